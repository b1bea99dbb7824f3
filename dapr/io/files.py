"""Files and directories on disk: atomic writes, and the name a dataset directory goes by.

A file or directory being written appears at its path (or replaces what was there) only once it
is complete and flushed to disk; a failed write leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shutil
import socket
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from dapr.io import faults


def dir_name(path: Path) -> str:
    """The name of a dataset directory, also when ``path`` is ``.``."""
    return path.name or path.resolve().name


def read_at_most(path: Path, limit: int) -> bytes:
    """The bytes of the file at ``path``, but no more than ``limit + 1`` of them (more than
    ``limit``: too large), whatever it is: a device such as ``/dev/zero`` or a ``/proc`` file
    (whose size says nothing) is read up to there, and a named pipe is opened without waiting
    for a writer (one with none reads as empty)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        os.set_blocking(fd, True)  # a pipe whose writer has not written yet is waited for
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(limit + 1 - size, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_bytes_atomic(path: Path, chunks: Iterable[bytes | memoryview]) -> None:
    """Write to a temporary sibling, then rename it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)
    try:
        with tmp.open("xb") as handle:
            for chunk in chunks:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        faults.checkpoint()
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


@contextmanager
def atomic_directory(
    out: Path, owned: Callable[[PurePosixPath], bool] | None = None
) -> Iterator[Path]:
    """A fresh temporary sibling of ``out`` to fill; it replaces ``out`` once the block ends.

    If the block raises (or is interrupted), the temporary directory is removed and ``out``, if
    it existed, is left untouched. With ``owned`` (which paths, relative to ``out``, the writer
    produces), every other file of an existing ``out`` is carried into the new directory, so a
    rewrite never deletes what its writer did not create. An ``out`` that is a symbolic link is
    written where it points; the link stays.
    """
    out = out.resolve() if out.is_symlink() else out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(out)
    tmp.mkdir()
    try:
        yield tmp
        faults.checkpoint()
        with sibling_lock(out):  # two writers of one ``out`` swap in turn, never at once
            if owned is not None and out.is_dir():
                _carry_over(out, tmp, owned)
            fsync(tmp)
            _swap_in(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def sibling_lock(path: Path) -> Iterator[None]:
    """An inter-process lock on ``path``, held on a hidden file beside it (``.<name>.swap.lock``:
    not the cache's entry lock) that the holder deletes before releasing: nothing is left
    behind, and a process that was waiting on the deleted file finds it gone and locks the path
    anew."""
    import fcntl

    lock = path.with_name(f".{path.name}.swap.lock")
    while True:
        handle = lock.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
            mine = os.fstat(handle.fileno())
            try:
                here = os.stat(lock)
            except FileNotFoundError:
                here = None
        except BaseException:
            handle.close()
            raise
        if here is not None and (here.st_ino, here.st_dev) == (mine.st_ino, mine.st_dev):
            break
        handle.close()
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
        handle.close()  # releases the lock


def _carry_over(old: Path, new: Path, owned: Callable[[PurePosixPath], bool]) -> None:
    """Hard-link (else copy) into ``new`` the files of ``old`` that ``owned`` disowns, and
    recreate its disowned empty directories; ``old`` itself is not touched."""
    for folder, directories, files in os.walk(old):
        here = PurePosixPath(Path(folder).relative_to(old).as_posix())
        for name in files:
            relative = here / name
            if owned(relative):
                continue
            target = new / relative
            if target.exists():
                raise FileExistsError(f"{old / relative}: would be replaced by a written file")
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(Path(folder) / name, target, follow_symlinks=False)
            except OSError:
                shutil.copy2(Path(folder) / name, target, follow_symlinks=False)
        for name in directories:
            relative = here / name
            if not owned(relative) and not any((Path(folder) / name).iterdir()):
                (new / relative).mkdir(parents=True, exist_ok=True)


HOST = hashlib.blake2s(socket.gethostname().encode(), digest_size=4).hexdigest()
"""This host's tag in the names of temporaries: on a file system that several hosts share, a
temporary's pid says whether its writer lives only on the writer's own host."""
_WRITER = re.compile(r"^(?P<pid>\d+)(?:\.(?P<host>[0-9a-f]{8})?[0-9a-f]{8})?\.tmp")


def writer(name: str) -> tuple[int, str | None] | None:
    """``(pid, host tag)`` of the writer of a temporary named ``.<name>.<pid>[.<tag>].tmp...``,
    given what follows ``.<name>.`` (host None: a name without a host, of an older dapr);
    None if it is no such name."""
    match = _WRITER.match(name)
    return None if match is None else (int(match["pid"]), match["host"])


def writer_gone(pid: int, host: str | None) -> bool:
    """Whether the writer of a temporary is known to be gone: a process of this host (or of an
    unnamed one) that no longer exists. A writer on another host is never judged by its pid."""
    return host in (None, HOST) and not pid_alive(pid)


def pid_alive(pid: int) -> bool:
    """Whether a process of this host has ``pid`` (the writer of a temporary sibling)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, but belongs to someone else
        return True
    return True


def temp_sibling(path: Path) -> Path:
    """An unused hidden name next to ``path`` naming its writer: ``.<name>.<pid>.<host tag><random
    hex>.tmp`` (see :func:`writer`)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{HOST}{secrets.token_hex(4)}.tmp")


def _swap_in(new: Path, out: Path) -> None:
    """Rename directory ``new`` to ``out``, replacing an existing ``out`` only at the end."""
    if not out.exists():
        os.rename(new, out)
    else:
        old = new.with_name(new.name + ".old")
        os.rename(out, old)
        try:
            os.rename(new, out)
        except BaseException:
            os.rename(old, out)
            raise
        shutil.rmtree(old, ignore_errors=True)
    fsync(out.parent)


def fsync(path: Path) -> None:
    """Flush a written file or directory entry to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
