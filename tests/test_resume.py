"""A run killed with SIGKILL at several moments resumes to byte-identical outputs without
recomputing what it had finished; two runs of one experiment write identical run files."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tiny_models import tiny_bert

HERE = Path(__file__).resolve().parent
DOCUMENTS = 40  # in the wiki_splits fixture
DENSE = "  dense: {{name: slow-dense, args: {{model: {model}, pooling: mean}}}}\n"
EXPERIMENT = """
name: resume
dataset: {dataset}
retrievers:
  bm25-doc: {{name: slow-bm25, level: document}}
  titled: {{name: slow-bm25, contextualizer: slow-title}}
  plain: {{name: bm25}}
{dense}fusion:
  fused: {{name: convex, document: bm25-doc, passage: titled, args: {{alpha: 0.2}}}}
"""


def _start(experiment: Path, out: Path, home: Path) -> subprocess.Popen:
    env = {**os.environ, "DAPR_HOME": str(home), "PYTHONPATH": str(HERE)}
    command = [sys.executable, str(HERE / "slow_components.py"), "run", str(experiment)]
    return subprocess.Popen(
        [*command, "--out", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_interruptible,
    )


def _interruptible() -> None:
    """Ctrl-C as in a terminal's foreground job: a suite started in the background of a
    non-interactive shell inherits SIGINT ignored, which dapr (rightly) keeps ignoring."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _finish(experiment: Path, out: Path, home: Path) -> str:
    process = _start(experiment, out, home)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    return stdout


def _complete(home: Path) -> dict[str, int]:
    """Every complete cache entry and the inode of its directory, which a rewrite replaces (a
    read only touches its marker)."""
    return {
        str(marker.parent.relative_to(home)): marker.parent.stat().st_ino
        for marker in (home / "cache").glob("*/*/COMPLETE")
    }


def _stored_documents(home: Path) -> int:
    """Documents the contextualization stores hold."""
    total = 0
    for store in (home / "cache" / "contexts").glob("*.sqlite"):
        if store.name != "costs.sqlite":
            # a store just created may not have its table yet
            with sqlite3.connect(store) as db, contextlib.suppress(sqlite3.OperationalError):
                total += db.execute("SELECT count(*) FROM documents").fetchone()[0]
    return total


def _outputs(out: Path) -> dict[str, bytes]:
    files = {p.relative_to(out).as_posix(): p.read_bytes() for p in (out / "runs").iterdir()}
    files["summary.csv"] = (out / "summary.csv").read_bytes()
    metrics = json.loads((out / "metrics.json").read_text())
    metrics.pop("contextualization", None)
    files["metrics"] = json.dumps(metrics, sort_keys=True).encode()
    return files


@pytest.fixture(scope="module")
def setup(wiki_splits, tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    """The experiment, without and with a dense system, each run once uninterrupted."""
    from dapr.datasets import read_dataset

    root = tmp_path_factory.mktemp("resume")
    texts = [p.text for p in read_dataset(wiki_splits).corpus.passages()]
    dense = DENSE.format(model=tiny_bert(root / "tiny-bert", texts))
    experiments = {}
    for which, extra in (("plain", ""), ("dense", dense)):
        experiments[which] = root / f"{which}.yaml"
        experiments[which].write_text(EXPERIMENT.format(dataset=wiki_splits, dense=extra))
        _finish(experiments[which], root / f"reference-{which}", root / f"home-{which}")
    return root, experiments


MOMENTS: dict[str, Callable[[Path], bool]] = {
    # writing the first index: its temporary directory exists, nothing is complete yet
    "mid-index": lambda home: any((home / "cache" / "indexes").glob(".*.tmp")),
    # contextualizing the 40 documents: the first chunk of 16 is stored, the rest is not
    "mid-contextualize": lambda home: _stored_documents(home) >= 16,
    # the contextualized passages are being indexed
    "mid-second-index": lambda home: _stored_documents(home) == DOCUMENTS,
    # encoding passages: two shards of the dense index are stored, the rest is not
    "mid-encoding": lambda home: (
        len(list((home / "cache" / "indexes").glob(".*.partial/*.done"))) >= 2
    ),
    # after the first search: a run is stored
    "after-a-search": lambda home: len(list((home / "cache").glob("runs/*/COMPLETE"))) >= 1,
}


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_killed_run_resumes_to_identical_outputs(setup, tmp_path, moment):
    root, experiments = setup
    which = "dense" if moment == "mid-encoding" else "plain"
    experiment = experiments[which]
    home = tmp_path / "home"
    process = _start(experiment, tmp_path / "out", home)
    deadline = time.monotonic() + 120
    while not MOMENTS[moment](home):
        assert process.poll() is None, f"the run ended before {moment}"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()
    finished = _complete(home)
    stored = _stored_documents(home)
    shards = {p.name: p.stat().st_ino for p in (home / "cache").glob("indexes/.*.partial/*.npy")}

    log = _finish(experiment, tmp_path / "out", home)
    assert _outputs(tmp_path / "out") == _outputs(root / f"reference-{which}")
    after = _complete(home)
    # what was complete at the kill was neither rewritten nor computed again
    assert all(after[entry] == written for entry, written in finished.items())
    # each step computed now wrote one new entry (an index, or a run: searched or fused)
    computed = [line for line in log.splitlines() if line.split()[2:3] == ["computed"]]
    assert len(computed) == len(set(after) - set(finished))
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["contextualization"]["titled"]["computed"] == DOCUMENTS - stored
    # dense shards stored before the kill are in the finished index, not encoded again
    index = {p.name: p.stat().st_ino for p in (home / "cache").glob("indexes/*/shard-*.npy")}
    assert all(index[name] == inode for name, inode in shards.items())
    assert (moment == "mid-encoding") == bool(shards)


def test_two_runs_write_byte_identical_run_files(setup, tmp_path):
    root, experiments = setup
    _finish(experiments["dense"], tmp_path / "again", tmp_path / "home")
    reference = root / "reference-dense" / "runs"
    for run in reference.iterdir():
        assert (tmp_path / "again" / "runs" / run.name).read_bytes() == run.read_bytes()


def test_concurrent_runs_sharing_a_cache_compute_each_step_once(setup, tmp_path):
    root, experiments = setup
    experiment = experiments["plain"]
    home = tmp_path / "home"
    first = _start(experiment, tmp_path / "first", home)
    second = _start(experiment, tmp_path / "second", home)
    logs = [process.communicate(timeout=300) for process in (first, second)]
    assert first.returncode == second.returncode == 0, [err for _, err in logs]
    computed = [
        tuple(line.split()[:2])
        for log, _ in logs
        for line in log.splitlines()
        if line.split()[2:3] == ["computed"]
    ]
    assert len(computed) == len(set(computed)) == len(_complete(home))
    for out in ("first", "second"):
        assert _outputs(tmp_path / out) == _outputs(root / "reference-plain")
    contextualized = [
        json.loads((tmp_path / out / "metrics.json").read_text())["contextualization"]["titled"]
        for out in ("first", "second")
    ]
    assert sorted(c["computed"] for c in contextualized) == [0, DOCUMENTS]


@pytest.mark.parametrize(
    ("name", "moment", "status"),
    [("SIGTERM", "mid-contextualize", 143), ("SIGINT", "mid-encoding", 130)],
)
def test_a_signalled_run_stops_in_time_and_resumes(setup, tmp_path, name, moment, status):
    """A scheduler's SIGTERM (or a Ctrl-C) stops the run within the grace period with one line
    saying how to resume; the cache stays consistent and the rerun gives the same files."""
    root, experiments = setup
    which = "dense" if moment == "mid-encoding" else "plain"
    home = tmp_path / "home"
    process = _start(experiments[which], tmp_path / "out", home)
    deadline = time.monotonic() + 120
    while not MOMENTS[moment](home):
        assert process.poll() is None, f"the run ended before {moment}"
        assert time.monotonic() < deadline
        time.sleep(0.01)
    finished = _complete(home)
    sent = time.monotonic()
    process.send_signal(getattr(signal, name))
    _, stderr = process.communicate(timeout=30)
    assert time.monotonic() - sent < 10  # the default grace
    assert process.returncode == status, stderr
    assert stderr.strip().splitlines()[-1] == (
        f"dapr: {'terminated' if name == 'SIGTERM' else 'interrupted'} ({name}); finished steps "
        "are cached, rerun the same command to resume"
    )
    assert not (tmp_path / "out").exists()  # no partial results
    env = {**os.environ, "DAPR_HOME": str(home)}
    verify = [sys.executable, "-m", "dapr.cli", "cache", "verify"]
    assert subprocess.run(verify, env=env, capture_output=True, check=False).returncode == 0
    _finish(experiments[which], tmp_path / "out", home)
    assert _outputs(tmp_path / "out") == _outputs(root / f"reference-{which}")
    after = _complete(home)
    assert all(after[entry] == written for entry, written in finished.items())


def test_a_run_stuck_past_the_grace_period_exits_anyway():
    """SIGTERM while a long call holds the main thread: the process exits once the grace
    period (here half a second) is over, with status 143 and one line."""
    code = (
        "import os, signal, time\n"
        "from dapr.cli import Terminated, _terminate_gracefully\n"
        "with _terminate_gracefully():\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        time.sleep(5)\n"
        "    except Terminated:\n"
        "        time.sleep(5)  # does not stop in time\n"
        "print('not reached')\n"
    )
    env = {**os.environ, "DAPR_GRACE_SECONDS": "0.5"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert time.monotonic() - started < 4
    assert done.returncode == 143 and "not reached" not in done.stdout
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("dapr: terminated (SIGTERM), past the grace period")
    )
