"""Tables of results (markdown, CSV) and the files an experiment leaves behind."""

from __future__ import annotations

import contextlib
import csv
import glob
import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from dapr.contextualizers.pipeline import Cost
from dapr.errors import DaprError
from dapr.experiment.runner import Outcome
from dapr.io import write_trec_run
from dapr.io.files import atomic_directory, pid_alive, write_bytes_atomic
from dapr.io.rows import check_tokens


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


def cost_rows(
    costs: dict[str, Cost], outcome: Outcome | None = None, of: str = "system"
) -> list[dict[str, str]]:
    """The DAPR paper's Table 6 per system: the contextualizer chain, its speed per process, the
    process time for the whole corpus (estimated at that speed when only a sample ran), and
    the system's score (nDCG@10 when the experiment measures it)."""
    metric = _headline_metric(outcome) if outcome else None
    rows = []
    for system, cost in costs.items():
        row = {
            "approach": cost.approach,
            of: system,
            "speed (words/s)": f"{cost.words_per_second:,.1f}" if cost.seconds else "-",
            "total latency": _duration(cost.estimated_seconds)
            + (" (estimated)" if cost.corpus_words is not None else ""),
            "documents": f"{cost.documents:,}",
            "computed now": f"{cost.computed:,}",
            "workers": str(cost.workers),
            "wall (this run)": _duration(cost.wall_seconds),
        }
        if metric:
            row[metric] = f"{outcome.evaluations[system].means[metric]:.4f}"
        rows.append(row)
    return rows


def cost_markdown(rows: list[dict[str, str]]) -> str:
    if not rows:
        return ""
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|---|---|" + "---:|" * (len(columns) - 2)]
    lines += ["| " + " | ".join(row[c] for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _headline_metric(outcome: Outcome) -> str:
    metrics = outcome.experiment.metrics
    return "nDCG@10" if "nDCG@10" in metrics else metrics[0]


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:,.1f} h"


def check_output(out: Path) -> None:
    """Raise a DaprError naming ``out`` and the fix unless :func:`write` can put a results
    directory there; creates nothing, so it can run before any work.

    ``out`` may be missing (its parents are created), empty, or an earlier results directory
    (one with ``metrics.json``), which :func:`write` replaces whole.
    """
    out = Path(os.path.abspath(out))
    if out.exists() and not out.is_dir():
        raise DaprError(f"{out}: exists and is not a directory; remove it or choose another --out")
    cwd = Path.cwd()
    if out == cwd or out in cwd.parents:
        raise DaprError(
            f"{out}: is the working directory or holds it, so it cannot be replaced by the "
            "results; choose another --out, e.g. results/<experiment>"
        )
    if out.is_dir() and not (out / "metrics.json").is_file() and any(out.iterdir()):
        raise DaprError(
            f"{out}: exists and is not a results directory of dapr run (no metrics.json), so "
            "dapr will not replace it; empty it or choose another --out"
        )
    ancestor = out.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise DaprError(
            f"{out}: cannot be created, {ancestor} is a file, not a directory; choose another --out"
        )
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".dapr-probe-", dir=ancestor))
    except OSError as error:
        raise DaprError(
            f"{out}: cannot be written ({error.strerror} in {ancestor}); "
            "choose a writable --out or fix the directory's permissions"
        ) from None


def write(
    outcome: Outcome,
    out: Path,
    manifest: dict | None = None,
    also: Callable[[Path], object] | None = None,
) -> None:
    """Write ``runs/<system>.trec``, ``metrics.json``, ``summary.md`` and ``summary.csv``, and
    where contextualizers ran, their cost as ``contextualization.md`` and ``.csv``; the
    ``manifest`` as ``manifest.json``; then ``also(directory)`` writes any other file (a
    sweep's) into the same directory.

    The directory is built beside ``out`` and swapped in at the end: a failed write leaves
    no partial results (and ``out``, if it held earlier results, untouched).
    """
    check_output(out)
    for system in outcome.runs:  # before anything is written, and naming the real path
        check_tokens([system], "system name", out / "runs" / f"{system}.trec")
    out = Path(os.path.abspath(out))
    _remove_stale_scratch(out)
    created = [p for p in (out.parent, *out.parent.parents) if not p.exists()]
    try:
        with atomic_directory(out) as scratch:
            _write_results(outcome, scratch)
            if manifest is not None:
                _write_text(scratch / "manifest.json", json.dumps(manifest, indent=1) + "\n")
            if also is not None:
                also(scratch)
    except OSError as error:
        _remove_empty(created)
        raise DaprError(
            f"{out}: cannot write the results ({error.strerror or error}); free some space or "
            "choose another --out"
        ) from None
    except BaseException:
        _remove_empty(created)
        raise


def _remove_stale_scratch(out: Path) -> None:
    """Remove the scratch directories beside ``out`` that killed runs left behind (those
    named ``.<out>.<pid>.<token>.tmp[.old]`` whose process is gone)."""
    if not out.parent.is_dir():
        return
    for scratch in out.parent.glob(f".{glob.escape(out.name)}.*.tmp*"):
        pid = scratch.name[len(out.name) + 2 :].split(".")[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(scratch, ignore_errors=True)


def _remove_empty(directories: list[Path]) -> None:
    """Remove the directories (deepest first) that were created for a failed write."""
    for directory in directories:
        with contextlib.suppress(OSError):
            directory.rmdir()


def _write_results(outcome: Outcome, out: Path) -> None:
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
        "labels": {qid: list(labels) for qid, labels in outcome.labels.items()},
        "systems": {
            system: {
                "level": outcome.levels[system],
                **outcome.tags[system],
                "mean": evaluation.means,
                "per_query": evaluation.per_query,
            }
            for system, evaluation in outcome.evaluations.items()
        },
    }
    if outcome.costs:
        metrics["contextualization"] = {s: c.as_dict() for s, c in outcome.costs.items()}
        costs = cost_rows(outcome.costs, outcome)
        _write_text(out / "contextualization.md", cost_markdown(costs))
        _write_text(out / "contextualization.csv", _csv(costs))
    if outcome.labels:
        _write_text(out / "categories.md", category_markdown(metrics, _headline_metric(outcome)))
    _write_text(out / "metrics.json", json.dumps(metrics, indent=1) + "\n")
    _write_text(out / "summary.md", markdown(outcome))
    _write_text(out / "summary.csv", csv_text(outcome))


def category_markdown(metrics: dict, metric: str) -> str:
    """``metric`` per query category (columns, with their query counts) and system (rows)."""
    from dapr.analysis.categories import category_table

    systems = [s for s, v in metrics["systems"].items() if v["level"] == "passage"]
    if not systems:
        return ""
    table, counts = category_table(metrics, metric, systems)
    columns = [f"{c} (n={n})" for c, n in counts.items()]
    lines = [f"| {metric} | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for system, means in table.items():
        lines.append(f"| {system} | " + " | ".join(f"{means[c]:.4f}" for c in counts) + " |")
    return "\n".join(lines) + "\n"


def _csv(rows: list[dict[str, str]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def _write_text(path: Path, text: str) -> None:
    write_bytes_atomic(path, [text.encode()])
