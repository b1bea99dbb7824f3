"""A worker node of a two-node Ray cluster lost in the middle of `dapr run`: its raylet and
workers are killed while two jobs on it are halfway through writing their indexes. The run
finishes on the head with the sequential results, says which jobs it started again and why,
and never uses what the dead node half-wrote (`dapr cache verify` is clean)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

import pytest

pytest.importorskip("ray")

from test_ray_cluster import _free_port  # noqa: E402

pytestmark = pytest.mark.cluster

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
EXPERIMENT = """
name: lost-node
dataset: {dataset}
resources: {{cpus_per_job: 1}}
retrievers:
  gated-a: {{name: gated-bm25, args: {{k1: 0.9}}}}
  gated-b: {{name: gated-bm25, args: {{k1: 1.2}}}}
  bm25-doc: {{name: bm25, level: document}}
fusion:
  fused: {{name: convex, document: bm25-doc, passage: gated-a, args: {{alpha: 0.2}}}}
"""
HOLD = """
import sys, ray
ray.init(address=sys.argv[1], log_to_driver=False)
@ray.remote(num_cpus=2)
class Hold:
    def ready(self):
        return True
hold = Hold.remote()
ray.get(hold.ready.remote())
open(sys.argv[2], "w").close()
sys.stdin.read()
"""
"""Holds the head's 2 CPUs (the only node when it starts), says so by creating the file
``argv[2]``, and lets go when its stdin closes."""


def _wait(condition: Callable[[], object], what: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {seconds:g} s"
        time.sleep(0.1)


def _session(session: int) -> list[int]:
    """The live processes of a session (a node started by ``ray start`` in a session of its own:
    its raylet, its agents, its workers and what they started)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if int(fields[3]) == session and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def _kill_session(session: int) -> None:
    """SIGKILL every process of ``session`` and wait until they are gone."""
    for pid in _session(session):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _wait(lambda: not _session(session), f"the end of session {session}", 30)


@contextmanager
def _node(args: list[str], env: dict[str, str]) -> Iterator[tuple[subprocess.Popen, Path]]:
    """A Ray node (``ray start --block ARGS``) in a session and a short temp directory of its own;
    yields its ``ray start`` process (whose pid is the session's id) and that directory. Every
    process of the session is ended afterwards."""
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # socket paths: 107 characters
    log = temp / "node.log"
    with log.open("w") as out:
        node = subprocess.Popen(
            [BIN / "ray", "start", "--block", "--disable-usage-stats", "--temp-dir", temp, *args],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    try:
        _wait(
            lambda: "Ray runtime started" in log.read_text() or node.poll() is not None,
            "the start of a Ray node",
        )
        assert node.poll() is None, log.read_text()[-2000:]
        yield node, temp
    finally:
        node.terminate()  # `--block` stops the node's processes on SIGTERM
        with suppress(subprocess.TimeoutExpired):
            node.wait(30)
        _kill_session(node.pid)
        node.wait()
        shutil.rmtree(temp, ignore_errors=True)


def _distribution(root: Path) -> Path:
    """A folder for PYTHONPATH that installs ``gated-bm25`` by entry point (on every node)."""
    info = root / "gated_components-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gated-components\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[dapr.retrievers]\ngated-bm25 = gated_components:GatedBM25\n"
    )
    return root


def _outputs(out: Path) -> dict[str, bytes]:
    files = {p.name: p.read_bytes() for p in (out / "runs").iterdir()}
    files["summary.csv"] = (out / "summary.csv").read_bytes()
    metrics = json.loads((out / "metrics.json").read_text())
    metrics.pop("contextualization", None)
    files["metrics"] = json.dumps(metrics, sort_keys=True).encode()
    return files


def test_a_lost_worker_node_is_survived_on_the_head(wiki_slice, tmp_path):
    dataset, _ = wiki_slice
    experiment = tmp_path / "lost-node.yaml"
    experiment.write_text(EXPERIMENT.format(dataset=dataset))
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "disabled",
        "DAPR_HOME": str(tmp_path / "home"),
        "DAPR_TEST_GATE": str(gate),
        "PYTHONPATH": os.pathsep.join([str(_distribution(tmp_path / "plugin")), str(HERE)]),
        # the head declares a node dead after 5 missed health checks a second apart
        "RAY_health_check_period_ms": "1000",
        "RAY_health_check_failure_threshold": "5",
    }
    dapr = [BIN / "dapr"]
    port = _free_port()
    address = f"127.0.0.1:{port}"
    with ExitStack() as stack:
        head, head_temp = stack.enter_context(
            _node(["--head", "--port", str(port), "--num-cpus", "2", "--include-dashboard=false"],
                  env)
        )  # fmt: skip
        # the head's CPUs are taken before the worker node joins: the jobs start on the worker
        holding = tmp_path / "holding"
        holder = stack.enter_context(
            subprocess.Popen(
                [sys.executable, "-c", HOLD, address, holding],
                stdin=subprocess.PIPE,
                text=True,
                env=env,
            )  # fmt: skip
        )
        stack.callback(holder.kill)
        _wait(lambda: holding.exists() or holder.poll() is not None, "holding the head's CPUs")
        assert holder.poll() is None
        worker, _ = stack.enter_context(_node(["--address", address, "--num-cpus", "2"], env))
        run = stack.enter_context(
            subprocess.Popen(
                [*dapr, "run", experiment, "--ray-address", address, "--out", tmp_path / "ray"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )  # fmt: skip
        )
        stack.callback(run.kill)
        # both gated jobs halfway through their indexes, on the worker node
        _wait(lambda: len(list(gate.glob("waiting-*"))) == 2 or run.poll() is not None, "jobs")
        assert run.poll() is None, run.stderr.read()[-2000:]
        lost = sorted(int(p.name.split("-")[1]) for p in gate.glob("waiting-*"))
        assert set(lost) <= set(_session(worker.pid))
        _kill_session(worker.pid)  # the raylet, the workers, everything of that node
        (gate / "open").touch()
        holder.stdin.close()  # the head's CPUs are free for the jobs started again
        stdout, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr[-3000:]
        # Ray names a worker's log by its pid
        logs = head_temp.glob("session_*/logs/worker-*")
        on_head = {int(f.stem.rsplit("-", 1)[1]) for f in logs}

    # the log names each job started again and why
    retried = re.findall(r"dapr: job (\S+) \(\w+\) failed on attempt 1 of 4 \((\w+)", stderr)
    assert sorted(retried) == [("gated-a", "NodeDiedError"), ("gated-b", "NodeDiedError")]
    jobs = {line.split()[1]: line for line in stdout.splitlines() if line.startswith("  job ")}
    assert "(attempt 2: NodeDiedError)" in jobs["gated-a"]
    assert "(attempt 2: NodeDiedError)" in jobs["gated-b"]
    # ... and ran again on the head
    for system in ("gated-a", "gated-b"):
        assert int(re.search(r":(\d+)", jobs[system])[1]) in on_head
    manifest = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    assert sum(len(job["retried"]) for job in manifest["jobs"]) == 2

    # what the dead node half-wrote stays a temporary, never an entry
    halves = list((tmp_path / "home" / "cache" / "indexes").glob(".*.tmp/items.tsv"))
    assert {int(h.parent.name.split(".")[2]) for h in halves} == set(lost)
    verify = subprocess.run(
        [*dapr, "cache", "verify"], capture_output=True, text=True, env=env, timeout=120
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr

    # the sequential run, gate open: the same files
    env["DAPR_HOME"] = str(tmp_path / "home-sequential")
    alone = subprocess.run(
        [*dapr, "run", experiment, "--out", tmp_path / "sequential"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert alone.returncode == 0, alone.stderr[-2000:]
    assert _outputs(tmp_path / "ray") == _outputs(tmp_path / "sequential")
    for entry in (tmp_path / "home-sequential" / "cache" / "indexes").glob("*/items.tsv"):
        again = tmp_path / "home" / "cache" / "indexes" / entry.parent.name / "items.tsv"
        assert again.read_bytes() == entry.read_bytes()
        assert len(halves[0].read_bytes()) < len(entry.read_bytes())
