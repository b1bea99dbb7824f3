"""Faults beyond SIGKILL: the file system refuses a write (a file-size limit, as a full disk
would) during a cache write and during the writing of results. dapr stops with one line, leaves
no partial entry or results, and a rerun completes with byte-identical results."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from test_outputs import _experiment

CHILD = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
limit = int(sys.argv[1])
if limit:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from dapr.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _dapr(tmp: Path, limit: int, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(limit), *argv],
        cwd=tmp,
        env={"DAPR_HOME": str(tmp / "home"), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "manifest.json"  # it holds timings
    }


@pytest.fixture
def reference(tmp_path_factory) -> dict[str, bytes]:
    """The results of an undisturbed run."""
    tmp = tmp_path_factory.mktemp("reference")
    experiment = _experiment(tmp)
    assert _dapr(tmp, 0, "run", str(experiment), "--out", "out").returncode == 0
    return _files(tmp / "out")


@pytest.mark.parametrize("during", ["cache write", "results write"])
def test_a_refused_write_stops_cleanly_and_a_rerun_completes(tmp_path, reference, during):
    experiment = _experiment(tmp_path)
    if during == "results write":  # the cache is complete: only the results are written
        assert _dapr(tmp_path, 0, "run", str(experiment), "--out", "warm").returncode == 0
        limit = 16  # no results file is this small
    else:
        limit = 512  # the first index file is larger
    failed = _dapr(tmp_path, limit, "run", str(experiment), "--out", "out")
    assert failed.returncode == 2, failed.stderr
    lines = failed.stderr.strip().splitlines()
    assert "Traceback" not in failed.stderr and len(lines) == 1, failed.stderr
    assert "File too large" in lines[0] and "ulimit -f" in lines[0]
    assert not (tmp_path / "out").exists()
    leftovers = [p for p in tmp_path.rglob("*") if p.name.endswith((".tmp", ".tmp.old"))]
    assert leftovers == []
    cache = tmp_path / "home" / "cache"
    for entry in [*cache.glob("runs/*"), *cache.glob("indexes/*")]:
        if entry.is_dir() and not entry.name.startswith("."):
            assert (entry / "COMPLETE").is_file()  # nothing half-written counts as an entry
    again = _dapr(tmp_path, 0, "run", str(experiment), "--out", "out")
    assert again.returncode == 0, again.stderr
    assert _files(tmp_path / "out") == reference
