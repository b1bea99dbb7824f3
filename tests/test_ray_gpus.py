"""Ray's GPU placement, proven on a node that declares two GPUs it does not have: jobs asking
``gpus_per_job: 1`` and actors asking ``gpus_per_actor: 1`` get one GPU each (two at a time),
see it in the ``CUDA_VISIBLE_DEVICES`` Ray sets, and record it with the device they use."""

from __future__ import annotations

import json
import os
import socket
import time
from itertools import combinations
from pathlib import Path

import pytest

from dapr import fault_signals
from dapr.data import Document, Passage
from dapr.experiment.config import load
from dapr.experiment.schedule import Done, plan, run_jobs
from dapr.ray_actors import Actors, Placement, device, on_actors, placement, stop_ray
from dapr.store.cache import Cache

FOUR_JOBS = """
name: gpus
dataset: {dataset}
resources: {{gpus_per_job: 1, cpus_per_job: 1}}
retrievers:
  bm25-a: {{name: bm25, args: {{k1: 0.9}}}}
  bm25-b: {{name: bm25, args: {{k1: 1.2}}}}
  bm25-c: {{name: bm25, args: {{k1: 1.5}}}}
  bm25-d: {{name: bm25, args: {{k1: 1.8}}}}
"""

DECLARED = {"0", "1"}
"""The ids of the two GPUs the test node declares."""


@pytest.fixture(scope="module")
def gpu_ray():
    """A local Ray declaring 2 GPUs and 4 CPUs (so that the GPUs bound how many GPU jobs run
    at once); a Ray left running without them is stopped first. Skipped where torch sees CUDA:
    the declared GPUs would mix with real ones."""
    ray = pytest.importorskip("ray")
    import torch

    if torch.cuda.is_available():
        pytest.skip("declared GPUs are for machines without CUDA")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if ray.is_initialized():
        stop_ray()
    with fault_signals.kept():  # the JVM of the Lucene tests keeps its SIGSEGV handler
        ray.init(num_cpus=4, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    stop_ray()


EXPECTED_DEVICE = "cpu"
"""The device a job or actor given a declared GPU picks: torch sees no CUDA here."""


def test_the_device_is_torchs_first_visible_cuda_device_else_the_cpu(monkeypatch):
    import torch

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert device() == "cuda:0"  # CUDA numbers the visible devices from 0
    assert placement() == Placement((), "1", "cuda:0")  # outside a Ray task: no GPU ids
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert placement() == Placement((), None, "cpu")


def _gpu_job(board: Path):
    """A job hook holding its GPU until two jobs have started (20 s at most), so that two run
    at once, and recording where it ran (made here so that Ray pickles it by value)."""

    def hold(job, cache_root, *after):
        import torch  # noqa: F401 -- the device is torch's view of the GPU Ray gave

        started = time.time()
        (board / str(os.getpid())).touch()
        deadline = time.monotonic() + 20
        while len(list(board.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        host, pid = socket.gethostname(), os.getpid()
        return Done(job.key, job.system, host, pid, started, time.time(), (), placement())

    return hold


def _overlap(a: Done, b: Done) -> bool:
    return a.started < b.finished and b.started < a.finished


def test_jobs_run_one_per_declared_gpu_and_see_it(gpu_ray, wiki_slice, tmp_path):
    path = tmp_path / "gpus.yaml"
    path.write_text(FOUR_JOBS.format(dataset=wiki_slice[0]))
    jobs = plan([load(path)])
    board = tmp_path / "started"
    board.mkdir()
    done = run_jobs(jobs, Cache(tmp_path / "cache"), use_ray=True, job=_gpu_job(board))
    assert [d.system for d in done] == [j.system for j in jobs]
    for d in done:
        # Ray gave one GPU, exposed it as CUDA_VISIBLE_DEVICES, and the job picked its device
        assert d.placement == Placement(
            (d.placement.visible,), d.placement.visible, d.placement.device
        )
        assert d.placement.visible in DECLARED
        assert d.placement.device == EXPECTED_DEVICE
    # each job in a worker process of its own: none keeps a GPU job's CUDA state for the next
    assert len({d.pid for d in done}) == 4 and os.getpid() not in {d.pid for d in done}
    # two at a time, never three, and two running at once hold different GPUs
    pairs = [(a, b) for a, b in combinations(done, 2) if _overlap(a, b)]
    assert pairs
    assert all(a.placement.gpus != b.placement.gpus for a, b in pairs)
    assert not any(
        _overlap(a, b) and _overlap(b, c) and _overlap(a, c) for a, b, c in combinations(done, 3)
    )


def _recorder():
    """A contextualizer writing where it ran into every passage (a class made here, so that
    Ray pickles it by value)."""

    class Recorder:
        def contextualize(self, document):
            where = placement()
            text = json.dumps([os.getpid(), where.gpus, where.visible, where.device])
            return [text] * len(document.passages)

    return Recorder


def _documents(n: int) -> list[Document]:
    return [Document(f"d{i}", f"t{i}", (Passage(f"d{i}-0", f"d{i}", 0, "text"),)) for i in range(n)]


def _wait_for_free_gpus(ray, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while ray.available_resources().get("GPU", 0) < 2:
        assert time.monotonic() < deadline, f"GPUs still held: {ray.available_resources()}"
        time.sleep(0.2)


def test_chain_actors_hold_one_declared_gpu_each(gpu_ray):
    from dapr.experiment.chain import Chain, ContextStep
    from dapr.experiment.pools import RayPool

    chain = Chain([ContextStep("title")])
    chain.factories = [_recorder()]
    pool = RayPool(chain, Actors(count=2, gpus=1, cpus=1))
    seen: dict[int, tuple] = {}
    deadline = time.monotonic() + 30
    try:
        while len(seen) < 2 and time.monotonic() < deadline:
            [result] = pool.submit(0, _documents(1)).result()
            pid, gpus, visible, used = json.loads(result.texts[0])
            seen[pid] = (tuple(gpus), visible, used)
        assert gpu_ray.available_resources().get("GPU", 0) == 0  # both declared GPUs are held
    finally:
        pool.shutdown()
    assert len(seen) == 2, seen
    assert sorted(visible for _, visible, _ in seen.values()) == sorted(DECLARED)
    assert all(
        gpus == (visible,) and used == EXPECTED_DEVICE for gpus, visible, used in seen.values()
    )
    _wait_for_free_gpus(gpu_ray)


def _placement_writer():
    """A shard writer storing where it ran (a class made here, so that Ray pickles it by
    value)."""

    class PlacementWriter:
        def write_shard(self, chunk, path):
            where = placement()
            time.sleep(0.2)  # the pass lasts long enough for both actors to take shards
            path.write_text(json.dumps([os.getpid(), where.gpus, where.visible, where.device]))

    return PlacementWriter()


def test_ray_data_actors_hold_one_declared_gpu_each(gpu_ray, tmp_path):
    from dapr.retrievers.support.encoding import shards

    def never(chunk, path):
        raise AssertionError(f"encoded {path} in the driver")

    items = [(f"p{i}", f"text {i}") for i in range(10)]
    with on_actors(Actors(count=2, gpus=1, cpus=1)):
        list(shards(items, tmp_path, 1, ".json", never, writer=_placement_writer()))
    stored = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("shard-*.json"))]
    assert len(stored) == 10
    by_pid = {pid: (tuple(gpus), visible, used) for pid, gpus, visible, used in stored}
    assert len(by_pid) == 2, by_pid
    assert sorted(visible for _, visible, _ in by_pid.values()) == sorted(DECLARED)
    assert all(
        gpus == (visible,) and used == EXPECTED_DEVICE for gpus, visible, used in by_pid.values()
    )
    _wait_for_free_gpus(gpu_ray)


TWO_JOBS = """
name: gpu-run
dataset: {dataset}
resources: {{gpus_per_job: 1, cpus_per_job: 1}}
retrievers:
  bm25: {{name: bm25}}
  bm25-doc: {{name: bm25, level: document}}
"""


def test_dapr_run_on_ray_records_the_gpu_of_each_job(
    gpu_ray, wiki_slice, tmp_path, capsys, monkeypatch
):
    from dapr.cli import main

    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    path = tmp_path / "gpu-run.yaml"
    path.write_text(TWO_JOBS.format(dataset=wiki_slice[0]))
    assert main(["run", str(path), "--ray", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("  job ")]
    assert len(lines) == 2 and all(" gpu " in line for line in lines), out
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    jobs = {job["system"]: job for job in manifest["jobs"]}
    assert set(jobs) == {"bm25", "bm25-doc"}
    for job in jobs.values():
        where = job["placement"]
        assert where["gpus"] == [where["visible"]] and where["visible"] in DECLARED
        assert where["device"] == EXPECTED_DEVICE
        assert job["pid"] != os.getpid() and job["computed"]
        assert f"gpu {where['visible']} ({where['device']})" in out
