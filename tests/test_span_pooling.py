"""Span pooling (`train.NAME.args.encoding: late`): a dual encoder trained on passages pooled
inside their documents, as late chunking encodes them; the tiny encoder, `dapr run`."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from dapr.cli import main
from dapr.data import Corpus, Document, Passage
from dapr.errors import DaprError
from dapr.retrievers.dense import Dense
from dapr.training.dual import Settings, columns
from dapr.training.examples import Example
from dapr.training.span_pooling import in_documents, span_training, span_vectors


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """wiki-sample passages the tiny encoder knows, 5 to 25 words, longest first."""
    from dapr.datasets import load_dataset

    passages = [p.text for d in load_dataset("wiki-sample").corpus for p in d.passages]
    return sorted({t for t in passages if 5 <= len(t.split()) <= 25}, key=len)[-16:][::-1]


@pytest.fixture(scope="module")
def model(tiny_encoder):
    from sentence_transformers import SentenceTransformer

    found = SentenceTransformer(str(tiny_encoder), device="cpu")
    found.eval()  # no dropout: vectors comparable with inference
    return found


def corpus_of(texts: list[str], sizes: list[int]) -> Corpus:
    documents, at = [], 0
    for d, size in enumerate(sizes):
        passages = tuple(Passage(f"d{d}-{i}", f"d{d}", i, texts[at + i]) for i in range(size))
        documents.append(Document(f"d{d}", f"D{d}", passages))
        at += size
    return Corpus(documents)


def losses_of(model, corpus: Corpus, rows: list[tuple[str, str, str]], settings: Settings):
    """The span-pooled loss of ``rows`` (query, positive id, negative id), its collated batch and
    the plain (passage) loss of the same rows."""
    import torch
    from sentence_transformers import losses
    from sentence_transformers.data_collator import SentenceTransformerDataCollator

    plain_texts = {p.id: p.text for d in corpus for p in d.passages}
    references, documents = in_documents(corpus, plain_texts)
    spanned = columns([Example(q, references[p], (references[n],)) for q, p, n in rows])
    arguments = SimpleNamespace(prompts=None)
    collator, loss = span_training(model, "tiny", settings, documents, list(spanned), arguments)
    batch = collator([dict(zip(spanned, values)) for values in zip(*spanned.values())])
    features = [{k[len(c) + 1 :]: v for k, v in batch.items() if k.startswith(c + "_")}
                for c in spanned]  # fmt: skip
    plain = columns([Example(q, plain_texts[p], (plain_texts[n],)) for q, p, n in rows])
    tokenize = SentenceTransformerDataCollator(tokenize_fn=model.tokenize)
    plain_batch = tokenize([dict(zip(plain, values)) for values in zip(*plain.values())])
    plain_features = [{k[len(c) + 1 :]: v for k, v in plain_batch.items() if k.startswith(c + "_")}
                      for c in plain]  # fmt: skip
    with torch.no_grad():
        ordinary = losses.MultipleNegativesRankingLoss(model)(plain_features, None)
    return loss, features, float(ordinary)


def test_the_loss_sees_each_passage_pooled_inside_its_document(
    model, tiny_encoder, texts, tmp_path
):
    import torch

    corpus = corpus_of(texts, [5, 4, 3])  # several 24-token windows each
    rows = [("first query", "d0-2", "d0-4"), ("second", "d1-0", "d2-2"), ("third", "d2-1", "d1-3")]
    settings = Settings(encoding="late", late_window=24, late_overlap=4)
    loss, features, plain_loss = losses_of(model, corpus, rows, settings)
    assert len(features[1]["input_ids"]) > 3  # several windows a document
    dense = Dense(model=str(tiny_encoder), encoding="late", late_window=24, late_overlap=4)
    dense.index_documents([[(p.id, p.text, True) for p in d.passages] for d in corpus], tmp_path)
    late = dict(zip(dense._ids.tolist(), np.concatenate([np.asarray(s) for s in dense._shards])))
    positives = np.array([late[p] for _, p, _ in rows])
    negatives = np.array([late[n] for _, _, n in rows])
    with torch.no_grad():
        np.testing.assert_allclose(span_vectors(model, features[1]), positives, atol=1e-5)
        np.testing.assert_allclose(span_vectors(model, features[2]), negatives, atol=1e-5)
        queries = model.encode([q for q, _, _ in rows], convert_to_tensor=True)
        late_vectors = [queries, torch.from_numpy(positives), torch.from_numpy(negatives)]
        expected = float(loss.compute_loss_from_embeddings(late_vectors, None))
        seen = float(loss(features, None))
    assert seen == pytest.approx(expected, abs=1e-5)
    assert seen != pytest.approx(plain_loss, abs=1e-3)  # not the passages alone


def test_documents_of_one_passage_give_the_loss_of_plain_training(model, texts):
    import torch

    corpus = corpus_of(texts, [1] * 6)
    rows = [("a query", "d0-0", "d1-0"), ("another", "d2-0", "d3-0"), ("third", "d4-0", "d5-0")]
    loss, features, plain_loss = losses_of(model, corpus, rows, Settings(encoding="late"))
    with torch.no_grad():
        assert float(loss(features, None)) == pytest.approx(plain_loss, abs=1e-5)


def test_the_encoding_is_in_the_cache_key_and_checked():
    assert "encoding" not in Settings().identity()  # keys made before span pooling stay
    late = Settings(encoding="late", late_window=128).identity()
    assert late["encoding"] == "late" and late["late_window"] == 128
    assert late != Settings(encoding="late").identity()
    for args, message in [
        ({"encoding": "span"}, "encoding 'span' is not one of: passage, late"),
        ({"late_window": 64}, "late_window and late_overlap are settings of encoding: late"),
        ({"encoding": "late", "late_window": 8, "late_overlap": 8}, "must be below late_window"),
    ]:
        with pytest.raises(DaprError, match=message):
            Settings(**args)


EXPERIMENT = """
name: span_training
dataset: {data}
metrics: [nDCG@10]
train:
  tiny-span:
    model: {model}
    split: test
    negatives: {{same_document: 1}}
    args: {{max_steps: 2, batch_size: 8, save_steps: 2, encoding: late, late_window: 32}}
retrievers:
  late:
    name: dense
    args: {{model: trained/tiny-span, encoding: late, late_window: 32}}
"""


def test_a_span_pooled_model_trains_through_the_runner_and_searches_late(
    tiny_encoder, wiki_slice, tmp_path, capsys, monkeypatch
):
    from dapr.experiment import training

    parts = []
    real = training.content_key
    monkeypatch.setattr(training, "content_key", lambda *p: parts.append(p) or real(*p))
    file = tmp_path / "span.yaml"
    file.write_text(EXPERIMENT.format(model=tiny_encoder, data=wiki_slice[0]))
    assert main(["run", str(file), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "train  tiny-span" in out and "index  late" in out
    (key,) = [p for p in parts if p[0] == "dual"]
    identity = next(p for p in key if isinstance(p, dict) and "batch_size" in p)
    assert identity["encoding"] == "late" and identity["late_window"] == 32  # in the model's key
    pointer = json.loads(_pointer("tiny-span").read_text())
    card = json.loads((Path(pointer["path"]) / "dapr_training.json").read_text())
    assert card["steps"] == 2 and card["settings"]["encoding"] == "late"
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert 0 <= metrics["systems"]["late"]["mean"]["nDCG@10"] <= 1


def _pointer(name: str) -> Path:
    from dapr.checkpoints import trained_pointer

    return trained_pointer(name)


@pytest.fixture(scope="module")
def cls_pooled(tiny_encoder, tmp_path_factory) -> Path:
    from sentence_transformers import SentenceTransformer, models

    transformer = models.Transformer(str(tiny_encoder), max_seq_length=64)
    pooling = models.Pooling(transformer.get_word_embedding_dimension(), "cls")
    path = tmp_path_factory.mktemp("cls") / "model"
    SentenceTransformer(modules=[transformer, pooling], device="cpu").save(str(path))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("{model}", "{cls}"), "model '{cls}' pools by cls_token: choose a mean"),
        (("negatives:", "loss: cached_mnrl\n    negatives:"), "trains with loss mnrl, not"),
        (("negatives:", "workers: 2\n    negatives:"), "trains on one worker"),
        (("negatives:", "kind: cross\n    negatives:"), "is a dual encoder's setting"),
    ],
)
def test_what_span_pooling_cannot_train_is_refused_in_one_line(
    tiny_encoder, wiki_slice, cls_pooled, tmp_path, capsys, change, message
):
    old, new = (part.format(model=tiny_encoder, cls=cls_pooled) for part in change)
    text = EXPERIMENT.format(model=tiny_encoder, data=wiki_slice[0])
    assert old in text
    text = text.replace(old, new)
    (tmp_path / "bad.yaml").write_text(text)
    assert main(["train", str(tmp_path / "bad.yaml")]) == 2
    error = capsys.readouterr().err
    assert message.format(cls=cls_pooled) in error and error.count("\n") == 1, error
    assert "train.tiny-span.args.encoding: late" in error
