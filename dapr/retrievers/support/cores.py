"""How many cores this process may use (without importing torch: BM25 needs to know too)."""

from __future__ import annotations

import os


def cores() -> int:
    """How many cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1
