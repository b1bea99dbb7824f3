"""DuReader-retrieval: Chinese passage retrieval over Baidu web search results, from its raw files.

Source: https://github.com/baidu/DuReader/tree/master/DuReader-Retrieval (Qiu et al., EMNLP
2022, https://arxiv.org/abs/2203.10232). The JSON-lines release ``dureader_retrieval-data``
(from the page above) is read as it comes; the data is Baidu's, under the licence agreement
shipped with it (``License.docx``); the DuReader repository itself is Apache-2.0.

Input (``--source DIR``), every file JSON lines:

* ``passage_collection.json``: ``{"paragraph_id", "paragraph_text"}`` per line, the ~8M
  passages;
* ``dev.json`` and (optional) ``train.json``: ``{"question_id", "question",
  "answer_paragraphs": [{"paragraph_id", "paragraph_text"}, ...]}`` per line;
* ``dev_en.json`` (optional): the human-translated English dev queries for cross-lingual
  retrieval, records as in ``dev.json``; a record without ``answer_paragraphs`` takes the
  judgements of the dev query with the same ``question_id``;
* for the out-of-domain test sets, ``cmedqa/`` (medical questions, cMedQA) and ``ccovid/``
  (COVID-19 news, cCOVID-News), each with its own ``passage_collection.json`` and its
  ``test.json``, records as above.

The names of the optional cross-lingual and out-of-domain files are this adapter's: rename the
downloaded files to them if they come named otherwise.

Construction:

* document and passage: DuReader-retrieval has no document grouping, so every passage is its
  own document: doc id = passage id = ``paragraph_id``, title ``""``, position 0 (the ids stay
  the official ones rather than dapr's usual ``{doc_id}-{position}``). The corpus is streamed
  from the collection file on every pass;
* query: ``question``; relevance binary: every answer paragraph is judged 1;
* splits: option ``subset`` chooses the corpus and its queries. ``subset=main`` (default):
  ``dev`` from ``dev.json``, ``train`` from ``train.json`` and ``dev-en`` from ``dev_en.json``
  when those files are present (the official 4K test queries are unlabelled and not built);
  ``subset=cmedqa`` / ``subset=ccovid``: the out-of-domain set as split ``test`` over its own
  corpus, in a dataset named ``DuReader-retrieval-cmedqa`` / ``-ccovid`` (``dapr data build``
  writes it beside the main build's prepared copy, under that name).

Every line is checked; a missing file, a malformed line, a repeated passage id, or an answer
paragraph missing from the collection raises a one-line :class:`DataError` naming file and line.
Checking the collection keeps 8 bytes per passage and 18 per judgement in memory.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal

import numpy as np

from dapr.data import Corpus, Dataset, Document, Passage, Qrels, Queries, Split
from dapr.datasets.adapter import Adapter
from dapr.errors import DataError
from dapr.io.rows import add_query, check_type, jsonl_rows, judge, required_field

NAME = "DuReader-retrieval"
HOME = "https://github.com/baidu/DuReader/tree/master/DuReader-Retrieval"
COLLECTION = "passage_collection.json"
NO_GROUPING = (
    "DuReader-retrieval has no document grouping: every passage is its own document "
    "(document id = passage id, empty title)"
)
_PASSAGE_NEEDS = "every line needs paragraph_id and paragraph_text"
_QUERY_NEEDS = (
    "every line needs question_id, question and answer_paragraphs "
    "(a list of {paragraph_id, paragraph_text})"
)


@dataclass(frozen=True)
class Subset:
    """A corpus (in ``folder``) and its query files as ``(split, file, required)``."""

    folder: str
    queries: tuple[tuple[str, str, bool], ...]
    note: str


SubsetName = Literal["main", "cmedqa", "ccovid"]
"""Option ``subset``: a key of :data:`SUBSETS`."""
SUBSETS: dict[str, Subset] = {
    "main": Subset(
        "",
        (
            ("train", "train.json", False),
            ("dev", "dev.json", True),
            ("dev-en", "dev_en.json", False),
        ),
        "split dev-en holds the human-translated English dev queries (cross-lingual retrieval)",
    ),
    "cmedqa": Subset(
        "cmedqa",
        (("test", "test.json", True),),
        "subset cmedqa: the out-of-domain medical test set (cMedQA) over its own corpus",
    ),
    "ccovid": Subset(
        "ccovid",
        (("test", "test.json", True),),
        "subset ccovid: the out-of-domain COVID-19 news test set (cCOVID-News) over its own corpus",
    ),
}


# --------------------------------------------------------------------------- the collection


PassageReader = Callable[[Path], Iterator[tuple[str, str, str]]]
"""Reads ``(location, passage id, text)`` rows from a collection file."""


def passage_rows(path: Path) -> Iterator[tuple[str, str, str]]:
    """``(location, paragraph_id, paragraph_text)`` of every line of a collection file."""
    for n, row in jsonl_rows(path):
        at = f"{path}:{n}"
        pid = check_id(
            required_field(row, "paragraph_id", str, at, _PASSAGE_NEEDS), at, "paragraph_id"
        )
        yield at, pid, required_field(row, "paragraph_text", str, at, _PASSAGE_NEEDS)


def passage_documents(read: PassageReader, path: Path) -> Iterator[Document]:
    """Every passage of a collection as a document of its own (no grouping, no title)."""
    for _, pid, text in read(path):
        yield Document(pid, "", (Passage(pid, pid, 0, text),))


class IdRows:
    """The ``(location, id)`` rows of a collection, re-read on every iteration."""

    def __init__(self, read: PassageReader, path: Path):
        self.read = read
        self.path = path

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for at, pid, _ in self.read(self.path):
            yield at, pid


def check_id(value: str, at: str, field: str) -> str:
    """``value`` if it is a usable id: not empty, no whitespace (ids are TREC run columns)."""
    if not value or value.split() != [value]:
        raise DataError(
            f"{at}: field {field!r} is {value!r}, empty or holding whitespace; "
            "ids must be non-empty and free of whitespace"
        )
    return value


class JudgedPassages:
    """The passage ids that judgements name, kept as 8-byte hashes with the file and line of
    each judgement (a few bytes per judgement, not the ids)."""

    def __init__(self) -> None:
        self.hashes = array("q")
        self.lines = array("q")
        self.files = array("H")
        self.paths: list[Path] = []

    def add(self, pid: str, path: Path, line: int) -> None:
        if not self.paths or self.paths[-1] != path:
            self.paths.append(path)
        self.hashes.append(hash(pid))
        self.lines.append(line)
        self.files.append(len(self.paths) - 1)


def check_collection(
    rows: Iterable[tuple[str, str]],
    path: Path,
    judged: JudgedPassages,
    qrels: Iterable[Qrels],
    fix: str,
) -> None:
    """Check the ``(location, id)`` rows of a collection: no id twice, every judged id present.

    ``qrels`` (those ``judged`` records) name a missing id in the message, ``fix`` ends it.
    Memory: one 8-byte hash per row.
    """
    hashes = array("q")
    for _, pid in rows:
        hashes.append(hash(pid))
    ordered = np.sort(np.frombuffer(hashes, dtype=np.int64))
    named = np.frombuffer(judged.hashes, dtype=np.int64)
    missing = np.flatnonzero(~np.isin(named, ordered))
    if len(missing):
        first = int(missing[0])
        value = int(named[first])
        pid = next(i for q in qrels for judged_ in q.values() for i in judged_ if hash(i) == value)
        where = f"{judged.paths[judged.files[first]]}:{judged.lines[first]}"
        raise DataError(f"{where}: passage {pid!r} is not in {path}; {fix}")
    for value in np.unique(ordered[1:][ordered[1:] == ordered[:-1]]).tolist():
        _raise_if_repeated(rows, path, value)


def _raise_if_repeated(rows: Iterable[tuple[str, str]], path: Path, value: int) -> None:
    """Find the rows behind a repeated hash; raise if they share an id (not a mere collision)."""
    seen: dict[str, str] = {}
    for at, pid in rows:
        if hash(pid) != value:
            continue
        if pid in seen:
            raise DataError(
                f"{at}: passage id {pid!r} repeats {seen[pid]}; {path} must list each passage once"
            )
        seen[pid] = at


# --------------------------------------------------------------------------- queries


def read_queries(
    path: Path, judged: JudgedPassages, fallback: Qrels | None = None
) -> tuple[Queries, Qrels]:
    """Queries and qrels of a query file; the judged passages are recorded in ``judged``.

    With ``fallback``, a record without ``answer_paragraphs`` takes ``fallback``'s judgements
    of its ``question_id``.
    """
    queries: Queries = {}
    qrels: Qrels = {}
    for n, row in jsonl_rows(path):
        at = f"{path}:{n}"
        qid = check_id(required_field(row, "question_id", str, at, _QUERY_NEEDS), at, "question_id")
        add_query(
            queries, qid, required_field(row, "question", str, at, _QUERY_NEEDS), at, "question"
        )
        if fallback is not None and "answer_paragraphs" not in row:
            if qid not in fallback:
                raise DataError(
                    f"{at}: question {qid!r} has no answer_paragraphs and no dev query of that "
                    "id to take them from; give its answer_paragraphs"
                )
            qrels[qid] = dict(fallback[qid])
            continue
        answers = required_field(row, "answer_paragraphs", list, at, _QUERY_NEEDS)
        for answer in answers:
            check_type(answer, dict, at, "answer_paragraphs", _QUERY_NEEDS)
            pid = required_field(
                answer, "paragraph_id", str, at, _QUERY_NEEDS, prefix="answer_paragraphs[]."
            )
            judge(qrels, qid, check_id(pid, at, "paragraph_id"), 1)
            judged.add(pid, path, n)
    return queries, qrels


# --------------------------------------------------------------------------- the adapter


class DuReaderRetrieval(Adapter):
    """DuReader-retrieval built from its JSON-lines release (see the module)."""

    name = NAME
    origin = (
        f"Baidu's Chinese web-search passage retrieval benchmark, built from raw files ({HOME})"
    )
    raw_files = ()
    """The files needed depend on ``subset``; :meth:`build` checks them (see the module)."""
    hub_repo = None

    def build(self, source: Path, *, subset: SubsetName = "main") -> Dataset:
        """The dataset of ``subset`` from the release in ``source`` (see the module).

        :param subset: ``main`` (the web-search set) or an out-of-domain test set over its own
            corpus: ``cmedqa`` (medical) or ``ccovid`` (COVID-19).
        """
        spec = SUBSETS[subset]
        folder = Path(source) / spec.folder
        collection = folder / COLLECTION
        _require(collection)
        splits: dict[str, Split] = {}
        judged = JudgedPassages()
        for split, file_name, required in spec.queries:
            path = folder / file_name
            if not required and not path.is_file():
                continue
            _require(path)
            fallback = splits["dev"].qrels if split == "dev-en" else None
            splits[split] = Split(*read_queries(path, judged, fallback))
        fix = f"use the {COLLECTION} released with these queries"
        every_qrels = [s.qrels for s in splits.values()]
        check_collection(IdRows(passage_rows, collection), collection, judged, every_qrels, fix)
        notes = [NO_GROUPING]
        if subset != "main" or "dev-en" in splits:
            notes.append(spec.note)
        return Dataset(
            name=NAME if subset == "main" else f"{NAME}-{subset}",
            corpus=Corpus(partial(passage_documents, passage_rows, collection)),
            splits=splits,
            notes=tuple(notes),
            language="zh",
        )


def _require(path: Path) -> None:
    if not path.is_file():
        raise DataError(
            f"{path}: missing raw file of {NAME}; download the release from {HOME} "
            "and give its directory as --source"
        )


adapter = DuReaderRetrieval()
