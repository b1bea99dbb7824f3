"""Evaluation: a run against graded qrels, per query and averaged, through pytrec_eval
(trec_eval's own code) for the built-in measures and any registered :class:`Measure`.

Metric names are parsed by :mod:`dapr.evaluation.metrics`; document-level views (MaxP, document
qrels) are in :mod:`dapr.evaluation.documents`; runs, qrels and metric names in ranx's and
ir_measures' terms in :mod:`dapr.evaluation.interop`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dapr.data import Qrels, Run
from dapr.evaluation.documents import document_qrels, maxp
from dapr.evaluation.metrics import DEFAULT_METRICS, TrecMeasure, evaluate_trec, parse_metric


@dataclass(frozen=True)
class Evaluation:
    """``per_query[metric][query_id]`` and ``means[metric]`` over the evaluated queries."""

    per_query: dict[str, dict[str, float]]
    means: dict[str, float]


def evaluate(
    run: Run, qrels: Qrels, metrics: Sequence[str] = DEFAULT_METRICS, relevance_level: int = 1
) -> Evaluation:
    """Score a run against graded qrels.

    Every query with at least one relevant judgement (grade >= ``relevance_level``) counts; one
    the run does not answer scores 0. Binary metrics (recall, precision, RR, AP, Acc) count
    grades from ``relevance_level`` up as relevant; nDCG uses the grades themselves;
    ``Judged@k`` counts every judged item, whatever its grade. ``RR@k`` (``MRR@k``) is the
    reciprocal rank of the first relevant item within the top ``k`` (0 beyond), ranks ordered
    as trec_eval orders them: score, then item id, descending.
    """
    parsed = [parse_metric(m) for m in metrics]
    judged = {q: dict(j) for q, j in qrels.items() if any(g >= relevance_level for g in j.values())}
    results = run.to_dict()
    trec = [m for m in parsed if isinstance(m.measure, TrecMeasure)]
    scores = evaluate_trec(results, judged, trec, relevance_level)
    for m in parsed:
        if m.name not in scores:
            computed = m.measure.per_query(results, judged, m.cutoff, relevance_level)
            scores[m.name] = {qid: float(computed.get(qid, 0.0)) for qid in judged}
    means = {
        name: (sum(values.values()) / len(values) if values else 0.0)
        for name, values in scores.items()
    }
    return Evaluation(per_query=scores, means=means)


__all__ = [
    "DEFAULT_METRICS",
    "Evaluation",
    "document_qrels",
    "evaluate",
    "maxp",
    "parse_metric",
]
