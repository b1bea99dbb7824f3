"""Where dapr keeps what it builds: ``$DAPR_HOME``, by default ``~/.cache/dapr``."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """The root of dapr's caches (datasets built at first use, indexes, embeddings, runs)."""
    return Path(os.environ.get("DAPR_HOME") or Path.home() / ".cache" / "dapr").expanduser()
