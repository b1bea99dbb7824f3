"""The handlers of the signals a fault raises, kept across a library that replaces them.

The JVM that runs Lucene (pyserini) takes SIGSEGV in its normal work: its compiled code checks
for null and guards its stacks by faulting and handling the fault itself. ``ray.init`` installs
Ray's failure handler over the JVM's, and ``ray.shutdown`` then resets SIGSEGV to the default
action, so the JVM's next deliberate fault ends the process with no message (exit 139): a run
that used Lucene before it started Ray, in one process, could die at any later Lucene call.
:func:`kept` puts back the handlers that were installed before the block.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager

FAULTS = (signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL)
"""The signals a fault raises."""

_ACTION_BYTES = 512
"""Room for a ``struct sigaction`` (152 bytes on Linux, 16 on macOS); the handler comes first."""


def _sigaction(number: int, new: bytes | None) -> bytes:
    libc = ctypes.CDLL(None, use_errno=True)
    old = ctypes.create_string_buffer(_ACTION_BYTES)
    given = None if new is None else ctypes.create_string_buffer(new, _ACTION_BYTES)
    if libc.sigaction(number, given, old) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"sigaction({number}): {os.strerror(error)}")
    return old.raw


def handler(number: int) -> int:
    """The address of the handler installed for signal ``number`` (0: the default, 1: ignored)."""
    return _handler(_sigaction(number, None))


def _handler(action: bytes) -> int:
    return int.from_bytes(action[: ctypes.sizeof(ctypes.c_void_p)], sys.byteorder)


@contextmanager
def kept(signals: tuple[int, ...] = FAULTS) -> Iterator[None]:
    """Run the block, then put back every handler of ``signals`` that was installed before it
    (a default or ignored signal is left as the block left it). A no-op off POSIX."""
    if os.name != "posix":
        yield
        return
    before = {number: _sigaction(number, None) for number in signals}
    try:
        yield
    finally:
        for number, action in before.items():
            if _handler(action) not in (0, 1):
                _sigaction(number, action)
