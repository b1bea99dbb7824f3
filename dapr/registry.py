"""What a plugin implements, and the entry-point registries that find built-ins and plugins alike.

A retriever, contextualizer, fuser or dataset is any object registered under one of the entry-point
groups ``dapr.retrievers``, ``dapr.contextualizers``, ``dapr.fusers`` or ``dapr.datasets``. The
built-ins register in dapr's own ``pyproject.toml`` the same way a third-party package does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from dapr.data import Dataset, Document, Run
from dapr.errors import DaprError


@dataclass(frozen=True)
class Preset:
    """Named settings of a retriever (a paper checkpoint), and the levels it is meant for."""

    args: Mapping[str, Any]
    levels: tuple[str, ...] = ("passage", "document")
    about: str = ""


@runtime_checkable
class Retriever(Protocol):
    """Indexes ``(id, text)`` items once, then answers queries with a :class:`Run`.

    ``version`` is part of every cache key: bump it when a change alters the retriever's output.
    Optionally a retriever class also has

    - ``presets: dict[str, Preset]``, selected with the keyword argument ``preset``;
    - ``identity() -> dict``: what determines its index and results (model names and their
      :func:`dapr.models.revision`, pooling...) but not how fast they come (batch size, device,
      threads); the cache keys use it instead of the keyword arguments;
    - ``score(queries, candidates: Run) -> Run``: on a loaded index, the items of
      ``candidates`` (its scores ignored) ranked for each of its queries that ``queries`` has,
      in the run's order, with the score :meth:`search` gives each item (0 for an item that
      search leaves out for sharing no term with the query: BM25, SPLADE); candidates that are
      not in the index are dropped silently, an empty candidate list gives an empty ranking.
      Hierarchical retrieval searches the passages of the top documents with it; it should
      read only the candidates' part of the index;
    - ``resumable = True``: :meth:`index` may find in ``store`` what an interrupted attempt
      stored, and continues from it (the dense and sparse retrievers skip stored shards); a
      retriever without it always gets an empty ``store``. Storing its items through
      :func:`dapr.retrievers.encoding.shards` with ``writer=self`` (a ``write_shard(chunk,
      path)`` method; the retriever must pickle without its loaded models) gives both resuming
      and, in a job on Ray with ``resources.actors``, encoding on Ray Data actors.
    """

    version: str

    def index(self, items: Iterable[tuple[str, str]], store: Path) -> None:
        """Build the index from the items and persist it under ``store``; ready to search."""

    def load(self, store: Path) -> None:
        """Open an index that :meth:`index` persisted under ``store``."""

    def search(self, queries: Mapping[str, str], k: int) -> Run:
        """The top ``k`` items for every query."""


@runtime_checkable
class Reranker(Protocol):
    """Re-scores the top items of a first-stage run (a cross-encoder). Registered under
    ``dapr.retrievers`` like a retriever; an experiment names its ``first_stage`` system."""

    version: str

    def rerank(self, queries: Mapping[str, str], run: Run, texts: Mapping[str, str]) -> Run:
        """New scores for the items of ``run``; ``texts`` holds the text of each of them."""


@runtime_checkable
class Contextualizer(Protocol):
    """Gives each passage of a document the text a retriever should see for it.

    Its constructor is cheap (models load at first use), so it pickles small to worker
    processes. Optionally a contextualizer class also has

    - ``identity() -> dict``: what determines its output (backend, model and revision), for the
      per-document cache keys instead of the keyword arguments;
    - ``parallel``: ``True`` for CPU work on one document at a time, worth running in worker
      processes; ``False`` where processes do not help or are not safe (unset: no preference);
    - ``contextualize_batch(documents) -> list[list[str]]``: many documents at once in this
      process (a batched neural model on a GPU); used instead of worker processes.
    """

    version: str

    def contextualize(self, document: Document) -> list[str]:
        """One text per passage, in passage order."""


@runtime_checkable
class Fuser(Protocol):
    """Combines a document run and a passage run into a passage run.

    Optionally a fuser class also has

    - ``fuse_passages(first: Run, second: Run) -> Run``: a passage-level hybrid of two passage
      runs (an experiment's ``fusion`` entry with ``passages: [a, b]``);
    - ``scope(document_run: Run, ids: CorpusIds) -> Run``: the candidate passages the passage
      system must score (with its retriever's ``score``) before :meth:`fuse`, which makes the
      fusion hierarchical.
    """

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

    def sources(self) -> list[tuple[str, str, str]]:
        """``(name, distribution and version, object path)`` of every registered component."""
        rows = []
        for name, ep in sorted(self._entry_points().items()):
            dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else "?"
            rows.append((name, dist, ep.value))
        for name, obj in sorted(self._extra.items()):
            rows.append((name, "added at run time", f"{obj.__module__}:{obj.__qualname__}"))
        return rows

    def add(self, name: str, obj: Any) -> None:
        """Register an object at run time (a notebook or a test); entry points need no call."""
        self._extra[name] = obj

    def remove(self, name: str) -> None:
        """Forget an object registered with :meth:`add`."""
        self._extra.pop(name, None)


datasets = Registry("dapr.datasets", "dataset")
retrievers = Registry("dapr.retrievers", "retriever")
contextualizers = Registry("dapr.contextualizers", "contextualizer")
fusers = Registry("dapr.fusers", "fuser")


def with_preset(name: str, factory: Any, args: Mapping[str, Any], level: str) -> dict[str, Any]:
    """``args`` with its ``preset`` (if any) expanded into the preset's arguments, which the
    other ``args`` override; a DaprError for an unknown preset or one used at the wrong level."""
    if "preset" not in args:
        return dict(args)
    presets: Mapping[str, Preset] = getattr(factory, "presets", {})
    chosen = args["preset"]
    if chosen not in presets:
        choices = ", ".join(sorted(presets)) or "it has none"
        raise DaprError(f"retriever {name!r} has no preset {chosen!r}; choose from: {choices}")
    preset = presets[chosen]
    if level not in preset.levels:
        raise DaprError(
            f"preset {chosen!r} of retriever {name!r} is for {' or '.join(preset.levels)}-level "
            f"retrieval, not {level}; set level: {preset.levels[0]} or pick a "
            f"{level}-level preset: "
            + (", ".join(p for p, v in sorted(presets.items()) if level in v.levels) or "none")
        )
    rest = {k: v for k, v in args.items() if k != "preset"}
    return {**preset.args, **rest}


def load_dataset(name: str, **kwargs: Any) -> Dataset:
    """A registered dataset by name, or a dataset directory (hub layout or DAPR dump) by path."""
    if name not in datasets and Path(name).is_dir():
        from dapr.io import read_dataset

        return read_dataset(Path(name))
    return datasets.get(name)(**kwargs)
