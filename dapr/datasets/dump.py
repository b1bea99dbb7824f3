"""The original DAPR dump: ``corpus.jsonl`` and ``{train,dev,test}.jsonl``.

``corpus.jsonl`` holds one document per row, with its ``chunks``; each split file holds a query
and its judged chunks per row.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from dapr.data import SPLITS, Corpus, Dataset, Document, Passage, Qrels, Queries, Split
from dapr.errors import DataError
from dapr.io.checks import PassageTally
from dapr.io.files import dir_name
from dapr.io.rows import (
    add_query,
    check_type,
    jsonl_rows,
    judge,
    query_text,
    required_field,
    required_id,
    show,
)

_DUMP_CORPUS_NEEDS = "every corpus row needs id, title and chunks [{id, text}]"
_DUMP_SPLIT_NEEDS = (
    "every row needs query {id, text} and judged_chunks "
    "[{chunk {id, text}, judgement (integer), belonging_doc {id, title, chunks}}]"
)


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
    judged = {item for split in splits.values() for items in split.qrels.values() for item in items}
    corpus = Corpus(
        partial(_dump_documents, corpus_file, extra, judged, list(split_files.values()))
    )
    return Dataset(name or dir_name(path), corpus, splits, root=path)


def _dump_documents(
    corpus_file: Path,
    extra: dict[str, Document],
    judged: Collection[str] = frozenset(),
    split_files: Sequence[Path] = (),
) -> Iterator[Document]:
    """Documents of ``corpus.jsonl``, then the ``extra`` ones it does not contain.

    A complete pass also checks that chunk ids are unique and that every judged chunk is in
    the corpus.
    """
    seen: set[str] = set()
    tally = PassageTally(judged)
    for n, document in _corpus_rows(corpus_file):
        if document.id in seen:
            raise DataError(
                f"{corpus_file}:{n}: field 'id' {document.id!r} repeats an earlier document; "
                "give every document a unique id"
            )
        seen.add(document.id)
        for passage in document.passages:
            tally.add(passage.id)
        yield document
    for document in extra.values():
        if document.id not in seen:
            for passage in document.passages:
                tally.add(passage.id)
            yield document
    tally.check(partial(_chunk_ids, corpus_file, extra, seen), partial(_judged_chunks, split_files))


def _corpus_rows(corpus_file: Path) -> Iterator[tuple[int, Document]]:
    rows = jsonl_rows(corpus_file) if corpus_file.is_file() else iter(())
    for n, row in rows:
        yield n, _dump_document(row, f"{corpus_file}:{n}", _DUMP_CORPUS_NEEDS)


def _chunk_ids(
    corpus_file: Path, extra: dict[str, Document], in_corpus: set[str]
) -> Iterator[tuple[str, str]]:
    """``(where, chunk id)`` of every chunk, read again."""
    for n, document in _corpus_rows(corpus_file):
        for i, passage in enumerate(document.passages):
            yield f"{corpus_file}:{n}: chunks[{i}]", passage.id
    for document in extra.values():
        if document.id not in in_corpus:
            for i, passage in enumerate(document.passages):
                yield f"belonging_doc {document.id!r} (in a split file): chunks[{i}]", passage.id


def _judged_chunks(split_files: Sequence[Path]) -> Iterator[tuple[str, str]]:
    """``(where, chunk id)`` of every judged chunk of the split files, read again."""
    for path in split_files:
        for n, row in jsonl_rows(path):
            for i, judged in enumerate(row["judged_chunks"]):
                yield f"{path}:{n}: judged_chunks[{i}]", judged["chunk"]["id"]


def _dump_document(obj: dict[str, Any], at: str, needs: str, prefix: str = "") -> Document:
    """A dump document (``id``, ``title``, ``chunks``, optional ``candidate_chunk_ids``)."""
    doc_id = required_id(obj, "id", at, needs, prefix)
    title = required_field(obj, "title", str, at, needs, prefix)
    chunks = required_field(obj, "chunks", list, at, needs, prefix)
    candidates = _candidate_ids(obj, at, needs, prefix)
    passages = []
    for i, chunk in enumerate(chunks):
        where = f"{prefix}chunks[{i}]"
        check_type(chunk, dict, at, where, needs)
        chunk_id = required_id(chunk, "id", at, needs, where + ".")
        text = required_field(chunk, "text", str, at, needs, where + ".")
        is_candidate = candidates is None or chunk_id in candidates
        passages.append(Passage(chunk_id, doc_id, i, text, is_candidate))
    if candidates is not None:
        unknown = candidates - {p.id for p in passages}
        if unknown:
            raise DataError(
                f"{at}: field '{prefix}candidate_chunk_ids' names {show(min(unknown))}, which is "
                f"not a chunk of document {doc_id!r}; list only ids from its chunks"
            )
    return Document(doc_id, title, tuple(passages))


def _candidate_ids(obj: dict[str, Any], at: str, needs: str, prefix: str) -> set[str] | None:
    """The ids in ``candidate_chunk_ids``, or None when every chunk is a candidate."""
    ids = obj.get("candidate_chunk_ids")
    if ids is None:
        return None
    name = prefix + "candidate_chunk_ids"
    check_type(ids, list, at, name, needs)
    return {check_type(i, str, at, name, needs) for i in ids}


def _read_dump_split(path: Path, extra: dict[str, Document]) -> Split:
    """Queries and qrels of a dump split file; unseen ``belonging_doc``s are added to ``extra``."""
    needs = _DUMP_SPLIT_NEEDS
    queries: Queries = {}
    qrels: Qrels = {}
    for n, row in jsonl_rows(path):
        at = f"{path}:{n}"
        query = required_field(row, "query", dict, at, needs)
        qid = required_id(query, "id", at, needs, "query.")
        text = query_text(query, "text", qid, at, needs, "query.")
        add_query(queries, qid, text, at, "query.text")
        for i, judged in enumerate(required_field(row, "judged_chunks", list, at, needs)):
            prefix = f"judged_chunks[{i}]."
            check_type(judged, dict, at, prefix[:-1], needs)
            chunk = required_field(judged, "chunk", dict, at, needs, prefix)
            chunk_id = required_id(chunk, "id", at, needs, prefix + "chunk.")
            judge(qrels, qid, chunk_id, required_field(judged, "judgement", int, at, needs, prefix))
            doc = required_field(judged, "belonging_doc", dict, at, needs, prefix)
            doc_id = required_id(doc, "id", at, needs, prefix + "belonging_doc.")
            if doc_id not in extra:
                extra[doc_id] = _dump_document(doc, at, needs, prefix + "belonging_doc.")
    return Split(queries, qrels)
