"""A content-addressed store: each step's output lives under a hash of what determines it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dapr.io.files import atomic_directory
from dapr.paths import home

_COMPLETE = "COMPLETE"


def content_key(*parts: Any) -> str:
    """A stable hash of JSON-serialisable parts (dict order does not matter)."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


class Cache:
    """Entries ``root/kind/key/``; an entry exists only once it was completely written."""

    def __init__(self, root: Path | None = None):
        self.root = root or home() / "cache"

    def path(self, kind: str, key: str) -> Path:
        return self.root / kind / key

    def has(self, kind: str, key: str) -> bool:
        return (self.path(kind, key) / _COMPLETE).exists()

    @contextmanager
    def writing(self, kind: str, key: str) -> Iterator[Path]:
        """A fresh directory to fill; it becomes the entry only if the block finishes."""
        with atomic_directory(self.path(kind, key)) as scratch:
            yield scratch
            (scratch / _COMPLETE).touch()
