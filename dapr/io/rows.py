"""Reading and writing the rows of JSON lines and parquet files; checks of their fields.

Rows come numbered (lines from 1, blank ones skipped; parquet rows from 1) so that every
:class:`DataError` names the line or row at fault, what is wrong and how to fix it.
"""

from __future__ import annotations

import gzip
import json
import numbers
import zlib
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dapr.data import Qrels, Queries
from dapr.errors import DaprError, DataError
from dapr.io.files import fsync, read_at_most

Rows = Generator[tuple[int, dict[str, Any]], None, None]
"""Numbered rows of a file; a generator, so that ``contextlib.closing`` can end the reading."""
_BATCH_ROWS = 4096
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


# --------------------------------------------------------------------------- row sources


def text_lines(
    path: Path, encoding: str = "utf-8", newline: str | None = None
) -> Iterator[tuple[int, str]]:
    """Numbered non-blank lines of a text file, gzip-compressed when its name ends in ``.gz``.

    ``newline`` is as for :func:`open`: ``"\\n"`` keeps a lone ``\\r`` inside a line.
    """
    path = Path(path)
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        handle = opener(path, "rt", encoding=encoding, newline=newline)  # noqa: SIM115
    except FileNotFoundError:
        raise DataError(f"{path}: no such file; check the path") from None
    with handle:
        n = 0
        try:
            for n, line in enumerate(handle, 1):
                if line and not line.isspace():
                    yield n, line
        except UnicodeDecodeError:
            bad = _undecodable_line(path, encoding) or n + 1
            raise DataError(
                f"{path}:{bad}: not {encoding.upper()} text; save the file as {encoding.upper()}"
            ) from None
        except (gzip.BadGzipFile, EOFError, zlib.error) as e:
            raise DataError(
                f"{path}: not a complete gzip file ({e}); download it again or decompress it"
            ) from None


def _undecodable_line(path: Path, encoding: str) -> int | None:
    """The number of the first line that does not decode (text is decoded in blocks, so the
    line being read when decoding failed may come before it)."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as handle:
            for n, raw in enumerate(handle, 1):
                try:
                    raw.decode(encoding)
                except UnicodeDecodeError:
                    return n
    except (OSError, EOFError, zlib.error):
        return None
    return None


def jsonl_rows(path: Path) -> Rows:
    """Numbered JSON objects, one per non-blank line (``*.gz`` too)."""
    for n, line in text_lines(path):
        yield n, json_object(line, f"{path}:{n}")


def json_problem(error: json.JSONDecodeError | RecursionError, line: bool = True) -> str:
    """What :mod:`json` found wrong, in words: ``Expecting value at line 2 column 5`` (without
    ``line``: the column only); its messages that end in "at" ("Unterminated string starting
    at") get no second one. A RecursionError: nesting deeper than Python's recursion allows."""
    if isinstance(error, RecursionError):
        return "nested too deeply to read"
    where = f"line {error.lineno} column {error.colno}" if line else f"column {error.colno}"
    return f"{error.msg}{' ' if error.msg.endswith(' at') else ' at '}{where}"


def json_file(path: Path, limit: int, fix: str, error: type[DaprError] = DataError) -> Any:
    """The JSON value of the file at ``path``, read at most ``limit`` bytes whatever the file
    kind; ``error`` (one line ending in ``fix``) when it is larger, not UTF-8 or not JSON."""
    data = read_at_most(path, limit)
    if len(data) > limit:
        raise error(f"{path}: more than {limit:,} bytes; {fix}")
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text (byte {e.start}); {fix}") from None
    except (json.JSONDecodeError, RecursionError) as e:
        raise error(f"{path}: not valid JSON ({json_problem(e)}); {fix}") from None


def json_object(line: str, at: str) -> dict[str, Any]:
    """One line of a JSON lines file (found at ``at``) parsed, checked to be an object."""
    try:
        row = json.loads(line)
    except (json.JSONDecodeError, RecursionError) as e:
        raise DataError(
            f"{at}: invalid JSON ({json_problem(e, line=False)}); write one JSON object per line"
        ) from None
    if not isinstance(row, dict):
        raise DataError(
            f"{at}: expected a JSON object, got {show(row)}; write one JSON object per line"
        )
    return row


def _parquet_rows(path: Path) -> Rows:
    """Numbered rows (from 1) of a parquet file, read in batches. Without pre-buffering Arrow
    holds one batch, not the whole compressed file (1.2 GB for an NQ-sized corpus)."""
    n = 0
    try:
        with pq.ParquetFile(path, pre_buffer=False) as parquet:
            for batch in parquet.iter_batches(batch_size=_BATCH_ROWS):
                for row in batch.to_pylist():
                    n += 1
                    yield n, row
    except (pa.ArrowException, OSError) as e:
        if isinstance(e, FileNotFoundError):
            raise DataError(f"{path}: no such file; check the path") from None
        raise _unreadable_parquet(path, e) from None


def parquet_columns(path: Path) -> list[str]:
    """The column names of a parquet file."""
    try:
        return pq.read_schema(path).names
    except (pa.ArrowException, OSError) as e:
        raise _unreadable_parquet(path, e) from None


def parquet_row_count(path: Path) -> int:
    """The number of rows of a parquet file, from its metadata."""
    try:
        with pq.ParquetFile(path) as parquet:
            return parquet.metadata.num_rows
    except (pa.ArrowException, OSError) as e:
        raise _unreadable_parquet(path, e) from None


def _unreadable_parquet(path: Path, error: BaseException) -> DataError:
    return DataError(
        f"{path}: not a readable parquet file ({' '.join(str(error).split())}); "
        "rewrite it with dapr.datasets.write_dataset"
    )


def table_rows(path: Path) -> Rows:
    """Numbered rows of a parquet (by its suffix) or JSON lines file."""
    return _parquet_rows(path) if path.suffix == ".parquet" else jsonl_rows(path)


def row_location(path: Path, n: int) -> str:
    """Where row ``n`` of a file is, for error messages."""
    return f"{path}: row {n}" if path.suffix == ".parquet" else f"{path}:{n}"


# --------------------------------------------------------------------------- row sink


def write_table(path: Path, rows: Iterable[dict[str, Any]], schema: pa.Schema) -> None:
    """Stream rows to a JSON lines or parquet file (parquet: one row group per batch)."""
    if path.suffix == ".jsonl":
        with path.open("w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    else:
        with pq.ParquetWriter(path, schema) as writer:
            for batch in _batches(rows, _BATCH_ROWS):
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
    fsync(path)


def _batches(rows: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


# --------------------------------------------------------------------------- field checks


def show(value: object) -> str:
    """A short one-line rendering of a bad value."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_type(value: Any, kind: type, at: str, name: str, needs: str) -> Any:
    """``value`` if it is of type ``kind`` (a bool is not an integer here)."""
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    raise DataError(f"{at}: field {name!r} must be {_KINDS[kind]}, got {show(value)}; {needs}")


def required_field(
    row: dict[str, Any], key: str, kind: type, at: str, needs: str, prefix: str = ""
) -> Any:
    """``row[key]`` checked to be of type ``kind``; ``prefix`` locates nested fields."""
    if key not in row:
        raise DataError(f"{at}: missing field '{prefix}{key}'; {needs}")
    return check_type(row[key], kind, at, prefix + key, needs)


def required_id(row: dict[str, Any], key: str, at: str, needs: str, prefix: str = "") -> str:
    """A :func:`required_field` string that can be a column of a TREC run file: not empty and
    free of whitespace."""
    value = required_field(row, key, str, at, needs, prefix)
    if value.split() != [value]:
        raise DataError(
            f"{at}: field '{prefix}{key}' {value!r} is empty or contains whitespace; ids become "
            "columns of TREC run files, which whitespace separates, so rename it"
        )
    return value


def optional_field(
    row: dict[str, Any], key: str, kind: type, at: str, needs: str, default: Any
) -> Any:
    """``row[key]`` checked like :func:`required_field`, or ``default`` when absent or null."""
    if row.get(key) is None:
        return default
    return check_type(row[key], kind, at, key, needs)


def parse_number(text: str, kind: type, at: str, name: str) -> Any:
    """``kind(text)`` (``int`` or ``float``); a :class:`DataError` naming field ``name`` at ``at``
    if it is not one."""
    try:
        return kind(text)
    except ValueError:
        raise DataError(
            f"{at}: field {name!r} must be {_KINDS[kind]}, got {text!r}; write a valid {name}"
        ) from None


def as_grade(value: object, at: str) -> int:
    """``value`` as a relevance grade: an integer (not a bool), else a :class:`DataError`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise DataError(f"{at}: grade must be an integer, got {show(value)}; use integer grades")
    return int(value)


def check_tokens(values: list[str], what: str, path: Path) -> None:
    """Every value is non-empty and free of whitespace (a TREC column)."""
    if all(values) and len("".join("".join(values).split())) == sum(map(len, values)):
        return
    bad = next(v for v in values if v.split() != [v])
    raise DataError(
        f"{path}: {what} {bad!r} is empty or contains whitespace; TREC files separate "
        "columns by whitespace, so rename it"
    )


def blank_or_spaced(ids: pa.Array) -> bool:
    """Whether any of ``ids`` would fail :func:`check_tokens` (the same rule, in pyarrow)."""
    return bool(pc.any(pc.match_substring_regex(ids, _BLANK_OR_SPACE)).as_py())


# --------------------------------------------------------------------------- queries and qrels


def query_text(
    row: dict[str, Any], key: str, qid: str, at: str, needs: str, prefix: str = ""
) -> str:
    """The text of query ``qid``, checked to be a string that is not blank."""
    text = required_field(row, key, str, at, needs, prefix)
    if not text.strip():
        raise DataError(
            f"{at}: field '{prefix}{key}' of query {qid!r} is empty; give the query its text "
            "or remove the query (and its judgements)"
        )
    return text


def add_query(queries: Queries, qid: str, text: str, at: str, name: str) -> None:
    """Add query ``qid``; a :class:`DataError` if an earlier row gave it another text."""
    if queries.setdefault(qid, text) != text:
        raise DataError(
            f"{at}: field {name!r} differs from an earlier row for query {qid!r}; "
            "give each query id a single text"
        )


MAX_GRADE = 2**31 - 1
"""The largest grade trec_eval (a C int) holds."""


def judge(
    qrels: Qrels, qid: str, item: str, grade: int, at: str | None = None, trec: bool = False
) -> None:
    """Record a judgement. A grade is from 0 (not relevant) to :data:`MAX_GRADE`; a TREC qrels
    file (``trec``) may also grade down to ``-MAX_GRADE`` (trec_eval's judged non-relevant,
    as ClueWeb's -2 for spam). When a pair is judged more than once, the highest grade wins (a
    builder merging the judgements of several annotators); a file of judgements, whose row is
    ``at``, may judge a pair once."""
    where = at or f"query {qid!r}, item {item!r}"
    if not (-MAX_GRADE if trec else 0) <= grade <= MAX_GRADE:
        raise DataError(
            f"{where}: grade {grade} is out of range; grades go from 0 (not relevant) up to "
            f"{MAX_GRADE:,} (higher is more relevant)"
        )
    judged = qrels.setdefault(qid, {})
    before = judged.get(item)
    if at is not None and before is not None and before != grade:
        raise DataError(
            f"{at}: query {qid!r} judges {item!r} again, with grade {grade} after {before}; "
            "keep one judgement per query and item"
        )
    judged[item] = grade if before is None else max(grade, before)


def read_queries(path: Path) -> Queries:
    """Queries from a file of their own: JSON lines with ``_id`` (BEIR) or ``id`` and ``text``,
    or, for any other name, tab-separated ``id<TAB>text`` lines (``*.gz`` either way)."""
    path = Path(path)
    queries: Queries = {}
    if path.name.removesuffix(".gz").endswith(".jsonl"):
        needs = 'write one {"_id": ..., "text": ...} object per line'
        for n, row in jsonl_rows(path):
            at = f"{path}:{n}"
            qid = required_id(row, "_id" if "_id" in row else "id", at, needs)
            add_query(queries, qid, query_text(row, "text", qid, at, needs), at, "text")
        return queries
    for n, line in text_lines(path):
        at = f"{path}:{n}"
        qid, sep, text = line.rstrip("\r\n").partition("\t")
        if not sep or qid.split() != [qid] or not text.strip():
            raise DataError(f"{at}: expected query_id<TAB>text; write one query per line")
        add_query(queries, qid, text.strip(), at, "text")
    return queries
