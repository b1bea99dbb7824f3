"""``dapr results publish``: the results directory of one dataset, as ``dapr run`` wrote it,
copied into the docs (``docs/results/<experiment>/<dataset>/``), where the reproduction matrix
reads dapr's value, with its date, hardware and commit.

Only what the matrix and the docs read is copied (:data:`COPIED`), after checking that it is
one complete run; a copy of a newer run is replaced only when asked (``--overwrite``).
"""

from __future__ import annotations

import argparse
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from dapr.errors import DaprError
from dapr.experiment.results import MANIFEST, MAX_JSON_BYTES, METRICS, read_metrics

COPIED = (METRICS, MANIFEST, "summary.md")
"""The files published: the matrix reads the first two; ``summary.md`` where the run wrote one."""
SAME_RUN = ("experiment", "dataset", "dataset_fingerprint", "split")
"""What ``metrics.json`` and ``manifest.json`` of one run both record, and must agree on."""


def add(commands: argparse._SubParsersAction) -> None:
    results = commands.add_parser(
        "results", help="publish a results directory into the docs' reproduction matrix"
    )
    actions = results.add_subparsers(required=True, metavar="ACTION")
    publish = actions.add_parser(
        "publish",
        help="copy a results directory's metrics.json, manifest.json and summary.md into "
        "DOCS_DIR/<experiment>/<dataset>/, where the reproduction matrix reads them",
        description="RESULTS_DIR is the results directory of one dataset that dapr run wrote "
        "(results/<experiment>/<dataset> for a dataset: list). Its metrics.json and "
        "manifest.json must be of one run; the folder it goes to is named by the experiment and "
        "the dataset they record. A copy of a newer run (by the manifests' finish times) is "
        "kept unless --overwrite is given; other files in that folder are kept.",
    )
    publish.add_argument("results", type=Path, metavar="RESULTS_DIR")
    publish.add_argument(
        "--docs",
        type=Path,
        default=Path("docs") / "results",
        metavar="DOCS_DIR",
        help="the docs' results folder (default: docs/results of the current directory)",
    )
    publish.add_argument(
        "--overwrite", action="store_true", help="replace a copy of a newer run with this one"
    )
    publish.set_defaults(handler=_publish)


def _publish(args: argparse.Namespace) -> int:
    from dapr.io.files import atomic_directory
    from dapr.io.names import outside_home

    source: Path = args.results
    metrics, manifest = read_run(source)
    outside_home(args.docs, "--docs")
    if not args.docs.is_dir():
        raise DaprError(
            f"--docs {args.docs}: no such directory; run in the repository's root (its "
            "docs/results) or give the docs' results folder as --docs DIR"
        )
    target = args.docs.joinpath(*destination(source / METRICS, metrics))
    inside = Path(os.path.realpath(args.docs))
    if inside not in Path(os.path.realpath(target)).parents:
        raise DaprError(
            f"{target}: lies outside --docs {args.docs} (a symbolic link on the way); remove "
            "the link or give another --docs"
        )
    if target.exists() and not target.is_dir():
        raise DaprError(f"{target}: exists and is not a directory; remove it, then publish again")
    _check_newer(target, source, finished(source / MANIFEST, manifest), args.overwrite)
    copied = [name for name in COPIED if (source / name).is_file()]
    with atomic_directory(target, owned=lambda p: len(p.parts) == 1 and p.name in COPIED) as new:
        for name in copied:
            (new / name).write_bytes((source / name).read_bytes())
    print(f"published {source} to {target}: {', '.join(copied)}")
    return 0


def read_run(source: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """``metrics.json`` and ``manifest.json`` of the results directory ``source``, checked to be
    readable and of one run; a DaprError naming the file and the fix otherwise."""
    from dapr.io.rows import json_file

    if not source.is_dir():
        raise DaprError(
            f"{source}: not a directory; give the results directory of one dataset that "
            "`dapr run` wrote (results/<experiment>/<dataset> for a dataset: list)"
        )
    if not (source / METRICS).is_file() and any(source.glob(f"*/{METRICS}")):
        below = sorted(p.parent.name for p in source.glob(f"*/{METRICS}"))
        raise DaprError(
            f"{source}: holds the results of a dataset: list; publish each dataset's folder, "
            f"e.g. {source / below[0]}"
        )
    metrics = read_metrics(source)
    file = source / MANIFEST
    if not file.is_file():
        raise DaprError(
            f"{file}: no such file; the matrix shows the run's date, hardware and commit from "
            "it: publish a results directory that `dapr run` wrote whole"
        )
    manifest = json_file(file, MAX_JSON_BYTES, "rerun `dapr run` to rewrite it", DaprError)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("experiment"), dict):
        raise DaprError(f"{file}: not a manifest written by `dapr run`; rerun `dapr run`")
    recorded = {**manifest, "experiment": manifest["experiment"].get("name")}
    differ = [key for key in SAME_RUN if recorded.get(key) != metrics.get(key)]
    if differ:
        raise DaprError(
            f"{source}: {METRICS} and {MANIFEST} are of different runs (they differ in: "
            f"{', '.join(differ)}); rerun `dapr run` to write both, then publish"
        )
    return metrics, manifest


def destination(file: Path, metrics: dict[str, Any]) -> list[str]:
    """The folders, under the docs' results, of the run whose ``metrics.json`` is ``file``:
    its experiment's name (``/`` nests; a dataset: list's point ends in the dataset, dropped)
    and its dataset. Each part must be a name (:mod:`dapr.io.names`): none climbs out."""
    from dapr.io.names import FIX, problem

    dataset, name = metrics["dataset"], metrics.get("experiment")
    if not isinstance(name, str):
        raise DaprError(f"{file}: experiment: missing or not a text; rerun `dapr run`")
    parts = name.split("/")
    if len(parts) > 1 and parts[-1] == dataset:
        parts.pop()
    for key, part in [*(("experiment", p) for p in parts), ("dataset", dataset)]:
        wrong = problem(part)
        if wrong is not None:
            raise DaprError(
                f"{file}: {key}: {part!r} {wrong}, so it cannot name a folder of the docs' "
                f"results; {FIX}, then rerun `dapr run`"
            )
    return [*parts, dataset]


def finished(file: Path, manifest: dict[str, Any]) -> datetime:
    """When the run of ``manifest`` (read from ``file``) finished."""
    try:
        return datetime.fromisoformat(str(manifest["finished"]))
    except (KeyError, ValueError):
        raise DaprError(
            f"{file}: finished: missing or not a date and time; rerun `dapr run` to rewrite it"
        ) from None


def _check_newer(target: Path, source: Path, when: datetime, overwrite: bool) -> None:
    """A DaprError unless ``target`` is new, holds a copy of a run that finished no later than
    ``when``, or ``overwrite`` is given."""
    from dapr.io.rows import json_file

    file = target / MANIFEST
    if overwrite or not file.is_file():
        return
    try:
        before = finished(file, json_file(file, MAX_JSON_BYTES, "", DaprError))
    except (DaprError, TypeError):
        raise DaprError(
            f"{file}: a published copy whose finish time cannot be read; pass --overwrite to "
            f"replace it with {source}"
        ) from None
    try:
        newer = before > when
    except TypeError:  # one of them without a time zone
        newer = before.replace(tzinfo=None) > when.replace(tzinfo=None)
    if newer:
        raise DaprError(
            f"{target}: holds a newer run (finished {before.isoformat()}) than {source} "
            f"(finished {when.isoformat()}); pass --overwrite to replace it with the older one"
        )
