import math

import pytest

from dapr.data import Run
from dapr.errors import DaprError
from dapr.evaluation import evaluate, parse_metric

QRELS = {
    "q1": {"a": 2, "b": 1, "c": 0, "d": 1},
    "q2": {"y": 1},
    "q3": {"k": 1},  # judged, but the run never answers it
    "q4": {"e": 0},  # no relevant item: not evaluated
}
RUN = Run.from_dict(
    {
        "q1": {"b": 0.9, "x": 0.8, "a": 0.7, "d": 0.1},
        "q2": {f"z{i:02d}": 1.0 - i / 100 for i in range(10)} | {"y": 0.5},
        "q4": {"e": 1.0},
    }
)


def test_hand_computed_metrics():
    result = evaluate(RUN, QRELS, ["nDCG@10", "R@100", "R@2", "MRR@10"])
    # q1 ranks b(1) x(0) a(2) d(1): DCG = 1/log2(2) + 2/log2(4) + 1/log2(5)
    dcg = 1 + 2 / 2 + 1 / math.log2(5)
    # ideal order a(2) b(1) d(1): IDCG = 2/log2(2) + 1/log2(3) + 1/log2(4)
    idcg = 2 + 1 / math.log2(3) + 1 / 2
    assert result.per_query["nDCG@10"]["q1"] == pytest.approx(dcg / idcg)
    assert result.per_query["R@100"]["q1"] == pytest.approx(1.0)
    assert result.per_query["R@2"]["q1"] == pytest.approx(1 / 3)  # only b in the top 2
    assert result.per_query["MRR@10"]["q1"] == pytest.approx(1.0)
    # q2: y is 11th -> outside the top 10 for nDCG and MRR, inside the top 100 for recall
    assert result.per_query["nDCG@10"]["q2"] == 0.0
    assert result.per_query["MRR@10"]["q2"] == 0.0
    assert result.per_query["R@100"]["q2"] == 1.0
    # q3 unanswered counts as 0; q4 has nothing relevant and is left out
    assert set(result.per_query["MRR@10"]) == {"q1", "q2", "q3"}
    assert result.per_query["R@100"]["q3"] == 0.0
    assert result.means["MRR@10"] == pytest.approx((1 + 0 + 0) / 3)
    assert result.means["R@100"] == pytest.approx((1 + 1 + 0) / 3)


def test_mrr_cut_follows_trec_eval_tie_order():
    # tied scores: trec_eval ranks the larger id first, so n is 1st and m 2nd
    run = Run.from_dict({"q": {"m": 1.0, "n": 1.0}})
    qrels = {"q": {"m": 1}}
    assert evaluate(run, qrels, ["MRR@10"]).means["MRR@10"] == pytest.approx(0.5)
    assert evaluate(run, qrels, ["MRR@1"]).means["MRR@1"] == 0.0


def test_graded_gain_is_linear_like_trec_eval():
    run = Run.from_dict({"q": {"lo": 2.0, "hi": 1.0}})
    qrels = {"q": {"lo": 1, "hi": 3}}
    # DCG = 1/1 + 3/log2(3); IDCG = 3/1 + 1/log2(3)
    expected = (1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3))
    assert evaluate(run, qrels, ["nDCG@10"]).means["nDCG@10"] == pytest.approx(expected)


@pytest.mark.parametrize("name", ["ndcg@10", "nDCG", "R", "MAP@5", "Recall@10"])
def test_bad_metric_names(name):
    with pytest.raises(DaprError, match="metric"):
        parse_metric(name)
