"""Every ``DAPR_*`` environment variable dapr reads, declared once (:data:`VARIABLES`: its
parser, default and effect; the docs' environment page is made from it).

``dapr`` checks them all at start-up (:func:`check`), before any work, so a bad value stops it
with one line naming the variable, its value and the fix. Library code reads each through its
accessor (:func:`home`, :func:`grace_seconds`, ...) when it needs it, with the same checks: the
values follow the environment of the moment (tests set ``DAPR_HOME`` per test) and are never
used unchecked. A variable set to an empty string counts as unset, but for ``DAPR_HOME``.
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from dapr.errors import DaprError

GRACE_SECONDS = 10.0
"""Seconds dapr has, after SIGTERM, to stop at a safe point before it exits regardless (Slurm
sends SIGKILL 30 s after SIGTERM by default)."""
LOCK_STALE = 60.0
"""Seconds without a heartbeat after which a cache lock held on another host is taken over."""
RAY_TIMEOUT = 120.0
"""Seconds Ray may take to start or to join a cluster."""
MAX_SECONDS = 7 * 24 * 3600.0
"""The longest a setting in seconds may be (a week): beyond, a timer cannot be armed."""
FAULT_PHASES = (
    "dataset",
    "contextualize",
    "train",
    "index",
    "search",
    "rerank",
    "score",
    "fuse",
    "results",
)
"""The phases :mod:`dapr.io.faults` counts checkpoints in."""


class Fault(NamedTuple):
    """``DAPR_FAULT`` read: SIGKILL at the ``n``-th checkpoint of ``phase``, or with
    ``tally`` set, append each checkpoint's phase to that file instead."""

    phase: str
    n: int
    tally: Path | None = None


@dataclass(frozen=True)
class Variable:
    """One environment variable: how it reads, its default and what it does (for the docs)."""

    name: str
    kind: str
    default: str
    effect: str
    example: str
    parse: Callable[[str], object]


def _refused(name: str, raw: str, why: str) -> DaprError:
    return DaprError(f"{name}={raw!r}: {why}")


def _seconds(name: str, default: float) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not 0 < value <= MAX_SECONDS:  # NaN fails too
            raise _refused(
                name,
                raw,
                f"must be a number of seconds > 0 and <= {MAX_SECONDS:g} (default {default:g}); "
                f"unset it or give one, e.g. {name}={default * 3:g}",
            )
        return value

    return parse


def _home(raw: str) -> Path:
    fix = "point DAPR_HOME at a directory, or unset it for ~/.cache/dapr"
    if not raw.strip():
        raise _refused("DAPR_HOME", raw, f"is empty (a variable that expanded to nothing?); {fix}")
    try:
        path = Path(raw).expanduser()
    except RuntimeError:  # ~user/... of a user this machine does not know
        raise _refused("DAPR_HOME", raw, f"names an unknown user's home; {fix}") from None
    for part in (path, *path.parents):  # the nearest part that exists must be a directory
        if part.exists():
            if not part.is_dir():
                where = "" if part == path else f" ({part} is a file)"
                raise _refused("DAPR_HOME", raw, f"Not a directory{where}; check DAPR_HOME: {fix}")
            break
    return path


def parse_fault(raw: str) -> Fault:
    """A ``DAPR_FAULT`` value read (DaprError when it is not one)."""
    phase, sep, value = raw.partition(":")
    if phase == "tally" and sep and value.strip():
        return Fault("tally", 0, Path(value))
    if phase == "tally":
        why = "tally needs the file to append to"
    elif phase not in FAULT_PHASES:
        why = f"unknown phase {phase!r} (phases: {', '.join(FAULT_PHASES)})"
    elif not value.isdecimal() or int(value) < 1:
        why = f"the checkpoint {value!r} of {phase} must be a whole number >= 1"
    else:
        return Fault(phase, int(value))
    raise _refused(
        "DAPR_FAULT",
        raw,
        f"{why}; give <phase>:<n> (e.g. index:2) or tally:<file>, or unset it (tests only)",
    )


VARIABLES = (
    Variable(
        "DAPR_HOME",
        "a directory",
        "~/.cache/dapr",
        "Where dapr keeps what it builds: datasets prepared at first use, indexes, embeddings, "
        "runs and trained models. On a cluster, a file system every node shares.",
        "DAPR_HOME=/scratch/me/dapr",
        _home,
    ),
    Variable(
        "DAPR_GRACE_SECONDS",
        "seconds, > 0",
        f"{GRACE_SECONDS:g}",
        "After SIGTERM (a scheduler preempting the job), how long dapr may take to stop at a safe "
        "point before it exits regardless (exit status 143 either way).",
        "DAPR_GRACE_SECONDS=20",
        _seconds("DAPR_GRACE_SECONDS", GRACE_SECONDS),
    ),
    Variable(
        "DAPR_LOCK_STALE",
        "seconds, > 0",
        f"{LOCK_STALE:g}",
        "How long a cache entry's lock held by a process on another host may go without a "
        "heartbeat before it is taken over (a holder on this host is judged by the kernel).",
        "DAPR_LOCK_STALE=300",
        _seconds("DAPR_LOCK_STALE", LOCK_STALE),
    ),
    Variable(
        "DAPR_RAY_TIMEOUT",
        "seconds, > 0",
        f"{RAY_TIMEOUT:g}",
        "How long Ray may take to start, or to join the cluster of `--ray-address`, before "
        "dapr gives up with one line.",
        "DAPR_RAY_TIMEOUT=600",
        _seconds("DAPR_RAY_TIMEOUT", RAY_TIMEOUT),
    ),
    Variable(
        "DAPR_FAULT",
        "<phase>:<n> or tally:<file>",
        "unset (no faults)",
        "For tests: SIGKILL dapr at the n-th checkpoint of a phase ("
        + ", ".join(FAULT_PHASES)
        + "), or append each checkpoint's phase to a file.",
        "DAPR_FAULT=index:2",
        parse_fault,
    ),
)
"""Every variable dapr reads, in the order the docs list them."""
_BY_NAME = {variable.name: variable for variable in VARIABLES}


def _read(name: str) -> object | None:
    """The variable ``name`` parsed (None: unset, or empty but for DAPR_HOME); DaprError when
    its value is not valid."""
    raw = os.environ.get(name)
    if raw is None or (raw == "" and name != "DAPR_HOME"):
        return None
    return _BY_NAME[name].parse(raw)


def home() -> Path:
    """``DAPR_HOME``, else ``~/.cache/dapr``."""
    found = _read("DAPR_HOME")
    if isinstance(found, Path):
        return found
    try:
        return Path.home() / ".cache" / "dapr"
    except RuntimeError:  # no HOME, and a user the password database does not know
        raise DaprError(
            "DAPR_HOME: unset, and this user has no home directory for ~/.cache/dapr; set "
            "DAPR_HOME to a directory"
        ) from None


def _number(name: str, default: float) -> float:
    found = _read(name)
    return found if isinstance(found, float) else default


def grace_seconds() -> float:
    """``DAPR_GRACE_SECONDS``, else :data:`GRACE_SECONDS`."""
    return _number("DAPR_GRACE_SECONDS", GRACE_SECONDS)


def lock_stale() -> float:
    """``DAPR_LOCK_STALE``, else :data:`LOCK_STALE`."""
    return _number("DAPR_LOCK_STALE", LOCK_STALE)


def ray_timeout() -> float:
    """``DAPR_RAY_TIMEOUT``, else :data:`RAY_TIMEOUT`."""
    return _number("DAPR_RAY_TIMEOUT", RAY_TIMEOUT)


def fault() -> Fault | None:
    """``DAPR_FAULT`` (None: unset)."""
    found = _read("DAPR_FAULT")
    return found if isinstance(found, Fault) else None


def check() -> list[str]:
    """Read every variable, so that a bad one raises its DaprError now; returns a warning line
    for each set ``DAPR_*`` variable dapr does not read whose name is close to one it does (a
    typo such as ``DAPR_HOMES``; other ``DAPR_*`` names, e.g. the Dapr runtime's, pass)."""
    for variable in VARIABLES:
        _read(variable.name)
    warnings = []
    for name in sorted(os.environ):
        if name.startswith("DAPR_") and name not in _BY_NAME:
            close = difflib.get_close_matches(name, _BY_NAME, n=1, cutoff=0.75)
            if close:
                warnings.append(
                    f"dapr: warning: {name} is set but dapr reads no such variable; did you "
                    f"mean {close[0]}? (ignored)"
                )
    return warnings
