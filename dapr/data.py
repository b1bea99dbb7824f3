"""The values that flow between dapr's steps: documents, passages, queries, qrels and runs."""

from __future__ import annotations

import hashlib
import struct
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Protocol

import numpy as np

from dapr.errors import DaprError
from dapr.ids import CorpusIds, IdColumn, IdIndex, ScannedIds, hash_seed

Queries = dict[str, str]
"""Query id -> query text."""
Qrels = dict[str, dict[str, int]]
"""Query id -> item id -> graded relevance (the shape pytrec_eval reads)."""

SPLITS = ("train", "dev", "test")
"""The split names a dataset may have."""
RANKING = "score desc, id desc"
"""How a :class:`Run` orders its rows (see :func:`rank_order`); part of every cached run's key,
so runs stored under another rule are computed again."""


@dataclass(frozen=True, slots=True)
class Passage:
    """One retrievable unit of a document, at its position (0-based) in reading order."""

    id: str
    """Unique in the corpus: what runs and qrels name."""
    doc_id: str
    """The :class:`Document` it belongs to."""
    position: int
    text: str
    is_candidate: bool = True
    """False for a passage that is context only: part of its document's text, never retrieved."""


@dataclass(frozen=True, slots=True)
class Document:
    """A titled document made of ordered passages."""

    id: str
    title: str
    passages: tuple[Passage, ...]
    """In reading order, ``passages[i].position == i``."""

    TEXT = "passages joined by spaces, no title"
    """How :attr:`text` is made (part of document-level cache keys)."""

    @property
    def text(self) -> str:
        """The whole document as one text, as the DAPR reference code gives it to document-level
        retrievers: every passage (candidate or not) joined by a space, without the title."""
        return " ".join(p.text for p in self.passages).strip()


class Record(Protocol):
    """Where a corpus's fingerprint and ids are kept between processes."""

    def recall(self) -> tuple[str, CorpusIds] | None:
        """The kept fingerprint and ids, if they can be trusted."""

    def keep(self, fingerprint: str, ids: CorpusIds) -> None:
        """Keep what a full read found."""


@dataclass(frozen=True)
class Split:
    """The queries of one split and their graded judgements."""

    queries: Queries
    """Query id -> query text."""
    qrels: Qrels
    """Query id -> passage id -> grade."""


class Corpus:
    """Documents in a fixed order, streamed from their source every time they are iterated.

    ``source`` is either a sequence of documents or a function returning a fresh iterator, so
    a corpus larger than memory is read once per pass and never held whole. One pass gives
    both :attr:`fingerprint` and :attr:`ids`, whichever is asked for first; with a ``record``
    (a dataset directory's, :mod:`dapr.datasets.record`) they come from it when it can be
    trusted, and a full read writes it for the next process.
    """

    def __init__(
        self,
        source: Sequence[Document] | Callable[[], Iterable[Document]],
        record: Record | None = None,
    ):
        self._source = source
        self._scanned: ScannedIds | None = None
        self._record = record
        self._recalled: bool | None = None

    def __iter__(self) -> Iterator[Document]:
        yield from (self._source() if callable(self._source) else self._source)

    def passages(self) -> Iterator[Passage]:
        """Every passage, document by document in corpus order."""
        for document in self:
            yield from document.passages

    @cached_property
    def ids(self) -> CorpusIds:
        """Passage ids, document ids and the passage -> document map, as compact arrays."""
        if self._scanned is None and self._recall():
            return self.__dict__["ids"]
        if self._scanned is None:
            self._scan()
        scanned, self._scanned = self._scanned, None
        assert scanned is not None  # _scan() keeps the ids until they are asked for
        indexes = {}
        for kind, listed in (("passage", scanned.passages), ("document", scanned.documents)):
            indexes[kind] = index = IdIndex(listed, scanned.take_hashes(kind))
            repeated = index.first_repeat()
            if repeated is not None:
                raise DaprError(
                    f"{kind} id {repeated!r} is used twice in the corpus; give every {kind} a "
                    "unique id"
                )
        sizes = scanned.sizes
        ids = CorpusIds(
            passage_ids=scanned.passages,
            doc_ids=scanned.documents,
            doc_of=np.repeat(np.arange(len(sizes), dtype=np.int64), sizes),
        )
        ids._indexes.update(indexes)
        if self._record is not None:
            self._record.keep(self.__dict__["fingerprint"], ids)
        return ids

    @cached_property
    def fingerprint(self) -> str:
        """A content hash of every id, title, text and candidate flag, in order."""
        if self._recall():
            return self.__dict__["fingerprint"]
        fingerprint = self._scan()
        if self._record is not None:
            self.ids  # noqa: B018 - the record holds both: write it now
        return fingerprint

    def _recall(self) -> bool:
        """Whether the record gave :attr:`fingerprint` and :attr:`ids` (asked once)."""
        if self._recalled is None:
            found = self._record.recall() if self._record is not None else None
            if found is not None:
                self.__dict__["fingerprint"], self.__dict__["ids"] = found
            self._recalled = found is not None
        return self._recalled

    def _scan(self) -> str:
        """One pass: the fingerprint (returned and cached) and, unless :attr:`ids` is known,
        the ids it is built from (kept until it is)."""
        digest = hashlib.sha256()
        passages, documents, sizes = IdColumn(), IdColumn(), array("q")
        for document in self:
            digest.update(_framed("D", document.id, document.title))
            documents.add(document.id)
            sizes.append(len(document.passages))
            for p in document.passages:
                digest.update(
                    _framed("P", p.id, str(p.position), p.text, "1" if p.is_candidate else "0")
                )
                passages.add(p.id)
        fingerprint = self.__dict__["fingerprint"] = digest.hexdigest()[:16]
        if "ids" not in self.__dict__:
            sizes_array = np.frombuffer(sizes, dtype=np.int64) if sizes else np.zeros(0, np.int64)
            passage_ids, passage_hashes = passages.finish()
            doc_ids, doc_hashes = documents.finish()
            hashes = {"passage": passage_hashes, "document": doc_hashes}
            self._scanned = ScannedIds(passage_ids, doc_ids, sizes_array, hash_seed(), hashes)
        return fingerprint


@dataclass
class Dataset:
    """A corpus with queries and qrels per split.

    ``labels`` maps a query id to its categories (NQ-hard's CR, MT, MHR, AC, or any grouping a
    dataset provides) for per-category analysis. ``relevance_level`` is the lowest grade that
    counts as relevant for binary metrics (recall, MRR); nDCG always uses the grades.
    ``notes`` are facts about the construction that statistics should show (for example, that
    every passage is its own document because the source has no document grouping).
    ``language`` (an ISO 639-1 code) lets a retriever choose its tokenizer (jieba for ``zh``).
    ``root`` is the directory it was read from, where published extras such as the hub's
    ``keyphrases/`` and ``corpus_coref/`` tables live.
    """

    name: str
    corpus: Corpus
    splits: dict[str, Split] = field(default_factory=dict)
    labels: dict[str, tuple[str, ...]] = field(default_factory=dict)
    relevance_level: int = 1
    notes: tuple[str, ...] = ()
    language: str = "en"
    root: Path | None = field(default=None, compare=False)

    def split(self, name: str) -> Split:
        """The split ``name``; a :class:`~dapr.errors.DaprError` naming those there are if it is
        missing."""
        if name not in self.splits:
            have = ", ".join(self.splits) or "none"
            raise DaprError(f"dataset {self.name!r} has no split {name!r}; choose from: {have}")
        return self.splits[name]

    @cached_property
    def fingerprint(self) -> str:
        """A content hash of the corpus and of every split's queries and qrels."""
        digest = hashlib.sha256(self.corpus.fingerprint.encode())
        for name in sorted(self.splits):
            split = self.splits[name]
            _feed(digest, "S", name)
            for qid in sorted(split.queries):
                _feed(digest, "Q", qid, split.queries[qid])
            for qid in sorted(split.qrels):
                for item, grade in sorted(split.qrels[qid].items()):
                    _feed(digest, "J", qid, item, str(grade))
        for qid in sorted(self.labels):
            labels = self.labels[qid]
            _feed(digest, "L", qid, str(len(labels)), *labels)
        _feed(digest, "R", str(self.relevance_level), self.language)
        return digest.hexdigest()[:16]


def _feed(digest: hashlib._Hash, *fields: str) -> None:
    digest.update(_framed(*fields))


_LENGTH = struct.Struct("<Q").pack


def _framed(*fields: str) -> bytes:
    """Each field's UTF-8 length (8 bytes, little-endian), then its bytes."""
    parts = []
    for value in fields:
        data = value.encode()
        parts.append(_LENGTH(len(data)))
        parts.append(data)
    return b"".join(parts)


@dataclass(frozen=True, eq=False)
class Run:
    """Ranked lists of scored items, one per query, stored column-wise.

    Query ``queries[q]`` owns rows ``offsets[q]:offsets[q + 1]``; each row is an item (a code into
    ``vocab``) and its score. Within a query rows are in rank order: descending score, ties by
    descending item id (as trec_eval orders them). Build one with :meth:`from_dict` or
    :meth:`from_lists`.
    """

    queries: np.ndarray
    offsets: np.ndarray
    items: np.ndarray
    scores: np.ndarray
    vocab: np.ndarray

    @classmethod
    def from_lists(
        cls,
        queries: Sequence[str] | np.ndarray,
        items: Sequence[np.ndarray],
        scores: Sequence[np.ndarray],
        vocab: np.ndarray,
    ) -> Run:
        """A run from per-query arrays of item codes and scores, in any order (each query's rows
        are put in rank order): what a retriever's ``search`` builds without a dict per query.

        :param queries: The query ids.
        :param items: For each query, its items as codes into ``vocab`` (integers).
        :param scores: For each query, its items' scores, aligned with ``items``.
        :param vocab: The item ids the codes index (an array of ``str``).
        """
        lengths = np.fromiter((len(x) for x in items), dtype=np.int64, count=len(items))
        offsets = np.zeros(len(items) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat_items = np.concatenate(items).astype(np.int64) if items else np.zeros(0, np.int64)
        flat_scores = (
            np.concatenate(scores).astype(np.float64) if scores else np.zeros(0, np.float64)
        )
        # the vocabulary cut to the items ranked: an index's ids can be the whole corpus
        flat_items, ranked = _ranked_only(flat_items, vocab)
        ranked = np.asarray(ranked, dtype=object)
        order = rank_order(offsets, flat_items, flat_scores, ranked)
        return cls(
            queries=np.array(list(queries), dtype=object),
            offsets=offsets,
            items=flat_items[order],
            scores=flat_scores[order],
            vocab=ranked,
        )

    @classmethod
    def from_dict(cls, run: Mapping[str, Mapping[str, float]]) -> Run:
        """A run from ``{query_id: {item_id: score}}``."""
        vocab: dict[str, int] = {}
        items, scores = [], []
        for ranked in run.values():
            items.append(np.array([vocab.setdefault(i, len(vocab)) for i in ranked], np.int64))
            scores.append(np.fromiter(ranked.values(), dtype=np.float64, count=len(ranked)))
        return cls.from_lists(list(run), items, scores, np.array(list(vocab), dtype=object))

    def __len__(self) -> int:
        return len(self.queries)

    def ranking(self, q: int) -> tuple[np.ndarray, np.ndarray]:
        """Item ids and scores of the ``q``-th query, in rank order."""
        rows = slice(self.offsets[q], self.offsets[q + 1])
        return self.vocab[self.items[rows]], self.scores[rows]

    def to_dict(self) -> dict[str, dict[str, float]]:
        """``{query_id: {item_id: score}}`` in rank order, the shape pytrec_eval reads."""
        out = {}
        for q, qid in enumerate(self.queries):
            ids, scores = self.ranking(q)
            out[qid] = dict(zip(ids.tolist(), scores.tolist()))
        return out

    def not_finite(self) -> tuple[str, str, float] | None:
        """The first ``(query, item, score)`` whose score is NaN or infinite, if any."""
        finite = np.isfinite(self.scores)
        if finite.all():
            return None
        row = int(np.argmin(finite))
        query = self.queries[int(np.searchsorted(self.offsets, row, side="right")) - 1]
        return str(query), str(self.vocab[self.items[row]]), float(self.scores[row])

    def top(self, k: int) -> Run:
        """The first ``k`` items of every query."""
        lengths = np.minimum(np.diff(self.offsets), k)
        keep = np.concatenate(
            [np.arange(s, s + n) for s, n in zip(self.offsets[:-1], lengths)] or [np.empty(0)]
        ).astype(np.int64)
        offsets = np.zeros_like(self.offsets)
        np.cumsum(lengths, out=offsets[1:])
        return Run(self.queries, offsets, self.items[keep], self.scores[keep], self.vocab)

    def compact(self) -> Run:
        """This run with ``vocab`` cut to the items it ranks (their codes renumbered in
        ``vocab`` order); itself when it holds no other."""
        if len(np.unique(self.items)) == len(self.vocab):
            return self
        items, vocab = _ranked_only(self.items, self.vocab)
        return Run(self.queries, self.offsets, items, self.scores, vocab)

    def save(self, path: Path) -> None:
        """Store as ``.npz`` (no pickling; ids as fixed-width unicode; only the ids ranked)."""
        run = self.compact()
        np.savez(
            path,
            queries=np.asarray(run.queries, dtype=object).astype(str),
            offsets=run.offsets,
            items=run.items,
            scores=run.scores,
            vocab=np.asarray(run.vocab, dtype=object).astype(str),
        )

    @classmethod
    def load(cls, path: Path) -> Run:
        """A run that :meth:`save` stored."""
        with np.load(path, allow_pickle=False) as z:
            return cls(
                queries=z["queries"].astype(object),
                offsets=z["offsets"],
                items=z["items"],
                scores=z["scores"],
                vocab=z["vocab"].astype(object),
            )


def _ranked_only(items: np.ndarray, vocab: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``items`` renumbered into the part of ``vocab`` they use (in ``vocab`` order), and that
    part."""
    used, codes = np.unique(items, return_inverse=True)
    return codes.astype(np.int64, copy=False), np.asarray(vocab)[used]


def rank_order(
    offsets: np.ndarray, items: np.ndarray, scores: np.ndarray, vocab: np.ndarray
) -> np.ndarray:
    """Row permutation into rank order per query: descending score, ties by descending item id
    (``vocab[item]``), the order trec_eval evaluates them in, so a written run, its evaluation
    and a fusion cut at a depth agree on tied items.

    Sorted query by query with one quicksort, falling back to a two-key sort only where a query
    holds tied scores: on millions of rows an order of magnitude faster than one global sort.
    """
    order = np.empty(len(scores), dtype=np.int64)
    bounds = offsets.tolist()
    descending: np.ndarray | None = None
    for start, end in zip(bounds[:-1], bounds[1:]):
        negated = -scores[start:end]
        local = np.argsort(negated)
        ranked = negated[local]
        if (ranked[1:] == ranked[:-1]).any():
            if descending is None:  # once per call, and only when some query has ties
                descending = -id_ranks(vocab)
            local = np.lexsort((descending[items[start:end]], negated))
        order[start:end] = local + start
    return order


def id_ranks(vocab: np.ndarray) -> np.ndarray:
    """For each code of ``vocab``, the rank of its id in ascending string order (code point
    order, which is trec_eval's byte order for UTF-8): the key that breaks score ties."""
    ranks = np.empty(len(vocab), dtype=np.int64)
    values = np.asarray(vocab)
    if values.dtype.kind not in "UT":  # objects: as unicode; StringDType sorts by code point
        values = values.astype(str)
    ranks[np.argsort(values, kind="stable")] = np.arange(len(vocab))
    return ranks
