"""dapr's runs, qrels and metric names in the terms of ranx and ir_measures (the ``interop`` extra).

Runs and qrels convert to ``ranx.Run`` / ``ranx.Qrels`` and back without loss (ids, scores,
grades; ranx cannot hold a run without a single ranked item, which becomes an empty
``ranx.Run``). ir_measures reads dapr's ``run.to_dict()`` and qrels as they are; what it reads
(dicts, data frames, ``ir_measures.read_trec_run``) converts back with :func:`from_ir_measures_run`
and :func:`from_ir_measures_qrels`. ranx compiles its metrics with numba on first use (about
30 s, cached afterwards), so it is imported only by the functions that need it.

Tied scores are ranked differently by each tool: trec_eval (and dapr) by descending item id,
ir_measures' msmarco and judged providers (``RR@10``, ``Judged@10``) by ascending id, ranx in
no defined order. :func:`ranked_scores` gives a run scores that spell out dapr's order, so that
every tool ranks every item as dapr does; :func:`evaluate_ranx` and
:func:`evaluate_ir_measures` score with it, over the queries dapr scores (those with a grade
of at least ``relevance_level``; an unanswered one scores 0), so their numbers equal
:func:`dapr.evaluation.evaluate`'s.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dapr.data import Qrels, Run
from dapr.errors import DaprError
from dapr.evaluation import Evaluation
from dapr.evaluation.metrics import (
    ACCURACY,
    AVERAGE_PRECISION,
    JUDGED,
    NDCG,
    PRECISION,
    RECALL,
    RECIPROCAL_RANK,
    Metric,
    parse_metric,
)

if TYPE_CHECKING:
    import ranx

_RANX = {
    NDCG: "ndcg",
    RECALL: "recall",
    PRECISION: "precision",
    RECIPROCAL_RANK: "mrr",
    AVERAGE_PRECISION: "map",
    ACCURACY: "hit_rate",
}
_IR_MEASURES = {
    NDCG: "nDCG",
    RECALL: "R",
    PRECISION: "P",
    RECIPROCAL_RANK: "RR",
    AVERAGE_PRECISION: "AP",
    ACCURACY: "Success",
    JUDGED: "Judged",
}
_GRADED = (NDCG, JUDGED)
"""Measures that take no relevance level: nDCG gains are the grades (as in trec_eval), and
Judged counts every judgement."""


# --------------------------------------------------------------------------- runs and qrels


def to_ranx_run(run: Run, name: str | None = None) -> ranx.Run:
    """The run as a ``ranx.Run`` (named ``name``), scores as they are."""
    ranx = _ranx()
    results = run.to_dict()
    if not any(results.values()):
        return ranx.Run(name=name)
    return ranx.Run.from_dict(results, name=name)


def from_ranx_run(run: ranx.Run) -> Run:
    """A ``ranx.Run`` as a dapr :class:`Run` (ranked as dapr ranks: ties by descending id)."""
    return Run.from_dict({str(q): dict(ranked) for q, ranked in run.to_dict().items()})


def to_ranx_qrels(qrels: Qrels) -> ranx.Qrels:
    """The qrels as ``ranx.Qrels``, every grade kept (also 0 and negative ones)."""
    ranx = _ranx()
    return ranx.Qrels(dict(qrels)) if any(qrels.values()) else ranx.Qrels()


def from_ranx_qrels(qrels: ranx.Qrels) -> Qrels:
    """``ranx.Qrels`` as dapr qrels ({query: {item: grade}})."""
    return {
        str(q): {str(i): int(g) for i, g in judged.items()} for q, judged in qrels.to_dict().items()
    }


def from_ir_measures_run(run: Any) -> Run:
    """A run in any form ir_measures reads (``{query: {item: score}}``, a data frame with
    ``query_id``/``doc_id``/``score`` columns, ``ScoredDoc`` records) as a dapr :class:`Run`."""
    return Run.from_dict(_ir_measures().util.RunConverter(run).as_dict_of_dict())


def from_ir_measures_qrels(qrels: Any) -> Qrels:
    """Qrels in any form ir_measures reads (dicts, a data frame, ``Qrel`` records)."""
    converted = _ir_measures().util.QrelsConverter(qrels).as_dict_of_dict()
    return {q: {i: int(g) for i, g in judged.items()} for q, judged in converted.items()}


def ranked_scores(run: Run) -> Run:
    """The run with each query's scores replaced by n, n - 1, ..., 1 down its ranking: the same
    ranking, without ties, for tools that break ties in another way."""
    lengths = np.diff(run.offsets)
    ends = np.repeat(run.offsets[1:], lengths)
    scores = (ends - np.arange(len(run.items))).astype(np.float64)
    return Run(run.queries, run.offsets, run.items, scores, run.vocab)


# --------------------------------------------------------------------------- metric names


def ranx_metric(metric: str, relevance_level: int = 1) -> str:
    """ranx's name for a dapr metric: ``nDCG@10`` -> ``ndcg@10``, ``R@100`` with relevance
    level 2 -> ``recall@100-l2``; a DaprError for a metric ranx does not have."""
    parsed = parse_metric(metric)
    family = _family(_RANX, parsed)
    if family is None:
        raise DaprError(
            f"metric {metric!r} has no ranx equivalent; evaluate it with dapr or ir_measures "
            "(dapr.evaluation.interop.evaluate_ir_measures)"
        )
    name = family + (f"@{parsed.cutoff}" if parsed.cutoff else "")
    graded = parsed.measure in _GRADED or relevance_level == 1
    return name if graded else f"{name}-l{relevance_level}"


def ir_measures_metric(metric: str, relevance_level: int = 1) -> Any:
    """ir_measures' measure for a dapr metric (``R@100`` -> ``R@100``, with relevance level 2
    ``R(rel=2)@100``; ``Acc@20`` -> ``Success@20``); a DaprError for a plugin's metric."""
    parsed = parse_metric(metric)
    family = _family(_IR_MEASURES, parsed)
    if family is None:
        raise DaprError(
            f"metric {metric!r} is a plugin's, so ir_measures has no name for it; use one of "
            "nDCG@k, R@k, P@k, RR[@k], AP, Acc@k, Judged[@k]"
        )
    measure = getattr(_ir_measures(), family)
    if parsed.measure not in _GRADED:
        measure = measure(rel=relevance_level)
    return measure @ parsed.cutoff if parsed.cutoff else measure


# --------------------------------------------------------------------------- evaluation


def evaluate_ranx(
    run: Run, qrels: Qrels, metrics: Sequence[str], relevance_level: int = 1
) -> Evaluation:
    """``metrics`` computed by ranx, over the queries and in the ranking dapr evaluates."""
    names = {m.name: ranx_metric(m.name, relevance_level) for m in _parse(metrics)}
    judged, answered = _comparable(run, qrels, relevance_level)
    per_query = {name: dict.fromkeys(judged, 0.0) for name in names}
    if answered:
        ranx = _ranx()
        ranked = ranx.Run(answered)
        with warnings.catch_warnings():  # ranx hashes ids into a signed integer on purpose
            warnings.filterwarnings("ignore", message="unsafe cast from uint64 to int64")
            wanted = list(dict.fromkeys(names.values()))
            ranx.evaluate(ranx.Qrels({q: judged[q] for q in answered}), ranked, wanted)
        for name, theirs in names.items():
            per_query[name].update({q: float(v) for q, v in ranked.scores[theirs].items()})
    return _evaluation(per_query)


def evaluate_ir_measures(
    run: Run, qrels: Qrels, metrics: Sequence[str], relevance_level: int = 1
) -> Evaluation:
    """``metrics`` computed by ir_measures (its default providers: pytrec_eval, msmarco,
    judged, ...), over the queries and in the ranking dapr evaluates."""
    measures = {m.name: ir_measures_metric(m.name, relevance_level) for m in _parse(metrics)}
    judged, answered = _comparable(run, qrels, relevance_level)
    per_query = {name: dict.fromkeys(judged, 0.0) for name in measures}
    wanted: dict[str, list[str]] = {}
    for name, measure in measures.items():
        wanted.setdefault(str(measure), []).append(name)
    unique = list({str(m): m for m in measures.values()}.values())
    for found in _ir_measures().iter_calc(unique, judged, answered) if answered else ():
        for name in wanted[str(found.measure)]:
            per_query[name][found.query_id] = float(found.value)
    return _evaluation(per_query)


def _family(names: Mapping[Any, str], parsed: Metric) -> str | None:
    """The name a table gives the metric's measure (found by identity: a plugin's measure need
    not be hashable)."""
    return next((name for measure, name in names.items() if measure is parsed.measure), None)


def _parse(metrics: Iterable[str]) -> list[Metric]:
    return [parse_metric(m) for m in metrics]


def _comparable(
    run: Run, qrels: Qrels, relevance_level: int
) -> tuple[Qrels, dict[str, dict[str, float]]]:
    """The queries dapr scores (a grade of at least ``relevance_level``) and the run's non-empty
    rankings of them, scored by rank (see :func:`ranked_scores`)."""
    judged = {q: dict(j) for q, j in qrels.items() if any(g >= relevance_level for g in j.values())}
    ranked = ranked_scores(run).to_dict()
    return judged, {q: ranked[q] for q in judged if ranked.get(q)}


def _evaluation(per_query: dict[str, dict[str, float]]) -> Evaluation:
    means = {n: (sum(v.values()) / len(v) if v else 0.0) for n, v in per_query.items()}
    return Evaluation(per_query=per_query, means=means)


def _ranx() -> Any:
    try:
        import ranx
    except ImportError:
        raise DaprError('ranx is not installed: pip install "dapr-ir[interop]"') from None
    return ranx


def _ir_measures() -> Any:
    try:
        import ir_measures
    except ImportError:
        raise DaprError('ir_measures is not installed: pip install "dapr-ir[interop]"') from None
    return ir_measures
