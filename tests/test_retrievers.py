import numpy as np
import pytest

from dapr.retrievers.bm25 import BM25, _require_bm25s
from dapr.retrievers.dense import Dense

ITEMS = [
    ("a", "The cat sat on the mat near the door."),
    ("b", "Dogs are running fast in the park."),
    ("c", "Cats and dogs can live together."),
    ("d", "Stock markets fell sharply today as investors sold shares."),
    ("e", "A kitten is a young domestic cat."),
]


def test_bm25_scores_follow_lucene_formula(tmp_path):
    retriever = BM25()
    retriever.index(ITEMS, tmp_path)
    run = retriever.search({"q": "markets"}, k=10).to_dict()
    # one matching item (df=1 of N=5): idf = ln(1 + (N - df + 0.5) / (df + 0.5)), tf = 1,
    # score = idf * tf / (tf + k1 * (1 - b + b * |d| / avgdl)), lengths after stop words/stemming
    bm25s, stemmer = _require_bm25s()
    tokens = bm25s.tokenize(
        [t for _, t in ITEMS],
        stopwords="en",
        stemmer=stemmer.Stemmer("porter").stemWords,
        return_ids=False,
        show_progress=False,
    )
    lengths = [len(t) for t in tokens]
    avgdl = sum(lengths) / len(lengths)
    idf = np.log(1 + (5 - 1 + 0.5) / (1 + 0.5))
    expected = idf * 1 / (1 + 0.9 * (1 - 0.4 + 0.4 * lengths[3] / avgdl))
    assert list(run["q"]) == ["d"]
    assert run["q"]["d"] == pytest.approx(expected, rel=1e-5)


def test_bm25_stems_drops_stop_words_and_non_matches(tmp_path):
    retriever = BM25()
    retriever.index(ITEMS, tmp_path)
    run = retriever.search({"cats": "cats", "stop": "the and of", "none": "zebra"}, k=10)
    ranked = run.to_dict()
    assert set(ranked["cats"]) == {"a", "c", "e"}  # cat, cats, cat: all stem to "cat"
    assert ranked["stop"] == {} and ranked["none"] == {}


def test_bm25_index_persists(tmp_path):
    first = BM25()
    first.index(ITEMS, tmp_path)
    second = BM25()
    second.load(tmp_path)
    query = {"q": "dogs running"}
    assert first.search(query, 3).to_dict() == second.search(query, 3).to_dict()


def test_dense_ranks_semantically_and_blocks_do_not_change_results(tmp_path):
    whole = Dense(block_size=1000)
    whole.index(ITEMS, tmp_path / "whole")
    blocked = Dense(block_size=2)
    blocked.index(ITEMS, tmp_path / "blocked")
    queries = {"pets": "young feline", "money": "stock exchange crash"}
    a, b = whole.search(queries, 3).to_dict(), blocked.search(queries, 3).to_dict()
    assert list(a["pets"]) == list(b["pets"]) and list(a["money"]) == list(b["money"])
    assert next(iter(a["pets"])) == "e"
    assert next(iter(a["money"])) == "d"
    assert len(a["pets"]) == 3
    for qid in a:
        assert np.allclose(list(a[qid].values()), list(b[qid].values()), atol=1e-5)


def test_dense_cosine_matches_manual_computation(tmp_path):
    retriever = Dense()
    retriever.index(ITEMS, tmp_path)
    run = retriever.search({"q": "a cat on a mat"}, 5).to_dict()["q"]
    model = retriever._model(retriever.document_name)
    docs = model.encode_document([t for _, t in ITEMS])
    query = model.encode_query(["a cat on a mat"])[0]
    cosine = docs @ query / (np.linalg.norm(docs, axis=1) * np.linalg.norm(query))
    for (item, _), expected in zip(ITEMS, cosine):
        assert run[item] == pytest.approx(float(expected), abs=1e-5)


def test_dense_encoding_in_small_shards_gives_the_same_embeddings(tmp_path):
    whole = Dense()
    whole.index(ITEMS, tmp_path / "whole")
    sharded = Dense(shard_size=2)  # 5 items -> 3 shards, searched in order
    sharded.index(ITEMS, tmp_path / "sharded")
    assert list(sharded._ids) == [i for i, _ in ITEMS]
    assert [len(s) for s in sharded._shards] == [2, 2, 1]
    np.testing.assert_array_equal(np.concatenate(sharded._shards), whole._shards[0])
    assert sorted(p.name for p in (tmp_path / "sharded").glob("*.npy")) == [
        "shard-00000.npy",
        "shard-00001.npy",
        "shard-00002.npy",
    ]
    assert len(list((tmp_path / "sharded").glob("shard-*.npy.done"))) == 3
    queries = {"pets": "young feline", "money": "stock exchange crash"}
    expected = whole.search(queries, 4).to_dict()
    got = sharded.search(queries, 4).to_dict()
    assert {q: list(r) for q, r in got.items()} == {q: list(r) for q, r in expected.items()}
