"""Any ir_datasets dataset as a dapr dataset: ``irds:<id>`` (and :func:`register`, the other way).

``load_dataset("irds:<id>", **options)``, or ``dataset: irds:<id>`` with ``dataset_args`` in an
experiment file, reads the ir_datasets dataset ``<id>`` (https://ir-datasets.com; one registered
in this process with ``ir_datasets.registry.register`` works the same way):

* corpus: the id's docs, read again on every pass. Docs that carry dapr's passage structure (a
  ``document_id`` field, as those :func:`register` exports do; ``position`` and ``is_candidate``
  when present) are passages, grouped into their documents in order. Any other doc is a
  document: by default a single passage with the doc's own id (the notes say so); with the
  option ``passage_words`` it is cut into windows of that many whitespace words starting every
  ``stride`` words (default ``passage_words``: no overlap), passage ids ``{doc_id}-{position}``;
* text: the doc's ``text`` field when its type has one, else its ``default_text()``; title: the
  ``title`` field, else empty. Queries likewise (``text``, else ``default_text()``);
* splits: the id's own queries and qrels, as the split ``split`` (default ``test``); an id without
  queries of its own takes those of its children ``<id>/train``, ``<id>/dev`` and ``<id>/test``.
  When documents are cut into passages, a judged document's grade goes to every passage of it;
* ``relevance_level`` (default 1) and ``language`` (default: the docs' language, else ``en``).

``irds:dapr/<name>`` reads a dapr dataset registered by :func:`register`, and registers the
dapr dataset ``<name>`` first when this process has not.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

from dapr.data import SPLITS, Corpus, Dataset, Document, Passage, Qrels, Queries, Split
from dapr.errors import DataError

IRDS = "irds:"
"""The prefix of a dataset name read through ir_datasets."""


@dataclass(frozen=True)
class Options:
    """What ``dataset_args`` may set for an ``irds:`` dataset (see the module docstring)."""

    passage_words: int | None = None
    stride: int | None = None
    split: str = "test"
    relevance_level: int = 1
    language: str | None = None


def irds_export() -> Any:
    """:mod:`dapr.datasets.irds_export` (which needs ir_datasets: a DaprError without it)."""
    from dapr.datasets import irds_export

    return irds_export


def check_irds(name: str, options: Mapping[str, Any]) -> Options:
    """``options`` checked for the ``irds:`` dataset ``name``, whose id must be known."""
    opened = _open(_dataset_id(name))
    if not opened.has_docs():
        raise DataError(f"dataset {name!r}: the ir_datasets dataset has no docs; name one that has")
    return _options(name, options)


def read_irds(name: str, **options: Any) -> Dataset:
    """The dapr dataset of ``irds:<id>`` (``name`` with or without the prefix)."""
    name = name if name.startswith(IRDS) else IRDS + name
    opts = check_irds(name, options)
    dataset_id = _dataset_id(name)
    opened = _open(dataset_id)
    fields_ = _fields(opened.docs_cls())
    structured = "document_id" in fields_
    if structured and opts.passage_words is not None:
        raise DataError(
            f"dataset {name!r}: its docs are passages of documents already; remove passage_words"
        )
    documents = _Documents(dataset_id, opts)
    sources = _split_sources(dataset_id, opened, opts.split)
    splits = {split: Split(_queries(source), _qrels(source)) for split, source in sources.items()}
    if opts.passage_words is not None:
        judged = {doc for s in splits.values() for items in s.qrels.values() for doc in items}
        counts = documents.passage_counts(judged)
        splits = {n: Split(s.queries, _to_passages(s.qrels, counts)) for n, s in splits.items()}
    notes: tuple[str, ...] = ()
    if not structured and opts.passage_words is None:
        notes = ("every doc of the ir_datasets dataset is one document of one passage",)
    elif not structured:
        notes = (
            f"docs cut into passages of {opts.passage_words} words every "
            f"{opts.stride or opts.passage_words}; a judged doc's grade goes to all its passages",
        )
    return Dataset(
        name=name,
        corpus=Corpus(documents),
        splits=splits,
        relevance_level=opts.relevance_level,
        notes=notes,
        language=opts.language or opened.docs_lang() or "en",
    )


def register(dataset: Dataset | str, name: str | None = None) -> list[str]:
    """Register ``dataset`` (or the dapr dataset of that name) in ir_datasets as
    ``dapr/<name>`` (its passages) and ``dapr/<name>/<split>`` (passages, queries, qrels);
    returns those ids. See :mod:`dapr.datasets.irds_export`."""
    return irds_export().register_dataset(dataset, name)


def windows(text: str, size: int, stride: int) -> list[str]:
    """``text`` as passages of ``size`` whitespace words starting every ``stride`` words, the
    last one reaching the end; one empty passage for a text without words."""
    words = text.split()
    out = []
    for start in range(0, max(len(words), 1), stride):
        out.append(" ".join(words[start : start + size]))
        if start + size >= len(words):
            break
    return out


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class _Documents:
    """The corpus source: documents made from the id's docs on every call (picklable)."""

    dataset_id: str
    options: Options

    def __call__(self) -> Iterator[Document]:
        opened = _open(self.dataset_id)
        fields_ = _fields(opened.docs_cls())
        docs = opened.docs_iter()
        if "document_id" in fields_:
            yield from _grouped(docs, fields_)
            return
        size = self.options.passage_words
        stride = self.options.stride or size
        for doc in docs:
            text, title = _text(doc, fields_), doc.title if "title" in fields_ else ""
            passages: tuple[Passage, ...]
            if size is None:
                passages = (Passage(doc.doc_id, doc.doc_id, 0, text),)
            else:
                passages = tuple(
                    Passage(f"{doc.doc_id}-{n}", doc.doc_id, n, part)
                    for n, part in enumerate(windows(text, size, stride or size))
                )
            yield Document(doc.doc_id, title, passages)

    def passage_counts(self, doc_ids: set[str]) -> dict[str, int]:
        """How many passages each of ``doc_ids`` is cut into (one pass over the docs)."""
        return {
            document.id: len(document.passages) for document in self() if document.id in doc_ids
        }


def _grouped(docs: Iterator[Any], fields_: tuple[str, ...]) -> Iterator[Document]:
    """Documents of consecutive passages sharing a ``document_id``, titled by the first."""
    for document_id, group in itertools.groupby(docs, key=lambda d: d.document_id):
        rows = list(group)
        passages = tuple(
            Passage(
                row.doc_id,
                document_id,
                int(row.position) if "position" in fields_ else n,
                _text(row, fields_),
                bool(row.is_candidate) if "is_candidate" in fields_ else True,
            )
            for n, row in enumerate(rows)
        )
        yield Document(document_id, rows[0].title if "title" in fields_ else "", passages)


def _to_passages(qrels: Qrels, counts: Mapping[str, int]) -> Qrels:
    """Document judgements given to every passage of the judged documents (``counts``: how many
    passages each has)."""
    return {
        qid: {f"{d}-{n}": grade for d, grade in items.items() for n in range(counts.get(d, 0))}
        for qid, items in qrels.items()
    }


def _split_sources(dataset_id: str, opened: Any, split: str) -> dict[str, Any]:
    """The ir_datasets datasets the splits come from: the id itself, else its children."""
    if opened.has_queries():
        return {split: opened}
    found = {}
    for child in SPLITS:
        try:
            candidate = _open(f"{dataset_id}/{child}")
        except DataError:
            continue
        if candidate.has_queries():
            found[child] = candidate
    return found


def _queries(source: Any) -> Queries:
    fields_ = _fields(source.queries_cls())
    return {query.query_id: _text(query, fields_) for query in source.queries_iter()}


def _qrels(source: Any) -> Qrels:
    """Graded judgements (a pair judged twice keeps the higher grade); none without qrels."""
    qrels: Qrels = {}
    if not source.has_qrels():
        return qrels
    for row in source.qrels_iter():
        judged = qrels.setdefault(row.query_id, {})
        grade = int(row.relevance)
        judged[row.doc_id] = max(grade, judged.get(row.doc_id, grade))
    return qrels


def _text(record: Any, fields_: tuple[str, ...]) -> str:
    return record.text if "text" in fields_ else record.default_text()


def _fields(cls: Any) -> tuple[str, ...]:
    return tuple(getattr(cls, "_fields", ()))


def _dataset_id(name: str) -> str:
    dataset_id = name.removeprefix(IRDS)
    if not dataset_id:
        raise DataError(f"dataset {name!r}: give an ir_datasets id after irds:, e.g. irds:vaswani")
    return dataset_id


def _open(dataset_id: str) -> Any:
    """The ir_datasets dataset ``dataset_id``; ``dapr/<name>[/<split>]`` is registered from the
    dapr dataset ``<name>`` on first use."""
    export = irds_export()
    registry = export.ir_datasets.registry
    found = _lookup(registry, dataset_id)
    parts = dataset_id.split("/")
    if found is None and parts[0] == export.NAMESPACE and len(parts) in (2, 3):
        from dapr.registry import datasets

        if parts[1] in datasets and _lookup(registry, f"{export.NAMESPACE}/{parts[1]}") is None:
            register(datasets.get(parts[1])(), parts[1])
            found = _lookup(registry, dataset_id)
    if found is not None:
        return found
    raise DataError(
        f"{IRDS}{dataset_id}: ir_datasets has no dataset {dataset_id!r}; give an id "
        "listed at https://ir-datasets.com or one registered with ir_datasets.registry.register"
    )


def _lookup(registry: Any, dataset_id: str) -> Any:
    try:
        return registry[dataset_id]
    except KeyError:
        return None


def _options(name: str, given: Mapping[str, Any]) -> Options:
    """``given`` as :class:`Options`, each checked, or a one-line DataError."""
    known = [f.name for f in fields(Options)]
    for key in given:
        if key not in known:
            raise DataError(
                f"dataset {name!r}: unknown option {key!r}; valid options: {', '.join(known)}"
            )
    opts = Options(**given)
    for key in ("passage_words", "stride"):
        value = getattr(opts, key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise DataError(f"dataset {name!r}: option {key!r} must be a positive integer")
    if opts.stride is not None and opts.passage_words is None:
        raise DataError(f"dataset {name!r}: option 'stride' needs passage_words; give both")
    if isinstance(opts.relevance_level, bool) or not isinstance(opts.relevance_level, int):
        raise DataError(f"dataset {name!r}: option 'relevance_level' must be an integer")
    for key in ("split", "language"):
        value = getattr(opts, key)
        if value is not None and (not isinstance(value, str) or not value):
            raise DataError(f"dataset {name!r}: option {key!r} must be a non-empty text")
    return opts
