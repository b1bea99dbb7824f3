"""A folder of plain-text or markdown documents, brought by the user, with queries and qrels.

Input: a folder holding ``.txt`` and ``.md`` files (searched recursively, in sorted order of
their relative paths; names starting with ``.`` are ignored), UTF-8 (a byte-order mark is
allowed). Queries and judgements come separately:

* ``queries=PATH``: ``qid<TAB>text`` lines, or JSON lines with ``_id`` and ``text`` when the file
  is named ``*.jsonl``;
* ``qrels=PATH``: TREC qrels (``qid 0 passage-id grade``) or BEIR TSV
  (``query-id<TAB>corpus-id<TAB>score``, header line optional), told apart by the first line;
* ``split=NAME`` (default ``test``): the split they make. Without both files there is no split.

Construction:

* document: one file. Its id is the path relative to the folder, ``/``-separated, without the
  suffix, whitespace runs turned into ``_`` (``notes/Meeting 1.md`` -> ``notes/Meeting_1``).
  Title: for ``.md``, a leading level-1 heading (``# Title``, or ``Title`` underlined with
  ``===``), which is then not a passage; otherwise, and for ``.txt``, the file name's stem;
* passage: a paragraph, the lines between blank lines, joined with every whitespace run made
  one space (markdown is otherwise kept as written, so later headings are passages of their
  own). Ids ``{doc_id}-{position}``, 0-based. Files without a paragraph are skipped (the notes
  count them);
* queries: those the qrels judge (the notes count the others); the grades as given, a pair
  judged twice keeping the higher. Options ``relevance_level`` (default 1) and ``language``
  (ISO 639-1 code, default ``en``).

Errors (one line naming the file and line): an empty or missing folder, a file that is not UTF-8,
two files giving one doc id, a malformed or repeated query, a malformed qrels line, and a qrels
line naming a query or passage that does not exist.

Licence: that of the documents the user brings.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from dapr.data_loaders.beir import id_of, is_integer

from dapr.data import Corpus, Dataset, Document, Passage, Qrels, Queries, Split
from dapr.datasets.adapter import LocalAdapter
from dapr.errors import DataError
from dapr.io.rows import jsonl_rows, judge, parse_number, required_field, text_lines

NAME = "text-folder"
SUFFIXES = (".txt", ".md")
_ATX_TITLE = re.compile(r"#[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*")
_SETEXT_RULE = re.compile(r"=+[ \t]*")
_QUERIES_NEEDS = "write qid<TAB>text lines (or JSON lines with _id and text in a *.jsonl file)"


# --------------------------------------------------------------------------- documents


def document_files(folder: Path) -> list[tuple[str, Path]]:
    """``(doc id, file)`` of every ``.txt`` and ``.md`` file, by relative path."""
    if not folder.is_dir():
        raise DataError(f"{folder}: not a directory; give a folder of .txt or .md documents")
    found = []
    for path in folder.rglob("*"):
        relative = path.relative_to(folder)
        if (
            path.suffix.lower() in SUFFIXES
            and path.is_file()
            and not any(part.startswith(".") for part in relative.parts)
        ):
            found.append((relative.as_posix(), path))
    if not found:
        raise DataError(
            f"{folder}: no .txt or .md files (searched recursively); put the documents there, "
            "one file per document"
        )
    files: list[tuple[str, Path]] = []
    first: dict[str, Path] = {}
    for relative, path in sorted(found):
        doc_id = id_of(relative[: -len(path.suffix)])
        if first.setdefault(doc_id, path) != path:
            raise DataError(
                f"{path}: gives doc id {doc_id!r}, as {first[doc_id]} does; rename one of them"
            )
        files.append((doc_id, path))
    return files


def read_text(path: Path) -> str:
    """A file's UTF-8 text (a byte-order mark dropped)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise DataError(
            f"{path}:{line}: not UTF-8 text (byte {e.start}); save the file as UTF-8"
        ) from None


def blocks(text: str) -> list[list[str]]:
    """Runs of non-blank lines."""
    found: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.strip():
            found[-1].append(line)
        elif found[-1]:
            found.append([])
    return [block for block in found if block]


def markdown_title(first: list[str]) -> tuple[str | None, list[str]]:
    """The level-1 heading opening a markdown file's first block, and the rest of that block."""
    atx = _ATX_TITLE.fullmatch(first[0].strip())
    if atx and atx.group(1).strip():
        return atx.group(1).strip(), first[1:]
    if len(first) >= 2 and _SETEXT_RULE.fullmatch(first[1].strip()):
        return first[0].strip(), first[2:]
    return None, first


def read_document(doc_id: str, path: Path) -> Document:
    """A file as its document (see the module docstring); it may have no passages."""
    found = blocks(read_text(path))
    title = None
    if path.suffix.lower() == ".md" and found:
        title, rest = markdown_title(found[0])
        found = ([rest] if rest else []) + found[1:]
    texts = [" ".join(" ".join(block).split()) for block in found]
    passages = tuple(Passage(f"{doc_id}-{i}", doc_id, i, text) for i, text in enumerate(texts))
    return Document(doc_id, title or path.stem, passages)


def documents(files: list[tuple[str, Path]]) -> Iterator[Document]:
    """The documents of the files that have a passage, re-read on every call."""
    for doc_id, path in files:
        document = read_document(doc_id, path)
        if document.passages:
            yield document


# --------------------------------------------------------------------------- queries, qrels


def read_queries(path: Path) -> Queries:
    """``qid<TAB>text`` lines, or JSON lines (``_id``, ``text``) in a ``*.jsonl`` file."""
    queries: Queries = {}
    first: dict[str, str] = {}
    for at, qid, text in _query_rows(path):
        if not qid:
            raise DataError(f"{at}: the query id is empty; {_QUERIES_NEEDS}")
        if not text.strip():
            raise DataError(f"{at}: query {qid!r} has an empty text; give every query a text")
        if first.setdefault(qid, at) != at:
            raise DataError(f"{at}: query id {qid!r} repeats {first[qid]}; give each a unique id")
        queries[qid] = text.strip()
    return queries


def _query_rows(path: Path) -> Iterator[tuple[str, str, str]]:
    if path.name.removesuffix(".gz").endswith(".jsonl"):
        for n, row in jsonl_rows(path):
            at = f"{path}:{n}"
            yield (
                at,
                required_field(row, "_id", str, at, _QUERIES_NEEDS).strip(),
                required_field(row, "text", str, at, _QUERIES_NEEDS),
            )
        return
    for n, line in text_lines(path):
        qid, tab, text = line.rstrip("\r\n").partition("\t")
        if not tab:
            raise DataError(f"{path}:{n}: no tab between query id and text; {_QUERIES_NEEDS}")
        yield f"{path}:{n}", qid.strip(), text


@dataclass(frozen=True)
class Known:
    """What qrels may name: the queries (from ``queries_file``), passages and documents."""

    queries: Queries
    queries_file: Path
    passages: set[str]
    documents: set[str]


def read_qrels(path: Path, known: Known) -> Qrels:
    """TREC qrels or a BEIR TSV (told apart by the first line), every id checked."""
    qrels: Qrels = {}
    beir: bool | None = None
    for n, line in text_lines(path):
        at = f"{path}:{n}"
        if beir is None:
            beir = line.count("\t") == 2
            if beir and not is_integer(line.rstrip("\r\n").split("\t")[2].strip()):
                continue  # the header: query-id corpus-id score
        qid, item, grade = _qrels_row(line, beir, at)
        if qid not in known.queries:
            raise DataError(
                f"{at}: query {qid!r} is not in {known.queries_file}; add it there or drop the line"
            )
        if item not in known.passages:
            hint = (
                f"; {item!r} is a document: judge its passages ({item}-0, {item}-1, ...)"
                if item in known.documents
                else "; passage ids are {doc_id}-{position}, positions from 0"
            )
            raise DataError(f"{at}: passage {item!r} is not in the corpus{hint}")
        judge(qrels, qid, item, grade)
    return qrels


def _qrels_row(line: str, beir: bool, at: str) -> tuple[str, str, int]:
    if beir:
        parts = [part.strip() for part in line.rstrip("\r\n").split("\t")]
        if len(parts) != 3 or not all(parts):
            raise DataError(
                f"{at}: expected 3 tab-separated columns (query-id, corpus-id, score) like the "
                f"first line, got {len(parts)}; write one judgement per line"
            )
        return parts[0], parts[1], parse_number(parts[2], int, at, "score")
    parts = line.split()
    if len(parts) != 4:
        raise DataError(
            f"{at}: expected 4 columns (qid 0 passage-id grade), got {len(parts)}; write one "
            "judgement per line, columns separated by whitespace (or a BEIR TSV)"
        )
    return parts[0], parts[2], parse_number(parts[3], int, at, "grade")


# --------------------------------------------------------------------------- the dataset


class TextFolder(LocalAdapter):
    name = NAME
    origin = (
        "your own folder of .txt/.md documents (paragraphs split at blank lines), with "
        "queries=PATH and qrels=PATH given separately: give its path"
    )
    path_help = "a folder of .txt/.md documents (with queries=PATH and qrels=PATH)"

    def build(
        self,
        source: Path,
        *,
        queries: Path | None = None,
        qrels: Path | None = None,
        split: str = "test",
        relevance_level: int = 1,
        language: str = "en",
    ) -> Dataset:
        """The dataset of the folder of documents ``source`` (see the module docstring).

        :param queries: A file of queries: ``qid<TAB>text`` lines or JSON lines.
        :param qrels: A file of judgements: TREC qrels or a BEIR TSV.
        :param split: The name of the split the queries make.
        :param relevance_level: The lowest grade that counts as relevant.
        :param language: The text's ISO 639-1 code (``en``, ``zh``...).
        """
        unsafe = split.startswith(".") or split != split.strip() or {"/", "\\"} & set(split)
        if not split or unsafe:  # the split name becomes a file name
            raise self.option_error("split", "a plain name (no path, no leading dot)", split)
        language = self.language_code(language)
        if (queries is None) != (qrels is None):
            given, missing = ("queries", "qrels") if qrels is None else ("qrels", "queries")
            raise DataError(
                f"dataset {NAME!r}: option {given!r} needs option {missing!r} too; give both "
                "files, or neither for a corpus without queries"
            )
        folder = Path(source)
        files = document_files(folder)
        passage_ids: set[str] = set()
        doc_ids: set[str] = set()
        empty = 0
        for doc_id, path in files:
            document = read_document(doc_id, path)
            empty += not document.passages
            doc_ids.add(doc_id)
            passage_ids.update(p.id for p in document.passages)
        if empty == len(files):
            raise DataError(f"{folder}: none of its {len(files)} files has any text; add documents")
        notes = ["documents are the files, passages their blank-line separated paragraphs"]
        if empty:
            notes.append(f"{empty} files without text skipped")
        splits = {}
        if queries is not None and qrels is not None:
            asked = read_queries(Path(queries))
            judged = read_qrels(Path(qrels), Known(asked, Path(queries), passage_ids, doc_ids))
            splits[split] = Split({qid: asked[qid] for qid in asked if qid in judged}, judged)
            if len(asked) > len(judged):
                notes.append(f"{len(asked) - len(judged)} queries without judgements left out")
        corpus = Corpus(partial(documents, files))
        return Dataset(
            NAME,
            corpus,
            splits,
            relevance_level=relevance_level,
            notes=tuple(notes),
            language=language,
        )


adapter = TextFolder()
