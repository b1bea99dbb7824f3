"""The NQ-hard rule on any dataset: the queries on which every one of several systems fails.

The DAPR paper built NQ-hard from the NaturalQuestions queries that all of several strong
retrievers miss (nDCG@10 = 0) and asks, in its Limitations, for the same rule elsewhere.
:func:`hard_subset` labels every query ``"hard"`` or ``"not hard"``; write the labels with
:func:`dapr.analysis.categories.write_labels` and analyse them as any other categories.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dapr.analysis.categories import system_scores
from dapr.errors import DaprError

HARD = "hard"
NOT_HARD = "not hard"
DEFAULT_METRIC = "nDCG@10"


def hard_subset(
    per_query_by_system: Mapping[str, Mapping[str, float]], threshold: float = 0.0
) -> dict[str, tuple[str, ...]]:
    """``{query_id: ("hard",)}`` when every system scores at most ``threshold``, else
    ``("not hard",)``; queries in the first system's order, then any others as first seen.

    Every system must score every query: a query missing from one is an error naming both.
    """
    if not per_query_by_system:
        raise DaprError("hard subset: no systems given; name at least one system")
    queries = list(dict.fromkeys(q for scores in per_query_by_system.values() for q in scores))
    if not queries:
        raise DaprError("hard subset: the systems score no queries; evaluate their runs first")
    for system, scores in per_query_by_system.items():
        missing = next((q for q in queries if q not in scores), None)
        if missing is not None:
            raise DaprError(
                f"hard subset: system {system!r} has no score for query {missing!r}; "
                "compare systems evaluated on the same queries"
            )
    return {
        q: (HARD,)
        if all(scores[q] <= threshold for scores in per_query_by_system.values())
        else (NOT_HARD,)
        for q in queries
    }


def gather_scores(
    results: Sequence[Mapping], metric: str = DEFAULT_METRIC, systems: Sequence[str] | None = None
) -> dict[str, dict[str, float]]:
    """``{system: {query_id: score}}`` for ``metric`` from one or more ``metrics.json`` dicts.

    ``systems`` defaults to every passage-level system of every file. A system is named as in
    its file or, where two files hold one name, as ``"experiment/system"``. The files must be on
    the same dataset and split.
    """
    if not results:
        raise DaprError("hard subset: no metrics.json given; pass at least one results directory")
    _same_queries(results)
    named = _system_names(results)
    aliases = {qualified: system for system, qualified in named.values()}
    aliases |= {display: system for display, (system, _) in named.items()}
    if systems is None:
        systems = [n for n, (s, _) in named.items() if s.get("level", "passage") == "passage"]
        if not systems:
            raise DaprError("hard subset: no passage-level system in the results; run one first")
    chosen = {}
    for name in systems:
        if name not in aliases:
            raise DaprError(
                f"hard subset: unknown system {name!r}; choose from: {', '.join(named) or 'none'}"
            )
        chosen[name] = system_scores(aliases[name], name, metric, "hard subset")
    return chosen


def _system_names(results: Sequence[Mapping]) -> dict[str, tuple[Mapping, str]]:
    """``{display name: (system entry, "experiment/system")}``: the plain name where it is
    unique across the files, else the qualified one."""
    entries = [
        (name, f"{metrics.get('experiment', '?')}/{name}", system)
        for metrics in results
        for name, system in (metrics.get("systems") or {}).items()
    ]
    counts: dict[str, int] = {}
    for name, _, _ in entries:
        counts[name] = counts.get(name, 0) + 1
    named = {}
    for name, qualified, system in entries:
        display = name if counts[name] == 1 else qualified
        if display in named:
            raise DaprError(
                f"hard subset: system {qualified!r} appears twice; give each results directory once"
            )
        named[display] = (system, qualified)
    return named


def _same_queries(results: Sequence[Mapping]) -> None:
    first = results[0]
    for other in results[1:]:
        for key in ("dataset", "dataset_fingerprint", "split"):
            if other.get(key) != first.get(key):
                raise DaprError(
                    f"hard subset: the results differ in {key!r} ({first.get(key)!r} vs "
                    f"{other.get(key)!r}); compare systems run on one dataset and split"
                )
