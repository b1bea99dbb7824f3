"""The DAPR paper's own contexts, as the hub publishes them: exact inputs, nothing computed.

The hub dataset ``UKPLab/dapr`` has, per dataset, ``<Name>-keyphrases`` (the top-10 TopicRank
keyphrases of every document) and ``<Name>-corpus_coref`` (every passage with its coreference
annotations). ``dapr data fetch NAME`` stores them as ``keyphrases/`` and ``corpus_coref/`` in
the dataset directory; this contextualizer reads them from there.

- ``kind: keyphrases``: a row per document, its id in ``doc_id`` (or ``_id``) and its phrases in
  ``keyphrases`` (a list, joined with ``separator``: a space, as the reference joins them) or as
  one string in ``doc_summary`` / ``text``; each passage becomes ``"{phrases} {passage}"``, like
  the ``keyphrases`` contextualizer.
- ``kind: coref``: a row per passage, ``_id`` and the annotated ``text``, which replaces the
  passage.

A table is indexed once into a SQLite lookup in the cache (keyed by the files' names, sizes
and modification times), so even MS MARCO's 6.7 GB of annotated passages is never held in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import Any

from dapr.data import Document
from dapr.errors import DaprError, DataError
from dapr.io.rows import row_location, table_rows
from dapr.store.lookups import Lookup, lookup

TABLES = {"keyphrases": "keyphrases", "coref": "corpus_coref"}
"""``kind`` -> the folder of the published table in a dataset directory."""
KEY_COLUMNS = {"keyphrases": ("doc_id", "_id"), "coref": ("_id",)}
VALUE_COLUMNS = {"keyphrases": ("keyphrases", "doc_summary", "text"), "coref": ("text",)}


class Precomputed:
    """Passages contextualized with the published keyphrases or coreference annotations.

    :param kind: The published table: ``keyphrases`` or ``coref``.
    :param dataset_dir: The dataset directory that holds the table (None: the experiment's
        dataset, which the runner passes).
    :param separator: What joins the keyphrases when the table lists them one by one.
    """

    version = "1"
    parallel = False  # a lookup per document: worker processes would only add start-up time

    def __init__(
        self, kind: str = "keyphrases", dataset_dir: str | None = None, separator: str = " "
    ) -> None:
        if kind not in TABLES:
            raise DaprError(
                f"precomputed: kind {kind!r} is not one of: {', '.join(TABLES)}; "
                "choose the published table to use"
            )
        self.kind = kind
        self.dataset_dir = dataset_dir
        self.separator = separator

    def identity(self) -> dict[str, Any]:
        return {"kind": self.kind, "separator": self.separator, "files": self._signature}

    def contextualize(self, document: Document) -> list[str]:
        if self.kind == "keyphrases":
            phrases = self._get(document.id, "keyphrases", document.id)
            return [f"{phrases} {p.text}" if phrases else p.text for p in document.passages]
        return [self._get(p.id, "passage", document.id) for p in document.passages]

    @cached_property
    def _files(self) -> list[Path]:
        if self.dataset_dir is None:
            raise DaprError(
                "precomputed: no dataset directory; the runner passes the experiment's dataset, "
                "or set args.dataset_dir"
            )
        folder = Path(self.dataset_dir) / TABLES[self.kind]
        files = sorted([*folder.glob("*.parquet"), *folder.glob("*.jsonl")])
        if not files:
            raise DaprError(
                f"{folder}: no published {TABLES[self.kind]} table; fetch the dataset from the "
                f"hub with `dapr data fetch NAME` (config <Name>-{TABLES[self.kind]}), or use "
                f"the {self.kind} contextualizer to compute it"
            )
        return files

    @cached_property
    def _signature(self) -> list[tuple[str, int, int]]:
        return [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in self._files]

    @cached_property
    def _table(self) -> Lookup:
        def rows() -> Iterator[tuple[str, str]]:
            for file in self._files:
                for n, row in table_rows(file):
                    yield _entry(row, self.kind, self.separator, row_location(file, n))

        return lookup(rows, self.kind, self.separator, self._signature)

    def _get(self, key: str, what: str, document: str) -> str:
        found = self._table.get(key)
        if found is None:
            raise DataError(
                f"{self._files[0].parent}: no row for {what} {key!r} (document {document!r}); "
                "the published table belongs to another version of the dataset: fetch both again"
            )
        return found


def _entry(row: dict[str, Any], kind: str, separator: str, at: str) -> tuple[str, str]:
    key = next((row[c] for c in KEY_COLUMNS[kind] if isinstance(row.get(c), str)), None)
    column = next((c for c in VALUE_COLUMNS[kind] if row.get(c) is not None), None)
    if key is None or column is None:
        raise DataError(
            f"{at}: a {TABLES[kind]} row needs an id in {' or '.join(KEY_COLUMNS[kind])} and a "
            f"value in {' or '.join(VALUE_COLUMNS[kind])}; it has: {', '.join(row) or 'nothing'}"
        )
    value = row[column]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return key, separator.join(value)
    if isinstance(value, str):
        return key, value
    raise DataError(f"{at}: {column} must be a string or a list of strings, got {value!r}")
