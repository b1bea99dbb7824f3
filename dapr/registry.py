"""Entry-point registries: built-ins and plugins are found the same way.

A retriever, contextualizer, fuser, dataset or metric is any object registered under one of the
entry-point groups ``dapr.retrievers``, ``dapr.contextualizers``, ``dapr.fusers``,
``dapr.datasets`` or ``dapr.metrics``; dapr's own components register in its ``pyproject.toml``
the same way a third-party package does. What each must implement is in :mod:`dapr.interfaces`.
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import EntryPoints, entry_points
from typing import Any, Protocol

from dapr.errors import DaprError


class _Selectable(Protocol):
    """What :func:`importlib.metadata.entry_points` returns: ``EntryPoints``, or before Python
    3.12 (called with no argument) ``SelectableGroups``; both select by group."""

    def select(self, *, group: str) -> EntryPoints: ...


_scanned: tuple[tuple, _Selectable] | None = None


def _installed() -> _Selectable:
    """Every installed entry point, read again only when ``sys.path`` or the modification time
    of one of its folders changed (as :mod:`importlib.metadata` caches each folder's listing): a
    run looked up 19 names, and each scan of every distribution took 4 ms."""
    global _scanned
    key = tuple((path, _modified(path)) for path in sys.path)
    if _scanned is None or _scanned[0] != key:
        _scanned = (key, entry_points())
    return _scanned[1]


def _modified(path: str) -> int:
    try:
        return os.stat(path or ".").st_mtime_ns
    except OSError:
        return -1


class Registry:
    """Components of one kind, looked up by their registered name."""

    def __init__(self, group: str, kind: str):
        self.group = group
        self.kind = kind
        self._extra: dict[str, Any] = {}
        self.generation = 0
        """Counts run-time additions and removals (for callers that memoize lookups)."""

    def _entry_points(self) -> dict[str, list[Any]]:
        """Name -> its entry points (more than one when two packages claim the name)."""
        found: dict[str, list[Any]] = {}
        for ep in _installed().select(group=self.group):
            same = [e for e in found.get(ep.name, []) if e.value == ep.value]
            if not same:  # one package seen twice on the path is one registration
                found.setdefault(ep.name, []).append(ep)
        return found

    def names(self) -> list[str]:
        return sorted({*self._entry_points(), *self._extra})

    def __contains__(self, name: str) -> bool:
        return name in self._extra or name in self._entry_points()

    def get(self, name: str) -> Any:
        """The registered object, imported on first use; a DaprError when the name is unknown,
        claimed by two packages, or its module cannot be imported."""
        if name in self._extra:
            return self._extra[name]
        found = self._entry_points().get(name)
        if found is None:
            choices = ", ".join(self.names()) or "none installed"
            raise DaprError(f"unknown {self.kind} {name!r}; choose from: {choices}")
        if len(found) > 1:
            claims = " and ".join(f"{_origin(ep)} ({ep.value})" for ep in found)
            raise DaprError(
                f"{self.kind} {name!r} is registered twice, by {claims}; uninstall one of them "
                f"or register the plugin's {self.kind} under another name"
            )
        (entry,) = found
        try:
            return entry.load()
        except Exception as error:  # noqa: BLE001 - any failure of a plugin's module
            reason = str(error).splitlines()[0] if str(error) else ""
            raise DaprError(
                f"{self.kind} {name!r} ({entry.value}, from {_origin(entry)}) cannot be imported: "
                f"{type(error).__name__}: {reason}; reinstall or fix that package"
            ) from None

    def sources(self) -> list[tuple[str, str, str]]:
        """``(name, distribution and version, object path)`` of every registered component."""
        rows = []
        for name, found in sorted(self._entry_points().items()):
            for ep in found:
                rows.append((name, _origin(ep), ep.value))
        for name, obj in sorted(self._extra.items()):
            kind = obj if isinstance(obj, type) else type(obj)  # a class, or an instance
            rows.append((name, "added at run time", f"{kind.__module__}:{kind.__qualname__}"))
        return rows

    def add(self, name: str, obj: Any) -> None:
        """Register an object at run time (a notebook or a test); entry points need no call."""
        self._extra[name] = obj
        self.generation += 1

    def remove(self, name: str) -> None:
        """Forget an object registered with :meth:`add`."""
        self._extra.pop(name, None)
        self.generation += 1


datasets = Registry("dapr.datasets", "dataset")
retrievers = Registry("dapr.retrievers", "retriever")
contextualizers = Registry("dapr.contextualizers", "contextualizer")
fusers = Registry("dapr.fusers", "fuser")
metrics = Registry("dapr.metrics", "metric")


def _origin(entry: Any) -> str:
    """The distribution (and version) that registered an entry point."""
    return f"{entry.dist.name} {entry.dist.version}" if entry.dist is not None else "?"
