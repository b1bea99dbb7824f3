"""The hub layout: a dataset directory of JSON lines or parquet tables.

One directory per dataset, ``{ext}`` being ``jsonl`` or ``parquet``::

    corpus.{ext}            _id, text, title, doc_id, paragraph_no, total_paragraphs, is_candidate
    queries/{split}.{ext}   _id, text
    qrels/{split}.{ext}     query_id, corpus_id, score
    labels.{ext}            query_id, label              (optional: query categories)
    meta.json               {"relevance_level": 1, "notes": [...], "language": "en"} (optional)

Corpus rows are passages; the rows of a document are contiguous and ``paragraph_no`` counts
0, 1, 2, ... inside it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import pyarrow as pa

from dapr.data import SPLITS, Corpus, Dataset, Document, Passage, Qrels, Queries, Split
from dapr.datasets.record import CorpusRecord, is_record
from dapr.errors import DataError
from dapr.io import faults
from dapr.io.checks import PassageTally
from dapr.io.files import atomic_directory, dir_name, write_bytes_atomic
from dapr.io.rows import (
    add_query,
    as_grade,
    check_type,
    json_file,
    judge,
    optional_field,
    parquet_columns,
    parquet_row_count,
    query_text,
    required_field,
    required_id,
    row_location,
    table_rows,
    write_table,
)

Format = Literal["jsonl", "parquet"]
FORMATS: tuple[str, ...] = ("jsonl", "parquet")

CORPUS_SCHEMA = pa.schema(
    [
        ("_id", pa.string()),
        ("text", pa.string()),
        ("title", pa.string()),
        ("doc_id", pa.string()),
        ("paragraph_no", pa.int64()),
        ("total_paragraphs", pa.int64()),
        ("is_candidate", pa.bool_()),
    ]
)
QUERIES_SCHEMA = pa.schema([("_id", pa.string()), ("text", pa.string())])
QRELS_SCHEMA = pa.schema(
    [("query_id", pa.string()), ("corpus_id", pa.string()), ("score", pa.int64())]
)
LABELS_SCHEMA = pa.schema([("query_id", pa.string()), ("label", pa.string())])
META_FILE = "meta.json"
MAX_META_BYTES = 1 << 20
"""The most a dataset's ``meta.json`` may hold (a real one: a few hundred bytes)."""

ALL_SPLITS = "all"
"""Name of the published hub data's qrels file that unites every split."""
CORPUS_NEEDS = "every corpus row needs _id, text, title, doc_id, paragraph_no"
_QUERIES_NEEDS = "every query row needs _id and text"
_QRELS_NEEDS = "every qrels row needs query_id, corpus_id and an integer score"
_LABELS_NEEDS = "every labels row needs query_id and label"


# --------------------------------------------------------------------------- read


def read_hub(path: Path, ext: str, name: str | None = None, remember: bool = True) -> Dataset:
    """A directory in the hub layout of ``ext`` files; splits are read now, the corpus lazily.
    With ``remember``, the corpus's fingerprint and ids come from (and go to) the directory's
    record (:mod:`dapr.datasets.record`) while its files are unchanged."""
    corpus_files = _corpus_files(path, ext)
    if ext == "parquet":
        for corpus_file in corpus_files:
            _check_parquet_columns(corpus_file)
    _check_not_empty(corpus_files)
    splits, qrels_files = {}, []
    for split in _hub_split_names(path, ext):
        queries_file = path / "queries" / f"{split}.{ext}"
        qrels_file = path / "qrels" / f"{split}.{ext}"
        queries = _read_hub_queries(queries_file)
        qrels = _read_hub_qrels(qrels_file, queries, queries_file) if qrels_file.is_file() else {}
        splits[split] = Split(queries, qrels)
        if qrels_file.is_file():
            qrels_files.append(qrels_file)
    judged = {item for split in splits.values() for items in split.qrels.values() for item in items}
    record = CorpusRecord(path) if remember else None
    corpus = Corpus(partial(_hub_documents, corpus_files, judged, qrels_files), record)
    labels_file = path / f"labels.{ext}"
    labels = _read_labels(labels_file) if labels_file.is_file() else {}
    level, notes, language = _read_meta(path / META_FILE)
    return Dataset(
        name or dir_name(path), corpus, splits, labels, level, notes, language, root=path
    )


def _read_labels(path: Path) -> dict[str, tuple[str, ...]]:
    labels: dict[str, list[str]] = {}
    for n, row in table_rows(path):
        at = row_location(path, n)
        qid = required_field(row, "query_id", str, at, _LABELS_NEEDS)
        label = required_field(row, "label", str, at, _LABELS_NEEDS)
        if label not in labels.setdefault(qid, []):
            labels[qid].append(label)
    return {qid: tuple(found) for qid, found in labels.items()}


def _read_meta(path: Path) -> tuple[int, tuple[str, ...], str]:
    """``relevance_level``, ``notes`` and ``language`` from ``meta.json`` (defaults without)."""
    if not path.is_file():
        return 1, (), "en"
    needs = (
        'meta.json holds {"relevance_level": <integer>, "notes": [<string>, ...], '
        '"language": <code>}'
    )
    meta = json_file(path, MAX_META_BYTES, needs)
    check_type(meta, dict, str(path), "meta.json", needs)
    level = optional_field(meta, "relevance_level", int, str(path), needs, 1)
    notes = optional_field(meta, "notes", list, str(path), needs, [])
    language = optional_field(meta, "language", str, str(path), needs, "en")
    notes = tuple(check_type(note, str, str(path), "notes", needs) for note in notes)
    return level, notes, language


def _corpus_files(path: Path, ext: str) -> list[Path]:
    """``corpus.{ext}``, or the shards ``corpus/*.{ext}`` (as published on the hub) by name."""
    single = path / f"corpus.{ext}"
    return [single] if single.is_file() else sorted((path / "corpus").glob(f"*.{ext}"))


def _check_parquet_columns(path: Path) -> None:
    names = parquet_columns(path)
    for column in ("_id", "text", "title", "doc_id", "paragraph_no"):
        if column not in names:
            raise DataError(f"{path}: missing column {column!r}; {CORPUS_NEEDS}")


def _check_not_empty(corpus_files: list[Path]) -> None:
    """A corpus of no rows is an error (checked from parquet metadata or a first line)."""
    for file in corpus_files:
        if file.suffix == ".parquet":
            if parquet_row_count(file):
                return
        else:
            with contextlib.closing(table_rows(file)) as rows:
                if next(rows, None) is not None:
                    return
    where = corpus_files[0] if len(corpus_files) == 1 else corpus_files[0].parent
    raise DataError(f"{where}: the corpus has no passages; write at least one row ({CORPUS_NEEDS})")


def _hub_split_names(path: Path, ext: str) -> list[str]:
    """Splits named by ``queries/*.{ext}``: train, dev, test first, then the others by name.

    ``qrels/all`` (the union of the splits, as published on the hub) is not a split of its own.
    """
    found = {f.stem for f in (path / "queries").glob(f"*.{ext}") if f.is_file()}
    for qrels_file in sorted((path / "qrels").glob(f"*.{ext}")):
        if qrels_file.stem not in found and qrels_file.stem != ALL_SPLITS:
            raise DataError(
                f"{qrels_file}: no queries/{qrels_file.name} beside it; "
                "every qrels file needs the queries file of the same split"
            )
    return [s for s in SPLITS if s in found] + sorted(found - set(SPLITS))


def _read_hub_queries(path: Path) -> Queries:
    queries: Queries = {}
    for n, row in table_rows(path):
        at = row_location(path, n)
        qid = required_id(row, "_id", at, _QUERIES_NEEDS)
        text = query_text(row, "text", qid, at, _QUERIES_NEEDS)
        add_query(queries, qid, text, at, "text")
    return queries


def _read_hub_qrels(path: Path, queries: Queries, queries_file: Path) -> Qrels:
    """Judgements of the queries in ``queries`` (read from ``queries_file``)."""
    qrels: Qrels = {}
    for n, row in table_rows(path):
        at = row_location(path, n)
        qid = required_id(row, "query_id", at, _QRELS_NEEDS)
        if qid not in queries:
            raise DataError(
                f"{at}: field 'query_id' {qid!r} is not a query of {queries_file}; "
                "judge only queries listed there, or add the query"
            )
        item = required_id(row, "corpus_id", at, _QRELS_NEEDS)
        judge(qrels, qid, item, required_field(row, "score", int, at, _QRELS_NEEDS), at)
    return qrels


@dataclass
class _PendingDocument:
    """The rows of one document read so far."""

    id: str
    title: str
    total: int | None
    base: int = 0
    passages: list[Passage] = field(default_factory=list)
    at: str = ""

    def add(self, passage: Passage, title: str, total: int | None, at: str) -> None:
        expected = self.base + len(self.passages)
        if self.base not in (0, 1) or passage.position != expected:
            raise DataError(
                f"{at}: field 'paragraph_no' is {passage.position} but this is paragraph "
                f"{expected} of document {self.id!r}; keep a document's rows "
                "contiguous and numbered 0, 1, 2, ... (or 1, 2, 3, ...)"
            )
        passage = replace(passage, position=len(self.passages))
        if title != self.title:
            raise DataError(
                f"{at}: field 'title' differs from the first row of document {self.id!r}; "
                "give every row of a document the same title"
            )
        if total != self.total:
            raise DataError(
                f"{at}: field 'total_paragraphs' differs from the first row of document "
                f"{self.id!r}; give every row of a document the same total"
            )
        self.passages.append(passage)
        self.at = at

    def finish(self) -> Document:
        if self.total is not None and self.total != len(self.passages):
            raise DataError(
                f"{self.at}: field 'total_paragraphs' is {self.total} but document {self.id!r} "
                f"has {len(self.passages)} rows; write every paragraph of the document"
            )
        return Document(self.id, self.title, tuple(self.passages))


def _hub_documents(
    paths: list[Path], judged: Collection[str] = frozenset(), qrels_files: Sequence[Path] = ()
) -> Iterator[Document]:
    """The documents of hub corpus files, grouping consecutive rows by ``doc_id``.

    A complete pass also checks that passage ids are unique and that every passage judged in
    ``qrels_files`` (the items of ``judged``) is in the corpus.
    """
    pending: _PendingDocument | None = None
    seen: set[str] = set()
    tally = PassageTally(judged)
    for path, n, row in ((p, n, row) for p in paths for n, row in table_rows(p)):
        at = row_location(path, n)
        passage, title, total = _hub_passage(row, at)
        tally.add(passage.id)
        if pending is None or passage.doc_id != pending.id:
            if pending is not None:
                yield pending.finish()
            if passage.doc_id in seen:
                raise DataError(
                    f"{at}: field 'doc_id' {passage.doc_id!r} reappears after other documents; "
                    "keep the rows of a document contiguous"
                )
            seen.add(passage.doc_id)
            pending = _PendingDocument(passage.doc_id, title, total, base=passage.position)
        pending.add(passage, title, total, at)
    if pending is not None:
        yield pending.finish()
    tally.check(partial(_passage_ids, paths), partial(_judged_items, qrels_files))


def _passage_ids(paths: list[Path]) -> Iterator[tuple[str, str]]:
    """``(where, passage id)`` of every corpus row, read again."""
    for path in paths:
        for n, row in table_rows(path):
            yield row_location(path, n), row["_id"]


def _judged_items(qrels_files: Sequence[Path]) -> Iterator[tuple[str, str]]:
    """``(where, corpus_id)`` of the qrels rows, read again."""
    for path in qrels_files:
        for n, row in table_rows(path):
            yield row_location(path, n), row["corpus_id"]


def _hub_passage(row: dict[str, Any], at: str) -> tuple[Passage, str, int | None]:
    """A corpus row as its passage, its document's title and its ``total_paragraphs``."""
    passage = Passage(
        id=required_id(row, "_id", at, CORPUS_NEEDS),
        doc_id=required_id(row, "doc_id", at, CORPUS_NEEDS),
        position=required_field(row, "paragraph_no", int, at, CORPUS_NEEDS),
        text=required_field(row, "text", str, at, CORPUS_NEEDS),
        is_candidate=optional_field(row, "is_candidate", bool, at, CORPUS_NEEDS, True),
    )
    title = required_field(row, "title", str, at, CORPUS_NEEDS)
    return passage, title, optional_field(row, "total_paragraphs", int, at, CORPUS_NEEDS, None)


# --------------------------------------------------------------------------- write


def write_dataset(dataset: Dataset, out: Path, format: Format = "jsonl") -> None:
    """Write ``dataset`` in the hub layout; ``out`` appears (or is replaced) only once complete."""
    if format not in FORMATS:
        raise DataError(f"unknown dataset format {format!r}; choose 'jsonl' or 'parquet'")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise DataError(f"{out}: exists and is not a directory; remove it or choose another path")
    faults.checkpoint("dataset")
    with atomic_directory(out, owned=hub_file) as root:
        _write_hub(dataset, root, format)


TABLE_FOLDERS = ("corpus", "queries", "qrels")


def hub_file(path: PurePosixPath, extra_folders: tuple[str, ...] = ()) -> bool:
    """Whether ``path`` (relative to a dataset directory) is part of the hub layout: rewriting
    a dataset replaces these and keeps every other file of the directory (but the corpus record,
    which describes the files replaced)."""
    if path.parts and is_record(path.parts[0]):
        return True
    tables = path.suffix in (".jsonl", ".parquet")
    folders = (*TABLE_FOLDERS, *extra_folders)
    if len(path.parts) == 1:
        return (
            path.name == META_FILE
            or path.name in folders
            or (tables and path.stem in ("corpus", "labels"))
        )
    return len(path.parts) == 2 and path.parts[0] in folders and tables


def _write_hub(dataset: Dataset, root: Path, ext: str) -> None:
    write_table(root / f"corpus.{ext}", _corpus_rows(dataset.corpus), CORPUS_SCHEMA)
    for folder in ("queries", "qrels"):
        (root / folder).mkdir()
    for name, split in dataset.splits.items():
        if not name or name.startswith(".") or "/" in name or os.sep in name:
            raise DataError(f"split name {name!r} cannot be a file name; rename the split")
        queries = ({"_id": qid, "text": text} for qid, text in split.queries.items())
        write_table(root / "queries" / f"{name}.{ext}", queries, QUERIES_SCHEMA)
        write_table(root / "qrels" / f"{name}.{ext}", _qrels_rows(split.qrels), QRELS_SCHEMA)
    if dataset.labels:
        rows = (
            {"query_id": qid, "label": label}
            for qid, labels in dataset.labels.items()
            for label in labels
        )
        write_table(root / f"labels.{ext}", rows, LABELS_SCHEMA)
    if dataset.relevance_level != 1 or dataset.notes or dataset.language != "en":
        meta = {
            "relevance_level": dataset.relevance_level,
            "notes": list(dataset.notes),
            "language": dataset.language,
        }
        write_bytes_atomic(root / META_FILE, [json.dumps(meta, indent=1).encode() + b"\n"])


def _corpus_rows(corpus: Corpus) -> Iterator[dict[str, Any]]:
    """One row per passage, documents in corpus order."""
    for document in corpus:
        total = len(document.passages)
        if total == 0:
            raise DataError(
                f"document {document.id!r} has no passages; the hub layout stores one row per "
                "passage, so drop the document or give it a passage"
            )
        for i, p in enumerate(document.passages):
            if p.position != i or p.doc_id != document.id:
                raise DataError(
                    f"passage {p.id!r} has doc_id {p.doc_id!r} and position {p.position}; "
                    f"as passage {i} of document {document.id!r} it needs doc_id "
                    f"{document.id!r} and position {i}"
                )
            yield {
                "_id": p.id,
                "text": p.text,
                "title": document.title,
                "doc_id": document.id,
                "paragraph_no": i,
                "total_paragraphs": total,
                "is_candidate": p.is_candidate,
            }


def _qrels_rows(qrels: Qrels) -> Iterator[dict[str, Any]]:
    for qid, judged in qrels.items():
        for item, grade in judged.items():
            grade = as_grade(grade, f"qrels of query {qid!r}")
            yield {"query_id": qid, "corpus_id": item, "score": grade}
