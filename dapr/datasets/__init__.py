"""Datasets: the document -> passage form on disk and the registered adapters that build it.

:func:`load_dataset` finds a dataset by its registered name, reads a dataset directory, or
reads an ir_datasets dataset named ``irds:<id>`` (:mod:`~dapr.datasets.irds`);
:func:`read_dataset` tells the layouts apart (the hub layout, :mod:`dapr.datasets.hub`, in JSON
lines or parquet, and the original DAPR dump, :mod:`dapr.datasets.dump`) and
:func:`write_dataset` writes the hub layout. Corpora are read lazily: every pass over
``dataset.corpus`` re-reads the file, so a malformed corpus row raises :class:`DataError` while
iterating. Queries and qrels are read eagerly; when a (query, item) pair is judged more than
once, the highest grade wins.

Modules: :mod:`~dapr.datasets.adapter` (the adapter base of every ``data_loaders`` module),
:mod:`~dapr.datasets.published` (the prebuilt datasets on the hub), :mod:`~dapr.datasets.download`
(raw files), :mod:`~dapr.datasets.stats` (corpus and split statistics).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from dapr.data import SPLITS, Dataset
from dapr.datasets.dump import read_dump
from dapr.datasets.hub import CORPUS_NEEDS, read_hub, write_dataset
from dapr.datasets.irds import IRDS, read_irds
from dapr.errors import DataError
from dapr.io.rows import jsonl_rows
from dapr.registry import datasets


def load_dataset(name: str, **kwargs: Any) -> Dataset:
    """A registered dataset by name, a dataset directory (hub layout or DAPR dump) by path, or
    an ir_datasets dataset as ``irds:<id>`` (``kwargs``: :class:`dapr.datasets.irds.Options`)."""
    if name.startswith(IRDS):
        return read_irds(name, **kwargs)
    if name not in datasets and Path(name).is_dir():
        return read_dataset(Path(name))
    return datasets.get(name)(**kwargs)


def read_dataset(path: Path, name: str | None = None, remember: bool = True) -> Dataset:
    """A dataset directory in the hub layout (JSON lines or parquet) or the original DAPR dump;
    ``remember``: see :func:`~dapr.datasets.hub.read_hub`."""
    path = Path(path)
    layout = _detect_layout(path)
    if layout == "dump":
        return read_dump(path, name)
    return read_hub(path, layout, name, remember)


def _detect_layout(path: Path) -> str:
    """``"jsonl"`` or ``"parquet"`` (hub layout) or ``"dump"``."""
    if not path.is_dir():
        raise DataError(f"{path}: not a directory; give a dataset directory (hub layout or dump)")
    jsonl, parquet = path / "corpus.jsonl", path / "corpus.parquet"
    has_dump_splits = any((path / f"{s}.jsonl").is_file() for s in SPLITS)
    if jsonl.is_file() and parquet.is_file():
        raise DataError(f"{path}: has both corpus.jsonl and corpus.parquet; keep only one")
    if parquet.is_file() or any((path / "corpus").glob("*.parquet")):
        return "parquet"
    if jsonl.is_file():
        return _jsonl_corpus_layout(jsonl, has_dump_splits)
    if any((path / "corpus").glob("*.jsonl")):
        return "jsonl"
    if has_dump_splits:
        return "dump"
    raise DataError(
        f"{path}: not a dataset directory: no corpus.jsonl or corpus.parquet; expected the hub "
        "layout (corpus, queries/, qrels/) or the DAPR dump (corpus.jsonl, train/dev/test.jsonl)"
    )


def _jsonl_corpus_layout(corpus: Path, has_dump_splits: bool) -> str:
    """Tell a hub corpus from a dump corpus by the fields of its first row."""
    with contextlib.closing(jsonl_rows(corpus)) as rows:
        first = next(rows, None)
    if first is None:
        return "dump" if has_dump_splits else "jsonl"
    n, row = first
    if "chunks" in row:
        return "dump"
    if "_id" in row:
        return "jsonl"
    raise DataError(
        f"{corpus}:{n}: missing field '_id' (hub layout) or 'chunks' (DAPR dump); {CORPUS_NEEDS}"
    )


__all__ = ["load_dataset", "read_dataset", "write_dataset"]
