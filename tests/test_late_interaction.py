"""The late_interaction retriever (ColBERT) with tiny random ColBERT checkpoints built here."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import tiny_bert

from dapr.errors import DaprError
from dapr.retrievers.late_interaction import LateInteraction
from dapr.retrievers.support.colbert import import_colbert, maxsim, quiet

ITEMS = [
    ("a", "The cat sat on the mat near the door."),
    ("b", "Dogs are running fast in the park!"),
    ("c", "Cats and dogs can live together."),
    ("d", "Stock markets fell sharply today as investors sold shares."),
    ("e", "A kitten is a young domestic cat."),
]
QUERIES = {"money": "stock markets", "pets": "kitten cat", "park": "dogs in the park"}


def tiny_colbert(
    path: Path, texts, words_only: bool = False, dim: int = 16, seed: int = 0, **settings
) -> Path:
    """A tiny random ColBERT checkpoint in the layout colbert-ai reads: a BERT saved under the
    ``bert.`` prefix with the ``linear`` projection to ``dim``, and ``artifact.metadata``.

    ``words_only`` makes every token's vector depend on its word alone (no positions, attention
    or feed-forward contributions), so MaxSim rewards shared words and rankings are clear."""
    from safetensors.torch import load_file, save_file

    tiny_bert(path, texts, hidden=32, seed=seed)
    weights = load_file(path / "model.safetensors")
    if words_only:
        for name in weights:
            if name.endswith(("attention.output.dense.weight", "attention.output.dense.bias")) or (
                ".output.dense." in name and "attention" not in name
            ):
                weights[name] = torch.zeros_like(weights[name])
        weights["embeddings.position_embeddings.weight"].zero_()
    generator = torch.Generator().manual_seed(seed + 1)
    weights = {f"bert.{name}": tensor for name, tensor in weights.items()}
    weights["linear.weight"] = torch.randn(dim, 32, generator=generator) / 32**0.5
    save_file(weights, path / "model.safetensors")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "architectures": ["HF_ColBERT"]}))
    metadata = {"dim": dim, "query_maxlen": 8, "doc_maxlen": 64, "mask_punctuation": True}
    (path / "artifact.metadata").write_text(json.dumps({**metadata, **settings}))
    return path


@pytest.fixture(scope="module")
def random_colbert(tmp_path_factory) -> str:
    texts = [t for _, t in ITEMS] + list(QUERIES.values())
    return str(tiny_colbert(tmp_path_factory.mktemp("colbert"), texts))


@pytest.fixture(scope="module")
def words_colbert(tmp_path_factory) -> str:
    texts = [t for _, t in ITEMS] + list(QUERIES.values()) + WORDS
    return str(tiny_colbert(tmp_path_factory.mktemp("colbert_words"), texts, words_only=True))


def test_encoder_follows_colbert_rules(random_colbert):
    encoder = LateInteraction(model=random_colbert, query_maxlen=10).encoder()
    queries = encoder.queries(["cat", "stock markets fell"])
    assert queries.shape == (2, 10, 16)  # [CLS] [Q] words [SEP], then [MASK] up to 10
    assert torch.allclose(queries.norm(dim=2), torch.ones(2, 10), atol=1e-5)
    vectors, counts = encoder.documents(["the cat sat.", "dogs!", "the cat sat"])
    # [CLS] [D] the cat sat [SEP]: the full stop's vector is dropped with the punctuation
    assert counts == [6, 4, 6]
    assert vectors.shape == (16, 16) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    short = LateInteraction(model=random_colbert, doc_maxlen=5).encoder()
    assert short.documents(["the cat sat on the mat near the door"])[1] == [5]


def test_exact_scores_equal_maxsim_of_the_encoders_own_vectors(tmp_path, random_colbert):
    retriever = LateInteraction(model=random_colbert, dtype="float32")
    retriever.index(ITEMS, tmp_path)
    run = retriever.search(QUERIES, k=5).to_dict()
    checkpoint = retriever.encoder().checkpoint
    with quiet(), torch.inference_mode():
        documents = checkpoint.docFromText([t for _, t in ITEMS], keep_dims=False)
        queries = checkpoint.queryFromText(list(QUERIES.values()))
    for query, qid in zip(queries, QUERIES):
        assert len(run[qid]) == 5
        for (item, _), doc in zip(ITEMS, documents):
            expected = (query.float() @ doc.float().T).max(dim=1).values.sum().item()
            assert run[qid][item] == pytest.approx(expected, abs=1e-4)
    half = LateInteraction(model=random_colbert)  # float16 storage: the same up to rounding
    half.index(ITEMS, tmp_path / "half")
    for qid, scores in half.search(QUERIES, k=5).to_dict().items():
        assert scores == pytest.approx(run[qid], abs=2e-2)


def test_maxsim_of_packed_documents():
    queries = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])  # one query, two vectors
    vectors = torch.tensor([[0.5, 0.5], [1.0, -1.0], [-1.0, 0.0], [0.0, -2.0]])
    scores = maxsim(queries, vectors, torch.tensor([2, 1, 1]))
    # document 0: max(0.5, 1) + max(0.5, -1); document 1: -1 + 0; document 2: 0 + -2
    assert scores.tolist() == [[1.5, -1.0, -2.0]]


def test_words_only_colbert_ranks_shared_words_first(tmp_path, words_colbert):
    retriever = LateInteraction(model=words_colbert)
    retriever.index(ITEMS, tmp_path)
    run = retriever.search(QUERIES, k=3).to_dict()
    assert next(iter(run["money"])) == "d"
    assert next(iter(run["pets"])) == "e"
    assert next(iter(run["park"])) == "b"
    assert all(len(ranked) == 3 for ranked in run.values())


def test_blocks_and_query_batches_do_not_change_results(tmp_path, random_colbert):
    words = " ".join(t for _, t in ITEMS).split()
    rng = random.Random(1)
    items = [(f"p{i}", " ".join(rng.sample(words, rng.randint(2, 12)))) for i in range(35)]
    whole = LateInteraction(model=random_colbert, dtype="float32")
    whole.index(items, tmp_path)
    blocked = LateInteraction(model=random_colbert, dtype="float32", block_size=1, query_batch=1)
    blocked.load(tmp_path)
    a, b = whole.search(QUERIES, 12).to_dict(), blocked.search(QUERIES, 12).to_dict()
    for qid in QUERIES:
        assert set(a[qid]) == set(b[qid])
        assert [a[qid][i] for i in a[qid]] == pytest.approx([b[qid][i] for i in a[qid]], abs=1e-5)
    assert len(whole.search(QUERIES, 100).to_dict()["money"]) == len(items)


def test_index_persists_and_shards_stream(tmp_path, random_colbert, monkeypatch):
    import dapr.retrievers.late_interaction as module

    monkeypatch.setattr(module, "_CHUNK", 2)  # three shards of at most two passages
    first = LateInteraction(model=random_colbert)
    first.index(iter(ITEMS), tmp_path)
    assert len(list(tmp_path.glob("shard-*.npy"))) == 3
    second = LateInteraction(model=random_colbert)
    second.load(tmp_path)
    assert first.search(QUERIES, 4).to_dict() == second.search(QUERIES, 4).to_dict()
    plaid = LateInteraction(model=random_colbert, method="plaid")
    with pytest.raises(DaprError, match="built with method 'exact'.*set method: exact"):
        plaid.load(tmp_path)
    (tmp_path / "ids.json").write_text(json.dumps([i for i, _ in ITEMS][:-1]))
    with pytest.raises(DaprError, match=f"{len(ITEMS) - 1} ids for {len(ITEMS)} items"):
        LateInteraction(model=random_colbert).load(tmp_path)  # ids checked against doclens


def test_identity_names_what_changes_results(random_colbert):
    exact = LateInteraction(model=random_colbert, query_maxlen=150, doc_maxlen=512).identity()
    assert exact["model"] == random_colbert and exact["revision"].startswith("sha256:")
    assert (exact["query_maxlen"], exact["doc_maxlen"], exact["method"]) == (150, 512, "exact")
    assert exact["dtype"] == "float16"
    plaid = LateInteraction(model=random_colbert, method="plaid", nbits=4).identity()
    assert plaid["nbits"] == 4 and "dtype" not in plaid
    fast = LateInteraction(model=random_colbert, batch_size=2, block_size=7, query_batch=3)
    assert fast.identity() == LateInteraction(model=random_colbert).identity()
    preset = LateInteraction.presets["colbertv2"]
    assert preset.args["model"] == "colbert-ir/colbertv2.0" and preset.levels == ("passage",)


def test_missing_model_and_bad_arguments_are_one_line_errors(tmp_path):
    retriever = LateInteraction(model="dapr-test/no-such-colbert")
    with pytest.raises(DaprError, match="cannot load model 'dapr-test/no-such-colbert'") as error:
        retriever.index(ITEMS, tmp_path)
    assert "\n" not in str(error.value)
    with pytest.raises(DaprError, match="cannot load model") as error:
        LateInteraction(model="dapr-test/no-such-colbert", method="plaid").index(ITEMS, tmp_path)
    assert "\n" not in str(error.value)
    with pytest.raises(DaprError, match="unknown method 'fast'; choose from: exact, plaid"):
        LateInteraction(method="fast")
    with pytest.raises(DaprError, match="unknown dtype 'int8'"):
        LateInteraction(dtype="int8")
    with pytest.raises(DaprError, match="unknown nbits 3; choose from: 1, 2, 4"):
        LateInteraction(nbits=3)
    with pytest.raises(DaprError, match="no index in"):
        LateInteraction().load(tmp_path / "nothing")


def test_plaid_collection_file_and_tiny_corpus(tmp_path, random_colbert):
    import_colbert()  # first, so importing colbert changes no process-wide setting
    from colbert.evaluation.loaders import load_collection

    from dapr.retrievers.support.plaid import _write_collection

    texts = ["one\ttab", "two\nlines\r\n", "", "plain text"]
    ids = _write_collection([(f"x{i}", t) for i, t in enumerate(texts)], tmp_path / "c.tsv")
    assert ids == ["x0", "x1", "x2", "x3"]
    assert load_collection(str(tmp_path / "c.tsv")) == ["one tab", "two lines", "", "plain text"]
    retriever = LateInteraction(model=random_colbert, method="plaid")
    with pytest.raises(DaprError, match="corpus of 5 items is too small.*use method: exact"):
        retriever.index(ITEMS, tmp_path / "store")
    assert not (tmp_path / "store" / "collection.tsv").exists()


WORDS = [f"w{i}" for i in range(120)]


@pytest.mark.slow
@pytest.mark.usefixtures("torch_extensions")
def test_plaid_agrees_with_exact(tmp_path, words_colbert):
    """About 4 minutes on a first run, which compiles colbert-ai's C++ search extensions; about
    15 seconds after that."""
    rng = random.Random(0)
    items = [(f"p{i}", " ".join(rng.sample(WORDS, 8))) for i in range(300)]
    queries = {f"q{i}": " ".join(rng.sample(text.split(), 3)) for i, (_, text) in enumerate(items)}
    queries = dict(list(queries.items())[:40])
    exact = LateInteraction(model=words_colbert, dtype="float32")
    exact.index(items, tmp_path / "exact")
    plaid = LateInteraction(model=words_colbert, method="plaid", nbits=2)
    started = time.perf_counter()
    plaid.index(items, tmp_path / "building")
    (tmp_path / "building").rename(tmp_path / "plaid")  # as the experiment cache moves it
    assert (tmp_path / "plaid" / "plaid" / "ivf.pid.pt").is_file()
    again = LateInteraction(model=words_colbert, method="plaid", nbits=2)
    again.load(tmp_path / "plaid")
    found = again.search(queries, 5).to_dict()
    print(f"PLAID index + first search: {time.perf_counter() - started:.1f} s")
    wanted = exact.search(queries, 5).to_dict()
    for qid in queries:
        best = next(iter(wanted[qid]))
        assert next(iter(found[qid])) == best
        assert found[qid][best] == pytest.approx(wanted[qid][best], abs=0.1)
        assert len(set(found[qid]) & set(wanted[qid])) >= 4
