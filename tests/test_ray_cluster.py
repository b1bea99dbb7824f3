"""`dapr run --ray-address` joining a Ray cluster started apart from it (`ray start --head`), as
on a real cluster: the jobs run in the cluster's workers and write what the sequential run
writes."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from test_schedule import GRID  # noqa: E402  (four BM25 jobs and a fusion)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def ray_head():
    """A Ray head node of 2 CPUs in its own processes; yields (address, its temp directory)."""
    # a short directory: Ray's socket paths must fit in 107 characters
    temp = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    port = _free_port()
    ray = Path(sys.executable).with_name("ray")
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    log = (temp / "head.log").open("w")
    head = subprocess.Popen(
        [ray, "start", "--head", "--block", "--num-cpus", "2", "--port", str(port),
         "--include-dashboard=false", "--disable-usage-stats", "--temp-dir", str(temp)],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while "Ray runtime started" not in (temp / "head.log").read_text():
            assert head.poll() is None, (temp / "head.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the Ray head did not start in 2 minutes"
            time.sleep(0.5)
        yield f"127.0.0.1:{port}", temp
    finally:
        head.terminate()  # `--block` stops every process of the node on SIGTERM
        try:
            head.wait(60)
        except subprocess.TimeoutExpired:
            head.kill()
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def test_dapr_run_joins_a_cluster_by_its_address(ray_head, wiki_slice, tmp_path):
    address, temp = ray_head
    dataset, _ = wiki_slice
    grid = tmp_path / "grid.yaml"
    grid.write_text(GRID.format(dataset=dataset))
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "DAPR_HOME": str(tmp_path / "home")}
    dapr = Path(sys.executable).with_name("dapr")
    joined = subprocess.run(
        [dapr, "run", grid, "--ray-address", address, "--out", tmp_path / "cluster"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert joined.returncode == 0, joined.stderr[-2000:]
    assert joined.stdout.startswith("4 retrieval jobs on Ray")
    # each job ran in a worker process of that cluster (Ray names worker logs by their pid)
    pids = [int(p) for p in re.findall(r"  job \S+ +\S+?:(\d+)", joined.stdout)]
    workers = {int(f.stem.rsplit("-", 1)[1]) for f in temp.glob("session_*/logs/worker-*.out")}
    assert len(pids) == 4 and set(pids) <= workers
    env["DAPR_HOME"] = str(tmp_path / "home-sequential")
    alone = subprocess.run(
        [dapr, "run", grid, "--out", tmp_path / "sequential"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert alone.returncode == 0, alone.stderr[-2000:]
    runs = sorted((tmp_path / "sequential" / "runs").iterdir())
    assert len(runs) == 5
    for run in runs:
        assert (tmp_path / "cluster" / "runs" / run.name).read_bytes() == run.read_bytes()
