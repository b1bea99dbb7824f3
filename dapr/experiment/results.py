"""A results directory of ``dapr run``: the only module that writes or reads one.

``out/`` holds ``runs/<system>.trec``, ``metrics.json`` (means and per-query values, query
categories, contextualization costs), ``summary.md`` / ``.csv``, ``contextualization.md`` /
``.csv`` and ``categories.md`` where they apply, ``manifest.json``, and for a sweep ``sweep.md``
/ ``.csv`` / ``.json`` with its plot. It is built beside ``out`` and swapped in whole, with
the files of an earlier ``out`` that dapr did not write carried over; results of another
configuration are replaced only when asked (``--overwrite``).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from dapr.analysis.table import Result, result_from_metrics
from dapr.errors import DaprError, os_error
from dapr.experiment import summary
from dapr.experiment.manifest import denoising_figure
from dapr.experiment.runner import Outcome
from dapr.experiment.spec import Experiment, Published, PublishedRow
from dapr.experiment.sweep import SweepResult
from dapr.io import faults, write_trec_run
from dapr.io.files import (
    atomic_directory,
    write_bytes_atomic,
    writer,
    writer_gone,
)
from dapr.io.names import outside_home, problem
from dapr.io.rows import json_file
from dapr.io.trec import check_run

METRICS = "metrics.json"
MANIFEST = "manifest.json"
SWEEP = "sweep.json"
WRITTEN = frozenset(
    {
        METRICS,
        SWEEP,
        MANIFEST,
        "summary.md",
        "summary.csv",
        "contextualization.md",
        "contextualization.csv",
        "categories.md",
        "sweep.md",
        "sweep.csv",
        "sweep.png",
        "sweep.pdf",
        "training.json",
        "training.md",
        "profile.txt",
        "runs",
    }
)
"""The names dapr writes at the top of a results directory."""


def written_by_dapr(path: PurePosixPath) -> bool:
    """Whether dapr writes ``path`` (relative to a results directory): a rerun replaces these
    and keeps every other file."""
    if len(path.parts) == 1:
        denoising = path.name.startswith("denoising-") and path.suffix in (".png", ".pdf")
        return path.name in WRITTEN or denoising
    return path.parts[0] == "runs" and len(path.parts) == 2 and path.suffix == ".trec"


def check_output(out: Path, experiment: Experiment | None = None, overwrite: bool = False) -> None:
    """Raise a DaprError naming ``out`` and the fix unless :func:`write` can put a results
    directory there; creates nothing, so it can run before any work.

    ``out`` may be missing (its parents are created), empty, or an earlier results directory
    (one with ``metrics.json``), which :func:`write` replaces whole.
    """
    out = Path(os.path.abspath(out))
    outside_home(out)
    if experiment is not None and not overwrite:
        _same_configuration(out, experiment)
    if out.exists() and not out.is_dir():
        raise DaprError(f"{out}: exists and is not a directory; remove it or choose another --out")
    cwd = Path.cwd()
    if out == cwd or out in cwd.parents:
        raise DaprError(
            f"{out}: is the working directory or holds it, so it cannot be replaced by the "
            "results; choose another --out, e.g. results/<experiment>"
        )
    if out.is_dir() and not (out / METRICS).is_file() and any(out.iterdir()):
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


def _same_configuration(out: Path, experiment: Experiment) -> None:
    """A DaprError unless ``out`` is new or holds results of this very configuration."""
    from dapr.experiment.manifest import plain

    manifest = out / MANIFEST
    if not manifest.is_file():
        return
    try:
        before = json.loads(manifest.read_text(encoding="utf-8")).get("experiment")
    except (OSError, ValueError, AttributeError):
        before = None
    now = json.loads(json.dumps(plain(experiment)))
    if before == now:
        return
    differ = sorted(k for k in {*now, *(before or {})} if (before or {}).get(k) != now.get(k))
    raise DaprError(
        f"{out}: holds the results of another configuration of {experiment.name!r} (it differs "
        f"in: {', '.join(differ) or 'an unreadable manifest.json'}); pass --overwrite to "
        "replace them, or choose another --out"
    )


def write(
    outcome: Outcome,
    out: Path,
    manifest: dict | None = None,
    swept: SweepResult | None = None,
) -> None:
    """Write ``runs/<system>.trec``, ``metrics.json``, ``summary.md`` and ``summary.csv``, and
    where contextualizers ran, their cost as ``contextualization.md`` and ``.csv``; the
    ``manifest`` as ``manifest.json``; and what a sweep found (``swept``).

    The directory is built beside ``out`` and swapped in at the end: a failed write leaves
    no partial results (and ``out``, if it held earlier results, untouched).
    """
    check_output(out)
    for system, run in outcome.runs.items():  # before anything is written, naming the real path
        check_run(run, out / "runs" / f"{system}.trec", system)
    out = Path(os.path.abspath(out))
    if out.is_symlink():  # written where it points; the link stays
        out = out.resolve()
    _remove_stale_scratch(out)
    faults.checkpoint("results")
    created = [p for p in (out.parent, *out.parent.parents) if not p.exists()]
    try:
        with atomic_directory(out, owned=written_by_dapr) as scratch:
            _write_results(outcome, scratch)
            if manifest is not None:
                _write_text(scratch / "manifest.json", json.dumps(manifest, indent=1) + "\n")
            if swept is not None:
                _write_sweep(swept, scratch)
    except OSError as error:
        _remove_empty(created)
        raise DaprError(f"cannot write the results: {os_error(error, str(out))}") from None
    except BaseException:
        _remove_empty(created)
        raise


def _remove_stale_scratch(out: Path) -> None:
    """Remove the scratch directories beside ``out`` that killed runs left behind (those
    named ``.<out>.<pid>.<token>.tmp[.old]`` whose process is gone; on a shared file system,
    only this host's: another host's writer is not judged by its pid)."""
    if not out.parent.is_dir():
        return
    for scratch in out.parent.glob(f".{glob.escape(out.name)}.*.tmp*"):
        by = writer(scratch.name[len(out.name) + 2 :])
        if by is not None and writer_gone(*by):
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
        costs = summary.cost_rows(outcome.costs, outcome)
        _write_text(out / "contextualization.md", summary.cost_markdown(costs))
        _write_text(out / "contextualization.csv", summary.table_csv(costs))
    if outcome.labels:
        _write_text(
            out / "categories.md",
            summary.category_markdown(metrics, summary.headline_metric(outcome)),
        )
    if outcome.trained:
        _write_training(outcome.trained, out)
    _write_text(out / METRICS, json.dumps(metrics, indent=1) + "\n")
    _write_text(out / "summary.md", summary.markdown(outcome))
    _write_text(out / "summary.csv", summary.csv_text(outcome))


def _write_training(trained: dict[str, dict], out: Path) -> None:
    """``training.json`` (each trained model's card) and, for denoised negatives, the share of
    candidates the cross-encoder removed at each rank (RocketQA's Figure 5)."""
    _write_text(out / "training.json", json.dumps(trained, indent=1) + "\n")
    _write_text(out / "training.md", summary.training_markdown(trained))
    for name, card in trained.items():
        if "denoising" in card:
            from dapr.analysis.plots import denoising_plot

            counts = card["denoising"]
            denoising_plot(
                counts["scored"], counts["removed"], counts["below"], out / denoising_figure(name)
            )


def _write_text(path: Path, text: str) -> None:
    write_bytes_atomic(path, [text.encode()])


def _write_sweep(result: SweepResult, out: Path) -> None:
    """``sweep.md``, ``sweep.csv``, ``sweep.json`` and the plot ``sweep.png`` / ``.pdf``."""
    from dapr.analysis.plots import sweep_plot
    from dapr.experiment import sweep

    _write_text(out / "sweep.md", sweep.markdown(result))
    _write_text(out / "sweep.csv", sweep.csv_text(result))
    _write_text(out / SWEEP, json.dumps(sweep.summary(result), indent=1) + "\n")
    parameter = result.sweep
    curves = {
        f"{subset} ({split}, n={result.sizes[split][subset]})": list(zip(parameter.values, means))
        for split in reversed(result.splits)
        for subset, means in result.means[split].items()
    }
    sweep_plot(curves, parameter.argument, parameter.metric, out / "sweep", chosen=result.chosen)


def write_tables(out: Path, stem: str, tables: Mapping[str, str]) -> None:
    """``out/<stem>.<extension>`` for each ``{extension: text}`` (a report's table formats)."""
    outside_home(out)
    out.mkdir(parents=True, exist_ok=True)
    for extension, text in tables.items():
        _write_text(out / f"{stem}.{extension}", text)


def metrics_files(paths: Sequence[Path]) -> list[Path]:
    """Each path's metrics.json, or those of the results directories under it (a grid)."""
    found = []
    for path in paths:
        if path.is_file() or (path / METRICS).is_file():
            found.append(path)
        elif path.is_dir() and (below := sorted(path.rglob(METRICS))):
            found.extend(below)
        else:
            raise DaprError(f"{path}: no metrics.json here; give a results directory of dapr run")
    return found


def read_metrics(path: Path) -> dict[str, Any]:
    """The ``metrics.json`` of a results directory (or that file itself), checked for the keys
    every reader relies on; a DaprError naming the file and the fix otherwise."""
    file = path / METRICS if path.is_dir() else path
    if not file.is_file():
        raise DaprError(f"{file}: no such file; pass a results directory written by `dapr run`")
    data = _json(file)
    for key, kind in (("dataset", str), ("systems", dict)):
        if not isinstance(data.get(key), kind):
            raise DaprError(
                f"{file}: key {key!r} missing or not a {kind.__name__}; rerun `dapr run`"
            )
    for name, entry in data["systems"].items():
        if not isinstance(entry, dict):
            raise DaprError(f"{file}: systems.{name} is not an object; rerun `dapr run`")
        for key in ("mean", "per_query"):
            if not isinstance(entry.get(key), dict):
                raise DaprError(f"{file}: systems.{name}.{key} missing or not an object")
    return data


def load_results(paths: Sequence[Path]) -> list[Result]:
    """:func:`read_metrics` of each path, as the rows and scores tables are built from."""
    results = []
    for path in paths:
        path = Path(path)
        file = path / METRICS if path.is_dir() else path
        results.append(result_from_metrics(file, read_metrics(path)))
    return results


def read_published(metrics_file: Path) -> Published | None:
    """The ``published:`` block of the experiment whose results hold ``metrics_file``, as its
    ``manifest.json`` recorded it; None without a manifest or a block."""
    manifest = metrics_file.parent / MANIFEST
    if not manifest.is_file():
        return None
    given = _json(manifest).get("experiment", {}).get("published")
    if not isinstance(given, dict):
        return None
    try:
        rows = tuple(PublishedRow(**row) for row in given.get("rows", []))
        return Published(given["source"], given.get("values", {}), rows)
    except (KeyError, TypeError):
        raise DaprError(
            f"{manifest}: experiment.published is not as dapr writes it; rerun `dapr run`"
        ) from None


def read_sweep(directory: Path) -> dict[str, Any]:
    """The ``sweep.json`` of a results directory whose experiment swept a parameter."""
    file = directory / SWEEP
    if not file.is_file():
        raise DaprError(f"{directory}: no sweep.json; run an experiment with a sweep block")
    return _json(file)


MAX_JSON_BYTES = 1 << 30
"""The most a results file read back may hold (``/dev/zero`` given as one is not read forever)."""


def _json(file: Path) -> dict[str, Any]:
    try:
        data = json_file(file, MAX_JSON_BYTES, "rerun `dapr run` to rewrite it", DaprError)
    except OSError as e:
        raise DaprError(f"{file}: cannot be read ({e.strerror}); check its permissions") from None
    if not isinstance(data, dict):
        raise DaprError(f"{file}: expected a JSON object written by `dapr run`")
    return data


def export_runs(
    directory: Path, out: Path, systems: Sequence[str] = (), header: bool = True
) -> list[Path]:
    """The runs of a results directory written to ``out/<system>.trec``, each opened by a
    header saying what made it (experiment, system settings, dataset and its fingerprint,
    split, cache key, metric means, dapr version and git revision, when it finished)."""
    from dapr.io import read_trec_run

    directory = Path(directory)
    metrics = read_metrics(directory)
    manifest_file = directory / MANIFEST
    manifest = _json(manifest_file) if manifest_file.is_file() else {}
    chosen = list(systems) or list(metrics["systems"])
    unknown = [s for s in chosen if s not in metrics["systems"]]
    if unknown:
        raise DaprError(
            f"{directory}: no system {unknown[0]!r}; choose from: {', '.join(metrics['systems'])}"
        )
    for system in chosen:  # runs/<system>.trec is read, <out>/<system>.trec written
        wrong = problem(system)
        if wrong is not None:
            raise DaprError(
                f"{directory / METRICS}: systems: system name {system!r} {wrong}, so it names no "
                "run file dapr wrote; rerun `dapr run` to rewrite the results"
            )
    outside_home(out)
    spec = manifest.get("experiment", {})
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for system in chosen:
        source = directory / "runs" / f"{system}.trec"
        if not source.is_file():
            raise DaprError(f"{source}: no such run; rerun `dapr run` to write it")
        about = {
            "system": system,
            "experiment": metrics.get("experiment"),
            "settings": {**spec.get("retrievers", {}), **spec.get("fusion", {})}.get(system),
            "level": metrics["systems"][system].get("level"),
            "dataset": metrics["dataset"],
            "dataset_fingerprint": metrics.get("dataset_fingerprint"),
            "split": metrics.get("split"),
            "depth": metrics.get("depth"),
            "cache_key": manifest.get("keys", {}).get(system),
            "mean": metrics["systems"][system]["mean"],
            "dapr": manifest.get("packages", {}).get("dapr"),
            "git": manifest.get("git"),
            "finished": manifest.get("finished"),
        }
        target = out / f"{system}.trec"
        write_trec_run(read_trec_run(source), target, system, about if header else None)
        written.append(target)
    return written
