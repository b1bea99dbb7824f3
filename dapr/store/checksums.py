"""What a cache entry held when it was written: the size and an xxh3-128 hash of each file,
recorded in ``CHECKSUMS`` before the entry is marked complete, and checked before it is read."""

from __future__ import annotations

import json
import os
from pathlib import Path

import xxhash

CHECKSUMS = "CHECKSUMS"
_BLOCK = 1 << 22


def digest(path: Path) -> str:
    """The xxh3-128 hash of a file's bytes."""
    hasher = xxhash.xxh3_128()
    with path.open("rb") as handle:
        while block := handle.read(_BLOCK):
            hasher.update(block)
    return hasher.hexdigest()


def _files(entry: Path, skip: tuple[str, ...]) -> list[Path]:
    return sorted(
        p for p in entry.rglob("*") if p.is_file() and p.relative_to(entry).as_posix() not in skip
    )


def seal(entry: Path, skip: tuple[str, ...] = ()) -> None:
    """Write ``CHECKSUMS``: every file of the entry (but ``skip``), its size and hash."""
    sums = {
        p.relative_to(entry).as_posix(): [p.stat().st_size, digest(p)]
        for p in _files(entry, (CHECKSUMS, *skip))
    }
    tmp = entry / f".{CHECKSUMS}.tmp"
    tmp.write_text(json.dumps(sums, indent=0, sort_keys=True))
    os.replace(tmp, entry / CHECKSUMS)


def damage(entry: Path, hashes: bool = True, skip: tuple[str, ...] = ()) -> str | None:
    """What is wrong with a sealed entry (None: nothing): a missing ``CHECKSUMS``, a missing or
    resized file, or (with ``hashes``) a file whose bytes changed."""
    try:
        recorded = json.loads((entry / CHECKSUMS).read_text())
    except FileNotFoundError:
        return f"no {CHECKSUMS} (written by an older dapr, or not sealed)"
    except (OSError, ValueError):
        return f"{CHECKSUMS} is unreadable"
    if not isinstance(recorded, dict) or not all(
        isinstance(v, list) and len(v) == 2 for v in recorded.values()
    ):
        return f"{CHECKSUMS} is unreadable"
    for name, (size, hashed) in sorted(recorded.items()):
        path = entry / name
        if name in skip or not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size:,} bytes, {size:,} were written"
        if hashes and digest(path) != hashed:
            return f"{name} is not what was written (its checksum differs)"
    return None  # files added later (an index's reader may add its own) are not judged
