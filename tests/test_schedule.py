"""The job graph, and a real local Ray (2 CPUs) running it: in parallel, retried when a worker
dies, with the same results as the sequential run."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from dapr.experiment.config import load
from dapr.experiment.schedule import plan, run_job, run_jobs
from dapr.store.cache import Cache

GRID = """
name: grid
dataset: {dataset}
resources: {{cpus_per_job: 1}}
retrievers:
  bm25-a: {{name: bm25, args: {{k1: 0.9}}}}
  bm25-b: {{name: bm25, args: {{k1: 1.2}}}}
  bm25-title: {{name: bm25, contextualizer: title}}
  bm25-doc: {{name: bm25, level: document}}
fusion:
  fused: {{name: convex, document: bm25-doc, passage: bm25-a, args: {{alpha: 0.2}}}}
"""


def _experiment(tmp_path: Path, text: str, name: str = "grid.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return load(path)


def test_plan_runs_shared_systems_once_and_rerankers_after_their_first_stage(tmp_path, wiki_slice):
    dataset, _ = wiki_slice
    grid = GRID.format(dataset=dataset)
    first = _experiment(tmp_path, grid)
    rerank = "  ce: {name: rerank, first_stage: bm25-a, args: {model: m}}\nfusion:"
    second = _experiment(tmp_path, grid.replace("fusion:", rerank), "second.yaml")
    jobs = plan([first, second])
    assert [j.system for j in jobs] == ["bm25-a", "bm25-b", "bm25-title", "bm25-doc", "ce"]
    ce = jobs[-1]
    assert ce.after == jobs[0].key and set(ce.experiment.retrievers) == {"bm25-a", "ce"}
    assert all(not j.experiment.fusion and j.experiment.sweep is None for j in jobs)
    assert len(plan([first, replace(first, split="dev")])) == 8  # another split, other runs


def test_ray_runs_independent_jobs_in_parallel_with_the_sequential_results(
    local_ray, wiki_slice, tmp_path
):
    dataset, _ = wiki_slice
    jobs = plan([_experiment(tmp_path, GRID.format(dataset=dataset))])
    assert len(jobs) == 4
    # once into a cache of its own first, so that both worker processes have started and
    # imported dapr before the jobs timed below (a loaded machine started one seconds late)
    run_jobs(jobs, Cache(tmp_path / "warm-up"), use_ray=True)
    on_ray = run_jobs(jobs, Cache(tmp_path / "ray"), use_ray=True)
    alone = run_jobs(jobs, Cache(tmp_path / "sequential"))
    # every job computed its index and run, two at a time on two worker processes
    assert all(done.computed for done in on_ray)
    assert len({done.pid for done in on_ray} - {os.getpid()}) >= 2
    spans = sorted((d.started, d.finished) for d in on_ray)
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:]))
    assert {d.pid for d in alone} == {os.getpid()}
    for kind in ("runs", "indexes"):
        ray_entries = sorted(
            p.name for p in (tmp_path / "ray" / kind).iterdir() if not p.name.startswith(".")
        )
        seq_entries = sorted(
            p.name for p in (tmp_path / "sequential" / kind).iterdir() if not p.name.startswith(".")
        )
        assert ray_entries == seq_entries
    for key in sorted(
        p.name for p in (tmp_path / "ray" / "runs").iterdir() if not p.name.startswith(".")
    ):
        ray_run = (tmp_path / "ray" / "runs" / key / "run.npz").read_bytes()
        assert ray_run == (tmp_path / "sequential" / "runs" / key / "run.npz").read_bytes()


def test_a_job_whose_worker_dies_is_retried(local_ray, wiki_slice, tmp_path):
    dataset, _ = wiki_slice
    jobs = plan([_experiment(tmp_path, GRID.format(dataset=dataset))])[:1]
    marker = tmp_path / "crashed-once"

    def crash_once(job, cache_root, *after):
        if not marker.exists():
            marker.touch()
            os._exit(1)  # the worker process dies mid-job
        return run_job(job, cache_root, *after)

    [done] = run_jobs(jobs, Cache(tmp_path / "cache"), use_ray=True, job=crash_once)
    assert marker.exists() and done.system == "bm25-a" and done.computed
    assert len(done.retried) == 1 and done.retried[0].startswith("WorkerCrashedError: ")


def test_dapr_run_with_ray_prints_the_jobs_and_the_results(
    local_ray, wiki_slice, tmp_path, capsys, monkeypatch
):
    from dapr.cli import main

    dataset, _ = wiki_slice
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    path = tmp_path / "grid.yaml"
    path.write_text(GRID.format(dataset=dataset))
    assert main(["run", str(path), "--ray", "--out", str(tmp_path / "ray")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("4 retrieval jobs on Ray") and out.count("  job ") == 4
    steps = [
        line.split() for line in out.splitlines() if line.startswith("  ") and "job" not in line
    ]
    assert [s[2] for s in steps if s[0] == "search"] == ["cached"] * 4  # the jobs computed them
    assert steps[-1][:3] == ["fuse", "fused", "computed"]
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home-sequential"))
    assert main(["run", str(path), "--out", str(tmp_path / "sequential")]) == 0
    for run in (tmp_path / "sequential" / "runs").iterdir():
        assert (tmp_path / "ray" / "runs" / run.name).read_bytes() == run.read_bytes()


def test_ray_that_never_starts_is_given_up_on(monkeypatch, tmp_path):
    """Where Ray cannot reach its own processes, ray.init waits forever: dapr gives up after
    DAPR_RAY_TIMEOUT seconds with one line."""
    import threading
    import time

    import ray

    from dapr.errors import DaprError
    from dapr.ray_actors import start_ray

    never = threading.Event()
    monkeypatch.setattr(ray, "init", lambda **kwargs: never.wait())
    monkeypatch.setenv("DAPR_RAY_TIMEOUT", "0.5")
    started = time.monotonic()
    with pytest.raises(
        DaprError, match=r"a local Ray did not start within 0.5 s.*DAPR_RAY_TIMEOUT"
    ):
        start_ray(None)
    assert time.monotonic() - started < 5
    never.set()

    def refuse(**kwargs):
        raise ConnectionError("could not connect to 10.0.0.9:6379\nmore detail")

    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(
        DaprError, match=r"Ray could not start \(could not connect to 10.0.0.9:6379\)"
    ):
        start_ray("10.0.0.9:6379")
