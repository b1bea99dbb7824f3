"""Paired t-tests and Holm's correction against values worked out by hand."""

import math
import statistics

import pytest
from scipy.stats import t as t_dist

from dapr.analysis.significance import holm, paired_tests
from dapr.errors import DaprError


def two_sided_p(system: list[float], baseline: list[float]) -> float:
    """The paired t-test by hand: t = mean(d) / (sd(d) / sqrt(n)), n - 1 degrees of freedom."""
    d = [s - b for s, b in zip(system, baseline)]
    t = statistics.mean(d) / (statistics.stdev(d) / math.sqrt(len(d)))
    return 2 * t_dist.sf(abs(t), len(d) - 1)


def scores(values: list[float]) -> dict[str, float]:
    return {f"q{i}": v for i, v in enumerate(values)}


def test_holm_worked_example():
    # sorted: 0.01 * 3 = 0.03; 0.03 * 2 = 0.06; max(0.06, 0.04 * 1) = 0.06
    adjusted = holm({"a": 0.01, "b": 0.04, "c": 0.03})
    assert list(adjusted) == ["a", "b", "c"]
    assert adjusted == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06})


def test_holm_is_capped_at_one_and_monotone():
    # 0.3 * 4 = 1.2 -> 1; the larger ones can only stay at 1
    assert holm({"a": 0.3, "b": 0.5, "c": 0.4, "d": 0.9}) == {"a": 1, "b": 1, "c": 1, "d": 1}
    # 0.001 * 3 = 0.003; 0.02 * 2 = 0.04; 0.03 * 1 = 0.03 -> raised to 0.04 to keep the order
    adjusted = holm({"x": 0.001, "y": 0.02, "z": 0.03})
    assert adjusted == pytest.approx({"x": 0.003, "y": 0.04, "z": 0.04})


def test_holm_leaves_undefined_tests_out():
    adjusted = holm({"a": 0.02, "b": math.nan})
    assert adjusted["a"] == pytest.approx(0.02)  # m = 1: the NaN does not count
    assert math.isnan(adjusted["b"])
    assert holm({}) == {}


def test_paired_tests_match_hand_computation():
    base = [0.2, 0.4, 0.6, 0.8, 0.7]
    better = [0.3, 0.5, 0.7, 0.9, 0.82]  # +0.1 everywhere, +0.12 once: clearly better
    mixed = [0.5, 0.3, 0.7, 0.6, 0.8]  # differences +0.3 -0.1 +0.1 -0.2 +0.1
    got = paired_tests(scores(base), {"better": scores(better), "mixed": scores(mixed)})
    p_better, p_mixed = two_sided_p(better, base), two_sided_p(mixed, base)
    assert p_better < 0.001 < 0.5 < p_mixed
    assert got["better"].p_value == pytest.approx(p_better, rel=1e-9)
    assert got["mixed"].p_value == pytest.approx(p_mixed, rel=1e-9)
    # Holm over two: the smaller doubles, the larger stays (it exceeds the doubled one)
    assert got["better"].adjusted == pytest.approx(2 * p_better, rel=1e-9)
    assert got["mixed"].adjusted == pytest.approx(p_mixed, rel=1e-9)
    assert got["better"].delta == pytest.approx(0.104)
    assert got["mixed"].delta == pytest.approx(0.04)
    assert got["better"].queries == got["mixed"].queries == 5
    assert got["better"].significant() and not got["mixed"].significant()
    assert not got["better"].significant(level=p_better)  # adjusted = 2p is not below p


def test_significance_uses_the_adjusted_p_value():
    base = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    system = [0.3, 0.25, 0.45, 0.4, 0.7, 0.65]
    p = two_sided_p(system, base)
    assert 0.025 < p < 0.05  # significant alone, not once doubled by a second comparison
    alone = paired_tests(scores(base), {"s": scores(system)})["s"]
    assert alone.adjusted == pytest.approx(p) and alone.significant()
    paired = paired_tests(scores(base), {"s": scores(system), "same": scores(base)})
    assert paired["s"].p_value == pytest.approx(p)
    assert paired["s"].adjusted == pytest.approx(2 * p)
    assert not paired["s"].significant()


def test_identical_scores_give_p_one_and_the_order_of_queries_does_not_matter():
    base = {"a": 0.5, "b": 0.1, "c": 0.9}
    same = {"c": 0.9, "a": 0.5, "b": 0.1}
    got = paired_tests(base, {"same": same})["same"]
    assert (got.p_value, got.adjusted, got.delta, got.queries) == (1.0, 1.0, 0.0, 3)
    assert not got.significant()
    shuffled = paired_tests({"b": 0.1, "c": 0.9, "a": 0.5}, {"s": {"a": 0.7, "b": 0.2, "c": 0.8}})
    in_order = paired_tests(base, {"s": {"a": 0.7, "b": 0.2, "c": 0.8}})
    assert shuffled["s"].p_value == pytest.approx(in_order["s"].p_value)
    assert in_order["s"].p_value == pytest.approx(two_sided_p([0.7, 0.2, 0.8], [0.5, 0.1, 0.9]))


def test_a_single_query_cannot_be_tested():
    got = paired_tests({"q": 0.2}, {"s": {"q": 0.9}})["s"]
    assert math.isnan(got.p_value) and math.isnan(got.adjusted)
    assert got.delta == pytest.approx(0.7) and got.queries == 1
    assert not got.significant()


def test_queries_one_side_lacks_are_errors():
    with pytest.raises(DaprError, match="'q2'"):
        paired_tests({"q1": 0.1, "q2": 0.2}, {"s": {"q1": 0.3}})
    with pytest.raises(DaprError, match="'extra'.*'s'"):
        paired_tests({"q1": 0.1, "q2": 0.2}, {"s": {"q1": 0.3, "q2": 0.1, "extra": 1.0}})
