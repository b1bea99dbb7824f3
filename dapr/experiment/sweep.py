"""Sweep one fusion argument: every value on the tuning split, the best one on the reported split.

Retrieval runs are computed once per split and cached; each value only fuses them again. The
value with the best mean on ``tune_on`` is chosen before the reported split is looked at; the
reported split's numbers for every value are kept beside it for the paper's Figure 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from dapr.data import Dataset
from dapr.datasets import load_dataset
from dapr.errors import ConfigError
from dapr.experiment.runner import Outcome, Runner
from dapr.experiment.spec import Experiment, Sweep
from dapr.experiment.sweep_spec import with_value
from dapr.io import spreadsheet
from dapr.store.cache import Cache


@dataclass
class SweepResult:
    """Per value, the metric's mean on each split over all queries and over the subset."""

    sweep: Sweep
    splits: tuple[str, str]
    """(tuning split, reported split)."""
    means: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    """``means[split]["all" | subset]`` in the order of ``sweep.values``."""
    sizes: dict[str, dict[str, int]] = field(default_factory=dict)
    """Queries per split and query set."""
    chosen: Any = None
    outcome: Outcome | None = None
    """The experiment on the reported split with the chosen value."""

    def rows(self) -> list[dict[str, object]]:
        rows = []
        for n, value in enumerate(self.sweep.values):
            row: dict[str, object] = {self.sweep.argument: value}
            for split in self.splits:
                for subset, values in self.means[split].items():
                    row[f"{split} {subset}"] = values[n]
            row["chosen"] = value == self.chosen
            rows.append(row)
        return rows


def run_sweep(
    experiment: Experiment, cache: Cache | None = None, dataset: Dataset | None = None
) -> SweepResult:
    """Evaluate every value of ``experiment.sweep``, choose on its ``tune_on`` split
    (``dataset``: the experiment's, when it is loaded already)."""
    sweep = experiment.sweep
    if sweep is None:
        raise ConfigError(f"experiment {experiment.name!r} has no sweep block")
    cache = cache or Cache()
    dataset = dataset or load_dataset(experiment.dataset, **experiment.dataset_args)
    metrics = experiment.metrics + (() if sweep.metric in experiment.metrics else (sweep.metric,))
    base = replace(experiment, metrics=metrics, sweep=None)
    result = SweepResult(sweep, (sweep.tune_on, experiment.split))
    for split in result.splits:
        at_split = replace(base, split=split)
        subset = _subset(sweep, Runner(at_split, cache).run(dataset), dataset)
        per_value = [
            _scores(with_value(at_split, sweep, value), sweep, cache, dataset)
            for value in sweep.values
        ]
        sets = {"all": None} | ({sweep.subset: subset} if sweep.subset else {})
        result.means[split] = {
            name: [_mean(scores, qids) for scores in per_value] for name, qids in sets.items()
        }
        result.sizes[split] = {
            name: len(per_value[0]) if qids is None else len(qids) for name, qids in sets.items()
        }
    tuned = result.means[sweep.tune_on]["all"]
    result.chosen = sweep.values[tuned.index(max(tuned))]
    result.outcome = Runner(with_value(base, sweep, result.chosen), cache).run(dataset)
    # what was run: the experiment, its sweep block and the chosen value
    result.outcome.experiment = with_value(
        replace(experiment, metrics=metrics), sweep, result.chosen
    )
    return result


def _scores(experiment: Experiment, sweep: Sweep, cache: Cache, dataset: Dataset) -> dict:
    outcome = Runner(experiment, cache).run(dataset, evaluate={sweep.system})
    return outcome.evaluations[sweep.system].per_query[sweep.metric]


def _subset(sweep: Sweep, outcome: Outcome, dataset: Dataset) -> set[str] | None:
    """The queries of the subset on this split: ``hard`` (every passage-level retriever of the
    experiment scores 0 on the metric) or those labelled with the category ``sweep.subset``."""
    if sweep.subset is None:
        return None
    if sweep.subset == "hard":
        from dapr.analysis.hard import hard_subset

        scores = {
            system: outcome.evaluations[system].per_query[sweep.metric]
            for system, spec in outcome.experiment.retrievers.items()
            if spec.level == "passage"
        }
        return {qid for qid, labels in hard_subset(scores).items() if "hard" in labels}
    subset = {qid for qid, labels in outcome.labels.items() if sweep.subset in labels}
    if not subset:
        found = sorted({label for labels in outcome.labels.values() for label in labels})
        raise ConfigError(
            f"sweep.subset: no query of {dataset.name!r} is in category {sweep.subset!r}; "
            f"use hard, null, or one of: {', '.join(found) or 'none (the dataset has none)'}"
        )
    return subset


def _mean(scores: dict[str, float], qids: set[str] | None) -> float:
    values = list(scores.values()) if qids is None else [scores[q] for q in qids if q in scores]
    return sum(values) / len(values) if values else float("nan")


def summary(result: SweepResult) -> dict[str, Any]:
    """What ``sweep.json`` holds: the values, the means per split and query set (null where a
    set is empty), the query counts and the chosen value."""
    sweep = result.sweep
    return {
        "parameter": sweep.parameter,
        "values": list(sweep.values),
        "metric": sweep.metric,
        "tune_on": sweep.tune_on,
        "reported_on": result.splits[1],
        "chosen": result.chosen,
        "means": {
            split: {name: [None if m != m else m for m in means] for name, means in sets.items()}
            for split, sets in result.means.items()
        },
        "queries": result.sizes,
    }


def markdown(result: SweepResult) -> str:
    """The table of every value, the chosen one in bold."""
    rows = result.rows()
    columns = [c for c in rows[0] if c != "chosen"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---:|" * len(columns)]
    for row in rows:
        cells = [str(row[columns[0]])] + [
            "-" if row[c] != row[c] else f"{row[c]:.4f}" for c in columns[1:]
        ]
        if row["chosen"]:
            cells = [f"**{c}**" for c in cells]
        lines.append("| " + " | ".join(cells) + " |")
    sweep = result.sweep
    lines.append(
        f"\nChosen {sweep.parameter} = {result.chosen}: the best mean {sweep.metric} on "
        f"{sweep.tune_on}, reported on {result.splits[1]}."
    )
    return "\n".join(lines) + "\n"


def csv_text(result: SweepResult) -> str:
    rows = result.rows()
    columns = list(rows[0])
    return spreadsheet.csv_text(columns, ([row[c] for c in columns] for row in rows))
