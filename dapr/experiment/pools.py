"""Where a contextualizer step runs when it does not run in the job's own process: spawned
worker processes (each building the chain once), or Ray actors in a job on Ray with
``resources.actors``."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from dapr import ray_actors
from dapr.data import Document
from dapr.experiment.chain import Chain, timed
from dapr.store.contexts import Done


class ProcessPool:
    """Worker processes (spawned, each building the chain once), started at the first task."""

    def __init__(self, chain: Chain, workers: int):
        self.chain, self.workers = chain, workers
        self._executor: ProcessPoolExecutor | None = None
        self.tasks = 0
        """Chunks handed out: no more processes than these start."""

    @property
    def started(self) -> bool:
        return self._executor is not None

    def submit(self, index: int, documents: list[Document]) -> Future:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
                initargs=(self.chain,),
            )
        self.tasks += 1
        return self._executor.submit(_work, index, documents)

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(cancel_futures=True)


class RayPool:
    """Ray actors (each building the chain once), started at the first task; chunks go in turn
    to those that have started, so actors the cluster has no room for do not stall the pass.
    Every step runs there, batching ones too (an actor may hold a GPU); an actor whose process
    dies is restarted and its tasks retried."""

    def __init__(self, chain: Chain, setting: ray_actors.Actors):
        self.chain, self.setting = chain, setting
        self._actors: list[Any] = []
        self._starting: dict[Any, Any] = {}
        self._ready: list[Any] = []
        self._turn = 0
        self.tasks = 0

    @property
    def started(self) -> bool:
        return bool(self._actors)

    def submit(self, index: int, documents: list[Document]) -> Future:
        import ray

        if not self._actors:
            remote = ray.remote(
                num_cpus=self.setting.cpus,
                num_gpus=self.setting.gpus,
                max_restarts=ray_actors.RETRIES,
                max_task_retries=ray_actors.RETRIES,
            )(_ChainActor)
            self._actors = [remote.remote(self.chain) for _ in range(self.setting.count)]
            self._starting = {actor.__ray_ready__.remote(): actor for actor in self._actors}
        if self._starting:
            waiting = list(self._starting)
            ready, _ = ray.wait(waiting, num_returns=len(waiting), timeout=0)
            if not ready and not self._ready:  # none has started yet: wait for the first
                ready, _ = ray.wait(waiting, num_returns=1)
            for ref in ready:
                ray.get(ref)  # raises if the actor could not start
                self._ready.append(self._starting.pop(ref))
        actor = self._ready[self._turn % len(self._ready)]
        self._turn += 1
        self.tasks += 1
        return actor.work.remote(index, documents).future()

    def shutdown(self) -> None:
        import ray

        for actor in self._actors:
            ray.kill(actor)


class _ChainActor:
    """A Ray actor applying steps of its own copy of a chain."""

    def __init__(self, chain: Chain):
        _start_worker(chain)

    def work(self, index: int, documents: list[Document]) -> list[Done]:
        return _work(index, documents)


_worker_chain: Chain | None = None


def _start_worker(chain: Chain) -> None:
    global _worker_chain
    _worker_chain = chain
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def _work(index: int, documents: list[Document]) -> list[Done]:
    assert _worker_chain is not None
    return timed(_worker_chain, index, documents)
