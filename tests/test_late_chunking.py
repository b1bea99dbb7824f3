"""Late chunking (`dense` with `encoding: late`): passages pooled inside their document's encoding,
checked on the tiny encoder, through `dapr check` and `dapr run`."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from test_check import check, run

from dapr.checkpoints import revision
from dapr.data import Corpus, Dataset, Document, Passage
from dapr.errors import DaprError
from dapr.experiment.plan import index_key, retrieval
from dapr.experiment.spec import RetrieverSpec
from dapr.retrievers.dense import Dense
from dapr.retrievers.support.late_chunking import Frame, late_chunk, windows
from dapr.store.cache import content_key


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """wiki-sample passages (words the tiny encoder knows) that fit its 64 tokens, longest first."""
    from dapr.datasets import load_dataset

    passages = [p.text for d in load_dataset("wiki-sample").corpus for p in d.passages]
    return sorted({t for t in passages if 5 <= len(t.split()) <= 25}, key=len)[-12:][::-1]


@pytest.fixture(scope="module")
def normalized(tiny_encoder, tmp_path_factory) -> Path:
    """The tiny encoder with a Normalize module after its mean pooling (as all-MiniLM-L6-v2)."""
    from sentence_transformers import SentenceTransformer, models

    model = SentenceTransformer(str(tiny_encoder), device="cpu")
    path = tmp_path_factory.mktemp("normalized") / "model"
    SentenceTransformer(modules=[model[0], model[1], models.Normalize()], device="cpu").save(
        str(path)
    )
    return path


def late(model: Path, **args) -> Dense:
    return Dense(model=str(model), encoding="late", device="cpu", **args)


def vectors(dense: Dense, documents, store: Path) -> dict[str, np.ndarray]:
    dense.index_documents(documents, store)
    rows = np.concatenate([np.asarray(s) for s in dense._shards])
    assert dense._ids is not None
    return dict(zip(dense._ids.tolist(), rows))


def whole(*passages: tuple[str, str]) -> list[tuple[str, str, bool]]:
    return [(pid, text, True) for pid, text in passages]


def test_a_one_passage_document_is_encoded_as_its_passage(normalized, texts, tmp_path):
    items = [(f"p{i}", t) for i, t in enumerate(texts)] + [("empty", "")]
    ordinary = Dense(model=str(normalized), device="cpu")
    ordinary.index(items, tmp_path / "passage")
    chunked = late(normalized)
    chunked.index(items, tmp_path / "late")  # every item a document of its own
    np.testing.assert_allclose(chunked._shards[0], ordinary._shards[0], atol=1e-5)
    assert np.allclose(np.linalg.norm(chunked._shards[0], axis=1), 1)  # the model's Normalize


def test_a_passage_sees_its_document_and_no_other(tiny_encoder, texts, tmp_path):
    a, b, c = texts[:3]
    base = vectors(late(tiny_encoder), [whole(("a", a), ("b", b)), whole(("c", c))], tmp_path / "0")
    neighbour = vectors(
        late(tiny_encoder), [whole(("a", a), ("b", texts[3])), whole(("c", c))], tmp_path / "1"
    )
    assert not np.allclose(neighbour["a"], base["a"])  # its neighbour changed
    other = vectors(
        late(tiny_encoder), [whole(("a", a), ("b", b)), whole(("c", texts[4]))], tmp_path / "2"
    )
    np.testing.assert_array_equal(other["a"], base["a"])  # another document changed
    np.testing.assert_array_equal(other["b"], base["b"])
    # a non-candidate passage is context, not an item
    hidden = vectors(
        late(tiny_encoder),
        [[("a", a, True), ("x", texts[3], False), ("b", b, True)]],
        tmp_path / "3",
    )
    assert list(hidden) == ["a", "b"] and not np.allclose(hidden["a"], base["a"])


@pytest.mark.parametrize("length,size,overlap", [(10, 4, 1), (37, 8, 3), (8, 8, 2), (100, 16, 0)])
def test_windows_give_each_token_to_its_most_central_window(length, size, overlap):
    starts, stops, owner = windows(length, size, overlap)
    assert starts[0] == 0 and stops[-1] == length and len(owner) == length
    assert np.all(stops - starts == min(size, length))  # every window full
    assert np.all(starts[1:] <= stops[:-1] - overlap)  # consecutive windows share >= overlap
    for t in range(length):
        central = [
            min(t - s, e - 1 - t) if s <= t < e else -1
            for s, e in zip(starts.tolist(), stops.tolist())
        ]
        assert owner[t] == int(np.argmax(central))  # most central; the earlier one on a tie
    if (length, size, overlap) == (10, 4, 1):
        assert starts.tolist() == [0, 3, 6]
        assert owner.tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_pooling_takes_every_token_once_from_its_window():
    passages = [[11, 12, 13], [14], [], [15, 16, 17, 18, 19, 20, 21]]
    flat = [t for p in passages for t in p]
    frame = Frame(size=4, overlap=2, prefix=(1,), suffix=(2,))

    def encode(framed: list[list[int]]) -> list[np.ndarray]:
        # a token's output: one-hot on its id, valued by 1 + the window it was read from
        out = []
        for n, window in enumerate(framed):
            rows = np.zeros((len(window), 32))
            rows[np.arange(len(window)), window] = n + 1
            out.append(rows)
        return out

    (pooled,) = late_chunk([passages], encode, frame)
    _, _, owner = windows(len(flat), 4, 2)
    sums = [pooled[0] * 4, pooled[1] * 1, None, pooled[3] * 8]  # tokens (+ [CLS], + [SEP])
    assert sums[0][1] == 1 and sums[3][2] == owner[-1] + 1  # first [CLS], last [SEP]
    seen = sums[0] + sums[1] + sums[3]
    for t, token in enumerate(flat):
        assert seen[token] == pytest.approx(owner[t] + 1)  # once, from its owner
    assert np.allclose(pooled[2], (sums[0] + sums[1] + sums[3]) / 13)  # empty: the document's


def test_vectors_do_not_depend_on_batch_or_shard_size(tiny_encoder, texts, tmp_path):
    documents = [
        whole(*[(f"d{d}p{i}", t) for i, t in enumerate(texts[d : d + 3 + d % 3])]) for d in range(6)
    ]
    reference = vectors(late(tiny_encoder, late_overlap=8), documents, tmp_path / "ref")
    assert len(reference) == sum(len(d) for d in documents)
    small = late(tiny_encoder, late_overlap=8, batch_size=1, shard_size=1)
    got = vectors(small, documents, tmp_path / "small")
    assert len(small._shards) == 6  # a shard holds whole documents, never part of one
    assert got.keys() == reference.keys()
    for pid in reference:
        np.testing.assert_array_equal(got[pid], reference[pid])
    padded = vectors(
        late(tiny_encoder, late_overlap=8, batching="padded"), documents, tmp_path / "p"
    )
    for pid in reference:  # the GPU plan: padded batches, the same vectors to float tolerance
        np.testing.assert_allclose(padded[pid], reference[pid], atol=1e-5)


def test_only_mean_pooled_models_are_late_chunked(tiny_encoder, tmp_path):
    from sentence_transformers import SentenceTransformer, models

    with pytest.raises(DaprError, match="pools by cls.*encoding: passage"):
        late(tiny_encoder, pooling="cls")
    model = SentenceTransformer(str(tiny_encoder), device="cpu")
    cls = models.Pooling(model[0].get_word_embedding_dimension(), "cls")
    SentenceTransformer(modules=[model[0], cls], device="cpu").save(str(tmp_path / "cls"))
    with pytest.raises(DaprError, match="pools by cls_token"):  # read from its files, unloaded
        late(tmp_path / "cls")
    with pytest.raises(DaprError, match="late_window and late_overlap are settings of"):
        Dense(model=str(tiny_encoder), late_window=32)
    with pytest.raises(DaprError, match="late_overlap 31 must be below the window.s 30"):
        late(tiny_encoder, late_window=32, late_overlap=31).index([("a", "b")], tmp_path / "x")
    with pytest.raises(DaprError, match="late_window 100 is over"):
        late(tiny_encoder, late_window=100).index([("a", "b")], tmp_path / "y")


def test_the_default_index_key_is_unchanged_and_late_keys_differ():
    dataset = Dataset(
        "x",
        Corpus(
            [
                Document(
                    "d1",
                    "T",
                    (
                        Passage("d1-0", "d1", 0, "hello world"),
                        Passage("d1-1", "d1", 1, "second one"),
                    ),
                )
            ]
        ),
    )
    name = "sentence-transformers/all-MiniLM-L6-v2"
    before = (  # what the key was made of before late chunking existed
        "dense",
        "3",
        {
            "query_model": name,
            "query_revision": revision(name),
            "document_model": name,
            "document_revision": revision(name),
            "pooling": None,
            "similarity": None,
            "max_length": None,
        },
        "passage",
        None,
    )
    default = index_key(retrieval(RetrieverSpec("dense"), dataset).made_by, dataset)
    assert default == content_key(*before, dataset.corpus.fingerprint)
    if revision(name) == "sha256:64208df929f2965b":  # the packaged copy the key was recorded on
        assert default == "7b1f49570fe732f14711"
    assert (
        index_key(
            retrieval(RetrieverSpec("dense", args={"encoding": "passage"}), dataset).made_by,
            dataset,
        )
        == default
    )
    keys = {
        index_key(retrieval(RetrieverSpec("dense", args=args), dataset).made_by, dataset)
        for args in (
            {"encoding": "late"},
            {"encoding": "late", "late_window": 128},
            {"encoding": "late", "late_overlap": 16},
        )
    }
    assert len(keys) == 3 and default not in keys


EXPERIMENT = """
name: late
dataset: {dataset}
depth: 20
metrics: [nDCG@10]
retrievers:
  document: {{name: bm25, level: document}}
  passage: {{name: bm25}}
  late: {{name: dense, args: {{model: {model}, encoding: late, late_overlap: 8}}}}
fusion:
  hierarchical:
    {{name: hierarchical, document: document, passage: late, args: {{alpha: 0.3, documents: 3}}}}
  rrf: {{name: rrf, passages: [passage, late]}}
"""


def test_dapr_check_and_run_late_chunking_cached_the_second_time(
    wiki_slice, tiny_encoder, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    path = tmp_path / "late.yaml"
    path.write_text(EXPERIMENT.format(model=tiny_encoder, dataset=wiki_slice[0]))
    out = ["--out", str(tmp_path / "out")]
    code, planned, _, err = check(capsys, str(path), *out)
    assert code == 0 and err == ""
    assert ("index", "late", "computed") in planned
    assert run(capsys, str(path), *out) == planned
    again = run(capsys, str(path), *out)
    assert {status for *_, status in again} == {"cached"}
    assert {system for _, system, _ in again} >= {"late", "hierarchical", "rrf"}


def test_dapr_check_names_the_retriever_of_a_model_that_does_not_pool_by_the_mean(
    wiki_slice, tiny_encoder, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    path = tmp_path / "late.yaml"
    bad = EXPERIMENT.format(model=tiny_encoder, dataset=wiki_slice[0]).replace(
        "encoding: late,", "encoding: late, pooling: cls,"
    )
    path.write_text(bad)
    code, _, _, err = check(capsys, str(path), "--out", str(tmp_path / "out"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "retrievers.late" in err and "pools by cls" in err


def test_packed_items_keep_documents_together_in_chunks():
    from dapr.retrievers.support.encoding import chunks
    from dapr.retrievers.support.late_chunking import document_key, packed

    documents = [whole(*[(f"d{d}p{i}", "w") for i in range(d % 4 + 1)]) for d in range(9)]
    items = list(packed(documents))
    for size in (1, 2, 5):
        got = list(chunks(items, size, document_key))
        assert list(itertools.chain(*got)) == items
        for chunk in got:  # whole documents, at least `size` items unless the last
            keys = [document_key(i) for i in chunk]
            assert all(
                k not in [document_key(i) for c in got if c is not chunk for i in c] for k in keys
            )


def test_ray_actors_write_the_late_chunked_shards_the_job_would(
    local_ray, tiny_encoder, texts, tmp_path, monkeypatch
):
    from dapr.ray_actors import Actors, on_actors

    documents = [
        whole(*[(f"d{d}p{i}", t) for i, t in enumerate(texts[d : d + 3])]) for d in range(4)
    ]
    alone = vectors(late(tiny_encoder, shard_size=2), documents, tmp_path / "alone")

    def driver(*_):
        raise AssertionError("a shard was encoded in the driver")

    monkeypatch.setattr(Dense, "write_shard", driver)  # the actors import their own Dense
    with on_actors(Actors(count=2, cpus=1)):
        on_ray = vectors(late(tiny_encoder, shard_size=2), documents, tmp_path / "ray")
    assert on_ray.keys() == alone.keys()
    for pid in alone:
        np.testing.assert_array_equal(on_ray[pid], alone[pid])
