"""Where dapr keeps what it builds: ``$DAPR_HOME``, by default ``~/.cache/dapr``."""

from __future__ import annotations

from pathlib import Path

from dapr import settings

OWNED = ("cache", "datasets", "hub", "models", "raw", "tmp", "torch_extensions", "trained")
"""The folders dapr makes and manages under the home (``dapr cache prune`` cleans ``cache``);
the rest of a home that is also, say, a scratch folder is the user's."""


def home() -> Path:
    """The root of dapr's caches (datasets built at first use, indexes, embeddings, runs), as
    ``DAPR_HOME`` says now (checked: see :mod:`dapr.settings`)."""
    return settings.home()
