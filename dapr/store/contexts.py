"""Contextualized passages in the cache: one SQLite store per contextualizer step and its
settings, keyed by a hash of the document it read, and the log of complete passes' costs."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dapr.io import faults
from dapr.store.cache import content_key


@dataclass(frozen=True)
class Done:
    """A document's texts, its words and the process seconds they took."""

    texts: list[str]
    words: int
    seconds: float


class ContextStore:
    """The output of one contextualizer for every document it has read, by the document's
    key (SQLite, WAL): any chain in which the step reads the same document reuses it.

    Several runs may share the file: SQLite locks it, and an entry written twice is the same.
    """

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, timeout=600)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS documents "
            "(key TEXT PRIMARY KEY, texts TEXT NOT NULL, words INTEGER, seconds REAL)"
        )
        self._db.commit()

    @classmethod
    def for_step(cls, root: Path, identity: object) -> ContextStore:
        return cls(root / "contexts" / f"{content_key(identity)}.sqlite")

    def get(self, keys: Sequence[str]) -> dict[str, Done]:
        found: dict[str, Done] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), 500):
            part = unique[start : start + 500]
            marks = ",".join("?" * len(part))
            rows = self._db.execute(
                f"SELECT key, texts, words, seconds FROM documents WHERE key IN ({marks})", part
            )
            for key, texts, n, seconds in rows:
                found[key] = Done(json.loads(texts), n, seconds)
        return found

    def put(self, entries: Mapping[str, Done]) -> None:
        self._db.executemany(
            "INSERT OR IGNORE INTO documents VALUES (?, ?, ?, ?)",
            [
                (key, json.dumps(done.texts, ensure_ascii=False), done.words, done.seconds)
                for key, done in entries.items()
            ],
        )
        self._db.commit()
        faults.checkpoint("contextualize")

    def close(self) -> None:
        self._db.close()


def _cost_log(root: Path) -> sqlite3.Connection:
    path = root / "contexts" / "costs.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, timeout=600)
    db.execute(
        "CREATE TABLE IF NOT EXISTS costs "
        "(key TEXT PRIMARY KEY, documents INTEGER, words INTEGER, seconds REAL)"
    )
    return db


def record_pass(root: Path, key: str, documents: int, words: int, seconds: float) -> None:
    """Remember the totals of a complete pass (``key``: the chain's identity and the corpus)."""
    db = _cost_log(root)
    with db:
        db.execute(
            "INSERT OR REPLACE INTO costs VALUES (?, ?, ?, ?)", (key, documents, words, seconds)
        )
    db.close()


def recorded_pass(root: Path, key: str) -> tuple[int, int, float] | None:
    """``(documents, words, seconds)`` that :func:`record_pass` remembered under ``key``."""
    db = _cost_log(root)
    row = db.execute("SELECT documents, words, seconds FROM costs WHERE key = ?", (key,)).fetchone()
    db.close()
    return tuple(row) if row else None
