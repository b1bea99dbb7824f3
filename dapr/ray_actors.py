"""Ray actors a job spreads its corpus work over: the shards of a neural index are encoded by
Ray Data actors (:func:`dapr.retrievers.support.encoding.shards`), documents are contextualized by
chain actors (:func:`dapr.experiment.contextualize.contextualize_corpus`).

A job on Ray enters :func:`on_actors` with the experiment's ``resources`` (see
:func:`dapr.experiment.schedule.actors`); outside it, and without Ray, the same work runs in
the job's own process (and its local worker pool). :func:`placement` says where a job or an
actor computes: the GPUs Ray gave it and the device it uses.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from dapr import fault_signals, settings
from dapr.errors import DaprError

RETRIES = 3
"""How often an actor whose process died is restarted (and its tasks retried)."""


@dataclass(frozen=True)
class Actors:
    """``count`` actors, each holding ``gpus`` GPUs and ``cpus`` CPUs."""

    count: int
    gpus: float = 0
    cpus: float = 1
    window: int = 0
    """Index shards handed out per Ray Data pass (0: sixteen per actor). Each pass starts its
    actors (and loads the model) anew and holds its texts in memory."""


_ACTORS: ContextVar[Actors | None] = ContextVar("actors", default=None)


@contextmanager
def on_actors(setting: Actors | None) -> Iterator[None]:
    """Within this block, corpus work that can spread over Ray actors does, as ``setting``
    says (None: it does not)."""
    token = _ACTORS.set(setting)
    try:
        yield
    finally:
        _ACTORS.reset(token)


def current() -> Actors | None:
    """The actors of the enclosing :func:`on_actors` block, if any."""
    return _ACTORS.get()


@dataclass(frozen=True)
class Placement:
    """Where a job or actor computes: the GPUs Ray gave it and the device it uses."""

    gpus: tuple[str, ...]
    """The ids of the GPUs Ray assigned (``ray.get_gpu_ids()``); none outside a Ray task."""
    visible: str | None
    """``CUDA_VISIBLE_DEVICES`` as the process sees it (None: unset); Ray sets it to those ids."""
    device: str
    """See :func:`device`."""


def device() -> str:
    """The device a model placed by default (``device: None``) computes on in this process:
    ``cuda:0`` where torch sees CUDA (the first visible GPU: Ray's ``CUDA_VISIBLE_DEVICES``
    numbers the GPUs it gave from 0), else ``mps`` where torch sees Apple's GPU, else ``cpu``;
    ``cpu`` too where torch is not loaded (nothing here computed with it)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return "cpu"
    if torch.cuda.is_available():
        return "cuda:0"
    return "mps" if torch.backends.mps.is_available() else "cpu"


def placement() -> Placement:
    """This process's :class:`Placement` (in a Ray task or actor: what Ray gave it)."""
    ray = sys.modules.get("ray")
    ids = ray.get_gpu_ids() if ray is not None and ray.is_initialized() else []
    return Placement(tuple(map(str, ids)), os.environ.get("CUDA_VISIBLE_DEVICES"), device())


RAY_TIMEOUT = settings.RAY_TIMEOUT
"""Seconds Ray may take to start or to join a cluster (``DAPR_RAY_TIMEOUT`` overrides)."""


def start_ray(address: str | None) -> None:
    """``ray.init`` on this machine or at ``address``, given up on after ``RAY_TIMEOUT``
    seconds with a one-line DaprError (Ray waits forever where it cannot reach its own
    processes, e.g. without a working local network)."""
    import ray

    init = {"address": address} if address else {"num_cpus": os.cpu_count() or 1}
    timeout = settings.ray_timeout()
    failure: list[BaseException] = []

    def start() -> None:
        try:
            ray.init(**init, include_dashboard=False, log_to_driver=False)
        except BaseException as error:  # noqa: BLE001 - handed to the waiting thread
            failure.append(error)

    starter = threading.Thread(target=start, name="ray-init", daemon=True)
    with fault_signals.kept():  # a JVM started before Ray keeps its SIGSEGV handler
        starter.start()
        starter.join(timeout)
    if starter.is_alive():
        where = f"the cluster at {address}" if address else "a local Ray"
        raise DaprError(
            f"{where} did not start within {timeout:g} s (Ray needs a working network, "
            "loopback included, and free ports); check it, run without --ray, or allow more "
            "time with DAPR_RAY_TIMEOUT=SECONDS"
        )
    if failure:
        error = failure[0]
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise DaprError(
            f"Ray could not start ({reason}); check --ray-address, or run without --ray"
        )


def stop_ray() -> None:
    """``ray.shutdown``, keeping the fault handlers installed before it (Ray resets SIGSEGV to
    its default action when it shuts down, which a running JVM does not survive)."""
    import ray

    with fault_signals.kept():
        ray.shutdown()
