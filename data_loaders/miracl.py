"""MIRACL (English) in the DAPR form: Wikipedia articles as documents of their passages.

Source: MIRACL v1.0 (https://huggingface.co/datasets/miracl), Apache-2.0. The corpus is
``miracl/miracl-corpus`` (``miracl-corpus-v1.0-en/docs-{0..65}.jsonl.gz``, JSON lines with
``docid``, ``title``, ``text``); topics and qrels are the English dev and train files of
``miracl/miracl`` (``topics.miracl-v1.0-en-{dev,train}.tsv`` and
``qrels.miracl-v1.0-en-{dev,train}.tsv``).
The Hugging Face repositories may ask you to log in and accept their terms before downloading.

- Passage: one corpus line; its ``docid`` is ``"{article}#{position}"``.
- Document: the passages of one article (the id before ``#``), ordered by position; its title is
  the passages' title. Passage ids follow the DAPR dump: ``"{article}-{i}"`` with ``i`` the 0-based
  rank of the passage in its article (the same as the MIRACL position when positions run 0, 1, ...).
  The passages of an article must be contiguous in the shards (they are in the published corpus);
  a build checks this in bounded memory.
- Query: a topic. Relevance is binary: grade-1 judgements are kept as 1, grade-0 ones dropped.
  A query without a relevant passage has no place in any split.
- Splits: MIRACL dev -> ``test``. From the MIRACL train queries (in the order of their first
  relevant judgement in the qrels file) ``random.Random(42).sample`` draws as many positions as
  ``test`` has queries -> ``dev``; the rest -> ``train`` (the reference builder's rule).
- The splits are decided on the qrels alone; judgements naming passages absent from the corpus
  are then dropped, and queries left without one with them (a note says how many). With the
  full corpus nothing is dropped.

The corpus is streamed from the shards on every pass; a build makes one extra pass to find the
positions of the judged articles' passages.
"""

from __future__ import annotations

import bisect
import random
import re
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from dapr.data import Corpus, Dataset, Document, Passage, Qrels, Queries, Split
from dapr.datasets.adapter import Adapter, RawFile
from dapr.errors import DataError
from dapr.io.rows import (
    add_query,
    json_object,
    jsonl_rows,
    parse_number,
    required_field,
    text_lines,
)

NAME = "MIRACL"
CORPUS_DIR = "miracl-corpus-v1.0-en"
SHARDS = 66
CORPUS_URL = "https://huggingface.co/datasets/miracl/miracl-corpus/resolve/main/{path}"
TOPICS_URL = "https://huggingface.co/datasets/miracl/miracl/raw/main/miracl-v1.0-en/topics/{name}"
QRELS_URL = "https://huggingface.co/datasets/miracl/miracl/raw/main/miracl-v1.0-en/qrels/{name}"
TOPICS = {"dev": "topics.miracl-v1.0-en-dev.tsv", "train": "topics.miracl-v1.0-en-train.tsv"}
QRELS = {"dev": "qrels.miracl-v1.0-en-dev.tsv", "train": "qrels.miracl-v1.0-en-train.tsv"}
SEED = 42
"""Seed of the held-out draw of dev queries from MIRACL train (as in the reference builder)."""

_CORPUS_NEEDS = 'every corpus line is a JSON object with string fields "docid", "title", "text"'
_PASSAGE_ID = "passage ids look like ARTICLE#POSITION with a non-negative integer position"
_DOCID = re.compile(r'"docid"\s*:\s*"([^"\\]*)"')


def shard_paths(source: Path) -> list[Path]:
    return [Path(source) / CORPUS_DIR / f"docs-{i}.jsonl.gz" for i in range(SHARDS)]


# --- topics and qrels ------------------------------------------------------------------------


def read_topics(path: Path) -> Queries:
    """Query id -> text from a ``qid<TAB>text`` file."""
    queries: Queries = {}
    for n, line in text_lines(path):
        qid, tab, text = line.rstrip("\r\n").partition("\t")
        if not tab or not qid.strip() or not text.strip():
            raise DataError(
                f"{path}:{n}: expected a query id, a tab and the query text; "
                "write one topic per line as QID<TAB>TEXT"
            )
        add_query(queries, qid.strip(), text.strip(), f"{path}:{n}", "text")
    return queries


def split_passage_id(pid: str, at: str) -> tuple[str, int]:
    """``"12#3"`` -> ``("12", 3)``."""
    article, sep, position = pid.rpartition("#")
    if not sep or not article or not position.isdigit():
        raise DataError(f"{at}: passage id {pid!r} is malformed; {_PASSAGE_ID}")
    return article, int(position)


def read_relevant(path: Path, topics: Queries) -> dict[str, list[tuple[str, int]]]:
    """Query id -> its relevant ``(article, position)`` pairs, queries in the order of their
    first relevant judgement; grade-0 judgements are skipped."""
    relevant: dict[str, list[tuple[str, int]]] = {}
    for n, line in text_lines(path):
        at = f"{path}:{n}"
        fields = line.split()
        if len(fields) != 4:
            raise DataError(
                f"{at}: expected 4 columns (query id, Q0, passage id, grade), got {len(fields)}; "
                "write TREC qrels lines"
            )
        qid, _, pid, grade = fields
        if parse_number(grade, int, at, "grade") <= 0:
            continue
        if qid not in topics:
            raise DataError(
                f"{at}: query {qid!r} has no topic in {path.parent / _topics_beside(path)}; "
                "use the topics file of the same split"
            )
        pair = split_passage_id(pid, at)
        judged = relevant.setdefault(qid, [])
        if pair not in judged:
            judged.append(pair)
    return relevant


def _topics_beside(qrels: Path) -> str:
    return qrels.name.replace("qrels.", "topics.", 1)


def held_out(query_ids: list[str], size: int, seed: int = SEED) -> tuple[list[str], list[str]]:
    """``(dev, train)``: ``size`` queries drawn by position with ``random.Random(seed)``."""
    if size > len(query_ids):
        raise DataError(
            f"MIRACL train has {len(query_ids)} queries with a relevant passage, fewer than the "
            f"{size} held out for dev; check the qrels files"
        )
    drawn = random.Random(seed).sample(range(len(query_ids)), size)
    chosen = set(drawn)
    return [query_ids[i] for i in drawn], [q for i, q in enumerate(query_ids) if i not in chosen]


# --- the corpus --------------------------------------------------------------------------------


def _passage_ids(shards: list[Path]) -> Iterator[tuple[str, str, int]]:
    """``(where, article, position)`` of every corpus line; only the id is parsed."""
    for path in shards:
        for n, line in text_lines(path):
            at = f"{path}:{n}"
            found = _DOCID.search(line)
            if found is not None:
                pid = found.group(1)
            else:
                pid = required_field(json_object(line, at), "docid", str, at, _CORPUS_NEEDS)
            yield (at, *split_passage_id(pid, at))


@dataclass
class _Scan:
    """What a build needs from one pass over the corpus."""

    positions: dict[str, list[int]]
    """Judged article -> the positions of its passages in the corpus, sorted."""
    articles: int = 0
    passages: int = 0


def scan_corpus(shards: list[Path], judged: set[str]) -> _Scan:
    """Positions of the judged articles' passages; checks that articles are contiguous.

    Only a 64-bit hash per article is kept, so the check runs in bounded memory.
    """
    scan = _Scan(positions={})
    starts = array("q")
    current = None
    for _, article, position in _passage_ids(shards):
        scan.passages += 1
        if article != current:
            current = article
            scan.articles += 1
            starts.append(hash(article))
        if article in judged:
            scan.positions.setdefault(article, []).append(position)
    hashes = np.frombuffer(starts, dtype=np.int64)
    if len(np.unique(hashes)) != len(hashes):
        _raise_reappearance(shards, hashes)
    for article, positions in scan.positions.items():
        positions.sort()
        if len(set(positions)) != len(positions):
            raise DataError(
                f"{shards[0].parent}: article {article!r} repeats a passage position in the "
                "corpus shards; give every passage a unique id"
            )
    return scan


def _raise_reappearance(shards: list[Path], hashes: np.ndarray) -> None:
    """Name the line where an article starts again after other articles."""
    values, counts = np.unique(hashes, return_counts=True)
    repeated = set(values[counts > 1].tolist())
    seen: set[str] = set()
    current = None
    for at, article, _ in _passage_ids(shards):
        if article == current:
            continue
        current = article
        if hash(article) in repeated:
            if article in seen:
                raise DataError(
                    f"{at}: passage of article {article!r} after other articles' passages; "
                    "keep the passages of an article on consecutive lines"
                )
            seen.add(article)


def _document(rows: list[tuple[str, int, str, str]], article: str) -> Document:
    """The document of an article's rows ``(where, position, title, text)``."""
    rows.sort(key=lambda row: row[1])
    for before, after in zip(rows, rows[1:]):
        if before[1] == after[1]:
            raise DataError(
                f"{after[0]}: passage {article}#{after[1]} appears twice; "
                "give every passage a unique id"
            )
    passages = tuple(
        Passage(f"{article}-{i}", article, i, text) for i, (_, _, _, text) in enumerate(rows)
    )
    return Document(article, rows[0][2], passages)


def documents(shards: list[Path]) -> Iterator[Document]:
    """The articles of the corpus shards, streamed, each with its passages in position order."""
    article = None
    rows: list[tuple[str, int, str, str]] = []
    for path in shards:
        for n, row in jsonl_rows(path):
            at = f"{path}:{n}"
            pid = required_field(row, "docid", str, at, _CORPUS_NEEDS)
            title = required_field(row, "title", str, at, _CORPUS_NEEDS)
            text = required_field(row, "text", str, at, _CORPUS_NEEDS)
            name, position = split_passage_id(pid, at)
            if name != article:
                if rows:
                    yield _document(rows, article)
                article, rows = name, []
            rows.append((at, position, title, text))
    if rows:
        yield _document(rows, article)


# --- the dataset -------------------------------------------------------------------------------


def _split(
    query_ids: list[str],
    relevant: dict[str, list[tuple[str, int]]],
    topics: Queries,
    scan: _Scan,
) -> tuple[Split, int, int]:
    """The split of ``query_ids``; also how many judgements and queries were dropped."""
    queries: Queries = {}
    qrels: Qrels = {}
    missing = 0
    for qid in query_ids:
        judged: dict[str, int] = {}
        for article, position in relevant[qid]:
            positions = scan.positions.get(article, [])
            i = _index(positions, position)
            if i is None:
                missing += 1
            else:
                judged[f"{article}-{i}"] = 1
        if judged:
            queries[qid] = topics[qid]
            qrels[qid] = judged
    return Split(queries, qrels), missing, len(query_ids) - len(queries)


def _index(positions: list[int], position: int) -> int | None:
    """Rank of ``position`` in the sorted ``positions``, or None when absent."""
    i = bisect.bisect_left(positions, position)
    return i if i < len(positions) and positions[i] == position else None


def build(source: Path) -> Dataset:
    """The dataset from the raw files in ``source`` (see the module docstring)."""
    source = Path(source)
    topics = {split: read_topics(source / name) for split, name in TOPICS.items()}
    relevant = {split: read_relevant(source / name, topics[split]) for split, name in QRELS.items()}
    test_ids = list(relevant["dev"])
    dev_ids, train_ids = held_out(list(relevant["train"]), len(test_ids))
    judged = {
        article
        for by_query in relevant.values()
        for pairs in by_query.values()
        for article, _ in pairs
    }
    shards = shard_paths(source)
    scan = scan_corpus(shards, judged)
    splits: dict[str, Split] = {}
    missing = dropped = 0
    for name, ids, origin in (
        ("train", train_ids, "train"),
        ("dev", dev_ids, "train"),
        ("test", test_ids, "dev"),
    ):
        split, lost, gone = _split(ids, relevant[origin], topics[origin], scan)
        splits[name] = split
        missing += lost
        dropped += gone
    notes: tuple[str, ...] = ()
    if missing:
        notes = (
            f"{missing} relevant judgements name passages that are not in the corpus "
            f"({scan.articles} articles, {scan.passages} passages); they were dropped, and "
            f"with them {dropped} queries left without a relevant passage",
        )
    return Dataset(NAME, Corpus(partial(documents, shards)), splits, notes=notes)


class Miracl(Adapter):
    name = NAME
    origin = (
        "MIRACL v1.0 English (Apache-2.0): corpus https://huggingface.co/datasets/miracl/"
        "miracl-corpus, topics and qrels https://huggingface.co/datasets/miracl/miracl"
    )
    raw_files = (
        *(
            RawFile(name, TOPICS_URL.format(name=name), None, "MIRACL English topics")
            for name in TOPICS.values()
        ),
        *(
            RawFile(name, QRELS_URL.format(name=name), None, "MIRACL English qrels")
            for name in QRELS.values()
        ),
        *(
            RawFile(
                f"{CORPUS_DIR}/docs-{i}.jsonl.gz",
                CORPUS_URL.format(path=f"{CORPUS_DIR}/docs-{i}.jsonl.gz"),
                None,
                "MIRACL English corpus shard",
            )
            for i in range(SHARDS)
        ),
    )
    hub_repo = "UKPLab/dapr"

    def build(self, source: Path) -> Dataset:
        self.require(source)
        return build(source)


adapter = Miracl()
