"""dapr's numbers equal ranx's and ir_measures' on a real BM25 run over wiki-sample, and runs and
qrels go to ranx and back unchanged."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dapr.data import Run
from dapr.errors import DaprError
from dapr.evaluation import evaluate
from dapr.evaluation.interop import (
    evaluate_ir_measures,
    evaluate_ranx,
    from_ir_measures_qrels,
    from_ir_measures_run,
    from_ranx_qrels,
    from_ranx_run,
    ir_measures_metric,
    ranked_scores,
    ranx_metric,
    to_ranx_qrels,
    to_ranx_run,
)

ranx = pytest.importorskip("ranx")  # the interop extra, part of [all]
ir_measures = pytest.importorskip("ir_measures")

METRICS = ["nDCG@10", "RR@10", "R@100", "P@5", "AP"]
RANX_OF = {"nDCG@10": "ndcg@10", "RR@10": "mrr@10", "R@100": "recall@100", "P@5": "precision@5"}
RANX_OF["AP"] = "map"


@pytest.fixture(scope="module")
def bm25(tmp_path_factory):
    """BM25 (bm25s) over the whole wiki-sample, the top 100 of each test query; its qrels."""
    from dapr.datasets import load_dataset
    from dapr.retrievers.bm25 import BM25

    wiki = load_dataset("wiki-sample")
    retriever = BM25()
    retriever.index(((p.id, p.text) for p in wiki.corpus.passages()), tmp_path_factory.mktemp("i"))
    test = wiki.split("test")
    return retriever.search(test.queries, 100), test.qrels


@pytest.fixture(scope="module")
def graded(bm25):
    """The same judgements, graded 0 to 2 (relevance level 2): each query's first relevant
    passage (in id order) stays 1, the others become 2, and its third-ranked passage, when not
    relevant, is judged 0."""
    run, qrels = bm25
    ranked = run.to_dict()
    out = {}
    for qid, judged in qrels.items():
        first = min(judged)
        out[qid] = {item: 1 if item == first else 2 for item in judged}
        third = list(ranked.get(qid, {}))[2:3]
        if third and third[0] not in judged:
            out[qid][third[0]] = 0
    return out


def tied(run: Run) -> set[str]:
    """Queries whose ranking holds two equal scores."""
    return {str(run.queries[q]) for q in range(len(run)) if (np.diff(run.ranking(q)[1]) == 0).any()}


def assert_same(ours, theirs, metric: str, queries=None) -> None:
    for qid in queries if queries is not None else ours.per_query[metric]:
        assert theirs[qid] == pytest.approx(ours.per_query[metric][qid], abs=1e-6), (metric, qid)


def test_runs_and_qrels_go_to_ranx_and_back_unchanged(bm25, graded):
    run, _ = bm25
    converted = to_ranx_run(run, name="bm25")
    assert isinstance(converted, ranx.Run) and converted.name == "bm25"
    assert from_ranx_run(converted).to_dict() == run.to_dict()  # ids and float64 scores, exact
    assert to_ranx_qrels(graded).to_dict() == graded
    assert from_ranx_qrels(to_ranx_qrels(graded)) == graded  # grade 0 judgements kept
    odd = {"q1": {"a": -1, "b": 0, "c": 3}, "q 2": {"d": 1}}
    assert from_ranx_qrels(to_ranx_qrels(odd)) == odd
    with_empty = Run.from_dict({"q1": {"x": 0.1 + 0.2, "y": 1e-300}, "q2": {}})
    assert from_ranx_run(to_ranx_run(with_empty)).to_dict() == with_empty.to_dict()
    assert len(to_ranx_run(Run.from_dict({"q": {}})).to_dict()) == 0  # ranx holds no empty run
    records = [ir_measures.ScoredDoc("q", "a", 2.5), ir_measures.ScoredDoc("q", "b", 3.0)]
    assert from_ir_measures_run(records).to_dict() == {"q": {"b": 3.0, "a": 2.5}}
    qrels = [ir_measures.Qrel("q", "a", 2), ir_measures.Qrel("q", "b", 0)]
    assert from_ir_measures_qrels(qrels) == {"q": {"a": 2, "b": 0}}


def test_ranked_scores_keep_dapr_order_without_ties(bm25):
    run, _ = bm25
    assert tied(run), "the BM25 run should hold tied scores for this test to mean anything"
    ranked = ranked_scores(run)
    assert not tied(ranked)
    assert [list(r) for r in ranked.to_dict().values()] == [list(r) for r in run.to_dict().values()]
    first = ranked.ranking(0)[1]
    assert first.tolist() == list(range(len(first), 0, -1))


def test_metric_names():
    assert [ranx_metric(m) for m in METRICS] == [RANX_OF[m] for m in METRICS]
    assert ranx_metric("MRR@10", 2) == "mrr@10-l2"
    assert ranx_metric("ndcg_cut_10", 2) == "ndcg@10"  # nDCG's gains are the grades
    assert (ranx_metric("recall_100", 3), ranx_metric("Acc@20")) == ("recall@100-l3", "hit_rate@20")
    assert [str(ir_measures_metric(m)) for m in METRICS] == METRICS
    assert str(ir_measures_metric("R@100", 2)) == "R(rel=2)@100"
    assert str(ir_measures_metric("MAP", 2)) == "AP(rel=2)"
    assert str(ir_measures_metric("Acc@5")) == "Success@5"
    assert str(ir_measures_metric("Judged@10", 2)) == "Judged@10"
    assert ir_measures_metric("Judged@10") == ir_measures.parse_measure("Judged@10")
    with pytest.raises(DaprError, match="'Judged@10' has no ranx equivalent.*ir_measures"):
        ranx_metric("Judged@10")
    with pytest.raises(DaprError, match="unknown metric 'F1@10'"):
        ir_measures_metric("F1@10")


@pytest.mark.parametrize("level", [1, 2])
def test_dapr_equals_ranx_and_ir_measures_per_query(bm25, graded, level):
    run, binary = bm25
    qrels = binary if level == 1 else graded
    names = [*METRICS, "Judged@10"]
    ours = evaluate(run, qrels, names, relevance_level=level)
    assert len(ours.per_query["AP"]) == (1045 if level == 1 else 686)  # judged twice or more
    theirs = {
        "ranx": evaluate_ranx(run, qrels, METRICS, relevance_level=level),
        "ir_measures": evaluate_ir_measures(run, qrels, names, relevance_level=level),
    }
    for tool, found in theirs.items():
        for metric in found.means:
            assert_same(ours, found.per_query[metric], metric)
            assert found.means[metric] == pytest.approx(ours.means[metric], abs=1e-6), tool
    assert 0 < ours.means["RR@10"] < 1 and 0 < ours.means["Judged@10"] < 1


def test_the_tools_on_the_raw_run_agree_where_no_scores_tie(bm25, graded):
    """Given dapr's run as it is, every tool ranks untied items alike; ir_measures' pytrec_eval
    provider (nDCG, R, P, AP) also ranks tied ones as dapr does."""
    run, qrels = bm25
    ours = evaluate(run, qrels, METRICS)
    untied = [q for q in ours.per_query["AP"] if q not in tied(run)]
    assert 0 < len(untied) < len(ours.per_query["AP"])
    judged = {q: qrels[q] for q in ours.per_query["AP"]}
    ranked = to_ranx_run(run)
    ranx.evaluate(to_ranx_qrels(judged), ranked, list(RANX_OF.values()))
    measures = [ir_measures.parse_measure(m) for m in METRICS]
    by_ir_measures = {m: {} for m in METRICS}
    for found in ir_measures.iter_calc(measures, judged, run.to_dict()):
        by_ir_measures[str(found.measure)][found.query_id] = found.value
    for metric in METRICS:
        assert_same(ours, ranked.scores[RANX_OF[metric]], metric, untied)
        everywhere = None if metric != "RR@10" else untied  # RR@10: the msmarco provider
        assert_same(ours, by_ir_measures[metric], metric, everywhere)
    judged_rate = evaluate(run, graded, ["Judged@10"]).per_query["Judged@10"]
    raw = ir_measures.iter_calc([ir_measures.Judged @ 10], graded, run.to_dict())
    by_query = {found.query_id: found.value for found in raw}
    assert all(math.isclose(by_query[q], judged_rate[q]) for q in untied if q in graded)
