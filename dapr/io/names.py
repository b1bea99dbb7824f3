"""Names from an experiment file that become parts of paths: systems (``runs/<name>.trec``),
trained models (``$DAPR_HOME/trained/<name>.json``), the experiment (``results/<name>``, each
part of a nested name) and the points of a ``dataset:`` grid (``results/<name>/<folder>``).

A name is one path component that every common file system stores as it is: no separator, no
``.``/``..`` or leading ``.``, no control or format character, no white space, none of the
characters or device names Windows refuses, at most :data:`MAX_BYTES` bytes of UTF-8. Two names
of one invocation whose files are one file on a case-insensitive or normalising file system
(macOS, Windows) :func:`collide`.

Where results go is the user's to say, but never inside the folders dapr manages in
``$DAPR_HOME`` (:func:`outside_home`): its cache, datasets and models, which ``dapr cache prune``
cleans.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Iterable
from pathlib import Path

from dapr.errors import ConfigError, DaprError
from dapr.paths import OWNED, home

MAX_BYTES = 128
"""The longest name, in bytes of UTF-8: what dapr adds around a name (``@maxp.trec``, the
``@<overrides>`` of a results folder, up to 81 bytes, and the ``.<name>.<pid>.<writer>.tmp.old``
of an atomic write, 34) keeps every file name within the 255 bytes file systems allow."""

FIX = "names become file names: use one without spaces, separators or control characters"
"""The remedy every refused name is given (followed by an example)."""

_FORBIDDEN = '/\\<>:"|?*'
"""Path separators, and what Windows does not allow in a file name."""
_DEVICES = frozenset(
    ["CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$"]
    + [f"{port}{n}" for port in ("COM", "LPT") for n in [*"123456789", "¹", "²", "³"]]
)
"""Names Windows reserves for devices, with or without an extension."""


def problem(name: object) -> str | None:
    """What keeps ``name`` from being a file name, or None when it can be one."""
    if not isinstance(name, str) or not name:
        return "is not a non-empty text"
    if name in (".", ".."):
        return "is a relative folder, not a name"
    for char in name:
        if char in _FORBIDDEN:
            return f"holds {char!r} (a path separator or a character Windows refuses)"
        if unicodedata.category(char) in ("Cc", "Cf", "Cs"):
            return f"holds the control or format character {char!r}"
        if char.isspace():
            return "holds white space"
    if name.startswith("."):
        return "starts with '.' (a hidden file)"
    if name.endswith("."):
        return "ends with '.' (which Windows drops)"
    if name.split(".")[0].rstrip().upper() in _DEVICES:
        return f"is a device name Windows reserves ({name.split('.')[0]})"
    size = len(name.encode("utf-8"))
    if size > MAX_BYTES:
        return f"is {size} bytes long in UTF-8 (at most {MAX_BYTES})"
    return None


def component(
    name: object, path: Path, key: str, what: str = "name", example: str = "bm25-title"
) -> str:
    """``name``, or a ConfigError ``<path>: <key>: <what> <name> <problem>; <fix>, e.g.
    <example>``."""
    wrong = problem(name)
    if wrong is not None:
        raise ConfigError(f"{path}: {key}: {what} {name!r} {wrong}; {FIX}, e.g. {example}")
    assert isinstance(name, str)  # problem() refuses every other value
    return name


def folded(name: str) -> str:
    """What a case-insensitive, normalising file system takes ``name`` for (NFKC case-fold)."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", name).casefold())


def collide(names: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], tuple[str, str]] | None:
    """The first two ``(label, file name)`` pairs whose file names are one file on macOS or
    Windows (equal, or equal but for case or Unicode normalisation), else None."""
    seen: dict[str, tuple[str, str]] = {}
    for label, name in names:
        first = seen.setdefault(folded(name), (label, name))
        if first != (label, name):
            return first, (label, name)
    return None


def outside_home(out: Path, option: str = "--out") -> None:
    """A DaprError naming ``option`` when ``out`` is ``$DAPR_HOME`` or inside one of the folders
    dapr manages there (:data:`dapr.paths.OWNED`; symbolic links followed, also where ``out``
    does not exist yet). Elsewhere under a home that is also a scratch folder is allowed."""
    root = Path(os.path.realpath(home()))
    target = Path(os.path.realpath(out))
    owned = [root / folder for folder in OWNED]
    if target == root or any(target == mine or mine in target.parents for mine in owned):
        raise DaprError(
            f"{option} {out}: lies inside $DAPR_HOME ({root}), in the folders that hold dapr's "
            f"cache, datasets and models (`dapr cache prune` cleans them); choose an {option} "
            "outside them"
        )
