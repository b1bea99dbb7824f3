"""The MS MARCO build's working store (SQLite): QnA queries and their passages read from the
QnA files, located in the documents, deduplicated, assigned to splits, and the corpus written as
a spill file that the dataset reads back."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from dapr.data_loaders.msmarco_spans import (
    DEV_SPLIT,
    SPLIT_NAMES,
    TEST_SPLIT,
    TRAIN_SPLIT,
    cut,
    locate,
    overlap_losers,
)

from dapr.data import Document, Passage, Split
from dapr.errors import DataError
from dapr.io.rows import show, text_lines

NAME = "MSMARCO"
HOST = "https://msmarco.z22.web.core.windows.net"
DOCS = "msmarco-docs.tsv"
TRAIN = "train_v2.1.json"
DEV = "dev_v2.1.json"
RANKING_QRELS = "qrels.dev.small.tsv"
"""Optional: the passage-ranking dev (small) qrels, inside collectionandqueries.tar.gz."""
RANKING_QRELS_URL = f"{HOST}/msmarcoranking/collectionandqueries.tar.gz"

SEED = 42
Rule = Literal["auto", "paper", "qna"]
"""Option ``split``: how the splits are drawn (see the module docstring)."""
TRAIN_FILE, DEV_FILE = 0, 1

_READ_CHUNK = 1 << 20
_BATCH = 10_000
QNA_NEEDS = (
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


def connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    for pragma in ("journal_mode = OFF", "synchronous = OFF", "cache_size = -65536"):
        db.execute(f"PRAGMA {pragma}")
    db.executescript(_SCHEMA)
    return db


# --------------------------------------------------------------------------- QnA files


class QnaReader:
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
            raise DataError(f"{self.path}: not valid JSON ({e}); {QNA_NEEDS}") from None
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
            f"{QNA_NEEDS}"
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


def has_passages(path: Path) -> bool:
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


def check_queries(db: sqlite3.Connection, path: Path, file: int) -> None:
    """Every passages row has its query text and id."""
    for table, column in (("qtext", "query"), ("qid", "query_id")):
        missing = db.execute(
            f"SELECT p.qkey FROM passage p LEFT JOIN {table} q "
            "ON q.file = p.file AND q.qkey = p.qkey WHERE p.file = ? AND q.qkey IS NULL LIMIT 1",
            (file,),
        ).fetchone()
        if missing is not None:
            raise DataError(
                f"{path}: row {missing[0]!r} has passages but no {column!r}; {QNA_NEEDS}"
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
class Counts:
    with_document: int = 0
    located: int = 0
    duplicate_urls: int = 0


def locate_all(db: sqlite3.Connection, docs: Path, max_edits: int) -> Counts:
    """Pass 1 over the documents: locate the passages of every document's URL."""
    counts = Counts()
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


def deduplicate(db: sqlite3.Connection) -> None:
    """Within a QnA file, the first passage (file order) of each document span stays."""
    db.execute("CREATE INDEX located_span ON located (file, doc, start, stop)")
    db.execute(
        "CREATE TABLE kept AS SELECT MIN(l.prow) AS prow, l.file AS file, p.selected AS selected "
        "FROM located l JOIN passage p ON p.rowid = l.prow GROUP BY l.file, l.doc, l.start, l.stop"
    )
    db.execute("CREATE UNIQUE INDEX kept_row ON kept (file, selected, prow)")


def assign(db: sqlite3.Connection, rule: str, ranking: set[str] | None, seed: int) -> None:
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


def remove_overlaps(db: sqlite3.Connection) -> None:
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


def write_spill(db: sqlite3.Connection, docs: Path, spill: Path) -> tuple[dict[str, Split], int]:
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
    """The documents of a spill file written by :func:`write_spill`."""
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
