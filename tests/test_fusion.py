"""Convex fusion: hand-computed cases, and agreement with a plain dict reimplementation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dapr.data import Run, rank_order
from dapr.errors import DaprError
from dapr.fusion import RRF, SOFT_ZERO, Convex, min_max, rank_scale, z_score
from dapr.interfaces import Fuser

DictRun = dict[str, dict[str, float]]


def doc_codes(document_run: Run, passage_run: Run, pid2did: dict[str, str]) -> np.ndarray:
    """``doc_of`` for the passage run's vocabulary: -1 for unknown passages or documents."""
    code = {did: i for i, did in enumerate(document_run.vocab.tolist())}
    return np.array([code.get(pid2did.get(pid), -1) for pid in passage_run.vocab], np.int64)


def fuse(
    documents: DictRun,
    passages: DictRun,
    pid2did: dict[str, str],
    alpha: float,
    normalize: str = "candidates",
) -> list[tuple[str, list[tuple[str, float]]]]:
    """Convex fusion of dict runs, as ``[(qid, [(pid, score), ...]), ...]`` in output order."""
    document_run, passage_run = Run.from_dict(documents), Run.from_dict(passages)
    doc_of = doc_codes(document_run, passage_run, pid2did)
    fused = Convex(alpha, normalize).fuse(document_run, passage_run, doc_of)
    return [(qid, list(ranked.items())) for qid, ranked in fused.to_dict().items()]


# Shared example. Passages a1, a2 belong to document A, b1 to B, x1 to X (not retrieved).
DOCS = {"q": {"A": 10.0, "B": 6.0, "C": 2.0}}
PASSAGES = {"q": {"a1": 4.0, "b1": 3.0, "a2": 2.0, "x1": 0.0}}
PID2DID = {"a1": "A", "a2": "A", "b1": "B", "x1": "X"}
# passage side: min 0, max 4, divisor 4 -> a1 4/4 = 1, b1 3/4 = 0.75, a2 2/4 = 0.5, x1 0
# document side over candidates that have one: a1 10, a2 10, b1 6 (C is no candidate's document)
#   -> min 6, max 10, divisor 4 -> a1 (10-6)/4 = 1, a2 1, b1 (6-6)/4 = 0; x1 has none -> 0


def test_missing_documents_and_several_passages_per_document():
    # alpha 0.5: a1 .5*1 + .5*1 = 1; a2 .5*1 + .5*.5 = .75; b1 .5*0 + .5*.75 = .375; x1 0
    assert fuse(DOCS, PASSAGES, PID2DID, 0.5) == [
        ("q", [("a1", 1.0), ("a2", 0.75), ("b1", 0.375), ("x1", 0.0)])
    ]


def test_weights_follow_alpha_as_document_weight():
    # alpha 0.25: a1 .25 + .75 = 1; a2 .25*1 + .75*.5 = .625; b1 .25*0 + .75*.75 = .5625; x1 0
    assert fuse(DOCS, PASSAGES, PID2DID, 0.25) == [
        ("q", [("a1", 1.0), ("a2", 0.625), ("b1", 0.5625), ("x1", 0.0)])
    ]


def test_alpha_zero_is_the_normalised_passage_run():
    # passage side only: a1 1, b1 .75, a2 .5, x1 0
    assert fuse(DOCS, PASSAGES, PID2DID, 0.0) == [
        ("q", [("a1", 1.0), ("b1", 0.75), ("a2", 0.5), ("x1", 0.0)])
    ]


def test_alpha_one_is_the_document_side_with_ties_by_descending_id():
    # document side only: a1 1, a2 1 (tied: same document), b1 0, x1 0 (tied);
    # ties go as trec_eval orders them: descending id
    assert fuse(DOCS, PASSAGES, PID2DID, 1) == [
        ("q", [("a2", 1.0), ("a1", 1.0), ("x1", 0.0), ("b1", 0.0)])
    ]


def test_document_list_normalises_over_the_whole_document_list():
    # documents A 10, B 6, C 2: min 2, max 10, divisor 8 -> A (10-2)/8 = 1, B (6-2)/8 = .5
    # alpha .5: a1 .5*1 + .5*1 = 1; a2 .5*1 + .5*.5 = .75; b1 .5*.5 + .5*.75 = .625; x1 0
    assert fuse(DOCS, PASSAGES, PID2DID, 0.5, "document_list") == [
        ("q", [("a1", 1.0), ("a2", 0.75), ("b1", 0.625), ("x1", 0.0)])
    ]


def test_exact_ties_rank_by_item_code_not_by_id():
    docs = {"q": {"A": 5.0, "B": 1.0}}
    passages = {"q": {"p2": 0.0, "p1": 8.0}}  # codes: p2 0, p1 1
    # passage side: p1 1, p2 0; document side: p1 (in B) 0, p2 (in A) 1
    # alpha .5: p1 .5*0 + .5*1 = .5; p2 .5*1 + .5*0 = .5 -> tied, lower code p2 first
    assert fuse(docs, passages, {"p1": "B", "p2": "A"}, 0.5) == [("q", [("p2", 0.5), ("p1", 0.5)])]


def test_constant_scores_normalise_to_zero():
    docs = {"q": {"A": 3.0, "B": 3.0}}
    passages = {"q": {"a": 0.7, "b": 0.7, "c": 0.7}}
    # every side constant: (v - v) / max(0, 1e-4) = 0 -> all 0, ranked by descending id
    assert fuse(docs, passages, {"a": "A", "b": "B", "c": "A"}, 0.3) == [
        ("q", [("c", 0.0), ("b", 0.0), ("a", 0.0)])
    ]


def test_divisor_is_floored_for_nearly_constant_scores():
    passages = {"q": {"a": 0.50005, "b": 0.5}}
    # passage range 5e-5 < 1e-4: a (0.50005 - 0.5) / 1e-4 = 0.5, not 1; b 0
    [(_, ranked)] = fuse({}, passages, {}, 0.0)
    assert [pid for pid, _ in ranked] == ["a", "b"]
    assert ranked[0][1] == pytest.approx(0.5)
    assert ranked[1][1] == 0.0


def test_queries_missing_from_either_run():
    docs = {"only-docs": {"A": 1.0}, "q": {"A": 9.0}}
    passages = {"no-docs": {"a": 2.0, "b": 1.0}, "q": {"a": 1.0}}
    # no-docs has no document list: document side 0, passage side a 1, b 0 -> .6*1 = .6, 0
    # q: single candidate, both sides (v - v) / 1e-4 = 0 -> 0; only-docs has no passages: absent
    assert fuse(docs, passages, {"a": "A", "b": "A"}, 0.4) == [
        ("no-docs", [("a", 0.6), ("b", 0.0)]),
        ("q", [("a", 0.0)]),
    ]


def test_queries_are_matched_by_id_not_position():
    docs = {"q2": {"A": 1.0, "B": 0.0}, "q1": {"A": 0.0, "B": 1.0}}
    passages = {"q1": {"a": 1.0, "b": 0.0}, "q2": {"a": 1.0, "b": 0.0}}
    # q1: a doc 0 pass 1 -> .5, b doc 1 pass 0 -> .5 (tie, descending id: b, a)
    # q2: a doc 1 pass 1 -> 1,  b doc 0 pass 0 -> 0
    assert fuse(docs, passages, {"a": "A", "b": "B"}, 0.5) == [
        ("q1", [("b", 0.5), ("a", 0.5)]),
        ("q2", [("a", 1.0), ("b", 0.0)]),
    ]


def test_passage_whose_document_is_unknown():
    docs = {"q": {"A": 4.0, "B": 2.0}}
    passages = {"q": {"a": 1.0, "b": 3.0, "z": 2.0}}
    # z's document is in no vocabulary (doc_of -1). document side over a, b: a 1, b 0, z 0
    # passage side: min 1, max 3, divisor 2 -> a 0, b 1, z .5
    # alpha .5: a .5, b .5 (tie, descending id: b before a), z .25
    assert fuse(docs, passages, {"a": "A", "b": "B", "z": "Zed"}, 0.5) == [
        ("q", [("b", 0.5), ("a", 0.5), ("z", 0.25)])
    ]


def test_query_without_candidates_keeps_an_empty_list():
    docs = {"q": {"A": 1.0}, "empty": {"A": 1.0}}
    passages = {"empty": {}, "q": {"a": 1.0}}
    assert fuse(docs, passages, {"a": "A"}, 0.5) == [("empty", []), ("q", [("a", 0.0)])]


def test_output_keeps_the_passage_vocabulary_and_offsets():
    document_run, passage_run = Run.from_dict(DOCS), Run.from_dict(PASSAGES)
    doc_of = doc_codes(document_run, passage_run, PID2DID)
    fused = Convex(0.2).fuse(document_run, passage_run, doc_of)
    assert fused.vocab is passage_run.vocab
    assert fused.offsets.tolist() == passage_run.offsets.tolist()
    assert isinstance(Convex(0.2), Fuser)


@pytest.mark.parametrize("alpha", [-0.1, 1.5, math.nan, True, "0.5", None])
def test_invalid_alpha(alpha):
    with pytest.raises(DaprError, match="alpha"):
        Convex(alpha)


def test_invalid_normalize():
    with pytest.raises(DaprError, match="normalize"):
        Convex(0.5, normalize="documents")


def test_doc_of_must_cover_the_passage_vocabulary():
    document_run, passage_run = Run.from_dict(DOCS), Run.from_dict(PASSAGES)
    with pytest.raises(DaprError, match="doc_of"):
        Convex(0.5).fuse(document_run, passage_run, np.zeros(2, np.int64))
    with pytest.raises(DaprError, match="doc_of"):
        Convex(0.5).fuse(document_run, passage_run, np.full(4, 7, np.int64))


def test_min_max_per_segment():
    scores = np.array([2.0, 4.0, 3.0, 5.0, 5.0, np.nan, 1.0, 0.0])
    offsets = np.array([0, 3, 3, 5, 8])  # segments [2 4 3], [], [5 5], [nan 1 0]
    # [2 4 3]: divisor 2 -> 0 1 .5; [5 5]: divisor 1e-4 -> 0 0; [nan 1 0]: NaN ignored -> nan 1 0
    expected = [0.0, 1.0, 0.5, 0.0, 0.0, math.nan, 1.0, 0.0]
    np.testing.assert_array_equal(min_max(scores, offsets), expected)
    np.testing.assert_array_equal(min_max(np.array([1.0, 3.0])), [0.0, 1.0])
    assert min_max(np.zeros(0), np.array([0, 0])).shape == (0,)
    assert SOFT_ZERO == 1e-4


def test_rank_order_is_score_descending_then_id_descending_per_query():
    """The order trec_eval evaluates a run in: score, then item id, both descending."""
    rng = np.random.default_rng(1)
    lengths = rng.integers(0, 30, 50)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    items = np.concatenate([rng.permutation(100)[:n] for n in lengths])
    scores = rng.integers(0, 5, len(items)) / 4  # many exact ties
    vocab = np.array([f"doc-{rng.integers(10**6):06d}-{c}" for c in range(100)], dtype=object)
    query_of_row = np.repeat(np.arange(len(lengths)), lengths)
    expected = sorted(
        range(len(items)),
        key=lambda r: (query_of_row[r], -scores[r], [-ord(c) for c in vocab[items[r]]]),
    )
    np.testing.assert_array_equal(rank_order(offsets, items, scores, vocab), expected)


# A straightforward dict reimplementation of the reference, to compare against.


def reference_min_max(scores: dict[str, float]) -> dict[str, float]:
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    return {key: (value - low) / max(high - low, 1e-4) for key, value in scores.items()}


def reference_fuse(
    documents: DictRun, passages: DictRun, pid2did: dict[str, str], alpha: float, normalize: str
) -> DictRun:
    out = {}
    for qid, pid2score in passages.items():
        did2score = documents.get(qid, {})
        if normalize == "document_list":
            did2score = reference_min_max(did2score)
        doc_side = {
            pid: did2score[pid2did[pid]]
            for pid in pid2score
            if pid in pid2did and pid2did[pid] in did2score
        }
        if normalize == "candidates":
            doc_side = reference_min_max(doc_side)
        passage_side = reference_min_max(pid2score)
        out[qid] = {
            pid: alpha * doc_side.get(pid, 0.0) + (1 - alpha) * passage_side[pid]
            for pid in pid2score
        }
    return out


def random_runs(rng: np.random.Generator) -> tuple[DictRun, DictRun, dict[str, str]]:
    """Small runs with exact ties, unknown passages, and queries missing from either run."""
    pid2did = {f"p{i}": f"d{rng.integers(0, 15)}" for i in range(60)}
    documents = {
        f"q{q}": {
            f"d{d}": float(rng.integers(0, 6)) for d in rng.permutation(20)[: rng.integers(0, 8)]
        }
        for q in rng.permutation(12)[:9]
    }
    passages = {
        f"q{q}": {
            f"p{p}": float(rng.choice([rng.integers(0, 4) / 4, rng.normal()]))
            for p in rng.permutation(70)[: rng.integers(0, 12)]  # p60.. have no document
        }
        for q in rng.permutation(12)[:9]
    }
    return documents, passages, pid2did


@pytest.mark.parametrize("normalize", ["candidates", "document_list"])
@pytest.mark.parametrize("seed", range(20))
def test_matches_dict_reimplementation(seed, normalize):
    rng = np.random.default_rng(seed)
    documents, passages, pid2did = random_runs(rng)
    alpha = float(rng.choice([0.0, 0.2, 0.5, 1.0, rng.random()]))
    expected = reference_fuse(documents, passages, pid2did, alpha, normalize)
    got = dict(fuse(documents, passages, pid2did, alpha, normalize))
    assert list(got) == list(passages)
    for qid, ranked in got.items():
        scores = dict(ranked)
        assert scores.keys() == expected[qid].keys()
        for pid, score in scores.items():
            assert abs(score - expected[qid][pid]) <= 1e-9
        reference_ranking = sorted(expected[qid].items(), key=lambda pair: -pair[1])
        assert tie_groups(ranked) == tie_groups(reference_ranking)


def tie_groups(ranking: list[tuple[str, float]]) -> list[set[str]]:
    """A ranking as its consecutive groups of exactly tied scores (order inside ignored)."""
    groups: list[set[str]] = []
    for i, (pid, score) in enumerate(ranking):
        if i == 0 or score != ranking[i - 1][1]:
            groups.append(set())
        groups[-1].add(pid)
    return groups


# ----------------------------------------------------------------------------- rrf, scalings


def _rrf(documents: DictRun, passages: DictRun, k: int = 60, depth=None):
    document_run, passage_run = Run.from_dict(documents), Run.from_dict(passages)
    doc_of = doc_codes(document_run, passage_run, PID2DID)
    fused = RRF(k, depth).fuse(document_run, passage_run, doc_of)
    return {qid: list(ranked.items()) for qid, ranked in fused.to_dict().items()}


def test_rrf_adds_reciprocal_ranks_of_passage_and_document():
    # passage ranks a1 1, b1 2, a2 3, x1 4; document ranks A 1, B 2; X not listed
    assert _rrf(DOCS, PASSAGES, k=10) == {
        "q": [
            ("a1", pytest.approx(1 / 11 + 1 / 11)),
            ("a2", pytest.approx(1 / 13 + 1 / 11)),  # 0.1678: its document lifts it over b1
            ("b1", pytest.approx(1 / 12 + 1 / 12)),  # 0.1667
            ("x1", pytest.approx(1 / 14)),
        ]
    }


def test_rrf_depth_cuts_both_lists_first():
    fused = _rrf(DOCS, PASSAGES, k=0, depth=1)  # passages: a1 only; documents: A only
    assert fused == {"q": [("a1", pytest.approx(2.0))]}


@pytest.mark.parametrize(("args", "message"), [((-1,), "k must be"), ((60, 0), "depth must be")])
def test_rrf_bad_arguments(args, message):
    with pytest.raises(DaprError, match=message):
        RRF(*args)


def test_z_score_and_rank_scalings_per_segment():
    offsets = np.array([0, 4, 4, 6])
    values = np.array([4.0, 2.0, np.nan, 0.0, 5.0, 5.0])
    z = z_score(values, offsets)
    assert z[:2] == pytest.approx([1.2247449, 0.0]) and np.isnan(z[2])
    assert z[3] == pytest.approx(-1.2247449) and z[4:] == pytest.approx([0.0, 0.0])
    r = rank_scale(values, offsets)
    assert r[[0, 1, 3]] == pytest.approx([1.0, 2 / 3, 1 / 3]) and np.isnan(r[2])
    assert r[4:] == pytest.approx([1.0, 1.0])  # ties share the best rank


def test_convex_with_rank_scaling():
    document_run, passage_run = Run.from_dict(DOCS), Run.from_dict(PASSAGES)
    doc_of = doc_codes(document_run, passage_run, PID2DID)
    fused = Convex(0.5, scaling="rank").fuse(document_run, passage_run, doc_of).to_dict()["q"]
    # passage side: a1 1, b1 3/4, a2 1/2, x1 1/4; document side over a1, b1, a2 (10, 6, 10):
    # a1 and a2 share rank 1 -> 1, b1 rank 3 -> 1/3; x1 has none -> 0
    assert fused == pytest.approx({"a1": 1.0, "a2": 0.75, "b1": 0.75 / 2 + 1 / 6, "x1": 0.125})
    with pytest.raises(DaprError, match="scaling must be one of"):
        Convex(0.5, scaling="softmax")


# Passage-level hybrids: two passage runs over the union of their lists.
FIRST = {"q": {"a": 3.0, "b": 1.0, "c": 2.0}}
SECOND = {"q": {"b": 8.0, "d": 4.0, "a": 0.0}, "other": {"a": 1.0}}


def _listed(run: Run) -> list[tuple[str, list[tuple[str, float]]]]:
    return [(q, [(i, pytest.approx(s)) for i, s in r.items()]) for q, r in run.to_dict().items()]


def test_convex_fuses_two_passage_runs_over_their_union():
    # first min-max over 1..3: a 1, c .5, b 0, d missing -> 0
    # second over 0..8: b 1, d .5, a 0, c missing -> 0
    # alpha .5: a .5, b .5, c .25, d .25; ties by descending id
    fused = Convex(0.5).fuse_passages(Run.from_dict(FIRST), Run.from_dict(SECOND))
    assert _listed(fused) == [("q", [("b", 0.5), ("a", 0.5), ("d", 0.25), ("c", 0.25)])]
    # missing -1: c .5*.5 + .5*-1 = -.25, d .5*-1 + .5*.5 = -.25
    fused = Convex(0.5, missing=-1.0).fuse_passages(Run.from_dict(FIRST), Run.from_dict(SECOND))
    assert _listed(fused) == [("q", [("b", 0.5), ("a", 0.5), ("d", -0.25), ("c", -0.25)])]
    # alpha 1: the first run's scores (a 1, c .5, b 0); d, missing there, ties b at 0 and
    # comes first by descending id
    fused = Convex(1.0).fuse_passages(Run.from_dict(FIRST), Run.from_dict(SECOND))
    assert [i for i, _ in fused.to_dict()["q"].items()] == ["a", "c", "d", "b"]


def test_rrf_fuses_two_passage_runs_and_a_missing_list_adds_nothing():
    # ranks: first a 1, c 2, b 3; second b 1, d 2, a 3
    fused = RRF(k=10).fuse_passages(Run.from_dict(FIRST), Run.from_dict(SECOND)).to_dict()["q"]
    expected = {"a": 1 / 11 + 1 / 13, "b": 1 / 13 + 1 / 11, "c": 1 / 12, "d": 1 / 12}
    assert fused == pytest.approx(expected)
    assert list(fused) == ["b", "a", "d", "c"]  # ties by descending id
    # depth 1 keeps only each list's top item: a (first) and b (second)
    cut = RRF(k=10, depth=1).fuse_passages(Run.from_dict(FIRST), Run.from_dict(SECOND))
    assert cut.to_dict()["q"] == pytest.approx({"a": 1 / 11, "b": 1 / 11})


def test_missing_document_score_is_a_parameter():
    # as test_missing_documents_and_several_passages_per_document, but x1 (no document) takes
    # -1 on the document side: .5 * -1 + .5 * 0 = -.5
    document_run, passage_run = Run.from_dict(DOCS), Run.from_dict(PASSAGES)
    doc_of = doc_codes(document_run, passage_run, PID2DID)
    fused = Convex(0.5, missing=-1.0).fuse(document_run, passage_run, doc_of).to_dict()["q"]
    assert fused == pytest.approx({"a1": 1.0, "a2": 0.75, "b1": 0.375, "x1": -0.5})
    with pytest.raises(DaprError, match="missing"):
        Convex(0.5, missing=float("nan"))


def test_hierarchical_scope_is_every_passage_of_the_top_documents():
    from dapr.fusion import Hierarchical
    from dapr.ids import CorpusIds

    ids = CorpusIds(
        passage_ids=np.array(["A-0", "B-0", "A-1", "C-0", "B-1"], dtype=object),
        doc_ids=np.array(["A", "B", "C"], dtype=object),
        doc_of=np.array([0, 1, 0, 2, 1]),
    )
    documents = Run.from_dict({"q1": {"B": 5.0, "C": 4.0, "A": 1.0}, "q2": {"A": 2.0, "Z": 9.0}})
    scope = Hierarchical(0.2, documents=2).scope(documents, ids).to_dict()
    assert set(scope["q1"]) == {"B-0", "B-1", "C-0"}  # A is third
    assert set(scope["q2"]) == {"A-0", "A-1"}  # Z is not in the corpus
    assert Hierarchical(0.2, documents=2).scope_identity() == {"documents": 2}
    # by default every document of the run (the reference searches all 1,000 it retrieved)
    everything = Hierarchical(0.2).scope(documents, ids).to_dict()
    assert set(everything["q1"]) == {"A-0", "A-1", "B-0", "B-1", "C-0"}
    assert Hierarchical(0.2).scope_identity() == {"documents": None}
    with pytest.raises(DaprError, match="documents"):
        Hierarchical(0.2, documents=0)
    with pytest.raises(DaprError, match="alpha"):
        Hierarchical(1.5)


def test_convex_depth_cuts_both_lists_before_fusing():
    # depth 2: documents A 10, B 6; passages a1 4, b1 3 -> passage side a1 1, b1 0;
    # document side over candidates a1 10, b1 6 -> a1 1, b1 0; alpha .5: a1 1, b1 0
    document_run, passage_run = Run.from_dict(DOCS), Run.from_dict(PASSAGES)
    doc_of = doc_codes(document_run, passage_run, PID2DID)
    fused = Convex(0.5, depth=2).fuse(document_run, passage_run, doc_of).to_dict()["q"]
    assert fused == pytest.approx({"a1": 1.0, "b1": 0.0})
    # two passage runs cut to 2: FIRST a 3, c 2 -> a 1, c 0; SECOND b 8, d 4 -> b 1, d 0;
    # alpha .25, missing 0: b .75 * 1 = .75, a .25 * 1 = .25, c 0, d 0 (tie: d before c)
    hybrid = Convex(0.25, depth=2).fuse_passages(Run.from_dict(FIRST), Run.from_dict(SECOND))
    assert list(hybrid.to_dict()["q"].items()) == [
        ("b", pytest.approx(0.75)),
        ("a", pytest.approx(0.25)),
        ("d", 0.0),
        ("c", 0.0),
    ]
    with pytest.raises(DaprError, match="depth"):
        Convex(0.5, depth=0)
