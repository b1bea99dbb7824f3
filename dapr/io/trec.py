"""TREC run and qrels files.

A run has ``qid Q0 docid rank score system`` lines, qrels have ``qid iteration docid grade`` lines;
columns are separated by whitespace, so ids must be non-empty and free of it. A run file may
open with a header of ``# key: value`` lines (what made it: ``dapr runs export`` writes one),
which dapr reads with :func:`read_run_header` and skips when it reads the run; trec_eval does not
(``grep -v '^#' run.trec`` removes it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from dapr.data import Qrels, Run
from dapr.errors import DataError
from dapr.io.files import write_bytes_atomic
from dapr.io.rows import as_grade, blank_or_spaced, check_tokens, judge, parse_number, text_lines

_LINES_PER_BLOCK = 1 << 20
_RUN_COLUMNS = ("qid", "q0", "docid", "rank", "score", "system")
_RunColumns = tuple[np.ndarray, pa.Array, np.ndarray, pa.Array, np.ndarray]
"""Query codes, query ids, item codes, item ids and scores of a run's rows."""


def write_trec_run(
    run: Run, path: Path, system: str, header: Mapping[str, object] | None = None
) -> None:
    """Write ``qid Q0 docid rank score system`` lines in the run's order, ranks from 1, after
    ``header`` as ``# key: value`` lines (values as JSON) when given.

    Scores are written in the shortest form that reads back to the same float; a NaN or
    infinite score is refused.
    """
    path = Path(path)
    check_run(run, path, system)
    queries, vocab = _strings(run.queries), _strings(run.vocab)
    if any("\n" in key or ":" in key for key in header or {}):
        raise DataError(f"{path}: a header key holds ':' or a line break; rename it")
    top = [f"# {key}: {json.dumps(value)}\n".encode() for key, value in (header or {}).items()]
    write_bytes_atomic(path, [*top, *_run_lines(run, queries, vocab, str(system))])


def read_run_header(path: Path) -> dict[str, object]:
    """The ``# key: value`` lines opening a run file (``{}`` without any)."""
    header: dict[str, object] = {}
    for n, line in _header_lines(Path(path)):
        key, sep, value = line[1:].strip().partition(": ")
        try:
            header[key] = json.loads(value) if sep else None
        except json.JSONDecodeError:
            raise DataError(
                f"{path}:{n}: header line is not '# key: <JSON value>'; fix or remove the line"
            ) from None
    return header


def _header_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The numbered ``#`` lines at the top of a run file."""
    for n, line in text_lines(path):
        if not line.startswith("#"):
            return
        yield n, line


def check_run(run: Run, path: Path, system: str) -> None:
    """A DataError naming ``path`` unless the run can be written there as a TREC run: ids and
    the system name without whitespace, finite scores."""
    queries, vocab = _strings(run.queries), _strings(run.vocab)
    used = np.zeros(len(vocab), dtype=bool)
    used[run.items] = True
    check_tokens([str(system)], "system name", path)
    check_tokens(queries, "query id", path)
    check_tokens(np.array(vocab, dtype=object)[used].tolist(), "item id", path)
    if (bad := run.not_finite()) is not None:
        query, item, score = bad
        raise DataError(
            f"{path}: system {system!r} gave item {item!r} of query {query!r} the score {score}; "
            "a run file holds finite scores only: fix the system (nothing was written)"
        )


def read_trec_run(path: Path) -> Run:
    """A TREC run file, ranked by score, tied items by descending id (as trec_eval ranks
    them, whatever their order in the file)."""
    path = Path(path)
    columns = _read_run_columns_fast(path) or _read_run_columns(path)
    if not np.isfinite(columns[4]).all():
        _raise_not_finite(path)
    return _build_run(path, *columns)


def write_trec_qrels(qrels: Qrels, path: Path) -> None:
    """Write ``qid 0 docid grade`` lines, in the qrels' order."""
    path = Path(path)

    def chunks() -> Iterator[bytes]:
        for qid, judged in qrels.items():
            check_tokens([str(qid), *map(str, judged)], "id", path)
            lines = (
                f"{qid} 0 {item} {as_grade(grade, f'{path}: query {qid!r}')}\n"
                for item, grade in judged.items()
            )
            yield "".join(lines).encode()

    write_bytes_atomic(path, chunks())


def read_trec_qrels(path: Path) -> Qrels:
    """A TREC qrels file: ``qid iteration docid grade`` lines with integer grades."""
    path = Path(path)
    qrels: Qrels = {}
    for n, line in text_lines(path):
        parts = line.split()
        if len(parts) != 4:
            raise DataError(
                f"{path}:{n}: expected 4 columns (qid 0 docid grade), got {len(parts)}; "
                "write one judgement per line, columns separated by whitespace"
            )
        grade = parse_number(parts[3], int, f"{path}:{n}", "grade")
        judge(qrels, parts[0], parts[2], grade, f"{path}:{n}", trec=True)
    return qrels


# --------------------------------------------------------------------------- runs


def _read_run_columns_fast(path: Path) -> _RunColumns | None:
    """Columns of a single-space separated run via pyarrow's CSV reader; None if it cannot.

    Ids that the line-by-line reader would split (blank, or holding other whitespace) also give
    None, so both readers accept exactly the same files.
    """
    types = {c: pa.string() for c in _RUN_COLUMNS}
    types.update(rank=pa.int64(), score=pa.float64())
    header = max((n for n, _ in _header_lines(path)), default=0)
    try:
        table = pa_csv.read_csv(
            path,
            read_options=pa_csv.ReadOptions(column_names=list(_RUN_COLUMNS), skip_rows=header),
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
    if blank_or_spaced(queries) or blank_or_spaced(vocab):
        return None
    return q_codes, queries, codes, vocab, table.column("score").to_numpy()


def _read_run_columns(path: Path) -> _RunColumns:
    """Columns of a run with any whitespace, checking every line; errors name the line."""
    qids, items, scores = [], [], []
    header = max((n for n, _ in _header_lines(path)), default=0)
    for n, line in text_lines(path):
        if n <= header:
            continue
        parts = line.split()
        if len(parts) != 6:
            raise DataError(
                f"{path}:{n}: expected 6 columns (qid Q0 docid rank score system), got "
                f"{len(parts)}; write one ranked item per line, columns separated by whitespace"
            )
        parse_number(parts[3], int, f"{path}:{n}", "rank")
        scores.append(parse_number(parts[4], float, f"{path}:{n}", "score"))
        qids.append(parts[0])
        items.append(parts[2])
    q_codes, queries = _encode(_chunked(qids))
    codes, vocab = _encode(_chunked(items))
    return q_codes, queries, codes, vocab, np.array(scores, dtype=np.float64)


def _raise_not_finite(path: Path) -> None:
    """Name the first line whose score is NaN or infinite."""
    for n, line in text_lines(path):
        if line.startswith("#"):
            continue
        score = line.split()[4]
        if not np.isfinite(float(score)):
            raise DataError(
                f"{path}:{n}: field 'score' is {score!r}; every score must be a finite number "
                "(no NaN or infinity); fix the system that wrote the run"
            )


def _chunked(strings: list[str]) -> pa.ChunkedArray:
    return pa.chunked_array([pa.array(strings, type=pa.large_string())])


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
        order = np.lexsort((-scores, q_codes))  # by query and score: from_lists orders ties
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
    for n, line in text_lines(path):
        parts = line.split()
        if parts[0] == qid and parts[2] == docid:
            if seen:
                return n
            seen = True
    return 0


def _strings(values: np.ndarray) -> list[str]:
    listed = values.tolist()
    return listed if all(type(v) is str for v in listed) else [str(v) for v in listed]


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
