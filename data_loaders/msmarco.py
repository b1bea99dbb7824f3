"""MS MARCO for DAPR: MS MARCO QnA passages located inside their MS MARCO source documents.

Sources (MS MARCO terms: non-commercial research use, see https://microsoft.github.io/msmarco/):
the QnA v2.1 files ``train_v2.1.json`` and ``dev_v2.1.json`` (one JSON object of columns
``{"query": {row: text}, "query_id": {row: id}, "passages": {row: [{is_selected,
passage_text, url}]}, ...}``) and the document-ranking collection ``msmarco-docs.tsv``
(``docid \\t url \\t title \\t body``), each downloaded gzipped from
https://msmarco.z22.web.core.windows.net and read plain or gzipped.

Construction (the DAPR paper's Appendix A, following its reference builder):

- Every QnA passage (selected or not) whose URL names a document with a non-empty body is
  located in that body (body stripped of surrounding whitespace): first as an exact substring,
  else as the leftmost substring within at most ``max_edits`` (5) Levenshtein edits, the span
  the reference builder's ``regex`` search ``(passage){e<=5}`` finds. Passages not located are
  dropped. The search is exact but fast: a passage within 5 edits contains one of 6 pieces of
  itself verbatim, so only the places where a piece occurs are verified (with rapidfuzz), and
  ``regex`` runs only there, when the span's end is ambiguous or the span opens the document.
  The first document line of a URL is used; later lines with the same URL are skipped.
- Within each QnA file, a span of a document located twice keeps its first passage (file order).
- Splits. With the passage-ranking ``qrels.dev.small.tsv`` in the source (rule ``paper``, the
  reference's): test = the selected dev pairs of its queries; dev = a ``random.Random(42)``
  sample of the other selected dev pairs, as many as test has; train = the train file. Without
  it (rule ``qna``): test = every selected dev pair; dev = the same sample drawn from the
  selected train pairs, each sampled query moving to dev with all its selected pairs; train =
  the rest of the train file. Unselected train passages stay as (non-relevant) labelled spans.
- Overlapping spans of one document: the span of the higher split wins (test > dev > train);
  between two train spans the later-starting one wins.
- A document (doc id and title from the tsv) is kept when it holds a span; it is cut into the
  spans (candidates, ``Passage.is_candidate``) and the text between them (not candidates), so
  the passages joined give the body back. Relevance: grade 1 for a selected passage's span;
  queries without one are dropped. Passage ids ``f"{doc_id}-{position}"``.

Memory stays bounded: the QnA JSON is streamed with ijson into a temporary SQLite store, the
tsv is streamed twice (locate, then cut), and the kept documents are written, already cut, to a
gzipped spill file under ``$DAPR_HOME/tmp`` (or ``work_dir``). The returned corpus streams
from that spill; the directory is removed when the corpus object is garbage-collected or the
process exits, so write the dataset (``dapr data build`` does) before dropping it. On the
sample scaled to 36,000 documents (``benchmarks/msmarco_build.py``) the build peaks at 169 MB
against 1.2 GB for the reference's load-everything approach, with the same result.

Options (``--set``): ``split`` = auto (paper when ``qrels.dev.small.tsv`` is present, else
qna) | paper | qna; ``max_edits`` (5); ``seed`` (42); ``work_dir`` (where the spill goes).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import shutil
import sqlite3
import tempfile
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, Any, Literal

from dapr.adapters import Adapter, RawFile
from dapr.data import Corpus, Dataset, Document, Passage, Split
from dapr.errors import DataError
from dapr.io.rows import show, text_lines
from dapr.io.trec import read_trec_qrels
from dapr.paths import home

NAME = "MSMARCO"
HOST = "https://msmarco.z22.web.core.windows.net"
DOCS = "msmarco-docs.tsv"
TRAIN = "train_v2.1.json"
DEV = "dev_v2.1.json"
RANKING_QRELS = "qrels.dev.small.tsv"
"""Optional: the passage-ranking dev (small) qrels, inside collectionandqueries.tar.gz."""
RANKING_QRELS_URL = f"{HOST}/msmarcoranking/collectionandqueries.tar.gz"

MAX_EDITS = 5
SEED = 42
Rule = Literal["auto", "paper", "qna"]
"""Option ``split``: how the splits are drawn (see the module docstring)."""
TRAIN_FILE, DEV_FILE = 0, 1
SPLIT_NAMES = ("train", "dev", "test")  # codes 0, 1, 2: a higher code wins an overlap
TRAIN_SPLIT, DEV_SPLIT, TEST_SPLIT = 0, 1, 2

SHORT_PASSAGE = 60
"""Shorter passages are searched with ``regex`` over the whole document (pieces too short)."""
_READ_CHUNK = 1 << 20
_BATCH = 10_000
_QNA_NEEDS = (
    'a QnA file is one JSON object {"query": {row: text}, "query_id": {row: id}, '
    '"passages": {row: [{"is_selected": 0|1, "passage_text": text, "url": url}]}}'
)
_DOCS_NEEDS = "every line of msmarco-docs.tsv is docid<TAB>url<TAB>title<TAB>body"


# --------------------------------------------------------------------------- raw files


def raw_path(source: Path, name: str) -> Path | None:
    """``source/name``, or its gzipped variant ``name.gz``, whichever exists."""
    for candidate in (Path(source) / name, Path(source) / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _open_binary(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")


def _unreadable(path: Path, error: BaseException) -> DataError:
    reason = " ".join(str(error).split()) or type(error).__name__
    return DataError(f"{path}: cannot be read ({reason}); download the file again")


# --------------------------------------------------------------------------- locating


def locate(passage: str, document: str, max_edits: int = MAX_EDITS) -> tuple[int, int] | None:
    """The span of ``passage`` in ``document``: the first exact occurrence, else the span that
    ``regex.search("(passage){e<=max_edits}", document)`` returns (the leftmost start within
    ``max_edits`` edits), else None."""
    found = document.find(passage)
    if found != -1:
        return found, found + len(passage)
    if max_edits <= 0:
        return None
    if len(passage) < max(SHORT_PASSAGE, 4 * (max_edits + 1)):
        match = _fuzzy_pattern(passage, max_edits).search(document)
        return match.span() if match is not None else None
    for lo, hi in _candidate_starts(passage, document, max_edits):
        start, ends = _leftmost_start(passage, document, lo, hi, max_edits)
        if start is None:
            continue
        if start > 0:
            return _span_at(passage, document, start, ends, max_edits)
        # regex never opens a match at the search's first position with an inserted
        # character, so at the document's start its own search decides
        span = _regex_span(passage, document, 0, hi, max_edits)
        if span is not None:
            return span
    return None


def _fuzzy_pattern(passage: str, max_edits: int) -> Any:
    import regex

    return regex.compile(f"({regex.escape(passage)}){{e<={max_edits}}}")


def _candidate_starts(passage: str, document: str, k: int) -> list[tuple[int, int]]:
    """Merged ranges of starts a match within ``k`` edits can have: such a match holds one of
    ``k + 1`` disjoint pieces of the passage verbatim, which pins its start to within ``k``."""
    m, pieces = len(passage), k + 1
    ranges = []
    for i in range(pieces):
        offset, end = m * i // pieces, m * (i + 1) // pieces
        piece = passage[offset:end]
        at = document.find(piece)
        while at != -1:
            ranges.append((max(0, at - offset - k), max(0, at - offset + k)))
            at = document.find(piece, at + 1)
    ranges.sort()
    merged: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _ends_within(passage: str, document: str, start: int, k: int) -> list[int]:
    """Every end ``e`` with Levenshtein(passage, document[start:e]) <= ``k``."""
    from rapidfuzz.distance import Levenshtein

    m, n = len(passage), len(document)
    # an end within k edits puts document[start:start + m] within 2k: one call rules most out
    if Levenshtein.distance(passage, document[start : start + m], score_cutoff=2 * k) > 2 * k:
        return []
    ends = []
    for end in range(start + max(0, m - k), min(n, start + m + k) + 1):
        if Levenshtein.distance(passage, document[start:end], score_cutoff=k) <= k:
            ends.append(end)
    return ends


def _leftmost_start(
    passage: str, document: str, lo: int, hi: int, k: int
) -> tuple[int | None, list[int]]:
    """The first start in ``lo..hi`` with an end within ``k`` edits, and its valid ends."""
    for start in range(lo, min(hi, len(document)) + 1):
        ends = _ends_within(passage, document, start, k)
        if ends:
            return start, ends
    return None, []


def _span_at(passage: str, document: str, start: int, ends: list[int], k: int) -> tuple[int, int]:
    """The span ``regex`` matches from ``start`` (> 0): the only valid end, or its pick."""
    if len(ends) == 1:
        return start, ends[0]
    span = _regex_span(passage, document, start - 1, start, k)
    if span is None or span[0] != start:  # not expected: take the reference's whole search
        return _fuzzy_pattern(passage, k).search(document).span()
    return span


def _regex_span(passage: str, document: str, pos: int, last: int, k: int) -> tuple[int, int] | None:
    """What ``regex`` finds searching from ``pos`` if it starts by ``last``: the text up to
    ``endpos`` covers every match starting by ``last``, so the answer is the whole search's."""
    endpos = min(len(document), last + len(passage) + 2 * k + 2)
    match = _fuzzy_pattern(passage, k).search(document, pos, endpos)
    return match.span() if match is not None and match.start() <= last else None


# --------------------------------------------------------------------------- splits


def overlap_losers(spans: list[tuple[int, int, int, int]]) -> list[int]:
    """Keys of the spans to drop so that none overlap, ``spans`` being ``(start, end, split,
    key)`` of one document: the higher split wins, and between two train spans the one
    starting later (ties: the later key) wins."""
    ordered = sorted(spans)
    losers = []
    current = ordered[0] if ordered else None
    for following in ordered[1:]:
        if current[1] <= following[0]:
            current = following
            continue
        if current[2] > TRAIN_SPLIT and current[2] >= following[2]:
            losers.append(following[3])
        else:
            losers.append(current[3])
            current = following
    return losers


def cut(body: str, spans: Iterable[tuple[int, int]]) -> list[tuple[str, bool, int]]:
    """``body`` cut into the sorted, non-overlapping ``spans`` (candidates) and the text between
    them: ``(text, is_candidate, index of the span or -1)`` in reading order."""
    pieces: list[tuple[str, bool, int]] = []
    begin = 0
    for i, (start, end) in enumerate(spans):
        if start > begin:
            pieces.append((body[begin:start], False, -1))
        pieces.append((body[start:end], True, i))
        begin = end
    if begin < len(body):
        pieces.append((body[begin:], False, -1))
    return pieces


# --------------------------------------------------------------------------- the store


def _url_key(url: str) -> int:
    return int.from_bytes(hashlib.blake2b(url.encode(), digest_size=8).digest(), "big", signed=True)


_SCHEMA = """
CREATE TABLE passage (
    rowid INTEGER PRIMARY KEY, file INTEGER, qkey TEXT, selected INTEGER,
    ukey INTEGER, url TEXT, text TEXT);
CREATE TABLE qtext (file INTEGER, qkey TEXT, text TEXT, PRIMARY KEY (file, qkey)) WITHOUT ROWID;
CREATE TABLE qid (file INTEGER, qkey TEXT, qid TEXT, PRIMARY KEY (file, qkey)) WITHOUT ROWID;
CREATE TABLE doc (seq INTEGER PRIMARY KEY, line INTEGER, ukey INTEGER, url TEXT);
CREATE INDEX doc_url ON doc (ukey);
CREATE TABLE located (prow INTEGER PRIMARY KEY, file INTEGER, doc INTEGER, start INTEGER,
    stop INTEGER);
CREATE TABLE assigned (prow INTEGER PRIMARY KEY, split INTEGER);
CREATE TABLE final (prow INTEGER PRIMARY KEY, doc INTEGER, start INTEGER, stop INTEGER,
    split INTEGER);
"""


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    for pragma in ("journal_mode = OFF", "synchronous = OFF", "cache_size = -65536"):
        db.execute(f"PRAGMA {pragma}")
    db.executescript(_SCHEMA)
    return db


# --------------------------------------------------------------------------- QnA files


class _QnaReader:
    """Streams one QnA file into the store: its passages, query texts and query ids."""

    def __init__(self, path: Path, file: int, db: sqlite3.Connection):
        self.path, self.file, self.db = path, file, db
        self.passages: list[tuple[Any, ...]] = []
        self.texts: list[tuple[Any, ...]] = []
        self.ids: list[tuple[Any, ...]] = []
        self.rows = 0

    def read(self) -> int:
        import ijson

        sinks = {name: ijson.sendable_list() for name in ("passages", "query", "query_id")}
        coros = [ijson.kvitems_coro(sink, name) for name, sink in sinks.items()]
        try:
            with _open_binary(self.path) as handle:
                while chunk := handle.read(_READ_CHUNK):
                    for coro in coros:
                        coro.send(chunk)
                    self._take(sinks)
                for coro in coros:
                    coro.close()
                self._take(sinks)
        except ijson.JSONError as e:
            raise DataError(f"{self.path}: not valid JSON ({e}); {_QNA_NEEDS}") from None
        except (OSError, EOFError) as e:
            raise _unreadable(self.path, e) from None
        self._flush(force=True)
        return self.rows

    def _take(self, sinks: dict[str, list[tuple[str, Any]]]) -> None:
        for key, passages in sinks["passages"]:
            self._add_passages(key, passages)
        for key, text in sinks["query"]:
            self._check(key, text, str, "query")
            self.texts.append((self.file, key, text))
        for key, qid in sinks["query_id"]:
            if isinstance(qid, bool) or not isinstance(qid, int | str):
                self._check(key, qid, int, "query_id")
            self.ids.append((self.file, key, str(qid)))
        for sink in sinks.values():
            del sink[:]
        self._flush()

    def _add_passages(self, key: str, passages: Any) -> None:
        self._check(key, passages, list, "passages")
        self.rows += 1
        for i, passage in enumerate(passages):
            field = f"passages[{i}]"
            self._check(key, passage, dict, field)
            url = self._check(key, passage.get("url"), str, f"{field}.url")
            text = self._check(key, passage.get("passage_text"), str, f"{field}.passage_text")
            selected = passage.get("is_selected")
            if selected not in (0, 1):  # True and False compare equal to 1 and 0
                self._check(key, selected, bool, f"{field}.is_selected")
            self.passages.append((self.file, key, int(selected), _url_key(url), url, text))

    def _check(self, key: str, value: Any, kind: type, field: str) -> Any:
        if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
            return value
        kinds = {str: "a string", int: "an integer", list: "a list", dict: "an object"}
        want = kinds.get(kind, "0 or 1")
        raise DataError(
            f"{self.path}: row {key!r}: field {field!r} must be {want}, got {show(value)}; "
            f"{_QNA_NEEDS}"
        )

    def _flush(self, force: bool = False) -> None:
        if force or len(self.passages) >= _BATCH:
            self.db.executemany(
                "INSERT INTO passage (file, qkey, selected, ukey, url, text) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                self.passages,
            )
            self.passages.clear()
        if force or len(self.texts) + len(self.ids) >= _BATCH:
            self.db.executemany("INSERT OR REPLACE INTO qtext VALUES (?, ?, ?)", self.texts)
            self.db.executemany("INSERT OR REPLACE INTO qid VALUES (?, ?, ?)", self.ids)
            self.texts.clear()
            self.ids.clear()


def _has_passages(path: Path) -> bool:
    """Whether the top-level object has a ``passages`` key (for files that yielded no rows)."""
    import ijson

    with _open_binary(path) as handle:
        for prefix, event, value in ijson.parse(handle):
            if prefix == "" and event != "map_key":
                if event != "start_map":
                    return False
            elif prefix == "" and value == "passages":
                return True
    return False


def _check_queries(db: sqlite3.Connection, path: Path, file: int) -> None:
    """Every passages row has its query text and id."""
    for table, column in (("qtext", "query"), ("qid", "query_id")):
        missing = db.execute(
            f"SELECT p.qkey FROM passage p LEFT JOIN {table} q "
            "ON q.file = p.file AND q.qkey = p.qkey WHERE p.file = ? AND q.qkey IS NULL LIMIT 1",
            (file,),
        ).fetchone()
        if missing is not None:
            raise DataError(
                f"{path}: row {missing[0]!r} has passages but no {column!r}; {_QNA_NEEDS}"
            )


# --------------------------------------------------------------------------- documents


def _doc_lines(path: Path, fields: bool = True) -> Iterator[tuple[int, list[str]]]:
    """Numbered lines of msmarco-docs.tsv as ``[docid, url, title, body]`` (body stripped);
    with ``fields=False`` as ``[docid, url, rest]`` (cheaper, body not split off)."""
    for n, line in text_lines(path, newline="\n"):
        if line.count("\t") != 3:
            raise DataError(
                f"{path}:{n}: expected 4 tab-separated fields, found "
                f"{line.count(chr(9)) + 1}; {_DOCS_NEEDS}"
            )
        row = line.split("\t", 3 if fields else 2)
        if fields:
            row[3] = row[3].strip()
        yield n, row


@dataclass
class _Counts:
    with_document: int = 0
    located: int = 0
    duplicate_urls: int = 0


def _locate_all(db: sqlite3.Connection, docs: Path, max_edits: int) -> _Counts:
    """Pass 1 over the documents: locate the passages of every document's URL."""
    counts = _Counts()
    found: list[tuple[int, int, int, int, int]] = []
    lookup = "SELECT rowid, file, text FROM passage WHERE ukey = ? AND url = ? ORDER BY rowid"
    for n, (_, url, rest) in _doc_lines(docs, fields=False):
        key = _url_key(url)
        passages = db.execute(lookup, (key, url)).fetchall()
        if not passages:
            continue
        body = rest.split("\t", 1)[1].strip()
        if not body:
            continue
        if db.execute("SELECT 1 FROM doc WHERE ukey = ? AND url = ?", (key, url)).fetchone():
            counts.duplicate_urls += 1
            continue
        seq = db.execute("INSERT INTO doc (line, ukey, url) VALUES (?, ?, ?)", (n, key, url))
        doc = seq.lastrowid
        counts.with_document += len(passages)
        for rowid, file, text in passages:
            span = locate(text, body, max_edits)
            if span is not None and span[1] > span[0]:
                found.append((rowid, file, doc, *span))
        if len(found) >= _BATCH:
            counts.located += _insert_located(db, found)
    counts.located += _insert_located(db, found)
    return counts


def _insert_located(db: sqlite3.Connection, found: list[tuple[int, ...]]) -> int:
    db.executemany("INSERT INTO located VALUES (?, ?, ?, ?, ?)", found)
    n = len(found)
    found.clear()
    return n


# --------------------------------------------------------------------------- splits


def _deduplicate(db: sqlite3.Connection) -> None:
    """Within a QnA file, the first passage (file order) of each document span stays."""
    db.execute("CREATE INDEX located_span ON located (file, doc, start, stop)")
    db.execute(
        "CREATE TABLE kept AS SELECT MIN(l.prow) AS prow, l.file AS file, p.selected AS selected "
        "FROM located l JOIN passage p ON p.rowid = l.prow GROUP BY l.file, l.doc, l.start, l.stop"
    )
    db.execute("CREATE UNIQUE INDEX kept_row ON kept (file, selected, prow)")


def _assign(db: sqlite3.Connection, rule: str, ranking: set[str] | None, seed: int) -> None:
    """Fill ``assigned`` (passage row -> split code) by ``rule`` (see the module docstring)."""
    selected_dev = db.execute(
        "SELECT k.prow, i.qid FROM kept k JOIN passage p ON p.rowid = k.prow "
        "JOIN qid i ON i.file = p.file AND i.qkey = p.qkey "
        "WHERE k.file = ? AND k.selected = 1 ORDER BY k.prow",
        (DEV_FILE,),
    ).fetchall()
    insert = "INSERT INTO assigned VALUES (?, ?)"
    if rule == "paper":
        assert ranking is not None
        test = [(row, TEST_SPLIT) for row, qid in selected_dev if qid in ranking]
        pool = [row for row, qid in selected_dev if qid not in ranking]
        db.executemany(insert, test)
        db.executemany(insert, ((row, DEV_SPLIT) for row in _sample(pool, len(test), seed)))
        db.execute(
            "INSERT INTO assigned SELECT prow, ? FROM kept WHERE file = ?",
            (TRAIN_SPLIT, TRAIN_FILE),
        )
        return
    db.executemany(insert, ((row, TEST_SPLIT) for row, _ in selected_dev))
    pool = [
        row
        for (row,) in db.execute(
            "SELECT prow FROM kept WHERE file = ? AND selected = 1 ORDER BY prow", (TRAIN_FILE,)
        )
    ]
    db.execute("CREATE TEMP TABLE sampled (prow INTEGER PRIMARY KEY)")
    sampled = _sample(pool, len(selected_dev), seed)
    db.executemany("INSERT INTO sampled VALUES (?)", ((row,) for row in sampled))
    db.execute(
        "CREATE TEMP TABLE dev_query AS SELECT DISTINCT p.qkey FROM sampled s "
        "JOIN passage p ON p.rowid = s.prow"
    )
    db.execute(
        "INSERT INTO assigned SELECT k.prow, CASE WHEN k.selected = 1 AND p.qkey IN "
        "(SELECT qkey FROM dev_query) THEN ? ELSE ? END FROM kept k "
        "JOIN passage p ON p.rowid = k.prow WHERE k.file = ?",
        (DEV_SPLIT, TRAIN_SPLIT, TRAIN_FILE),
    )


def _sample(pool: list[int], k: int, seed: int) -> list[int]:
    """``random.Random(seed).sample(pool, min(k, len(pool)))``, the reference's draw."""
    return random.Random(seed).sample(pool, min(k, len(pool)))


def _remove_overlaps(db: sqlite3.Connection) -> None:
    """Fill ``final`` with the assigned spans that survive :func:`overlap_losers`."""
    rows = db.execute(
        "SELECT l.doc, l.start, l.stop, a.split, a.prow FROM assigned a "
        "JOIN located l ON l.prow = a.prow ORDER BY l.doc"
    )
    survivors: list[tuple[int, int, int, int, int]] = []
    for doc, spans in _grouped(rows):
        dropped = set(overlap_losers(spans))
        survivors.extend((k, doc, s, e, split) for s, e, split, k in spans if k not in dropped)
        if len(survivors) >= _BATCH:
            db.executemany("INSERT INTO final VALUES (?, ?, ?, ?, ?)", survivors)
            survivors.clear()
    db.executemany("INSERT INTO final VALUES (?, ?, ?, ?, ?)", survivors)


def _grouped(rows: Iterable[tuple[Any, ...]]) -> Iterator[tuple[Any, list[tuple[Any, ...]]]]:
    """Consecutive rows grouped by their first column: ``(value, [rest of each row])``."""
    key, group = None, []
    for row in rows:
        if row[0] != key and group:
            yield key, group
            group = []
        key = row[0]
        group.append(row[1:])
    if group:
        yield key, group


# --------------------------------------------------------------------------- corpus spill


def _final_rows(db: sqlite3.Connection) -> Iterator[tuple[int, list[tuple[Any, ...]]]]:
    """Per kept document (in line order): its line and its spans with their queries."""
    rows = db.execute(
        "SELECT d.line, f.start, f.stop, f.split, p.selected, i.qid, t.text FROM final f "
        "JOIN doc d ON d.seq = f.doc JOIN passage p ON p.rowid = f.prow "
        "JOIN qid i ON i.file = p.file AND i.qkey = p.qkey "
        "JOIN qtext t ON t.file = p.file AND t.qkey = p.qkey ORDER BY f.doc, f.start"
    )
    return _grouped(rows)


def _write_spill(db: sqlite3.Connection, docs: Path, spill: Path) -> tuple[dict[str, Split], int]:
    """Pass 2 over the documents: cut the kept ones into the spill; returns splits, #docs."""
    splits = {name: Split({}, {}) for name in SPLIT_NAMES}
    kept = _final_rows(db)
    want = next(kept, None)
    count = 0
    with gzip.open(spill, "wt", encoding="utf-8", compresslevel=1) as out:
        for n, (doc_id, _, title, body) in _doc_lines(docs):
            if want is None:
                break
            if n != want[0]:
                continue
            spans = want[1]
            pieces = cut(body, [(start, stop) for start, stop, *_ in spans])
            out.write(json.dumps([doc_id, title, [[t, c] for t, c, _ in pieces]]) + "\n")
            for position, (_, _, index) in enumerate(pieces):
                if index < 0:
                    continue
                _, _, split, selected, qid, query = spans[index]
                if selected:
                    target = splits[SPLIT_NAMES[split]]
                    target.queries.setdefault(qid, query)
                    target.qrels.setdefault(qid, {})[f"{doc_id}-{position}"] = 1
            count += 1
            want = next(kept, None)
    return splits, count


def read_spill(path: Path) -> Iterator[Document]:
    """The documents of a spill file written by :func:`_write_spill`."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            doc_id, title, pieces = json.loads(line)
            yield Document(
                doc_id,
                title,
                tuple(
                    Passage(f"{doc_id}-{i}", doc_id, i, text, candidate)
                    for i, (text, candidate) in enumerate(pieces)
                ),
            )


# --------------------------------------------------------------------------- the adapter


class MSMARCO(Adapter):
    name = NAME
    origin = (
        f"MS MARCO QnA v2.1 passages located in MS MARCO documents (DAPR Appendix A), from {HOST}"
    )
    raw_files = (
        RawFile(f"{DOCS}.gz", f"{HOST}/msmarcoranking/{DOCS}.gz", None, f"or the unpacked {DOCS}"),
        RawFile(f"{TRAIN}.gz", f"{HOST}/msmarco/{TRAIN}.gz", None, f"or the unpacked {TRAIN}"),
        RawFile(f"{DEV}.gz", f"{HOST}/msmarco/{DEV}.gz", None, f"or the unpacked {DEV}"),
    )
    hub_repo = "UKPLab/dapr"

    def require(self, source: Path, download: bool = False) -> None:
        """Every raw file, plain or gzipped, is in ``source`` (downloaded gzipped if asked)."""
        from dapr.download import fetch

        for raw in self.raw_files:
            plain = raw.path.removesuffix(".gz")
            if raw_path(source, plain) is not None:
                continue
            if download and raw.url:
                fetch(raw.url, Path(source) / raw.path, raw.sha256)
                continue
            raise DataError(
                f"{Path(source) / plain}: missing raw file of {NAME} (plain or .gz); download "
                f"{raw.url} there, or rerun with --download"
            )

    def build(
        self,
        source: Path,
        *,
        split: Rule = "auto",
        max_edits: int = MAX_EDITS,
        seed: int = SEED,
        work_dir: Path | None = None,
    ) -> Dataset:
        """The dataset from the raw files in ``source`` (see the module docstring)."""
        for key, value in (("max_edits", max_edits), ("seed", seed)):
            if value < 0:
                raise self.option_error(key, "a non-negative integer", value)
        source = Path(source)
        self.require(source)
        ranking_file = raw_path(source, RANKING_QRELS)
        rule = split
        if rule == "auto":
            rule = "paper" if ranking_file is not None else "qna"
        if rule == "paper" and ranking_file is None:
            raise DataError(
                f"{source / RANKING_QRELS}: missing; split=paper needs the passage-ranking dev "
                f"qrels (in {RANKING_QRELS_URL}), or use split=qna"
            )
        root = Path(work_dir) if work_dir is not None else home() / "tmp"
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="msmarco-", dir=root))
        try:
            splits, ndocs, counts = _build(source, work, rule, ranking_file, max_edits, seed)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        corpus = Corpus(partial(read_spill, work / "corpus.jsonl.gz"))
        weakref.finalize(corpus, shutil.rmtree, work, True)
        notes = (
            f"split rule {rule!r}: "
            + (
                "test = QnA dev queries of the passage-ranking dev (small) qrels, dev = a "
                "sample of the other QnA dev pairs, train = QnA train"
                if rule == "paper"
                else "test = QnA dev, dev = a sample of QnA train pairs, train = the rest"
            ),
            f"located {counts.located} of {counts.with_document} QnA passages whose URL has a "
            f"document (at most {max_edits} edits); {ndocs} documents kept"
            + (
                f"; {counts.duplicate_urls} later document lines repeating a URL skipped"
                if counts.duplicate_urls
                else ""
            ),
            "passages: the located QnA passages (candidates) and the text between them "
            "(not candidates)",
        )
        return Dataset(NAME, corpus, splits, notes=notes)


def _build(
    source: Path, work: Path, rule: str, ranking_file: Path | None, max_edits: int, seed: int
) -> tuple[dict[str, Split], int, _Counts]:
    db = _connect(work / "store.sqlite")
    db.execute("BEGIN")  # one transaction: no journal, nothing to roll back (files are dropped)
    try:
        for name, file in ((TRAIN, TRAIN_FILE), (DEV, DEV_FILE)):
            path = raw_path(source, name)
            assert path is not None
            if not _QnaReader(path, file, db).read() and not _has_passages(path):
                raise DataError(f"{path}: no 'passages' column found; {_QNA_NEEDS}")
            _check_queries(db, path, file)
        db.execute("CREATE INDEX passage_url ON passage (ukey)")
        docs = raw_path(source, DOCS)
        assert docs is not None
        counts = _locate_all(db, docs, max_edits)
        _deduplicate(db)
        ranking = set(read_trec_qrels(ranking_file)) if rule == "paper" and ranking_file else None
        _assign(db, rule, ranking, seed)
        _remove_overlaps(db)
        splits, ndocs = _write_spill(db, docs, work / "corpus.jsonl.gz")
    finally:
        db.close()
        (work / "store.sqlite").unlink(missing_ok=True)
    return splits, ndocs, counts


adapter = MSMARCO()
