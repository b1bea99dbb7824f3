"""Fault injection for tests: ``DAPR_FAULT=<phase>:<n>`` SIGKILLs this process at the ``n``-th
checkpoint of ``phase``, so that a test can kill a run at a chosen point of each phase and check
what the rerun gives. ``DAPR_FAULT=tally:<file>`` appends each checkpoint's phase to ``file``
instead (how many points each phase has). Unset, a checkpoint is one comparison.

Phases: ``dataset`` (writing a dataset directory), ``contextualize`` (each chunk stored),
``index``, ``search``, ``fuse`` (a step started, its cache entry written), ``results`` (the
results directory); a checkpoint that names no phase (an atomic file or directory write) counts
in the phase of the checkpoint before it.
"""

from __future__ import annotations

import os
import signal

_SETTING = os.environ.get("DAPR_FAULT") or None
_phase = ""
_hits: dict[str, int] = {}


def checkpoint(phase: str | None = None) -> None:
    """A point where a fault may be injected, in ``phase`` (None: the current one)."""
    if _SETTING is None:
        return
    global _phase
    _phase = phase or _phase
    _hits[_phase] = _hits.get(_phase, 0) + 1
    target, _, value = _SETTING.partition(":")
    if target == "tally":
        with open(value, "a") as tally:
            tally.write(f"{_phase}\n")
    elif target == _phase and str(_hits[_phase]) == value:
        os.kill(os.getpid(), signal.SIGKILL)


def arm(setting: str | None) -> None:
    """Inject faults as ``DAPR_FAULT`` would say ``setting`` (None: none); counts start anew."""
    global _SETTING, _phase
    _SETTING, _phase = setting or None, ""
    _hits.clear()
