"""A content-addressed store: each step's output lives under a hash of what determines it."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dapr import settings
from dapr.io import faults
from dapr.io.files import atomic_directory, fsync
from dapr.paths import home
from dapr.store.checksums import damage, seal

_COMPLETE = "COMPLETE"
_PHASES = {"indexes": "index"}
"""The fault-injection phase of writing an entry of a kind (else: the step's, see
:mod:`dapr.io.faults`)."""
QUARANTINE = ".quarantine"
"""Where damaged entries are moved (``dapr cache prune`` removes them)."""


def content_key(*parts: Any) -> str:
    """A stable hash of JSON-serialisable parts (dict order does not matter)."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


class Cache:
    """Entries ``root/kind/key/``; an entry exists only once it was completely written."""

    def __init__(self, root: Path | None = None):
        self.root = root or home() / "cache"
        self._checked: dict[tuple[str, str], int] = {}

    def path(self, kind: str, key: str) -> Path:
        return self.root / kind / key

    def has(self, kind: str, key: str) -> bool:
        return (self.path(kind, key) / _COMPLETE).exists()

    def valid(self, kind: str, key: str) -> bool:
        """Whether the entry is complete and holds what was written (every file's size and
        checksum, checked once per process). A damaged entry is moved to ``.quarantine/`` with
        a one-line report on stderr, and counts as missing: the caller computes it again."""
        entry = self.path(kind, key)
        marker = entry / _COMPLETE
        try:
            stamp = marker.stat().st_ino  # touch() changes the mtime, not the inode
        except FileNotFoundError:
            return False
        if self._checked.get((kind, key)) == stamp:
            return True
        problem = damage(entry, skip=(_COMPLETE,))
        if problem is None:
            self._checked[(kind, key)] = stamp
            return True
        where = self.quarantine(kind, key)
        print(
            f"dapr: cache entry {kind}/{key} is damaged ({problem}); moved to {where}, "
            "computing it again",
            file=sys.stderr,
        )
        return False

    def quarantine(self, kind: str, key: str) -> Path:
        """Move an entry aside (nothing of it is deleted) to ``root/.quarantine``."""
        target = self.root / QUARANTINE / f"{kind}-{key}-{time.strftime('%Y%m%dT%H%M%S')}"
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(self.path(kind, key), target)
        self._checked.pop((kind, key), None)
        return target

    def touch(self, kind: str, key: str) -> None:
        """Mark the entry as used now (the mtime of its marker), so that ``dapr cache prune
        --older-than`` keeps what runs still read; nothing happens if the entry is gone."""
        with contextlib.suppress(FileNotFoundError):
            os.utime(self.path(kind, key) / _COMPLETE)

    def partial(self, kind: str, key: str) -> Path:
        """Where :meth:`writing` with ``resume`` fills an entry, kept between attempts."""
        return self.root / kind / f".{key}.partial"

    @contextmanager
    def writing(self, kind: str, key: str, resume: bool = False) -> Iterator[Path]:
        """A directory to fill; it becomes the entry only if the block finishes.

        Without ``resume`` it is a fresh temporary, removed if the block fails. With ``resume``
        it is :meth:`partial`, kept when the block fails or the process dies, so that the next
        attempt finds what the last one stored (a writer that can continue from it says so with
        ``resumable = True``); hold the entry's :meth:`lock` around it.
        """
        if not resume:
            with atomic_directory(self.path(kind, key)) as scratch:
                yield scratch
                faults.checkpoint(_PHASES.get(kind))
                seal(scratch)
                (scratch / _COMPLETE).touch()
            return
        scratch = self.partial(kind, key)
        scratch.mkdir(parents=True, exist_ok=True)
        yield scratch
        faults.checkpoint(_PHASES.get(kind))
        seal(scratch)
        (scratch / _COMPLETE).touch()
        fsync(scratch)
        entry = self.path(kind, key)
        if entry.exists():  # an incomplete leftover: has() was False under the lock
            shutil.rmtree(entry)
        os.rename(scratch, entry)
        fsync(entry.parent)

    def lock_path(self, kind: str, key: str) -> Path:
        """The file an entry's lock is held on (hidden, beside the entry)."""
        return self.root / kind / f".{key}.lock"

    @contextmanager
    def lock(self, kind: str, key: str, wait: bool = True) -> Iterator[bool]:
        """Hold the entry's inter-process lock: a process that computes an entry under it, after
        checking :meth:`has` under it, never duplicates the work of another run sharing the
        cache. Released when the holder exits, also when it is killed. The holder may delete the
        lock file (prune does, with the entry): a process that was waiting on it then finds its
        lock on a file no longer at the path and locks the path anew. Without ``wait``, a lock
        held elsewhere is not waited for: the block runs without it, given False.

        The lock is an ``flock`` of the lock file, in which the holder records itself (process
        and host) and whose mtime it renews every :data:`HEARTBEAT` seconds. The kernel (or a
        shared file system's lock service) frees it when its holder dies; where a shared file
        system keeps locks per host, the record of a holder on another host whose heartbeat is
        fresh is respected still, and one silent for :data:`STALE` seconds is taken over."""
        path = self.lock_path(kind, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            handle = path.open("a+")
            try:
                if not _try_lock(handle, 0.2 if wait else 0):
                    if not wait:
                        handle.close()
                        yield False
                        return
                    _say_waiting(kind, key, handle)
                    fcntl.flock(handle, fcntl.LOCK_EX)
                here = _still_at(handle, path)
                elsewhere = here and _held_elsewhere(kind, key, handle, wait)
            except BaseException:
                handle.close()
                raise
            if here and not elsewhere:
                break
            handle.close()  # its holder removed the lock file (prune): lock the path anew
            if elsewhere:  # only without ``wait``: a holder on another host has it
                yield False
                return
        with handle:
            handle.seek(0)
            handle.truncate()
            handle.write(f"process {os.getpid()} on {socket.gethostname()}")
            handle.flush()
            beating = threading.Event()
            heart = threading.Thread(target=_beat, args=(handle.fileno(), beating), daemon=True)
            heart.start()
            try:
                yield True
            finally:
                beating.set()
                heart.join()
                handle.truncate(0)  # released: no holder recorded
                fcntl.flock(handle, fcntl.LOCK_UN)


HEARTBEAT = 5.0
"""Seconds between a lock holder's heartbeats (the lock file's mtime)."""
STALE = settings.LOCK_STALE
"""Seconds without a heartbeat after which a lock recorded by a holder on another host is
taken over (``DAPR_LOCK_STALE`` overrides); a holder on this host is judged by the kernel."""
_RECORD = re.compile(r"^process (?P<pid>\d+) on (?P<host>\S+)$")


def _beat(fd: int, stop: threading.Event) -> None:
    """Renew the lock file's mtime every :data:`HEARTBEAT` seconds until ``stop`` is set."""
    while not stop.wait(HEARTBEAT):
        with contextlib.suppress(OSError):
            os.utime(fd)


def _record(handle: Any) -> tuple[str, float]:
    """The holder a lock file records (empty: none) and its age: seconds since its heartbeat."""
    handle.seek(0)
    text = handle.read().strip()
    return text, time.time() - os.fstat(handle.fileno()).st_mtime


def _try_lock(handle: Any, seconds: float) -> bool:
    """Take the ``flock`` of ``handle`` if it is free within ``seconds`` (a lock held briefly,
    or being released, is not reported as waited for)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


def _say_waiting(kind: str, key: str, handle: Any) -> None:
    holder, age = _record(handle)
    for _ in range(50):  # a holder records itself just after it takes the lock
        if holder:
            break
        time.sleep(0.02)
        holder, age = _record(handle)
    print(
        f"dapr: waiting for {kind}/{key}, which {holder or 'another process'} is computing"
        + (f" (heartbeat {age:.0f} s ago)" if holder else ""),
        file=sys.stderr,
        flush=True,
    )


def _held_elsewhere(kind: str, key: str, handle: Any, wait: bool) -> bool:
    """With the ``flock`` of ``handle`` held: whether the lock's record names a living holder
    nonetheless (on another host, heartbeat fresh: the file system's locks are per host);
    waits (with ``wait``) until that holder releases it or its heartbeat stops. A record left
    by a holder that died (killed: it could not clear it) is taken over with a line saying so."""
    stale = settings.lock_stale()
    said = False
    while True:
        holder, age = _record(handle)
        match = _RECORD.match(holder)
        if not holder or match is None:
            return False
        if match["host"] == socket.gethostname() or age >= stale:
            why = "gone" if match["host"] == socket.gethostname() else f"silent for {age:.0f} s"
            print(
                f"dapr: taking over the lock of {kind}/{key} from {holder} ({why})",
                file=sys.stderr,
                flush=True,
            )
            return False
        if not wait:
            return True
        if not said:
            _say_waiting(kind, key, handle)
            said = True
        time.sleep(min(1.0, HEARTBEAT))


def _still_at(handle: Any, path: Path) -> bool:
    """Whether the open file ``handle`` is still the file at ``path``."""
    try:
        here = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(handle.fileno())
    return (mine.st_ino, mine.st_dev) == (here.st_ino, here.st_dev)
