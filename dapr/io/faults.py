"""Fault injection for tests: ``DAPR_FAULT=<phase>:<n>`` SIGKILLs this process at the ``n``-th
checkpoint of ``phase``, so that a test can kill a run at a chosen point of each phase and check
what the rerun gives. ``DAPR_FAULT=tally:<file>`` appends each checkpoint's phase to ``file``
instead (how many points each phase has). Unset, a checkpoint is one comparison.

Phases (:data:`dapr.settings.FAULT_PHASES`): ``dataset`` (writing a dataset directory),
``contextualize`` (each chunk stored), ``train``, ``index``, ``search``, ``rerank``, ``score``,
``fuse`` (a step started, its cache entry written), ``results`` (the results directory); a
checkpoint that names no phase (an atomic file or directory write) counts in the phase of the
checkpoint before it.
"""

from __future__ import annotations

import os
import signal

from dapr import settings

_UNREAD = settings.Fault("", 0)
"""``DAPR_FAULT`` not read yet: the first checkpoint reads it (importing this module must not
fail on a bad value; the CLI has refused one before any checkpoint)."""
_fault: settings.Fault | None = _UNREAD
_phase = ""
_hits: dict[str, int] = {}


def checkpoint(phase: str | None = None) -> None:
    """A point where a fault may be injected, in ``phase`` (None: the current one)."""
    global _fault, _phase
    if _fault is None:
        return
    if _fault is _UNREAD:
        _fault = settings.fault()
        if _fault is None:
            return
    _phase = phase or _phase
    _hits[_phase] = _hits.get(_phase, 0) + 1
    if _fault.tally is not None:
        with open(_fault.tally, "a") as tally:
            tally.write(f"{_phase}\n")
    elif _fault.phase == _phase and _hits[_phase] == _fault.n:
        os.kill(os.getpid(), signal.SIGKILL)


def arm(setting: str | None) -> None:
    """Inject faults as ``DAPR_FAULT`` would say ``setting`` (None: none); counts start anew."""
    global _fault, _phase
    _fault, _phase = (settings.parse_fault(setting) if setting else None), ""
    _hits.clear()
