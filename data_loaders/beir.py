"""A folder in the BEIR format, brought by the user (https://github.com/beir-cellar/beir).

Input, as the BEIR benchmark ships every dataset (each file may also be gzip-compressed,
``corpus.jsonl.gz`` and so on):

* ``corpus.jsonl``: one entry per line, ``_id`` and ``text``, optional ``title`` and ``metadata``;
* ``queries.jsonl``: ``_id`` and ``text`` per line;
* ``qrels/{split}.tsv``: ``query-id <TAB> corpus-id <TAB> score``, after a header line.

Construction:

* passage: one corpus entry, text as given. Its id stays the entry's ``_id``, the id the qrels
  (and any BEIR run) use, rather than dapr's usual ``{doc_id}-{position}``;
* document: BEIR has no document grouping, so by default every entry is its own document
  (doc id = ``_id``, title = the entry's title) and the dataset's notes say so.
  ``group_by=title`` makes a document of the entries sharing a title (for collections whose
  titles name the source document); ``group_by=FIELD`` groups by ``metadata[FIELD]`` and titles
  the document with its first entry's title. Grouped documents come in order of their first
  entry, their passages in file order; the doc id is the group's key with whitespace runs
  turned into ``_``. Grouping holds the corpus in memory; ungrouped corpora are streamed;
* splits: one per qrels file, named after it (``test.tsv`` -> ``test``); a split's queries are
  the queries its qrels judge; the score is the grade (a pair judged twice keeps the higher).
  Options ``relevance_level`` (lowest relevant grade, default 1) and ``language`` (ISO 639-1
  code, default ``en``); ``group_by`` is ``none`` (the default), ``title`` or a metadata field.

Every line is checked; a missing file, a malformed row, a repeated id or a qrels row naming an
unknown query or corpus entry raises a one-line :class:`DataError` naming file and line.

Licence: that of the data the user brings (each BEIR dataset keeps its own).

This module also holds the helpers (ids, split order) the other adapters of the user's own data
(``squad``, ``text-folder``) share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from dapr.data import SPLITS, Corpus, Dataset, Document, Passage, Qrels, Queries, Split
from dapr.datasets.adapter import LocalAdapter
from dapr.errors import DataError
from dapr.io.rows import (
    jsonl_rows,
    judge,
    optional_field,
    parse_number,
    required_field,
    show,
    text_lines,
)

NAME = "beir"
_CORPUS_NEEDS = "every corpus.jsonl line needs _id and text (optional title and metadata)"
_QUERIES_NEEDS = "every queries.jsonl line needs _id and text"
_QRELS_NEEDS = "write query-id<TAB>corpus-id<TAB>score lines after the header"


# --------------------------------------------------------------------------- shared with the
# other adapters of the user's own data (squad, text-folder)


def id_of(key: str) -> str:
    """A document id from a title or key: whitespace runs become ``_`` (TREC files need that)."""
    return "_".join(key.split())


def split_order(names: list[str]) -> list[str]:
    """train, dev, test first, then the other split names alphabetically."""
    return [s for s in SPLITS if s in names] + sorted(set(names) - set(SPLITS))


# --------------------------------------------------------------------------- BEIR


@dataclass(frozen=True, slots=True)
class Entry:
    """One corpus line."""

    id: str
    title: str
    text: str
    metadata: dict[str, Any]
    at: str


def beir_file(folder: Path, name: str) -> Path:
    """``folder/name``, or its gzip-compressed ``name.gz``."""
    plain, packed = folder / name, folder / f"{name}.gz"
    if plain.is_file() and packed.is_file():
        raise DataError(f"{folder}: has both {name} and {name}.gz; keep only one")
    if plain.is_file() or packed.is_file():
        return plain if plain.is_file() else packed
    raise DataError(
        f"{plain}: no such file; a BEIR folder holds corpus.jsonl, queries.jsonl and "
        "qrels/{split}.tsv (each may be .gz)"
    )


def qrels_files(folder: Path) -> dict[str, Path]:
    """Split name -> ``qrels/{split}.tsv`` (or ``.tsv.gz``)."""
    found: dict[str, Path] = {}
    for path in sorted((folder / "qrels").glob("*.tsv*")):
        split = path.name.removesuffix(".gz").removesuffix(".tsv")
        if not path.is_file() or not path.name.endswith((".tsv", ".tsv.gz")):
            continue
        if split in found:
            raise DataError(f"{folder / 'qrels'}: has both {split}.tsv and {split}.tsv.gz")
        found[split] = path
    if not found:
        raise DataError(
            f"{folder / 'qrels'}: no {{split}}.tsv files; a BEIR folder holds "
            "qrels/test.tsv (and train.tsv, dev.tsv) with query-id, corpus-id, score columns"
        )
    return {split: found[split] for split in split_order(list(found))}


def corpus_entries(path: Path) -> Iterator[Entry]:
    """The checked lines of ``corpus.jsonl`` (ids are not checked for repeats here)."""
    for n, row in jsonl_rows(path):
        at = f"{path}:{n}"
        metadata = optional_field(row, "metadata", dict, at, _CORPUS_NEEDS, {})
        yield Entry(
            id=_nonempty(required_field(row, "_id", str, at, _CORPUS_NEEDS), at, "_id"),
            title=optional_field(row, "title", str, at, _CORPUS_NEEDS, ""),
            text=required_field(row, "text", str, at, _CORPUS_NEEDS),
            metadata=metadata,
            at=at,
        )


def _nonempty(value: str, at: str, field: str) -> str:
    if not value.strip():
        raise DataError(f"{at}: field {field!r} is empty; give every row an id")
    return value


def ungrouped_documents(path: Path) -> Iterator[Document]:
    """Every corpus entry as its own one-passage document, streamed."""
    for entry in corpus_entries(path):
        yield Document(entry.id, entry.title, (Passage(entry.id, entry.id, 0, entry.text),))


def unique_entries(path: Path, first_at: dict[str, str]) -> Iterator[Entry]:
    """The corpus entries, checked that no id repeats; ``first_at`` collects id -> location."""
    for entry in corpus_entries(path):
        if first_at.setdefault(entry.id, entry.at) != entry.at:
            raise DataError(
                f"{entry.at}: field '_id' {entry.id!r} repeats {first_at[entry.id]}; "
                "give every corpus entry a unique _id"
            )
        yield entry


def check_corpus(path: Path) -> set[str]:
    """The corpus ids, after a pass that checks every line and that no id repeats."""
    first_at: dict[str, str] = {}
    for _ in unique_entries(path, first_at):
        pass
    return set(first_at)


def group_key(entry: Entry, group_by: str) -> str:
    """The grouping key of an entry: its title, or ``metadata[group_by]``."""
    if group_by == "title":
        key, field, fix = entry.title, "title", "give every entry a title"
    else:
        key, field = entry.metadata.get(group_by), f"metadata.{group_by}"
        fix = f"give every entry metadata.{group_by}, or choose another group_by"
        if isinstance(key, int) and not isinstance(key, bool):
            key = str(key)
    if not isinstance(key, str) or not key.strip():
        raise DataError(
            f"{entry.at}: field {field!r} is missing or empty, got {show(key)}; "
            f"group_by={group_by} needs it to name the document ({fix})"
        )
    return key


def grouped_documents(path: Path, group_by: str) -> tuple[list[Document], set[str]]:
    """Documents of the entries sharing a group key (in memory), and the corpus ids."""
    groups: dict[str, list[Entry]] = {}
    key_of_id: dict[str, str] = {}
    first_at: dict[str, str] = {}
    for entry in unique_entries(path, first_at):
        key = group_key(entry, group_by)
        doc_id = id_of(key)
        if key_of_id.setdefault(doc_id, key) != key:
            raise DataError(
                f"{entry.at}: group {key!r} and group {key_of_id[doc_id]!r} both make doc id "
                f"{doc_id!r} (whitespace becomes _); make the {group_by} values distinct"
            )
        groups.setdefault(doc_id, []).append(entry)
    documents = [
        Document(
            doc_id,
            entries[0].title,
            tuple(Passage(e.id, doc_id, i, e.text) for i, e in enumerate(entries)),
        )
        for doc_id, entries in groups.items()
    ]
    return documents, set(first_at)


def read_queries(path: Path) -> Queries:
    queries: Queries = {}
    first: dict[str, str] = {}
    for n, row in jsonl_rows(path):
        at = f"{path}:{n}"
        qid = _nonempty(required_field(row, "_id", str, at, _QUERIES_NEEDS), at, "_id")
        text = required_field(row, "text", str, at, _QUERIES_NEEDS)
        if first.setdefault(qid, at) != at:
            raise DataError(
                f"{at}: field '_id' {qid!r} repeats {first[qid]}; give every query a unique _id"
            )
        queries[qid] = text
    return queries


def read_qrels(
    path: Path, known_query: Callable[[str], bool], known_item: Callable[[str], bool]
) -> Qrels:
    """A BEIR qrels TSV; the header line (a non-integer score) is skipped when it comes first."""
    qrels: Qrels = {}
    first = True
    for n, line in text_lines(path):
        at = f"{path}:{n}"
        parts = [part.strip() for part in line.rstrip("\r\n").split("\t")]
        if len(parts) != 3:
            raise DataError(
                f"{at}: expected 3 tab-separated columns (query-id, corpus-id, score), "
                f"got {len(parts)}; {_QRELS_NEEDS}"
            )
        qid, item, score = parts
        if first and not is_integer(score):
            first = False
            continue  # the header: query-id corpus-id score
        first = False
        grade = parse_number(score, int, at, "score")
        if not known_query(qid):
            raise DataError(
                f"{at}: query-id {qid!r} is not in queries.jsonl; add the query or drop the row"
            )
        if not known_item(item):
            raise DataError(
                f"{at}: corpus-id {item!r} is not in corpus.jsonl; add the entry or drop the row"
            )
        judge(qrels, qid, item, grade)
    return qrels


def is_integer(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


class Beir(LocalAdapter):
    name = NAME
    origin = (
        "your own BEIR-format folder (corpus.jsonl, queries.jsonl, qrels/{split}.tsv; "
        "https://github.com/beir-cellar/beir): give its path"
    )
    path_help = "a BEIR folder (corpus.jsonl, queries.jsonl, qrels/{split}.tsv)"

    def build(
        self,
        source: Path,
        *,
        group_by: str | None = None,
        relevance_level: int = 1,
        language: str = "en",
    ) -> Dataset:
        """The dataset of the BEIR folder ``source`` (see the module docstring).

        :param group_by: What makes entries one document: ``title``, a metadata field, or
            ``none`` (None: each entry is a document of its own).
        :param relevance_level: The lowest grade that counts as relevant.
        :param language: The text's ISO 639-1 code (``en``, ``zh``...).
        """
        if group_by is not None and not group_by.strip():
            raise self.option_error("group_by", "none, title or a metadata field", group_by)
        group_by = None if group_by == "none" else group_by
        language = self.language_code(language)
        folder = Path(source)
        if not folder.is_dir():
            raise DataError(
                f"{folder}: not a directory; give a BEIR folder (corpus.jsonl, queries.jsonl, "
                "qrels/{split}.tsv)"
            )
        corpus_file = beir_file(folder, "corpus.jsonl")
        queries_file = beir_file(folder, "queries.jsonl")
        qrels_paths = qrels_files(folder)
        if group_by is None:
            ids = check_corpus(corpus_file)
            corpus = Corpus(partial(ungrouped_documents, corpus_file))
            notes = ("every corpus entry is its own document: BEIR has no document grouping",)
        else:
            documents, ids = grouped_documents(corpus_file, group_by)
            corpus = Corpus(documents)
            what = "title" if group_by == "title" else f"metadata field {group_by!r}"
            notes = (f"documents group the corpus entries sharing a {what} (group_by={group_by})",)
        queries = read_queries(queries_file)
        splits = {}
        for split, path in qrels_paths.items():
            qrels = read_qrels(path, queries.__contains__, ids.__contains__)
            splits[split] = Split({qid: queries[qid] for qid in qrels}, qrels)
        return Dataset(
            NAME, corpus, splits, relevance_level=relevance_level, notes=notes, language=language
        )


adapter = Beir()
