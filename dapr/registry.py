"""What a plugin implements, and the entry-point registries that find built-ins and plugins alike.

A retriever, contextualizer, fuser or dataset is any object registered under one of the entry-point
groups ``dapr.retrievers``, ``dapr.contextualizers``, ``dapr.fusers`` or ``dapr.datasets``. The
built-ins register in dapr's own ``pyproject.toml`` the same way a third-party package does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from dapr.data import Dataset, Document, Run
from dapr.errors import DaprError


@runtime_checkable
class Retriever(Protocol):
    """Indexes ``(id, text)`` items once, then answers queries with a :class:`Run`.

    ``version`` is part of every cache key: bump it when a change alters the retriever's output.
    """

    version: str

    def index(self, items: Iterable[tuple[str, str]], store: Path) -> None:
        """Build the index from the items and persist it under ``store``; ready to search."""

    def load(self, store: Path) -> None:
        """Open an index that :meth:`index` persisted under ``store``."""

    def search(self, queries: Mapping[str, str], k: int) -> Run:
        """The top ``k`` items for every query."""


@runtime_checkable
class Contextualizer(Protocol):
    """Gives each passage of a document the text a retriever should see for it."""

    version: str

    def contextualize(self, document: Document) -> list[str]:
        """One text per passage, in passage order."""


@runtime_checkable
class Fuser(Protocol):
    """Combines a document run and a passage run into a passage run."""

    def fuse(self, document_run: Run, passage_run: Run, doc_of: np.ndarray) -> Run:
        """``doc_of[i]`` is the code in ``document_run.vocab`` of the document of passage
        ``passage_run.vocab[i]`` (or -1 when that document is not in the document vocabulary)."""


class Registry:
    """Components of one kind, looked up by their registered name."""

    def __init__(self, group: str, kind: str):
        self.group = group
        self.kind = kind
        self._extra: dict[str, Any] = {}

    def _entry_points(self) -> dict[str, Any]:
        return {ep.name: ep for ep in entry_points(group=self.group)}

    def names(self) -> list[str]:
        return sorted({*self._entry_points(), *self._extra})

    def __contains__(self, name: str) -> bool:
        return name in self._extra or name in self._entry_points()

    def get(self, name: str) -> Any:
        """The registered object, imported on first use."""
        if name in self._extra:
            return self._extra[name]
        found = self._entry_points().get(name)
        if found is None:
            choices = ", ".join(self.names()) or "none installed"
            raise DaprError(f"unknown {self.kind} {name!r}; choose from: {choices}")
        return found.load()

    def add(self, name: str, obj: Any) -> None:
        """Register an object at run time (a notebook or a test); entry points need no call."""
        self._extra[name] = obj


datasets = Registry("dapr.datasets", "dataset")
retrievers = Registry("dapr.retrievers", "retriever")
contextualizers = Registry("dapr.contextualizers", "contextualizer")
fusers = Registry("dapr.fusers", "fuser")


def load_dataset(name: str, **kwargs: Any) -> Dataset:
    """A registered dataset by name, or a dataset directory (hub layout or DAPR dump) by path."""
    if name not in datasets and Path(name).is_dir():
        from dapr.io import read_dataset

        return read_dataset(Path(name))
    return datasets.get(name)(**kwargs)
