"""Ray actors a job spreads its corpus work over: the shards of a neural index are encoded by
Ray Data actors (:func:`dapr.retrievers.support.encoding.shards`), documents are contextualized by
chain actors (:func:`dapr.experiment.contextualize.contextualize_corpus`).

A job on Ray enters :func:`on_actors` with the experiment's ``resources`` (see
:func:`dapr.experiment.schedule.actors`); outside it, and without Ray, the same work runs in
the job's own process (and its local worker pool).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

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
