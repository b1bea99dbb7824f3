"""Metric names and the measures behind them.

A metric name is a registered family and, where the family takes one, a cutoff: ``nDCG@10``,
``R@100``, ``P@5``, ``RR@10`` (alias ``MRR@10``), ``AP`` (alias ``MAP``), ``Acc@20``,
``Judged@10``. ir_measures spells them this way; trec_eval's own names (``ndcg_cut_10``,
``recall_100``, ``P_5``, ``recip_rank``, ``map``, ``success_20``) mean the same. ``Judged``
(ir_measures' judgement rate) is computed here, the others by trec_eval. A plugin adds a family
by registering a :class:`dapr.interfaces.Measure` under the entry-point group ``dapr.metrics``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from dapr.data import Qrels
from dapr.errors import DaprError
from dapr.interfaces import Measure
from dapr.ranges import Range, number_problem
from dapr.registry import metrics as registry

DEFAULT_METRICS = ("nDCG@10", "R@100", "MRR@10")


@dataclass(frozen=True)
class TrecMeasure:
    """A trec_eval measure computed by pytrec_eval. ``truncate``: the run is cut at the cutoff
    before trec_eval sees it (``recip_rank`` has no cutoff of its own); otherwise the cutoff is
    trec_eval's (``ndcg_cut.10``)."""

    measure: str
    cutoff: str
    truncate: bool = False
    about: str = ""

    def request(self, cutoff: int | None) -> str:
        """The measure as pytrec_eval is asked for it."""
        return self.measure if cutoff is None or self.truncate else f"{self.measure}.{cutoff}"

    def key(self, cutoff: int | None) -> str:
        """The key under which pytrec_eval reports it."""
        return self.measure if cutoff is None or self.truncate else f"{self.measure}_{cutoff}"

    def per_query(
        self,
        run: Mapping[str, Mapping[str, float]],
        qrels: Qrels,
        cutoff: int | None,
        relevance_level: int,
    ) -> dict[str, float]:
        return evaluate_trec(run, qrels, [Metric("", self, cutoff)], relevance_level)[""]


NDCG = TrecMeasure("ndcg_cut", "required", about="normalised discounted cumulative gain")
RECALL = TrecMeasure("recall", "required", about="recall")
PRECISION = TrecMeasure("P", "required", about="precision")
RECIPROCAL_RANK = TrecMeasure(
    "recip_rank", "optional", truncate=True, about="reciprocal rank of the first relevant item"
)
AVERAGE_PRECISION = TrecMeasure("map", "none", about="average precision")
ACCURACY = TrecMeasure("success", "required", about="1 if a relevant item is in the top k")


@dataclass(frozen=True)
class JudgedRate:
    """ir_measures' ``Judged@k``: the share of a query's top ``k`` items (all of them without a
    cutoff, or when fewer are ranked) that its qrels judge at any grade, relevant or not. Items
    are ranked as trec_eval ranks them; a query with no ranked item scores 0."""

    cutoff: str = "optional"
    about: str = "share of the top k items that have a judgement"

    def per_query(
        self,
        run: Mapping[str, Mapping[str, float]],
        qrels: Qrels,
        cutoff: int | None,
        relevance_level: int,
    ) -> dict[str, float]:
        scores = {}
        for qid, judged in qrels.items():
            ranked = run.get(qid) or {}
            top = _top(ranked, cutoff or len(ranked))
            scores[qid] = sum(item in judged for item, _ in top) / len(top) if top else 0.0
        return scores


JUDGED = JudgedRate()

_TREC_NAMES = {
    "ndcg_cut": "nDCG",
    "recall": "R",
    "P": "P",
    "recip_rank": "MRR",
    "map": "MAP",
    "success": "Acc",
}


@dataclass(frozen=True)
class Metric:
    """A metric by its display name (``nDCG@10``): its measure and cutoff."""

    name: str
    measure: Measure
    cutoff: int | None


def parse_metric(name: str) -> Metric:
    """The :class:`Metric` a name means, or a DaprError naming the choices."""
    return _parse(name, registry.generation)


@lru_cache(maxsize=256)
def _parse(name: str, generation: int) -> Metric:
    """:func:`parse_metric`, remembered until a metric is added or removed at run time (reading
    the entry points takes milliseconds)."""
    trec = re.fullmatch(r"(ndcg_cut|recall|P|recip_rank|map|success)(?:_(\d+))?", name)
    if trec is not None:
        family, cutoff = trec.groups()
        name = _TREC_NAMES[family] + (f"@{cutoff}" if cutoff else "")
    match = re.fullmatch(r"([A-Za-z][\w-]*?)(?:@([^@]+))?", name)
    if match is None or match.group(1) not in registry:
        raise DaprError(f"unknown metric {name!r}; use {', '.join(_spellings())} (e.g. nDCG@10)")
    family, cutoff = match.group(1), match.group(2)
    measure = registry.get(family)
    if not isinstance(measure, Measure):
        raise DaprError(
            f"metric {family!r} is registered but is not a measure (it needs a cutoff attribute "
            "and a per_query method); fix the plugin that registers it"
        )
    if measure.cutoff == "required" and cutoff is None:
        raise DaprError(f"metric {name!r} needs a cutoff, e.g. {family}@10")
    digits = cutoff is not None and cutoff.isascii() and cutoff.isdigit()
    if cutoff is not None and not (digits and number_problem(int(cutoff), "", CUTOFFS) is None):
        raise DaprError(
            f"metric {name!r}: the cutoff must be at least 1, a whole number below 2**63, "
            f"e.g. {family}@10"
        )
    if measure.cutoff == "none" and cutoff is not None:
        raise DaprError(f"metric {name!r} takes no cutoff; write {family}")
    return Metric(name, measure, int(cutoff) if cutoff else None)


CUTOFFS = Range(1)
"""A cutoff is a positive integer (and below 2**63, as :data:`dapr.ranges.INT_LIMIT`)."""

BUILT_IN = ("nDCG", "R", "P", "RR", "MRR", "AP", "MAP", "Acc", "Judged")
"""The built-in families, in the order error messages list them (plugins follow)."""


def _spellings() -> list[str]:
    out = []
    names = registry.names()
    for family in [*(n for n in BUILT_IN if n in names), *(n for n in names if n not in BUILT_IN)]:
        try:
            cutoff = registry.get(family).cutoff
        except Exception:  # noqa: BLE001 - a broken plugin is listed by name only
            cutoff = "none"
        out.append({"required": f"{family}@k", "optional": f"{family}[@k]"}.get(cutoff, family))
    return out


def evaluate_trec(
    results: Mapping[str, Mapping[str, float]],
    judged: Qrels,
    metrics: Sequence[Metric],
    relevance_level: int,
) -> dict[str, dict[str, float]]:
    """``{metric name: {query: score}}`` of trec_eval measures over the judged queries, in as few
    pytrec_eval passes as the runs' cut depths allow."""
    import pytrec_eval

    scores: dict[str, dict[str, float]] = {m.name: dict.fromkeys(judged, 0.0) for m in metrics}
    for depth, group in _by_run_depth(metrics).items():
        ranked = results if depth is None else _truncate(results, depth)
        evaluator = pytrec_eval.RelevanceEvaluator(
            judged,
            {_trec(m).request(m.cutoff) for m in group},
            relevance_level=relevance_level,
        )
        keys = [(m.name, _trec(m).key(m.cutoff)) for m in group]
        for qid, values in evaluator.evaluate(ranked).items():
            for name, key in keys:
                scores[name][qid] = values[key]
    return scores


def _trec(metric: Metric) -> TrecMeasure:
    """The measure of a metric given to :func:`evaluate_trec` (a trec_eval one)."""
    assert isinstance(metric.measure, TrecMeasure), metric.name
    return metric.measure


def _by_run_depth(metrics: Sequence[Metric]) -> dict[int | None, list[Metric]]:
    """Metrics grouped by how deep the run must be cut before trec_eval sees it."""
    groups: dict[int | None, list[Metric]] = {}
    for m in metrics:
        depth = m.cutoff if _trec(m).truncate else None
        groups.setdefault(depth, []).append(m)
    return groups


def _truncate(results: Mapping[str, Mapping[str, float]], k: int) -> dict[str, dict[str, float]]:
    """The top ``k`` of every query in trec_eval's order (score, then item id, descending)."""
    return {qid: dict(_top(ranked, k)) for qid, ranked in results.items()}


def _top(ranked: Mapping[str, float], k: int) -> list[tuple[str, float]]:
    """The first ``k`` ``(item, score)`` pairs in trec_eval's order."""
    return sorted(ranked.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:k]
