"""Paired significance tests of per-query scores against a baseline, corrected for multiple
testing.

A system is compared with the baseline by a two-sided paired t-test (``scipy.stats.ttest_rel``)
on the queries both scored; the p-values of a family of comparisons are then adjusted by the
Holm-Bonferroni step-down procedure (the default) or by Bonferroni's, both of which control the
family-wise error rate, or left as they are (``none``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from statistics import fmean

from dapr.errors import DaprError


@dataclass(frozen=True)
class Comparison:
    """A system against the baseline: ``delta`` is mean(system - baseline) over ``queries``
    queries, ``p_value`` the raw two-sided paired t-test p-value, ``adjusted`` the p-value
    corrected for multiple testing (Holm's by default). The p-values are NaN when fewer than two
    queries leave the test undefined."""

    delta: float
    p_value: float
    adjusted: float
    queries: int

    def significant(self, level: float = 0.05) -> bool:
        """Whether the adjusted p-value is below ``level`` (never for an undefined test)."""
        return self.adjusted < level  # False for NaN


def holm(p_values: Mapping[str, float]) -> dict[str, float]:
    """Holm-Bonferroni adjusted p-values, in the input's key order.

    The i-th smallest of m p-values becomes max over j <= i of min(1, (m - j + 1) * p_(j)).
    NaN p-values (undefined tests) stay NaN and do not count in m.
    """
    defined = sorted((p, key) for key, p in p_values.items() if not math.isnan(p))
    m = len(defined)
    adjusted: dict[str, float] = {}
    running = 0.0
    for i, (p, key) in enumerate(defined):
        running = max(running, min(1.0, (m - i) * p))
        adjusted[key] = running
    return {key: adjusted.get(key, math.nan) for key in p_values}


def bonferroni(p_values: Mapping[str, float]) -> dict[str, float]:
    """Bonferroni adjusted p-values: each of m p-values becomes min(1, m * p); NaN p-values
    (undefined tests) stay NaN and do not count in m."""
    m = sum(not math.isnan(p) for p in p_values.values())
    return {key: p if math.isnan(p) else min(1.0, m * p) for key, p in p_values.items()}


CORRECTIONS: dict[str, Callable[[Mapping[str, float]], dict[str, float]]] = {
    "holm": holm,
    "bonferroni": bonferroni,
    "none": dict,
}
"""Multiple-testing corrections by name: ``none`` leaves the p-values as they are."""
CORRECTED = {"holm": "Holm-corrected", "bonferroni": "Bonferroni-corrected", "none": "uncorrected"}


def check_correction(correction: str) -> str:
    """``correction`` if it names one of :data:`CORRECTIONS`, or a DaprError naming them."""
    if correction not in CORRECTIONS:
        raise DaprError(
            f"unknown --correction {correction!r}; choose one of {', '.join(CORRECTIONS)}"
        )
    return correction


def adjust(p_values: Mapping[str, float], correction: str = "holm") -> dict[str, float]:
    """The p-values of one family adjusted by ``correction`` (see :data:`CORRECTIONS`)."""
    return CORRECTIONS[check_correction(correction)](p_values)


def paired_tests(
    baseline: Mapping[str, float],
    systems: Mapping[str, Mapping[str, float]],
    correction: str = "holm",
) -> dict[str, Comparison]:
    """Each system's per-query scores ({qid: score}) against the baseline's, adjusted by
    ``correction`` over the systems given. Both must cover the same queries (the queries of one
    split).

    When every paired difference is zero (identical scores) the p-value is 1.0; when fewer than
    two queries are shared, it is NaN (no test is possible).
    """
    from scipy.stats import ttest_rel

    check_correction(correction)
    raw: dict[str, tuple[float, float, int]] = {}
    for name, scores in systems.items():
        _same_queries(baseline, scores, name)
        queries = list(baseline)
        diffs = [scores[q] - baseline[q] for q in queries]
        delta = fmean(diffs) if diffs else math.nan
        if len(queries) < 2:
            p = math.nan
        elif all(d == 0 for d in diffs):
            p = 1.0
        else:
            with warnings.catch_warnings():  # a constant shift: scipy warns, t is huge, p ~ 0
                warnings.simplefilter("ignore", RuntimeWarning)
                result = ttest_rel([scores[q] for q in queries], [baseline[q] for q in queries])
            p = float(result.pvalue)
        raw[name] = (delta, p, len(queries))
    adjusted = adjust({name: p for name, (_, p, _) in raw.items()}, correction)
    return {name: Comparison(d, p, adjusted[name], n) for name, (d, p, n) in raw.items()}


def _same_queries(baseline: Mapping[str, float], scores: Mapping[str, float], name: str) -> None:
    missing = next((q for q in baseline if q not in scores), None)
    if missing is not None:
        raise DaprError(
            f"system {name!r} has no score for query {missing!r} that the baseline has; "
            "compare per-query scores of the same split"
        )
    extra = next((q for q in scores if q not in baseline), None)
    if extra is not None:
        raise DaprError(
            f"the baseline has no score for query {extra!r} that system {name!r} has; "
            "compare per-query scores of the same split"
        )
