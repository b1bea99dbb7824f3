"""T2Ranking: Chinese passage ranking with 4-level graded relevance, built from its raw files.

Source: https://github.com/THUIR/T2Ranking (Xie et al., SIGIR 2023,
https://arxiv.org/abs/2304.03679); the files are those of ``data/`` in the Hugging Face dataset
https://huggingface.co/datasets/THUIR/T2Ranking, licence Apache-2.0. Queries come from Sogou
search logs, passages from the pages several search engines returned for them.

Input (``--source DIR``, the ``data/`` folder), every file tab-separated UTF-8; a first line
whose first column is not an integer id is a header and skipped (the published files carry one):

* ``collection.tsv``: ``pid <TAB> passage`` (2,303,643 passages);
* ``queries.train.tsv``, ``queries.dev.tsv``: ``qid <TAB> query``;
* ``qrels.train.tsv``, ``qrels.dev.tsv``: TREC qrels ``qid 0 pid grade``, grades 0-3;
* optional ``qrels.retrieval.train.tsv`` / ``qrels.retrieval.dev.tsv``: ``qid <TAB> pid``, the
  pairs the official retrieval evaluation (MRR, recall) counts as relevant;
* optional ``queries.test.tsv`` with ``qrels.test.tsv``: the test split, built only when both are
  present (the published data has test queries but no test judgements).

Construction:

* document and passage: T2Ranking has no document grouping, so every passage is its own
  document: doc id = passage id = ``pid``, title ``""``, position 0 (the ids stay the official
  ones). The corpus is streamed from ``collection.tsv`` on every pass;
* relevance: the 4-level grades 0-3 of ``qrels.{split}.tsv``; ``relevance_level`` is 2, so
  grades 2 and 3 count as relevant for recall and MRR while nDCG uses the grades. A pair that
  ``qrels.retrieval.{split}.tsv`` lists as relevant but the graded file judges below 2 (or not
  at all) is raised to grade 2, so binary metrics count what the official evaluation counts
  (the notes give the number of such pairs when there are any);
* splits: ``train`` and ``dev`` as published (every query of the queries file, judged or not),
  ``test`` when its files are given.

Every line is checked; a missing file, a malformed line, a grade outside 0-3, a repeated passage
id, or a qrels line naming an unknown query or passage raises a one-line :class:`DataError`
naming file and line. Checking the collection keeps 8 bytes per passage and 18 per judgement in
memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

from dapr.data_loaders.dureader import (
    IdRows,
    JudgedPassages,
    check_collection,
    check_id,
    passage_documents,
)

from dapr.data import Corpus, Dataset, Qrels, Queries, Split
from dapr.datasets.adapter import Adapter, RawFile
from dapr.errors import DataError
from dapr.io.rows import add_query, judge, text_lines

NAME = "T2Ranking"
HOME = "https://github.com/THUIR/T2Ranking"
FILES = "https://huggingface.co/datasets/THUIR/T2Ranking/resolve/main/data"
COLLECTION = "collection.tsv"
GRADES = ("0", "1", "2", "3")
RELEVANT_FROM = 2
NO_GROUPING = (
    "T2Ranking has no document grouping: every passage is its own document "
    "(document id = passage id, empty title)"
)
GRADED = (
    "relevance grades 0-3: grades 2 and 3 count as relevant for recall and MRR, "
    "nDCG uses the grades"
)


def _raw(name: str) -> RawFile:
    return RawFile(name, f"{FILES}/{name}")


# --------------------------------------------------------------------------- tab-separated rows


def tsv_rows(path: Path, columns: int, needs: str) -> Iterator[tuple[str, list[str]]]:
    """``(location, fields)`` of every line: the first ``columns - 1`` tab-separated fields and
    the rest of the line; a header line (first field not an integer) is skipped."""
    first = True
    for n, line in text_lines(path):
        fields = line.rstrip("\r\n").split("\t", columns - 1)
        if first and not fields[0].strip().isdigit():
            first = False
            continue
        first = False
        at = f"{path}:{n}"
        if len(fields) != columns:
            raise DataError(
                f"{at}: {len(fields)} tab-separated fields, expected {columns}; {needs}"
            )
        yield at, fields


def _passage_rows(path: Path) -> Iterator[tuple[str, str, str]]:
    for at, (pid, text) in tsv_rows(path, 2, "write pid<TAB>passage"):
        yield at, check_id(pid, at, "pid"), text


def read_queries(path: Path) -> Queries:
    queries: Queries = {}
    for at, (qid, text) in tsv_rows(path, 2, "write qid<TAB>query"):
        add_query(queries, check_id(qid, at, "qid"), text, at, "query")
    return queries


def _qrels_fields(path: Path, columns: int, needs: str) -> Iterator[tuple[int, str, list[str]]]:
    """``(line, location, fields)`` of whitespace-separated qrels lines (TREC style), a header
    skipped as in :func:`tsv_rows`."""
    first = True
    for n, line in text_lines(path):
        fields = line.split()
        if first and fields and not fields[0].isdigit():
            first = False
            continue
        first = False
        at = f"{path}:{n}"
        if len(fields) != columns:
            raise DataError(f"{at}: {len(fields)} fields, expected {columns}; {needs}")
        yield n, at, fields


def read_qrels(path: Path, queries: Queries, judged: JudgedPassages) -> Qrels:
    """Graded judgements ``qid 0 pid grade``; the judged passages are recorded in ``judged``."""
    needs = "write qid 0 pid grade (grade 0, 1, 2 or 3)"
    qrels: Qrels = {}
    for n, at, (qid, _, pid, grade) in _qrels_fields(path, 4, needs):
        if grade not in GRADES:
            raise DataError(f"{at}: grade {grade!r} is not one of 0, 1, 2, 3; {needs}")
        _known_query(qid, queries, at)
        judge(qrels, qid, check_id(pid, at, "pid"), int(grade))
        judged.add(pid, path, n)
    return qrels


def add_retrieval_qrels(path: Path, queries: Queries, qrels: Qrels, judged: JudgedPassages) -> int:
    """Raise the pairs of a retrieval qrels file to at least grade 2; how many were raised."""
    raised = 0
    for n, at, (qid, pid) in _qrels_fields(path, 2, "write qid<TAB>pid"):
        _known_query(qid, queries, at)
        pairs = qrels.setdefault(qid, {})
        if pairs.get(check_id(pid, at, "pid"), -1) < RELEVANT_FROM:
            pairs[pid] = RELEVANT_FROM
            raised += 1
        judged.add(pid, path, n)
    return raised


def _known_query(qid: str, queries: Queries, at: str) -> None:
    if qid not in queries:
        raise DataError(
            f"{at}: query {qid!r} is not in the queries file of this split; "
            "judge only the split's queries"
        )


# --------------------------------------------------------------------------- the adapter


class T2Ranking(Adapter):
    """T2Ranking built from the files of its Hugging Face dataset (see the module)."""

    name = NAME
    origin = f"THUIR's Chinese passage ranking benchmark, graded 0-3, built from raw files ({HOME})"
    raw_files = tuple(
        _raw(name)
        for name in (
            COLLECTION,
            "queries.train.tsv",
            "queries.dev.tsv",
            "qrels.train.tsv",
            "qrels.dev.tsv",
        )
    )
    hub_repo = None

    def build(self, source: Path) -> Dataset:
        self.require(source)
        source = Path(source)
        splits: dict[str, Split] = {}
        judged = JudgedPassages()
        notes = [NO_GROUPING, GRADED]
        for split in ("train", "dev", "test"):
            queries_file = source / f"queries.{split}.tsv"
            qrels_file = source / f"qrels.{split}.tsv"
            if split == "test" and not (queries_file.is_file() and qrels_file.is_file()):
                continue
            queries = read_queries(queries_file)
            qrels = read_qrels(qrels_file, queries, judged)
            retrieval = source / f"qrels.retrieval.{split}.tsv"
            if retrieval.is_file():
                raised = add_retrieval_qrels(retrieval, queries, qrels, judged)
                if raised:
                    notes.append(
                        f"{retrieval.name} lists as relevant {raised} pair(s) that "
                        f"{qrels_file.name} grades below 2 or not at all: raised to grade 2"
                    )
            splits[split] = Split(queries, qrels)
        collection = source / COLLECTION
        fix = f"use the {COLLECTION} published with these qrels"
        every_qrels = [s.qrels for s in splits.values()]
        check_collection(IdRows(_passage_rows, collection), collection, judged, every_qrels, fix)
        return Dataset(
            name=NAME,
            corpus=Corpus(partial(passage_documents, _passage_rows, collection)),
            splits=splits,
            relevance_level=RELEVANT_FROM,
            notes=tuple(notes),
            language="zh",
        )


adapter = T2Ranking()
