"""Files and directories on disk: atomic writes, and the name a dataset directory goes by.

A file or directory being written appears at its path (or replaces what was there) only once it
is complete and flushed to disk; a failed write leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path


def _dir_name(path: Path) -> str:
    """The name of a dataset directory, also when ``path`` is ``.``."""
    return path.name or path.resolve().name


def _write_bytes(path: Path, chunks: Iterable[bytes | memoryview]) -> None:
    """Write to a temporary sibling, then rename it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_sibling(path)
    try:
        with tmp.open("xb") as handle:
            for chunk in chunks:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def _write_directory(out: Path, fill: Callable[[Path], None]) -> None:
    """Let ``fill`` write a temporary sibling directory, then swap it in for ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_sibling(out)
    tmp.mkdir()
    try:
        fill(tmp)
        _fsync(tmp)
        _swap_in(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _temp_sibling(path: Path) -> Path:
    """An unused hidden name next to ``path``."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


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
    _fsync(out.parent)


def _fsync(path: Path) -> None:
    """Flush a written file or directory entry to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
