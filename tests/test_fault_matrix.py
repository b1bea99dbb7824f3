"""Seeded fault injection: a run SIGKILLed at a random checkpoint of each phase (dataset build,
contextualize, index, search, fuse, write results; ``DAPR_FAULT=phase:n``, see
:mod:`dapr.io.faults`) is rerun: its files are byte-identical to an undisturbed run's and
`cache verify` is clean, for every seed. The runs are forked from this process (dapr imported
once), so the matrix costs little."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import sys
from pathlib import Path

import pytest

from dapr.cli import main
from dapr.io import faults
from dapr.store.cache import Cache
from dapr.store.housekeeping import verify

EXPERIMENT = """
name: faults
dataset: {dataset}
retrievers:
  bm25-doc: {{name: bm25, level: document}}
  titled: {{name: bm25, contextualizer: title}}
fusion:
  fused: {{name: convex, document: bm25-doc, passage: titled, args: {{alpha: 0.2}}}}
"""
PHASES = ("dataset", "contextualize", "index", "search", "fuse", "results")
SEEDS = (0, 1, 2)


def _child(setting: str | None, home: str, argv: list[str]) -> None:
    os.environ["DAPR_HOME"] = home
    faults.arm(setting)
    with open(os.devnull, "w") as quiet:
        os.dup2(quiet.fileno(), 1)
        os.dup2(quiet.fileno(), 2)
        try:
            code = main(argv)
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
        except BaseException:  # noqa: BLE001 - the exit status says it
            code = 1
    sys.stdout.flush()
    os._exit(code)


def _dapr(root: Path, setting: str | None, *argv: str) -> int:
    """``dapr ARGV`` in ``root`` (its own DAPR_HOME), forked; its exit status (-9: killed)."""
    process = multiprocessing.get_context("fork").Process(
        target=_child, args=(setting, str(root / "home"), list(argv))
    )
    here = os.getcwd()
    os.chdir(root)
    try:
        process.start()
    finally:
        os.chdir(here)
    process.join(120)
    assert process.exitcode is not None, "a forked dapr did not finish"
    return process.exitcode


def _both(root: Path, dataset: Path, setting: str | None, phase: str) -> int:
    """Export the dataset and run the experiment on it, faults as ``setting`` says in the step of
    ``phase`` (``all``: both); the status of that step."""
    export = setting if phase in ("dataset", "all") else None
    status = _dapr(root, export, "data", "export", str(dataset), "--out", "data")
    if status != 0 or phase == "dataset":
        return status
    (root / "exp.yaml").write_text(EXPERIMENT.format(dataset=root / "data"))
    return _dapr(root, setting, "run", "exp.yaml", "--out", "out")


def _files(root: Path) -> dict[str, bytes]:
    """The dataset and results files, but what a run measures: the manifest's timings and the
    contextualization's cost (its seconds, and how much of it this run computed)."""
    files = {}
    for path in sorted([*(root / "data").rglob("*"), *(root / "out").rglob("*")]):
        if path.is_file() and path.name != "manifest.json" and path.stem != "contextualization":
            files[path.relative_to(root).as_posix()] = path.read_bytes()
    metrics = json.loads(files.pop("out/metrics.json"))
    metrics.pop("contextualization", None)
    files["out/metrics.json"] = json.dumps(metrics, sort_keys=True).encode()
    return files


@pytest.fixture(scope="module")
def reference(wiki_slice, tmp_path_factory) -> tuple[dict[str, bytes], dict[str, int]]:
    """An undisturbed run's files, and how many checkpoints each phase has."""
    root = tmp_path_factory.mktemp("reference")
    tally = root / "tally"
    assert _both(root, wiki_slice[0], f"tally:{tally}", "all") == 0
    counts = {phase: tally.read_text().split().count(phase) for phase in PHASES}
    assert all(counts.values()), counts
    return _files(root), counts


@pytest.mark.skipif(sys.platform == "win32", reason="fork and SIGKILL")
@pytest.mark.parametrize("phase", PHASES)
def test_a_run_killed_at_a_random_point_of_a_phase_reruns_to_identical_files(
    reference, wiki_slice, tmp_path, phase
):
    files, counts = reference
    for seed in SEEDS:
        root = tmp_path / f"seed-{seed}"
        root.mkdir()
        n = random.Random(f"{phase}-{seed}").randint(1, counts[phase])
        killed = _both(root, wiki_slice[0], f"{phase}:{n}", phase)
        assert killed == -signal.SIGKILL, f"{phase}:{n} did not kill (status {killed})"
        assert _both(root, wiki_slice[0], None, "all") == 0, f"the rerun after {phase}:{n}"
        assert _files(root) == files, f"{phase}:{n}"
        assert verify(Cache(root / "home" / "cache"))[1] == []
