"""Datasets and runs on disk: the hub layout, the original DAPR dump, and TREC run/qrels files.

Hub layout, one directory per dataset, ``{ext}`` being ``jsonl`` or ``parquet``::

    corpus.{ext}            _id, text, title, doc_id, paragraph_no, total_paragraphs, is_candidate
    queries/{split}.{ext}   _id, text
    qrels/{split}.{ext}     query_id, corpus_id, score

Corpus rows are passages; the rows of a document are contiguous and ``paragraph_no`` counts
0, 1, 2, ... inside it. The original DAPR dump is ``corpus.jsonl`` (one document per row, with its
``chunks``) and ``{train,dev,test}.jsonl`` (a query and its judged chunks per row).

Corpora are read lazily: every pass over ``dataset.corpus`` re-reads the file, so a malformed
corpus row raises :class:`DataError` while iterating. Queries and qrels are read eagerly. When
a (query, item) pair is judged more than once, the highest grade wins.
"""

from __future__ import annotations

import contextlib
import json
import numbers
import os
import secrets
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from dapr.data import SPLITS, Corpus, Dataset, Document, Passage, Qrels, Queries, Run, Split
from dapr.errors import DataError

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

ALL_SPLITS = "all"
"""Name of the published hub data's qrels file that unites every split."""
_BATCH_ROWS = 4096
_LINES_PER_BLOCK = 1 << 20
_CORPUS_NEEDS = "every corpus row needs _id, text, title, doc_id, paragraph_no"
_QUERIES_NEEDS = "every query row needs _id and text"
_QRELS_NEEDS = "every qrels row needs query_id, corpus_id and an integer score"
_DUMP_CORPUS_NEEDS = "every corpus row needs id, title and chunks [{id, text}]"
_DUMP_SPLIT_NEEDS = (
    "every row needs query {id, text} and judged_chunks "
    "[{chunk {id, text}, judgement (integer), belonging_doc {id, title, chunks}}]"
)
_RUN_COLUMNS = ("qid", "q0", "docid", "rank", "score", "system")
_RunColumns = tuple[np.ndarray, pa.Array, np.ndarray, pa.Array, np.ndarray]
"""Query codes, query ids, item codes, item ids and scores of a run's rows."""
_BLANK_OR_SPACE = (  # an empty id, or one holding a character that str.split() splits on
    r"^$|[\t-\r\x1c- \x85\xa0\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]"
)
_KINDS = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    list: "a list",
    dict: "an object",
}


# --------------------------------------------------------------------------- public API


def read_dataset(path: Path, name: str | None = None) -> Dataset:
    """A dataset directory in the hub layout (JSON lines or parquet) or the original DAPR dump."""
    path = Path(path)
    layout = _detect_layout(path)
    if layout == "dump":
        return read_dump(path, name)
    return _read_hub(path, layout, name or _dir_name(path))


def read_dump(path: Path, name: str | None = None) -> Dataset:
    """A directory in the original DAPR dump format; splits are read now, the corpus lazily.

    Documents that appear only as the ``belonging_doc`` of a judged chunk follow the corpus
    documents, in the order they are first seen (train, dev, then test).
    """
    path = Path(path)
    corpus_file = path / "corpus.jsonl"
    split_files = {s: path / f"{s}.jsonl" for s in SPLITS if (path / f"{s}.jsonl").is_file()}
    if not corpus_file.is_file() and not split_files:
        raise DataError(
            f"{path}: no corpus.jsonl and no train/dev/test.jsonl; "
            "a DAPR dump directory needs at least one of them"
        )
    extra: dict[str, Document] = {}
    splits = {s: _read_dump_split(f, extra) for s, f in split_files.items()}
    corpus = Corpus(partial(_dump_documents, corpus_file, extra))
    return Dataset(name or _dir_name(path), corpus, splits)


def write_dataset(dataset: Dataset, out: Path, format: Format = "jsonl") -> None:
    """Write ``dataset`` in the hub layout; ``out`` appears (or is replaced) only once complete."""
    if format not in FORMATS:
        raise DataError(f"unknown dataset format {format!r}; choose 'jsonl' or 'parquet'")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise DataError(f"{out}: exists and is not a directory; remove it or choose another path")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_sibling(out, ".tmp")
    tmp.mkdir()
    try:
        _write_hub(dataset, tmp, format)
        _swap_in(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_trec_run(run: Run, path: Path, system: str) -> None:
    """Write ``qid Q0 docid rank score system`` lines in the run's order, ranks from 1.

    Scores are written in the shortest form that reads back to the same float.
    """
    path = Path(path)
    queries, vocab = _strings(run.queries), _strings(run.vocab)
    used = np.zeros(len(vocab), dtype=bool)
    used[run.items] = True
    _check_tokens([str(system)], "system name", path)
    _check_tokens(queries, "query id", path)
    _check_tokens(np.array(vocab, dtype=object)[used].tolist(), "item id", path)
    _write_bytes(path, _run_lines(run, queries, vocab, str(system)))


def read_trec_run(path: Path) -> Run:
    """A TREC run file, ranked by score; tied items in the order they first appear in the file."""
    path = Path(path)
    columns = _read_run_columns_fast(path) or _read_run_columns(path)
    return _build_run(path, *columns)


def write_trec_qrels(qrels: Qrels, path: Path) -> None:
    """Write ``qid 0 docid grade`` lines, in the qrels' order."""
    path = Path(path)

    def chunks() -> Iterator[bytes]:
        for qid, judged in qrels.items():
            _check_tokens([str(qid), *map(str, judged)], "id", path)
            lines = (
                f"{qid} 0 {item} {_as_grade(grade, f'{path}: query {qid!r}')}\n"
                for item, grade in judged.items()
            )
            yield "".join(lines).encode()

    _write_bytes(path, chunks())


def read_trec_qrels(path: Path) -> Qrels:
    """A TREC qrels file: ``qid iteration docid grade`` lines with integer grades."""
    path = Path(path)
    qrels: Qrels = {}
    for n, line in _lines(path):
        parts = line.split()
        if len(parts) != 4:
            raise DataError(
                f"{path}:{n}: expected 4 columns (qid 0 docid grade), got {len(parts)}; "
                "write one judgement per line, columns separated by whitespace"
            )
        grade = _parse_number(parts[3], int, f"{path}:{n}", "grade")
        _judge(qrels, parts[0], parts[2], grade)
    return qrels


# --------------------------------------------------------------------------- layout detection


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
    with contextlib.closing(_jsonl_rows(corpus)) as rows:
        first = next(rows, None)
    if first is None:
        return "dump" if has_dump_splits else "jsonl"
    n, row = first
    if "chunks" in row:
        return "dump"
    if "_id" in row:
        return "jsonl"
    raise DataError(
        f"{corpus}:{n}: missing field '_id' (hub layout) or 'chunks' (DAPR dump); {_CORPUS_NEEDS}"
    )


def _dir_name(path: Path) -> str:
    return path.name or path.resolve().name


# --------------------------------------------------------------------------- row sources


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Numbered non-blank lines of a UTF-8 text file."""
    try:
        handle = path.open(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: no such file; check the path") from None
    with handle:
        n = 0
        try:
            for n, line in enumerate(handle, 1):
                if line and not line.isspace():
                    yield n, line
        except UnicodeDecodeError:
            raise DataError(f"{path}:{n + 1}: not UTF-8 text; save the file as UTF-8") from None


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Numbered JSON objects, one per non-blank line."""
    for n, line in _lines(path):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(
                f"{path}:{n}: invalid JSON ({e.msg} at column {e.colno}); "
                "write one JSON object per line"
            ) from None
        if not isinstance(row, dict):
            raise DataError(
                f"{path}:{n}: expected a JSON object, got {_show(row)}; "
                "write one JSON object per line"
            )
        yield n, row


def _parquet_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Numbered rows (from 1) of a parquet file, read in batches."""
    n = 0
    try:
        with pq.ParquetFile(path) as parquet:
            for batch in parquet.iter_batches(batch_size=_BATCH_ROWS):
                for row in batch.to_pylist():
                    n += 1
                    yield n, row
    except (pa.ArrowException, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise DataError(f"{path}: no such file; check the path") from None
        raise DataError(
            f"{path}: not a readable parquet file ({_one_line(e)}); "
            "rewrite it with dapr.io.write_dataset"
        ) from None


def _rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    return _parquet_rows(path) if path.suffix == ".parquet" else _jsonl_rows(path)


def _at(path: Path, n: int) -> str:
    """Where row ``n`` of a file is, for error messages."""
    return f"{path}: row {n}" if path.suffix == ".parquet" else f"{path}:{n}"


# --------------------------------------------------------------------------- field checks


def _show(value: object) -> str:
    """A short one-line rendering of a bad value."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def _check(value: Any, kind: type, at: str, name: str, needs: str) -> Any:
    """``value`` if it is of type ``kind`` (a bool is not an integer here)."""
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    raise DataError(f"{at}: field {name!r} must be {_KINDS[kind]}, got {_show(value)}; {needs}")


def _field(row: dict[str, Any], key: str, kind: type, at: str, needs: str, prefix: str = "") -> Any:
    """``row[key]`` checked to be of type ``kind``; ``prefix`` locates nested fields."""
    if key not in row:
        raise DataError(f"{at}: missing field '{prefix}{key}'; {needs}")
    return _check(row[key], kind, at, prefix + key, needs)


def _optional(row: dict[str, Any], key: str, kind: type, at: str, needs: str, default: Any) -> Any:
    """``row[key]`` checked like :func:`_field`, or ``default`` when absent or null."""
    if row.get(key) is None:
        return default
    return _check(row[key], kind, at, key, needs)


def _parse_number(text: str, kind: type, at: str, name: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise DataError(
            f"{at}: field {name!r} must be {_KINDS[kind]}, got {text!r}; write a valid {name}"
        ) from None


def _as_grade(value: object, at: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise DataError(f"{at}: grade must be an integer, got {_show(value)}; use integer grades")
    return int(value)


def _add_query(queries: Queries, qid: str, text: str, at: str, name: str) -> None:
    if queries.setdefault(qid, text) != text:
        raise DataError(
            f"{at}: field {name!r} differs from an earlier row for query {qid!r}; "
            "give each query id a single text"
        )


def _judge(qrels: Qrels, qid: str, item: str, grade: int) -> None:
    judged = qrels.setdefault(qid, {})
    judged[item] = max(grade, judged.get(item, grade))


# --------------------------------------------------------------------------- hub layout: read


def _read_hub(path: Path, ext: str, name: str) -> Dataset:
    corpus_files = _corpus_files(path, ext)
    if ext == "parquet":
        for corpus_file in corpus_files:
            _check_parquet_columns(corpus_file, ("_id", "text", "title", "doc_id", "paragraph_no"))
    splits = {}
    for split in _hub_split_names(path, ext):
        qrels_file = path / "qrels" / f"{split}.{ext}"
        queries = _read_hub_queries(path / "queries" / f"{split}.{ext}")
        qrels = _read_hub_qrels(qrels_file) if qrels_file.is_file() else {}
        splits[split] = Split(queries, qrels)
    return Dataset(name, Corpus(partial(_hub_documents, corpus_files)), splits)


def _corpus_files(path: Path, ext: str) -> list[Path]:
    """``corpus.{ext}``, or the shards ``corpus/*.{ext}`` (as published on the hub) by name."""
    single = path / f"corpus.{ext}"
    return [single] if single.is_file() else sorted((path / "corpus").glob(f"*.{ext}"))


def _check_parquet_columns(path: Path, required: tuple[str, ...]) -> None:
    try:
        names = pq.read_schema(path).names
    except (pa.ArrowException, OSError) as e:
        raise DataError(
            f"{path}: not a readable parquet file ({_one_line(e)}); "
            "rewrite it with dapr.io.write_dataset"
        ) from None
    for column in required:
        if column not in names:
            raise DataError(f"{path}: missing column {column!r}; {_CORPUS_NEEDS}")


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
    for n, row in _rows(path):
        at = _at(path, n)
        qid = _field(row, "_id", str, at, _QUERIES_NEEDS)
        _add_query(queries, qid, _field(row, "text", str, at, _QUERIES_NEEDS), at, "text")
    return queries


def _read_hub_qrels(path: Path) -> Qrels:
    qrels: Qrels = {}
    for n, row in _rows(path):
        at = _at(path, n)
        qid = _field(row, "query_id", str, at, _QRELS_NEEDS)
        item = _field(row, "corpus_id", str, at, _QRELS_NEEDS)
        _judge(qrels, qid, item, _field(row, "score", int, at, _QRELS_NEEDS))
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


def _hub_documents(paths: list[Path]) -> Iterator[Document]:
    """The documents of hub corpus files, grouping consecutive rows by ``doc_id``."""
    pending: _PendingDocument | None = None
    seen: set[str] = set()
    for path, n, row in ((p, n, row) for p in paths for n, row in _rows(p)):
        at = _at(path, n)
        passage, title, total = _hub_passage(row, at)
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


def _hub_passage(row: dict[str, Any], at: str) -> tuple[Passage, str, int | None]:
    """A corpus row as its passage, its document's title and its ``total_paragraphs``."""
    passage = Passage(
        id=_field(row, "_id", str, at, _CORPUS_NEEDS),
        doc_id=_field(row, "doc_id", str, at, _CORPUS_NEEDS),
        position=_field(row, "paragraph_no", int, at, _CORPUS_NEEDS),
        text=_field(row, "text", str, at, _CORPUS_NEEDS),
        is_candidate=_optional(row, "is_candidate", bool, at, _CORPUS_NEEDS, True),
    )
    title = _field(row, "title", str, at, _CORPUS_NEEDS)
    return passage, title, _optional(row, "total_paragraphs", int, at, _CORPUS_NEEDS, None)


# --------------------------------------------------------------------------- hub layout: write


def _write_hub(dataset: Dataset, root: Path, ext: str) -> None:
    _write_table(root / f"corpus.{ext}", _corpus_rows(dataset.corpus), CORPUS_SCHEMA)
    for folder in ("queries", "qrels"):
        (root / folder).mkdir()
    for name, split in dataset.splits.items():
        if not name or name.startswith(".") or "/" in name or os.sep in name:
            raise DataError(f"split name {name!r} cannot be a file name; rename the split")
        queries = ({"_id": qid, "text": text} for qid, text in split.queries.items())
        _write_table(root / "queries" / f"{name}.{ext}", queries, QUERIES_SCHEMA)
        _write_table(root / "qrels" / f"{name}.{ext}", _qrels_rows(split.qrels), QRELS_SCHEMA)
    _fsync(root)


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
            grade = _as_grade(grade, f"qrels of query {qid!r}")
            yield {"query_id": qid, "corpus_id": item, "score": grade}


def _write_table(path: Path, rows: Iterable[dict[str, Any]], schema: pa.Schema) -> None:
    """Stream rows to a JSON lines or parquet file (parquet: one row group per batch)."""
    if path.suffix == ".jsonl":
        with path.open("w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    else:
        with pq.ParquetWriter(path, schema) as writer:
            for batch in _batches(rows, _BATCH_ROWS):
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
    _fsync(path)


def _batches(rows: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


# --------------------------------------------------------------------------- DAPR dump


def _dump_documents(corpus_file: Path, extra: dict[str, Document]) -> Iterator[Document]:
    """Documents of ``corpus.jsonl``, then the ``extra`` ones it does not contain."""
    seen: set[str] = set()
    rows = _jsonl_rows(corpus_file) if corpus_file.is_file() else iter(())
    for n, row in rows:
        document = _dump_document(row, f"{corpus_file}:{n}", _DUMP_CORPUS_NEEDS)
        if document.id in seen:
            raise DataError(
                f"{corpus_file}:{n}: field 'id' {document.id!r} repeats an earlier document; "
                "give every document a unique id"
            )
        seen.add(document.id)
        yield document
    for document in extra.values():
        if document.id not in seen:
            yield document


def _dump_document(obj: dict[str, Any], at: str, needs: str, prefix: str = "") -> Document:
    """A dump document (``id``, ``title``, ``chunks``, optional ``candidate_chunk_ids``)."""
    doc_id = _field(obj, "id", str, at, needs, prefix)
    title = _field(obj, "title", str, at, needs, prefix)
    chunks = _field(obj, "chunks", list, at, needs, prefix)
    candidates = _candidate_ids(obj, at, needs, prefix)
    passages = []
    for i, chunk in enumerate(chunks):
        where = f"{prefix}chunks[{i}]"
        _check(chunk, dict, at, where, needs)
        chunk_id = _field(chunk, "id", str, at, needs, where + ".")
        text = _field(chunk, "text", str, at, needs, where + ".")
        is_candidate = candidates is None or chunk_id in candidates
        passages.append(Passage(chunk_id, doc_id, i, text, is_candidate))
    if candidates is not None:
        unknown = candidates - {p.id for p in passages}
        if unknown:
            raise DataError(
                f"{at}: field '{prefix}candidate_chunk_ids' names {_show(min(unknown))}, which is "
                f"not a chunk of document {doc_id!r}; list only ids from its chunks"
            )
    return Document(doc_id, title, tuple(passages))


def _candidate_ids(obj: dict[str, Any], at: str, needs: str, prefix: str) -> set[str] | None:
    """The ids in ``candidate_chunk_ids``, or None when every chunk is a candidate."""
    ids = obj.get("candidate_chunk_ids")
    if ids is None:
        return None
    name = prefix + "candidate_chunk_ids"
    _check(ids, list, at, name, needs)
    return {_check(i, str, at, name, needs) for i in ids}


def _read_dump_split(path: Path, extra: dict[str, Document]) -> Split:
    """Queries and qrels of a dump split file; unseen ``belonging_doc``s are added to ``extra``."""
    needs = _DUMP_SPLIT_NEEDS
    queries: Queries = {}
    qrels: Qrels = {}
    for n, row in _jsonl_rows(path):
        at = f"{path}:{n}"
        query = _field(row, "query", dict, at, needs)
        qid = _field(query, "id", str, at, needs, "query.")
        _add_query(queries, qid, _field(query, "text", str, at, needs, "query."), at, "query.text")
        for i, judged in enumerate(_field(row, "judged_chunks", list, at, needs)):
            prefix = f"judged_chunks[{i}]."
            _check(judged, dict, at, prefix[:-1], needs)
            chunk = _field(judged, "chunk", dict, at, needs, prefix)
            chunk_id = _field(chunk, "id", str, at, needs, prefix + "chunk.")
            _judge(qrels, qid, chunk_id, _field(judged, "judgement", int, at, needs, prefix))
            doc = _field(judged, "belonging_doc", dict, at, needs, prefix)
            doc_id = _field(doc, "id", str, at, needs, prefix + "belonging_doc.")
            if doc_id not in extra:
                extra[doc_id] = _dump_document(doc, at, needs, prefix + "belonging_doc.")
    return Split(queries, qrels)


# --------------------------------------------------------------------------- TREC runs


def _read_run_columns_fast(path: Path) -> _RunColumns | None:
    """Columns of a single-space separated run via pyarrow's CSV reader; None if it cannot.

    Ids that the line-by-line reader would split (blank, or holding other whitespace) also give
    None, so both readers accept exactly the same files.
    """
    types = {c: pa.string() for c in _RUN_COLUMNS}
    types.update(rank=pa.int64(), score=pa.float64())
    try:
        table = pa_csv.read_csv(
            path,
            read_options=pa_csv.ReadOptions(column_names=list(_RUN_COLUMNS)),
            parse_options=pa_csv.ParseOptions(
                delimiter=" ", quote_char=False, double_quote=False, escape_char=False
            ),
            convert_options=pa_csv.ConvertOptions(
                column_types=types,
                null_values=[],
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except (pa.ArrowException, OSError):
        return None
    if any(table.column(c).null_count for c in _RUN_COLUMNS):
        return None
    q_codes, queries = _encode(table.column("qid"))
    codes, vocab = _encode(table.column("docid"))
    if _blank_or_spaced(queries) or _blank_or_spaced(vocab):
        return None
    return q_codes, queries, codes, vocab, table.column("score").to_numpy()


def _read_run_columns(path: Path) -> _RunColumns:
    """Columns of a run with any whitespace, checking every line; errors name the line."""
    qids, items, scores = [], [], []
    for n, line in _lines(path):
        parts = line.split()
        if len(parts) != 6:
            raise DataError(
                f"{path}:{n}: expected 6 columns (qid Q0 docid rank score system), got "
                f"{len(parts)}; write one ranked item per line, columns separated by whitespace"
            )
        _parse_number(parts[3], int, f"{path}:{n}", "rank")
        scores.append(_parse_number(parts[4], float, f"{path}:{n}", "score"))
        qids.append(parts[0])
        items.append(parts[2])
    q_codes, queries = _encode(_chunked(qids))
    codes, vocab = _encode(_chunked(items))
    return q_codes, queries, codes, vocab, np.array(scores, dtype=np.float64)


def _chunked(strings: list[str]) -> pa.ChunkedArray:
    return pa.chunked_array([pa.array(strings, type=pa.large_string())])


def _blank_or_spaced(ids: pa.Array) -> bool:
    return bool(pc.any(pc.match_substring_regex(ids, _BLANK_OR_SPACE)).as_py())


def _build_run(
    path: Path,
    q_codes: np.ndarray,
    query_ids: pa.Array,
    codes: np.ndarray,
    item_ids: pa.Array,
    scores: np.ndarray,
) -> Run:
    """A Run from coded rows; queries keep their first-seen order."""
    queries = np.array(query_ids.to_pylist(), dtype=object)
    vocab = np.array(item_ids.to_pylist(), dtype=object)
    if not len(queries):
        return Run.from_lists([], [], [], vocab)
    if not _is_ranked(q_codes, scores):
        order = np.lexsort((-scores, q_codes))  # stable: tied rows keep their file order
        q_codes, codes, scores = q_codes[order], codes[order], scores[order]
    _check_no_duplicates(path, q_codes, codes, queries, vocab)
    bounds = np.cumsum(np.bincount(q_codes, minlength=len(queries)))[:-1]
    return Run.from_lists(queries, np.split(codes, bounds), np.split(scores, bounds), vocab)


def _encode(column: pa.ChunkedArray) -> tuple[np.ndarray, pa.Array]:
    """Integer codes and the distinct values, in first-seen order."""
    chunks = pc.dictionary_encode(column).chunks  # the chunks share one dictionary
    if not chunks:
        return np.zeros(0, dtype=np.int64), pa.array([], type=pa.string())
    codes = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in chunks])
    return codes.astype(np.int64), chunks[-1].dictionary


def _is_ranked(q_codes: np.ndarray, scores: np.ndarray) -> bool:
    """Whether rows come query by query, in order of first appearance, scores descending."""
    q_step = np.diff(q_codes)
    in_blocks = np.all((q_step == 0) | (q_step == 1))
    return bool(in_blocks and np.all((q_step > 0) | (np.diff(scores) <= 0)))


def _check_no_duplicates(
    path: Path, q_codes: np.ndarray, codes: np.ndarray, queries: np.ndarray, vocab: np.ndarray
) -> None:
    width = max(len(vocab), 1)
    keys = np.sort(q_codes * width + codes)
    repeated = np.flatnonzero(keys[1:] == keys[:-1])
    if len(repeated):
        q, item = divmod(int(keys[repeated[0]]), width)
        qid, docid = str(queries[q]), str(vocab[item])
        raise DataError(
            f"{path}:{_second_occurrence(path, qid, docid)}: field 'docid' {docid!r} appears "
            f"twice for query {qid!r}; rank each item at most once per query"
        )


def _second_occurrence(path: Path, qid: str, docid: str) -> int:
    seen = False
    for n, line in _lines(path):
        parts = line.split()
        if parts[0] == qid and parts[2] == docid:
            if seen:
                return n
            seen = True
    return 0


def _strings(values: np.ndarray) -> list[str]:
    listed = values.tolist()
    return listed if all(type(v) is str for v in listed) else [str(v) for v in listed]


def _check_tokens(values: list[str], what: str, path: Path) -> None:
    """Every value is non-empty and free of whitespace (a TREC column)."""
    if all(values) and len("".join("".join(values).split())) == sum(map(len, values)):
        return
    bad = next(v for v in values if v.split() != [v])
    raise DataError(
        f"{path}: {what} {bad!r} is empty or contains whitespace; TREC files separate "
        "columns by whitespace, so rename it"
    )


def _run_lines(run: Run, queries: list[str], vocab: list[str], system: str) -> Iterator[memoryview]:
    """The run's TREC lines as UTF-8, built column-wise a block of rows at a time."""
    lengths = np.diff(run.offsets)
    query_of_row = np.repeat(np.arange(len(queries)), lengths)
    rank = np.arange(len(run.items)) - np.repeat(run.offsets[:-1], lengths) + 1
    query_names = pa.array(queries, type=pa.large_string())
    item_names = pa.array(vocab, type=pa.large_string())
    for start in range(0, len(run.items), _LINES_PER_BLOCK):
        rows = slice(start, start + _LINES_PER_BLOCK)
        lines = pc.binary_join_element_wise(
            query_names.take(pa.array(query_of_row[rows])),
            pa.scalar("Q0", pa.large_string()),
            item_names.take(pa.array(run.items[rows])),
            pc.cast(pa.array(rank[rows]), pa.large_string()),
            pc.cast(pa.array(run.scores[rows], type=pa.float64()), pa.large_string()),
            pa.scalar(system + "\n", pa.large_string()),
            pa.scalar(" ", pa.large_string()),
        )
        yield _utf8_bytes(lines)


def _utf8_bytes(strings: pa.Array) -> memoryview:
    """The concatenated contents of a large_string array."""
    if len(strings) == 0:
        return memoryview(b"")
    _, offsets, data = strings.buffers()
    bounds = np.frombuffer(offsets, dtype=np.int64)
    bounds = bounds[strings.offset : strings.offset + len(strings) + 1]
    return memoryview(data)[bounds[0] : bounds[-1]]


# --------------------------------------------------------------------------- atomic files


def _temp_sibling(path: Path, suffix: str) -> Path:
    """An unused hidden name next to ``path``."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{suffix}")


def _write_bytes(path: Path, chunks: Iterable[bytes | memoryview]) -> None:
    """Write to a temporary sibling, then rename it over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_sibling(path, ".tmp")
    try:
        with tmp.open("xb") as handle:
            for chunk in chunks:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def _swap_in(new: Path, out: Path) -> None:
    """Rename directory ``new`` to ``out``, replacing an existing ``out`` only at the end."""
    if not out.exists():
        os.rename(new, out)
    else:
        old = new.with_name(new.name + ".old")
        os.rename(out, old)
        try:
            os.rename(new, out)
        except BaseException:
            os.rename(old, out)
            raise
        shutil.rmtree(old, ignore_errors=True)
    _fsync(out.parent)


def _fsync(path: Path) -> None:
    """Flush a written file or directory entry to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__: list[str] = [
    "CORPUS_SCHEMA",
    "FORMATS",
    "QRELS_SCHEMA",
    "QUERIES_SCHEMA",
    "read_dataset",
    "read_dump",
    "read_trec_qrels",
    "read_trec_run",
    "write_dataset",
    "write_trec_qrels",
    "write_trec_run",
]
