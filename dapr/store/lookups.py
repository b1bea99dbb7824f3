"""Key -> text lookups kept in the cache: SQLite tables built once from rows (written to a
temporary file, then renamed into place) and only read after that."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from dapr.io.files import temp_sibling
from dapr.store.cache import Cache, content_key

KIND = "precomputed"
"""The cache folder the lookups live in."""


class Lookup:
    """A read-only key -> text table."""

    def __init__(self, path: Path):
        self.path = path
        self._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)

    def get(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM lookup WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]


def lookup(
    rows: Callable[[], Iterable[tuple[str, str]]], *identity: Any, cache: Cache | None = None
) -> Lookup:
    """The lookup stored under a hash of ``identity``, built from ``rows()`` the first time (a
    key given twice keeps its last value)."""
    path = (cache or Cache()).root / KIND / f"{content_key(*identity)}.db"
    if not path.is_file():
        _build(path, rows())
    return Lookup(path)


def _build(path: Path, rows: Iterable[tuple[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(path)
    db = sqlite3.connect(tmp)
    try:
        db.execute("CREATE TABLE lookup (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.executemany("INSERT OR REPLACE INTO lookup VALUES (?, ?)", rows)
        db.commit()
        db.close()
        os.replace(tmp, path)
    except BaseException:
        db.close()
        tmp.unlink(missing_ok=True)
        raise
