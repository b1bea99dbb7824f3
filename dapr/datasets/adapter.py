"""Dataset adapters: a registered dataset's ready copy, and how to build it from its raw files.

An adapter is registered under the entry-point group ``dapr.datasets``. Calling it (or
:meth:`Adapter.load`) returns the :class:`Dataset`: from the local prepared copy under
``$DAPR_HOME/datasets/<name>`` when there is one, else, for the DAPR benchmark's datasets, from
the published hub dataset ``UKPLab/dapr`` (downloaded once into that prepared copy). Building
from raw files (``dapr data build NAME --source DIR``) writes the same prepared copy.

Build options are declared once, as the keyword-only parameters of :meth:`Adapter.build`, with
defaults and type annotations::

    def build(self, source: Path, *, tagged: bool = False) -> Dataset: ...

:meth:`Adapter.check_options` checks given options against them (names, and values against the
annotations: ``bool``, ``int``, ``float``, ``str``, ``Path``, ``Literal[...]`` and unions such
as ``X | None``); ``dapr data build`` and :meth:`LocalAdapter.load` call it before
:meth:`Adapter.build`, so a build checks only what a type cannot say (a share within [0, 1]),
raising :meth:`Adapter.option_error` for a message of the same form. :class:`LocalAdapter` is
the base of the adapters over the user's own files.
"""

from __future__ import annotations

import inspect
import os
import types
import typing
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Literal

from dapr.data import Dataset
from dapr.errors import DaprError, DataError
from dapr.paths import home


@dataclass(frozen=True)
class RawFile:
    """A file a builder reads: its path inside the source directory and where it comes from.

    ``url`` is None for files that must be obtained by hand (``how`` then says how).
    ``sha256`` is checked after a download when it is known.
    """

    path: str
    url: str | None = None
    sha256: str | None = None
    how: str = ""


class Adapter:
    """One dataset by name. Subclasses set the class attributes and implement :meth:`build`."""

    name: str = ""
    origin: str = ""
    """One line for ``dapr data list``: where the data comes from."""
    raw_files: tuple[RawFile, ...] = ()
    hub_repo: str | None = None
    """The hub dataset that publishes a prebuilt copy (configs ``<name>-corpus`` etc.)."""
    builds_at_first_use: bool = False
    """Whether :meth:`load` builds the prepared copy itself, offline, from files a package
    installed (wiki-sample), when there is none."""

    def __call__(self, **options: Any) -> Dataset:
        return self.load(**options)

    @property
    def prepared(self) -> Path:
        """Where the ready copy lives (written by a hub download or ``dapr data build``)."""
        return home() / "datasets" / self.name

    def cached(self) -> bool:
        return self.prepared.is_dir()

    @property
    def raw(self) -> Path:
        """Where ``dapr data build NAME --download`` keeps the raw files when no ``--source``
        is given."""
        return home() / "raw" / self.name

    def fetched(self) -> bool:
        """Whether every raw file is in :attr:`raw` (so a load by name can build from them)."""
        return bool(self.raw_files) and all((self.raw / r.path).is_file() for r in self.raw_files)

    def load(self, **options: Any) -> Dataset:
        """The ready dataset: the prepared copy, fetched from the hub first if needed."""
        from dapr.datasets import read_dataset

        if options:
            raise DaprError(
                f"dataset {self.name!r} takes no options when loaded ({', '.join(options)}); "
                f"pass build options to `dapr data build {self.name} --set KEY=VALUE`"
            )
        if not self.cached():
            if self.hub_repo is None:
                raise DaprError(
                    f"dataset {self.name!r} is not built yet; build it with "
                    f"`dapr data build {self.name} --source DIR` ({self.origin})"
                )
            from dapr.datasets.published import fetch_published

            fetch_published(self.name, self.prepared, repo=self.hub_repo)
        return read_dataset(self.prepared, self.name)

    def build(self, source: Path) -> Dataset:
        """The dataset built from the raw files in ``source``.

        Subclasses declare their options as keyword-only parameters after ``source``, each with
        a default and a type annotation (see the module docstring).
        """
        raise DaprError(f"dataset {self.name!r} cannot be built from raw files; load it by name")

    def options(self) -> dict[str, inspect.Parameter]:
        """The build options: the keyword parameters of :meth:`build` after ``source``, by name,
        in declaration order, their annotations resolved to types."""
        build = self.build
        hints = typing.get_type_hints(inspect.unwrap(getattr(build, "__func__", build)))
        found = {}
        for i, param in enumerate(inspect.signature(build).parameters.values()):
            if param.kind is param.KEYWORD_ONLY or (
                param.kind is param.POSITIONAL_OR_KEYWORD and i > 0
            ):
                annotation = hints.get(param.name, param.annotation)
                found[param.name] = param.replace(annotation=annotation)
        return found

    def check_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` checked against :meth:`options`, ready for :meth:`build`.

        Raises a one-line :class:`DataError` for an unknown option, a missing one that has no
        default, or a value that does not fit the annotation. Values come back converted where
        the annotation says so: a path as :class:`~pathlib.Path`, an integer for a float as
        a float. A ``**kwargs`` parameter of :meth:`build` lets unknown options through.
        """
        declared = self.options()
        params = inspect.signature(self.build).parameters.values()
        open_ended = any(p.kind is p.VAR_KEYWORD for p in params)
        checked = {}
        for key, value in options.items():
            param = declared.get(key)
            if param is None:
                if open_ended:
                    checked[key] = value
                    continue
                valid = f"valid options: {', '.join(declared)}" if declared else None
                raise DataError(
                    f"dataset {self.name!r}: unknown option {key!r}; "
                    f"{valid or 'it takes no options'}"
                )
            converted = _convert(value, param.annotation)
            if converted is _MISMATCH:
                raise self.option_error(key, _kind(param.annotation), value)
            checked[key] = converted
        for key, param in declared.items():
            if key not in checked and param.default is param.empty:
                raise DataError(
                    f"dataset {self.name!r}: option {key!r} is required; give {key}=VALUE"
                )
        return checked

    def option_error(self, key: str, kind: str, value: Any) -> DataError:
        """The one-line error for option ``key``: it must be ``kind`` and is ``value``."""
        from dapr.io.rows import show

        return DataError(f"dataset {self.name!r}: option {key!r} must be {kind}, got {show(value)}")

    def require(self, source: Path, download: bool = False) -> None:
        """Check that every raw file is in ``source``; download the missing ones if asked."""
        from dapr.datasets.download import fetch

        for raw in self.raw_files:
            target = Path(source) / raw.path
            if target.is_file():
                continue
            if download and raw.url:
                fetch(raw.url, target, raw.sha256)
                continue
            if raw.url:
                fix = f"download {raw.url} there, or rerun with --download"
            else:
                fix = raw.how or "obtain it from the dataset's authors"
            raise DataError(f"{target}: missing raw file of {self.name}; {fix}")


def keep_raw(adapter: Adapter, source: Path) -> str | None:
    """Copy the raw files of ``source`` into :attr:`~Adapter.raw` when each is the pinned
    release (its SHA-256 known and matching), so that loads by name with options build from
    them offline, as after ``--download``; what was done, in words (None: nothing to keep)."""
    from dapr.datasets.download import file_sha256
    from dapr.io.files import write_bytes_atomic

    pinned = [raw for raw in adapter.raw_files if raw.sha256]
    if not pinned or Path(source).resolve() == adapter.raw.resolve():
        return None
    found = []
    for raw in pinned:
        path = Path(source) if Path(source).is_file() else Path(source) / raw.path
        if not path.is_file() or file_sha256(path) != raw.sha256:
            return (
                f"{path} is not the pinned release of {adapter.name} (its SHA-256 differs), so "
                "loads by name with options need its path as dataset_args: {path: ...}"
            )
        found.append((raw, path))
    for raw, path in found:
        target = adapter.raw / raw.path
        if not target.is_file() or file_sha256(target) != raw.sha256:
            with path.open("rb") as handle:
                write_bytes_atomic(target, iter(lambda: handle.read(1 << 20), b""))
    return f"kept a verified copy of its raw files in {adapter.raw} (loads with options read it)"


class LocalAdapter(Adapter):
    """An adapter over the user's own files: ``load(path=..., **options)`` builds from them.

    Every load with a ``path`` builds anew, its options checked as ``dapr data build`` checks
    them. Without ``path`` it reads the prepared copy that ``dapr data build NAME --source PATH``
    wrote (when no option is given), else builds from the raw files that ``dapr data build NAME
    --download`` fetched into :attr:`~Adapter.raw`, or fails with one line saying how to fetch
    them or give the path.
    """

    hub_repo = None
    path_help = ""
    """What ``path`` must name, for the error message."""

    def load(self, path: str | Path | None = None, **options: Any) -> Dataset:
        """The dataset built from ``path`` with the build ``options``, else as the class says.

        :param path: Your copy of the raw data, built on every load (None: the prepared copy,
            else the fetched raw files).
        """
        from dapr.datasets import read_dataset
        from dapr.io.rows import show

        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise DaprError(
                f"dataset {self.name!r}: path must be a file system path, got {show(path)}"
            )
        options = self.check_options(options)
        if path is None or str(path) == "":
            if self.cached() and not options:
                return read_dataset(self.prepared, self.name)
            if self.fetched():  # downloaded by name: built with these options
                return self.build(self.raw, **options)
            if any(raw.url for raw in self.raw_files):
                raise DaprError(
                    f"dataset {self.name!r} is not fetched yet; run `dapr data build {self.name} "
                    f"--download` once ({self.origin}), or give your copy's path as "
                    f"dataset_args: {{path: ...}}"
                )
            raise DaprError(
                f"dataset {self.name!r} reads your own data: give its path ({self.path_help}) "
                f"as dataset_args: {{path: ...}} in the experiment file or "
                f"load_dataset({self.name!r}, path=...) in Python, or build it once with "
                f"`dapr data build {self.name} --source PATH`"
            )
        self.require(Path(path))
        return self.build(Path(path), **options)

    def language_code(self, language: str) -> str:
        """Option ``language`` checked: an ISO 639-1 code such as ``en`` or ``zh``, lower-cased."""
        if not (language.isascii() and language.isalpha() and 2 <= len(language) <= 3):
            raise self.option_error("language", "an ISO 639-1 code such as en or zh", language)
        return language.lower()


def adapter_of(name: str) -> Adapter:
    """The registered adapter ``name``; plain loader functions are not adapters."""
    from dapr.registry import datasets

    found = datasets.get(name)
    if not isinstance(found, Adapter):
        raise DaprError(
            f"dataset {name!r} is registered as a loader function, not an adapter; "
            "it can be loaded by name but not built from raw files"
        )
    return found


# --------------------------------------------------------------------------- option values

_MISMATCH = object()
"""What :func:`_convert` returns for a value that does not fit the annotation."""
_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a text"}


def _convert(value: Any, hint: Any) -> Any:
    """``value`` as annotation ``hint`` wants it, or :data:`_MISMATCH`."""
    origin = typing.get_origin(hint)
    if hint is Any or hint is inspect.Parameter.empty:
        return value
    if origin is Literal:
        choices = typing.get_args(hint)
        fits = any(value == c and type(value) is type(c) for c in choices)
        return value if fits else _MISMATCH
    if origin is typing.Union or origin is types.UnionType:
        for member in typing.get_args(hint):
            converted = _convert(value, member)
            if converted is not _MISMATCH:
                return converted
        return _MISMATCH
    if hint is None or hint is type(None):
        return None if value is None else _MISMATCH
    if hint is bool:
        return value if isinstance(value, bool) else _MISMATCH
    if hint is int:  # a bool is no integer, though Python says it is
        return value if isinstance(value, int) and not isinstance(value, bool) else _MISMATCH
    if hint is float:  # an integer is a number
        fits = isinstance(value, (int, float)) and not isinstance(value, bool)
        return float(value) if fits else _MISMATCH
    if isinstance(hint, type) and issubclass(hint, PurePath):
        if isinstance(value, os.PathLike) or (isinstance(value, str) and value):
            return hint(value)
        return _MISMATCH
    if isinstance(origin or hint, type):  # str, list[str] (as list), any other class
        return value if isinstance(value, origin or hint) else _MISMATCH
    return value  # an annotation this check does not understand: not checked


def _kind(hint: Any) -> str:
    """What annotation ``hint`` asks for, in words: "an integer", "one of a, b"."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        return "one of " + ", ".join(str(c) for c in typing.get_args(hint))
    if origin is typing.Union or origin is types.UnionType:
        kinds = [_kind(m) for m in typing.get_args(hint) if m is not type(None)]
        return " or ".join(dict.fromkeys(kinds)) or "none"
    if isinstance(hint, type) and issubclass(hint, PurePath):
        return "a path"
    if hint in _KINDS:
        return _KINDS[hint]
    return f"of type {getattr(origin or hint, '__name__', hint)}"
