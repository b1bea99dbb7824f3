"""Run experiments as a graph of jobs: every retrieval system is a job (contextualize, index,
search; or rerank after its first stage), jobs shared by several experiments run once, and
independent jobs run in parallel as Ray tasks. Fusion, sweeps and evaluation then run in the
driver from the cached runs.

Without Ray the same jobs run one after another in this process. With Ray each job is a task
that asks for ``resources.gpus_per_job`` GPUs and ``resources.cpus_per_job`` CPUs, writes into
the shared cache (``$DAPR_HOME``: a shared file system on a cluster) and is started again when its
worker or its whole node dies (see :func:`run_jobs`: each retry is reported with its reason).
Jobs that compute the same cache entry wait on that entry's lock, so nothing is
computed twice even across concurrent runs. With ``resources.actors`` a job spreads its corpus
work over that many Ray actors: it hands the shards of a dense or sparse index to Ray Data
actors and the documents it contextualizes to chain actors (see :func:`actors`).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from dapr.experiment.spec import Experiment
from dapr.ray_actors import Actors, Placement, on_actors, placement, start_ray
from dapr.store.cache import Cache, content_key

RETRIES = 3
"""How often a job whose worker or node died is started again."""


@dataclass(frozen=True)
class Job:
    """One retrieval system of one experiment, reduced to what computing its run needs."""

    experiment: Experiment
    system: str
    key: str
    after: str | None = None
    """The key of the job whose run this one re-ranks."""


@dataclass(frozen=True)
class Done:
    """Where and when a job ran."""

    key: str
    system: str
    host: str
    pid: int
    started: float
    finished: float
    computed: tuple[str, ...]
    """The steps it computed (``kind system``); the rest it found cached."""
    placement: Placement | None = None
    """The GPUs Ray gave it and the device it computed on."""
    retried: tuple[str, ...] = ()
    """Why each earlier attempt failed (its worker or node died), oldest first."""


def plan(experiments: Sequence[Experiment]) -> list[Job]:
    """The retrieval jobs of all experiments, each once, first stages before their rerankers.

    Two systems are the same job when everything that determines their run is the same: the
    dataset (and its arguments), the split, the depth, and the system's settings together with
    those of its first stage.
    """
    jobs: dict[str, Job] = {}
    for exp in experiments:
        keys: dict[str, str] = {}
        for system, spec in exp.retrievers.items():
            after = keys.get(spec.first_stage) if spec.first_stage else None
            keys[system] = content_key(
                exp.dataset, exp.dataset_args, exp.split, exp.depth, asdict(spec), after
            )
            if keys[system] not in jobs:
                jobs[keys[system]] = Job(_only(exp, system), system, keys[system], after)
    return sorted(jobs.values(), key=lambda job: job.after is not None)


def _only(exp: Experiment, system: str) -> Experiment:
    """``exp`` reduced to ``system`` and the first stage it re-ranks, if any."""
    spec = exp.retrievers[system]
    needed = {system} | ({spec.first_stage} if spec.first_stage else set())
    retrievers = {name: s for name, s in exp.retrievers.items() if name in needed}
    return replace(exp, retrievers=retrievers, fusion={}, sweep=None, maxp=())


def run_job(job: Job, cache_root: str, *_after: Done) -> Done:
    """Compute (or find cached) the run of ``job`` in the cache at ``cache_root`` (``_after``:
    the jobs it waited for)."""
    from dapr.experiment.runner import Runner

    started = time.time()
    with on_actors(actors(job.experiment.resources)):
        outcome = Runner(job.experiment, Cache(Path(cache_root))).run(evaluate=())
    computed = tuple(f"{s.kind} {s.system}" for s in outcome.steps if s.status == "computed")
    host, pid = socket.gethostname(), os.getpid()
    return Done(job.key, job.system, host, pid, started, time.time(), computed, placement())


def actors(resources: dict[str, float]) -> Actors | None:
    """The actors a job on Ray spreads its corpus work over: ``resources.actors`` of them, each
    asking ``gpus_per_actor`` (by default ``gpus_per_job``) GPUs and ``cpus_per_actor`` CPUs;
    None when there are none or Ray is not running in this process."""
    import sys

    count = int(resources.get("actors", 0))
    if not count or "ray" not in sys.modules or not sys.modules["ray"].is_initialized():
        return None
    return Actors(
        count=count,
        gpus=resources.get("gpus_per_actor", resources.get("gpus_per_job", 0)),
        cpus=resources.get("cpus_per_actor", 1),
    )


def run_jobs(
    jobs: Sequence[Job],
    cache: Cache,
    ray_address: str | None = None,
    use_ray: bool = False,
    job: Callable[..., Done] = run_job,
) -> list[Done]:
    """Run every job: in this process, or as Ray tasks when ``use_ray`` or ``ray_address``
    (``auto`` or ``ray://host:port`` joins a cluster; none starts Ray sized to this machine)."""
    if not (use_ray or ray_address):
        return [job(j, str(cache.root)) for j in jobs]
    import ray

    if not ray.is_initialized():
        start_ray(ray_address)
    # a job given GPUs runs in a worker process of its own (max_calls, which Ray sets for
    # tasks declared with GPUs but options() cannot): a worker kept for a later job would hold
    # the GPU memory torch cached and the CUDA devices torch started with
    remotes = {
        False: ray.remote(max_retries=0)(job),
        True: ray.remote(max_retries=0, max_calls=1)(job),
    }
    keys = {j.key for j in jobs}
    finished: dict[str, Done] = {}
    failures: dict[str, list[str]] = {j.key: [] for j in jobs}
    running: dict[object, Job] = {}

    def submit(j: Job) -> None:
        resources = j.experiment.resources
        gpus = resources.get("gpus_per_job", 0)
        task = remotes[gpus > 0].options(num_cpus=resources.get("cpus_per_job", 1), num_gpus=gpus)
        after = [finished[j.after]] if j.after in finished else []
        running[task.remote(j, str(cache.root), *after)] = j

    # the driver retries, not Ray, so that it can say which job it started again and why; a
    # reranker starts once its first stage finished
    waiting = list(jobs)
    while waiting or running:
        for j in [j for j in waiting if j.after not in keys or j.after in finished]:
            waiting.remove(j)
            submit(j)
        [ref], _ = ray.wait(list(running), num_returns=1)
        j = running.pop(ref)
        try:
            finished[j.key] = ray.get(ref)
        except _lost(ray) as error:
            reason = f"{type(error).__name__}: {_first_sentences(str(error))}"
            failures[j.key].append(reason)
            if len(failures[j.key]) > RETRIES:
                raise
            print(
                f"dapr: job {j.system} ({j.key}) failed on attempt {len(failures[j.key])} of "
                f"{RETRIES + 1} ({reason}); starting it again",
                file=sys.stderr,
                flush=True,
            )
            submit(j)
    return [replace(finished[j.key], retried=tuple(failures[j.key])) for j in jobs]


def _lost(ray: Any) -> tuple[type[BaseException], ...]:
    """The errors of a job lost with its worker process or its node (not of the job itself)."""
    errors = ray.exceptions
    return (
        errors.WorkerCrashedError,
        errors.NodeDiedError,
        errors.LocalRayletDiedError,
        errors.OutOfMemoryError,
    )


def _first_sentences(text: str, count: int = 2) -> str:
    """The first ``count`` sentences of Ray's error message (the rest is advice), on one line."""
    return ". ".join(" ".join(text.split()).split(". ")[:count]).rstrip(".") + "."
