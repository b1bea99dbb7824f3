"""What the cache holds, and pruning it safely while other runs use it (``dapr cache ls|prune``).

The cache root holds one directory per kind (:data:`KINDS`). In it, an entry is a directory
``key/`` (complete once it holds ``COMPLETE``, whose mtime is its last use: see
:meth:`Cache.touch`) or a file: a contextualization store ``key.sqlite`` (kind ``contexts``, with
its ``-wal``/``-shm``) or a lookup table ``key.db`` (kind ``precomputed``); a key is 20 hex digits
(:func:`dapr.store.cache.content_key`). Hidden names are locks (``.key.lock``) and the temporaries
of atomic writes (``.key.<pid>.<hex>.tmp``, ``.<file>.<pid>.tmp``), which a killed writer leaves
behind. Anything else under the root is not dapr's (:func:`foreign`): listed, never removed.

A temporary's name tells its writer's pid and host (:func:`dapr.io.files.writer`). One of this
host is stale when no process has its pid; one of another host sharing the cache is never judged
by its pid: it is stale once unchanged for :data:`FOREIGN_HOURS` with its entry's lock free.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from dapr.io.files import HOST, temp_sibling, writer, writer_gone
from dapr.store.cache import _COMPLETE, QUARANTINE, Cache
from dapr.store.checksums import CHECKSUMS, damage

KINDS = {"indexes": "", "runs": "", "models": "", "contexts": ".sqlite", "precomputed": ".db"}
"""The kinds of entry dapr writes, and the suffix of the kind's file entries (SQLite stores)."""
_KEY = re.compile(r"^[0-9a-f]{20}$")
_QUARANTINED = re.compile(rf"^(?:{'|'.join(KINDS)})-[0-9a-f]{{20}}-\d{{8}}T\d{{6}}$")
"""An entry moved aside by :meth:`Cache.quarantine`: ``<kind>-<key>-<when>``."""
STORES = (".sqlite", ".db")
"""Suffixes of SQLite entries; removed only while no connection has them open."""
_COMPANIONS = ("-wal", "-shm", "-journal")
KEPT = {("contexts", "costs")}
_PARTIAL = ".partial"
"""Entries prune never removes: the record of what contextualizing each corpus cost."""
_TEMPORARY = re.compile(
    r"^\.(?P<key>.+?)\.(?P<writer>\d+(?:\.[0-9a-f]{8}(?:[0-9a-f]{8})?)?\.tmp)"
    r"(?:\.old|-journal|-wal|-shm)?$"
)
FOREIGN_HOURS = 1.0
"""How long a temporary of another host's writer stays unchanged before prune removes it (and
only while its entry's lock is free: cache writers hold it)."""
BUSY_SECONDS = 1.0
"""How long prune waits for a SQLite store's lock before leaving it (it is in use)."""


@dataclass(frozen=True)
class Entry:
    """One entry of the cache (or a stale temporary, ``temporary=True``)."""

    kind: str
    key: str
    path: Path
    bytes: int
    """Apparent size of every file in it."""
    used: float
    """When it was last used (written, or read by a run that touched it), seconds since epoch."""
    complete: bool
    temporary: bool = False
    partial: bool = False
    """What an interrupted index stored to resume from (``.<key>.partial``)."""
    damage: str | None = None
    """What is wrong with a complete entry: a file missing or of another size than written
    (``dapr cache ls``), or also of other bytes (``dapr cache verify``)."""

    @property
    def state(self) -> str:
        if self.temporary or self.partial:
            return "temporary" if self.temporary else "partial"
        if self.damage is not None:
            return "damaged"
        return "complete" if self.complete else "incomplete"


def entries(cache: Cache) -> list[Entry]:
    """Every entry of the cache, complete or not, sorted by kind and then last use."""
    return _scan(cache)[0]


def foreign(cache: Cache) -> list[Path]:
    """What lies under the cache root but is no entry, lock or temporary of dapr's (results a
    user put there, a folder of another kind): prune leaves it alone."""
    return _scan(cache)[1]


def _own(kind: str, name: str) -> bool:
    """Whether ``name`` in kind folder ``kind`` is named as dapr names an entry."""
    if kind == QUARANTINE:
        return _QUARANTINED.match(name) is not None
    suffix = KINDS[kind]
    if (kind, name) in {(k, key + KINDS[k]) for k, key in KEPT}:
        return True
    return name.endswith(suffix) and _KEY.match(name[: len(name) - len(suffix)]) is not None


def _scan(cache: Cache) -> tuple[list[Entry], list[Path]]:
    """The entries of the cache (sorted by kind and then last use), and what is not dapr's."""
    found: list[Entry] = []
    strange: list[Path] = []
    if cache.root.is_dir():
        strange = sorted(
            p
            for p in cache.root.iterdir()
            if not p.name.startswith(".") and (p.name not in KINDS or not p.is_dir())
        )
    for folder in _kinds(cache):
        groups: dict[str, list[Path]] = {}
        for child in folder.iterdir():
            directory = child.is_dir() and not child.is_symlink()
            if child.name.endswith(_PARTIAL) and directory and _own(folder.name, child.name[1:-8]):
                found.append(_partial_entry(folder.name, child))
            if child.name.startswith("."):
                continue
            if directory != (folder.name == QUARANTINE or not KINDS[folder.name]):
                strange.append(child)  # a file where entries are folders, or the reverse
            elif not _own(folder.name, child.name if directory else _base(child.name)):
                strange.append(child)
            elif directory:
                found.append(_directory_entry(folder.name, child))
            else:
                groups.setdefault(_base(child.name), []).append(child)
        for base, files in groups.items():
            entry = _file_entry(folder.name, folder / base, files)
            if entry is not None:
                found.append(entry)
    return sorted(found, key=lambda e: (e.kind, e.used, e.key)), sorted(strange)


def stale_temporaries(cache: Cache) -> list[Path]:
    """Leftovers of atomic writes whose writer process is gone (never one of a live process)."""
    return [path for path, _, by in _temporaries(cache) if _stale(path, by)]


def _stale(path: Path, by: tuple[int, str | None]) -> bool:
    """Whether the temporary ``path`` of writer ``by`` is left over (see the module's text)."""
    if by[1] in (None, HOST):
        return writer_gone(*by)
    return time.time() - _newest(path) >= FOREIGN_HOURS * 3600


def prune(
    cache: Cache,
    older_than: timedelta | None = None,
    kinds: Sequence[str] | None = None,
    keep: set[str] | None = None,
    dry_run: bool = False,
) -> list[Entry]:
    """Remove the complete entries of ``kinds`` (default: all) not used for ``older_than``
    (default: any), except the keys in ``keep``, and always stale temporaries and incomplete
    entries; return what was removed (with ``dry_run``: what would be, removing nothing).

    Each entry is removed under its lock (:meth:`Cache.lock`), after checking again that it is
    still to go, so a run holding that lock never loses an entry it writes or reads; a SQLite
    store that a process has open is left in place."""
    now = time.time()
    limit = older_than.total_seconds() if older_than is not None else None

    def chosen(entry: Entry) -> bool:
        if entry.kind == QUARANTINE:  # damaged entries moved aside: always go
            return True
        if entry.partial:  # kept to resume from, until as old as complete entries that go
            return (kinds is None or entry.kind in kinds) and (
                limit is None or now - entry.used >= limit
            )
        if not entry.complete:
            return True
        if entry.key in (keep or ()) or (entry.kind, entry.key) in KEPT:
            return False
        if kinds is not None and entry.kind not in kinds:
            return False
        return limit is None or now - entry.used >= limit

    removed = []
    for path, key, by in _temporaries(cache):
        if not _stale(path, by):
            continue
        entry = Entry(path.parent.name, path.name, path, _size(path), _mtime(path), False, True)
        if dry_run:
            removed.append(entry)
            continue
        mine = by[1] in (None, HOST)  # else: only with the lock free (its writer's hold is gone)
        with cache.lock(entry.kind, key, wait=mine) as held:
            if held and _exists(path):
                _remove(path)
                removed.append(entry)
            if not _exists(cache.path(entry.kind, key)):
                _unlock_file(cache, entry.kind, key)
    for entry in entries(cache):
        if not chosen(entry):
            continue
        if dry_run:
            removed.append(entry)
        elif entry.path.suffix in STORES and entry.path.is_file():
            if _remove_store(entry.path):
                removed.append(entry)
        else:
            with cache.lock(entry.kind, entry.key):
                again = _again(entry)
                if again is not None and chosen(again):
                    _remove(again.path)
                    removed.append(again)
                    _unlock_file(cache, entry.kind, entry.key)
    if not dry_run:
        _orphan_locks(cache)
    return removed


def _unlock_file(cache: Cache, kind: str, key: str) -> None:
    """Delete an entry's lock file while holding its lock (see :meth:`Cache.lock`)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(cache.lock_path(kind, key))


def _orphan_locks(cache: Cache) -> None:
    """Delete the lock files of entries that do not exist, where no one holds the lock."""
    for folder in _kinds(cache):
        for lock in folder.glob(".*.lock"):
            key = lock.name[1 : -len(".lock")]
            if _exists(cache.path(folder.name, key)) or not lock.is_file() or lock.is_symlink():
                continue
            with cache.lock(folder.name, key, wait=False) as held:
                if held and not _exists(cache.path(folder.name, key)):
                    _unlock_file(cache, folder.name, key)


def summary(entries: Sequence[Entry]) -> str:
    """A markdown table: per kind, its entries (how many incomplete), size and last use."""
    lines = [
        "| kind | entries | incomplete or damaged | size | last used |",
        "|---|---:|---:|---:|---|",
    ]
    kinds: dict[str, list[Entry]] = {}
    for entry in entries:
        kinds.setdefault(entry.kind, []).append(entry)
    for kind, group in [*sorted(kinds.items()), ("total", list(entries))]:
        used = max((e.used for e in group), default=None)
        when = datetime.fromtimestamp(used).strftime("%Y-%m-%d %H:%M") if used else "-"
        incomplete = sum(not e.complete or e.damage is not None for e in group)
        size = human_size(sum(e.bytes for e in group))
        lines.append(f"| {kind} | {len(group)} | {incomplete} | {size} | {when} |")
    return "\n".join(lines) + "\n"


def human_size(n: int) -> str:
    """``n`` bytes in binary units: ``512 B``, ``1.5 KiB``, ``2.0 GiB``."""
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024 or unit == "PiB":
            break
    return f"{value:.1f} {unit}"


def _kinds(cache: Cache) -> list[Path]:
    if not cache.root.is_dir():
        return []
    return sorted(
        p for p in cache.root.iterdir() if p.is_dir() and (p.name in KINDS or p.name == QUARANTINE)
    )


def _temporaries(cache: Cache) -> list[tuple[Path, str, tuple[int, str | None]]]:
    """``(path, key, writer)`` of every temporary of an atomic write (writer: pid, host tag)."""
    found = []
    for folder in _kinds(cache):
        for child in folder.iterdir():
            match = _TEMPORARY.match(child.name)
            by = writer(match["writer"]) if match else None
            if match and by is not None:
                found.append((child, match["key"], by))
    return sorted(found)


def _base(name: str) -> str:
    """A store's file name without its SQLite companion suffix."""
    for suffix in _COMPANIONS:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _directory_entry(kind: str, path: Path, hashes: bool = False) -> Entry:
    marker = path / _COMPLETE
    complete = marker.is_file()
    used = _mtime(marker) if complete else _newest(path)
    damaged = damage(path, hashes=hashes, skip=(_COMPLETE,)) if complete else None
    return Entry(kind, path.name, path, _size(path), used, complete, damage=damaged)


def verify(cache: Cache, kinds: Sequence[str] | None = None) -> tuple[int, list[Entry]]:
    """Check every complete directory entry (of ``kinds``) file by file against its recorded
    sizes and checksums; move the damaged ones to quarantine (a run computes them again).
    Returns how many were checked, and the damaged ones as they were found."""
    checked, damaged = 0, []
    for folder in _kinds(cache):
        if folder.name == QUARANTINE or (kinds is not None and folder.name not in kinds):
            continue
        for child in sorted(folder.iterdir()):
            if not _own(folder.name, child.name) or not child.is_dir() or child.is_symlink():
                continue
            with cache.lock(folder.name, child.name):
                entry = _directory_entry(folder.name, child, hashes=True)
                if not entry.complete:
                    continue
                checked += 1
                if entry.damage is not None:
                    cache.quarantine(folder.name, child.name)
                    damaged.append(entry)
    return checked, damaged


def _file_entry(kind: str, main: Path, files: list[Path]) -> Entry | None:
    """The entry of a file and its companions; None if they vanished meanwhile."""
    stats = []
    for file in files:
        with contextlib.suppress(FileNotFoundError):
            stats.append(file.lstat())
    if not stats:
        return None
    key = main.stem if main.suffix in STORES else main.name
    used = max(s.st_mtime for s in stats)
    return Entry(kind, key, main, sum(s.st_size for s in stats), used, True)


def _partial_entry(kind: str, path: Path) -> Entry:
    key = path.name[1 : -len(_PARTIAL)]
    return Entry(kind, key, path, _size(path), _newest(path), False, partial=True)


def _again(entry: Entry) -> Entry | None:
    """``entry`` as it is on disk now; None when it is gone."""
    if entry.partial:
        return _partial_entry(entry.kind, entry.path) if entry.path.is_dir() else None
    if entry.path.is_dir():
        return _directory_entry(entry.kind, entry.path)
    folder = entry.path.parent
    files = [folder / (entry.path.name + s) for s in ("", *_COMPANIONS)]
    return _file_entry(entry.kind, entry.path, files)


def _remove(path: Path) -> None:
    """Delete a file (and its SQLite companions) or a directory. A directory is first renamed to
    a temporary name of this process, so one half deleted is never taken for an entry."""
    if path.is_dir() and not path.is_symlink():
        doomed = temp_sibling(path)
        os.rename(path, doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        return
    for suffix in ("", *_COMPANIONS):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path.with_name(path.name + suffix))


def _remove_store(path: Path) -> bool:
    """Delete a SQLite file while holding its exclusive lock, which no one gets while another
    connection has it open; False (nothing removed) when it is in use."""
    try:
        db = sqlite3.connect(
            path.resolve().as_uri() + "?mode=rw",
            uri=True,
            timeout=BUSY_SECONDS,
            isolation_level=None,
        )
    except sqlite3.Error:
        return False  # gone meanwhile, or unreadable: leave it
    try:
        db.execute("PRAGMA locking_mode=EXCLUSIVE")
        db.execute("BEGIN EXCLUSIVE")
    except sqlite3.Error as error:
        if getattr(error, "sqlite_errorname", "") != "SQLITE_NOTADB":
            db.close()
            return False  # busy: a run has it open
    try:
        _remove(path)
    finally:
        db.close()
    return True


def _exists(path: Path) -> bool:
    return os.path.lexists(path)


def _size(path: Path) -> int:
    """Apparent size of a file, or of every file under a directory (links not followed; the
    entry's own record of checksums not counted)."""
    try:
        if not path.is_dir() or path.is_symlink():
            return path.lstat().st_size
    except FileNotFoundError:
        return 0
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            if name == CHECKSUMS and Path(folder) == path:
                continue
            with contextlib.suppress(FileNotFoundError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def _mtime(path: Path) -> float:
    try:
        return path.lstat().st_mtime
    except FileNotFoundError:
        return 0.0


def _newest(path: Path) -> float:
    """The latest mtime of a directory and anything in it."""
    newest = _mtime(path)
    for folder, dirs, files in os.walk(path):
        for name in dirs + files:
            newest = max(newest, _mtime(Path(folder, name)))
    return newest
