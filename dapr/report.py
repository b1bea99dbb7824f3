"""Tables of results (markdown, CSV) and the files an experiment leaves behind."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from dapr.experiment.runner import Outcome
from dapr.io import write_trec_run
from dapr.io.files import write_bytes_atomic


def rows(outcome: Outcome) -> list[dict[str, object]]:
    """One row per system: its name, level and the mean of every metric."""
    return [
        {"system": system, "level": outcome.levels[system]}
        | {m: evaluation.means[m] for m in outcome.experiment.metrics}
        for system, evaluation in outcome.evaluations.items()
    ]


def markdown(outcome: Outcome) -> str:
    metrics = list(outcome.experiment.metrics)
    lines = [
        "| system | level | " + " | ".join(metrics) + " |",
        "|---|---|" + "---:|" * len(metrics),
    ]
    for row in rows(outcome):
        values = " | ".join(f"{row[m]:.4f}" for m in metrics)
        lines.append(f"| {row['system']} | {row['level']} | {values} |")
    return "\n".join(lines) + "\n"


def csv_text(outcome: Outcome) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, ["system", "level", *outcome.experiment.metrics])
    writer.writeheader()
    for row in rows(outcome):
        writer.writerow({k: (f"{v:.6f}" if isinstance(v, float) else v) for k, v in row.items()})
    return buffer.getvalue()


def write(outcome: Outcome, out: Path) -> None:
    """Write ``runs/<system>.trec``, ``metrics.json``, ``summary.md`` and ``summary.csv``."""
    exp = outcome.experiment
    (out / "runs").mkdir(parents=True, exist_ok=True)
    for system, run in outcome.runs.items():
        write_trec_run(run, out / "runs" / f"{system}.trec", system)
    metrics = {
        "experiment": exp.name,
        "dataset": outcome.dataset.name,
        "dataset_fingerprint": outcome.dataset.fingerprint,
        "split": exp.split,
        "depth": exp.depth,
        "systems": {
            system: {
                "level": outcome.levels[system],
                "mean": evaluation.means,
                "per_query": evaluation.per_query,
            }
            for system, evaluation in outcome.evaluations.items()
        },
    }
    _write_text(out / "metrics.json", json.dumps(metrics, indent=1) + "\n")
    _write_text(out / "summary.md", markdown(outcome))
    _write_text(out / "summary.csv", csv_text(outcome))


def _write_text(path: Path, text: str) -> None:
    write_bytes_atomic(path, [text.encode()])
