"""Fusers: combine a BM25 document run with a neural passage run into one passage run.

:class:`Convex` reproduces the DAPR paper's hybrid of document and passage scores ("M2C2" in the
reference code of UKPLab/acl2024-dapr): min-max normalise each side, then mix them convexly;
``scaling`` offers z-scores or ranks instead of min-max. :class:`RRF` is reciprocal rank fusion
(Cormack, Clarke and Buettcher, SIGIR 2009), which needs no normalisation at all.

In both, the candidates of a query are the passages of its passage list; a candidate's document
side is its document's entry in the query's document list, and a candidate whose document is
not listed takes ``missing`` (0) on that side. Both also fuse two passage runs
(``fuse_passages``: a passage-level hybrid such as BM25 + dense passages) over the union of
their lists. :class:`Hierarchical` (the paper's section 4.2.1) searches the passage retriever
only within the passages of the top BM25 documents (:meth:`Hierarchical.scope`), then fuses as
:class:`Convex` does.
"""

from __future__ import annotations

from collections.abc import Callable
from numbers import Real
from typing import Annotated, Literal, get_args

import numpy as np

from dapr.data import Run, rank_order
from dapr.errors import DaprError
from dapr.ids import CorpusIds
from dapr.ranges import Range

SOFT_ZERO = 1e-4
"""Floor of the min-max divisor, so a constant list normalises to zeros instead of dividing by 0."""

Normalize = Literal["candidates", "document_list"]
Scaling = Literal["min_max", "z_score", "rank"]


def min_max(scores: np.ndarray, offsets: np.ndarray | None = None) -> np.ndarray:
    """Min-max normalise ``scores``, per segment when ``offsets`` is given.

    Segment ``q`` is ``scores[offsets[q]:offsets[q + 1]]`` (the layout of :class:`Run`; the
    segments must cover the array, and may be empty). Each value ``v`` becomes
    ``(v - min) / max(max - min, SOFT_ZERO)`` over its segment. NaN marks a missing score: it
    takes no part in the min and max, and stays NaN.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if offsets is None:
        offsets = np.array([0, len(scores)], dtype=np.int64)
    lengths = np.diff(offsets)
    filled = lengths > 0
    if not filled.any():
        return scores.copy()
    # reduceat over the starts of non-empty segments only: each then runs to the next such start,
    # which is exactly its own end, because the segments skipped in between are empty.
    starts = offsets[:-1][filled]
    low = np.fmin.reduceat(scores, starts)
    high = np.fmax.reduceat(scores, starts)
    divisor = np.maximum(high - low, SOFT_ZERO)
    counts = lengths[filled]
    return (scores - np.repeat(low, counts)) / np.repeat(divisor, counts)


def z_score(scores: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per segment (as in :func:`min_max`), ``(v - mean) / max(std, SOFT_ZERO)``; NaN stays."""
    scores = np.asarray(scores, dtype=np.float64)
    out = np.full_like(scores, np.nan)
    for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
        segment = scores[start:end]
        present = ~np.isnan(segment)
        if present.any():
            values = segment[present]
            spread = max(float(values.std()), SOFT_ZERO)
            out[start:end][present] = (values - values.mean()) / spread
    return out


def rank_scale(scores: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per segment, ``1 - (r - 1) / n`` for the value of rank ``r`` (1 = highest; equal values
    share the best rank) among the segment's ``n`` present values; NaN stays."""
    scores = np.asarray(scores, dtype=np.float64)
    out = np.full_like(scores, np.nan)
    for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist()):
        segment = scores[start:end]
        present = ~np.isnan(segment)
        values = segment[present]
        if len(values):
            # rank = 1 + how many values are strictly higher
            higher = np.searchsorted(np.sort(-values), -values, side="left")
            out[start:end][present] = 1 - higher / len(values)
    return out


SCALINGS = {"min_max": min_max, "z_score": z_score, "rank": rank_scale}


class Convex:
    """Convex fusion of min-max normalised BM25 document scores and passage scores.

    Per query the candidates are the passages of the passage run. A candidate whose document is in
    the query's document list takes that document's score; ``alpha`` weighs this document side and
    ``1 - alpha`` the passage side (the reference code's ``passage_weight`` is ``1 - alpha``)::

        score = alpha * min_max(document side) + (1 - alpha) * min_max(passage side)

    With ``normalize="candidates"`` (the reference) the document side is normalised over the
    candidates that have a document score, so a document counts once per candidate passage of it.
    ``normalize="document_list"`` (a deviation) normalises over the query's document list, each
    document once. Either way a candidate without a document score takes ``missing`` (0, the
    reference's choice: the bottom of the min-max scale) on that side, and so does every
    candidate of a query that has no document list. Queries with no passage list are left out.
    ``scaling`` is how each side is normalised: ``min_max`` (the reference), ``z_score`` or
    ``rank`` (see :func:`z_score`, :func:`rank_scale`).

    :meth:`fuse_passages` mixes two passage runs instead (``alpha`` weighs the first) over the
    union of their lists; a passage one list lacks takes ``missing`` on that side. ``depth``
    cuts both lists before fusing (None: as retrieved, the experiment's ``depth``).

    :param alpha: The weight of the document side; the passage side gets ``1 - alpha``.
    :param normalize: What the document side is min-max normalised over: ``candidates`` (the
        reference) or the query's ``document_list``.
    :param scaling: How each side is normalised: ``min_max`` (the reference), ``z_score`` or
        ``rank``.
    :param missing: The normalised score on a side where a candidate has none.
    :param depth: Both lists cut to their top ``depth`` before fusing (None: as retrieved).
    """

    version = "1"
    kind = "convex"
    alpha: float
    normalize: Normalize
    scale: Callable[[np.ndarray, np.ndarray], np.ndarray]
    missing: float
    depth: int | None

    def __init__(
        self,
        alpha: Annotated[float, Range(0, 1)],
        normalize: Normalize = "candidates",
        scaling: Scaling = "min_max",
        missing: Annotated[float, Range()] = 0.0,
        depth: Annotated[int | None, Range(1)] = None,
    ):
        if isinstance(alpha, bool) or not isinstance(alpha, Real) or not 0 <= alpha <= 1:
            raise DaprError(
                f"{self.kind} fusion: alpha (the weight of the document scores) must be a number "
                f"in [0, 1], got {alpha!r}"
            )
        if isinstance(missing, bool) or not isinstance(missing, Real) or not np.isfinite(missing):
            raise DaprError(
                f"{self.kind} fusion: missing (the normalised score of an unlisted candidate) "
                f"must be a finite number, got {missing!r}"
            )
        if normalize not in get_args(Normalize):
            choices = ", ".join(repr(c) for c in get_args(Normalize))
            raise DaprError(
                f"{self.kind} fusion: normalize must be one of {choices}, got {normalize!r}"
            )
        if scaling not in SCALINGS:
            choices = ", ".join(repr(c) for c in SCALINGS)
            raise DaprError(
                f"{self.kind} fusion: scaling must be one of {choices}, got {scaling!r}"
            )
        self.alpha = float(alpha)
        self.normalize = normalize
        self.scale = SCALINGS[scaling]
        self.missing = float(missing)
        self.depth = _checked_depth(self.kind, depth)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(alpha={self.alpha}, normalize={self.normalize!r})"

    def fuse(self, document_run: Run, passage_run: Run, doc_of: np.ndarray) -> Run:
        """The passage run, re-scored and re-ranked (``doc_of`` as in ``Fuser.fuse``)."""
        if self.depth is not None:
            document_run, passage_run = document_run.top(self.depth), passage_run.top(self.depth)
        document_side = self._document_side(document_run, passage_run, doc_of)
        passage_side = self.scale(passage_run.scores, passage_run.offsets)
        fused = self.alpha * document_side + (1 - self.alpha) * passage_side
        return _reranked(passage_run, fused)

    def fuse_passages(self, first: Run, second: Run) -> Run:
        """``alpha * first + (1 - alpha) * second`` over the union of two passage runs."""
        if self.depth is not None:
            first, second = first.top(self.depth), second.top(self.depth)
        offsets, items, vocab, (a, b) = _union(first, second)
        a, b = self.scale(a, offsets), self.scale(b, offsets)
        fused = self.alpha * _filled(a, self.missing) + (1 - self.alpha) * _filled(b, self.missing)
        return _reranked(Run(first.queries, offsets, items, fused, vocab), fused)

    def _document_side(self, document_run: Run, passage_run: Run, doc_of: np.ndarray) -> np.ndarray:
        """Per passage-run row, its normalised document score, 0 where it has none."""
        candidate_doc = _candidate_documents(document_run, passage_run, doc_of)
        if self.normalize == "document_list":
            listed = self.scale(document_run.scores, document_run.offsets)
            mapped = _map_document_scores(document_run, listed, passage_run, candidate_doc)
        else:
            raw = _map_document_scores(
                document_run, document_run.scores, passage_run, candidate_doc
            )
            mapped = self.scale(raw, passage_run.offsets)
        return _filled(mapped, self.missing)


class Hierarchical(Convex):
    """Hierarchical retrieval: the passage retriever searches only the passages of the query's
    top ``documents`` documents of the document run (:meth:`scope`; None, the default: every
    document of the run, i.e. the experiment's depth, as the reference code's top 1,000), and
    the resulting passage run is fused with the document run exactly as :class:`Convex` does
    (the DAPR paper's section 4.2.1 reports its best ``alpha`` at 0.1 to 0.2).

    :param documents: How many top documents of the document run the passage retriever
        searches within (None: every document of the run).
    """

    version = "1"
    kind = "hierarchical"
    approach = "hierarchical"
    """How result tables name it (:class:`dapr.interfaces.Described`)."""

    def __init__(
        self,
        alpha: Annotated[float, Range(0, 1)],
        documents: Annotated[int | None, Range(1)] = None,
        normalize: Normalize = "candidates",
        scaling: Scaling = "min_max",
        missing: Annotated[float, Range()] = 0.0,
        depth: Annotated[int | None, Range(1)] = None,
    ):
        super().__init__(alpha, normalize, scaling, missing, depth)
        if documents is not None and (
            isinstance(documents, bool) or not isinstance(documents, int) or documents < 1
        ):
            raise DaprError(
                f"hierarchical fusion: documents (how many top documents to search within) must "
                f"be a positive integer or null (every document of the run), got {documents!r}"
            )
        self.documents = documents

    def scope_identity(self) -> dict[str, int | None]:
        """What determines :meth:`scope`'s candidates (``alpha`` does not)."""
        return {"documents": self.documents}

    def scope(self, document_run: Run, ids: CorpusIds) -> Run:
        """Per query, every passage of its top ``documents`` documents (scores are 0): the
        candidates the passage retriever scores."""
        top = document_run if self.documents is None else document_run.top(self.documents)
        doc_code = ids.document_codes(top.vocab)
        order = np.argsort(ids.doc_of, kind="stable")
        starts = np.searchsorted(ids.doc_of[order], np.arange(len(ids.doc_ids) + 1))
        items = []
        for q in range(len(top.queries)):
            docs = doc_code[top.items[top.offsets[q] : top.offsets[q + 1]]]
            docs = docs[docs >= 0]
            pieces: list[np.ndarray] = [order[starts[d] : starts[d + 1]] for d in docs.tolist()]
            items.append(np.concatenate(pieces or [np.empty(0)]))
        scores = [np.zeros(len(i)) for i in items]
        return Run.from_lists(top.queries.tolist(), items, scores, ids.passage_ids)


class RRF:
    """Reciprocal rank fusion of the document list and the passage list.

    A candidate passage at rank ``p`` of its query's passage list, whose document is at rank
    ``d`` of the query's document list, scores ``1 / (k + p) + 1 / (k + d)``; a document that is
    not in the list (or lies below ``depth``) adds 0. Ranks start at 1. ``depth`` cuts both lists
    before fusing (None: all). ``k = 60`` is the constant of Cormack et al. (2009).

    :param k: The constant added to each rank; a larger ``k`` flattens the top ranks' lead.
    :param depth: Both lists cut to their top ``depth`` before fusing (None: all).
    """

    version = "1"

    def __init__(
        self, k: Annotated[int, Range(0)] = 60, depth: Annotated[int | None, Range(1)] = None
    ):
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise DaprError(f"rrf fusion: k must be a non-negative integer, got {k!r}")
        self.k = k
        self.depth = _checked_depth("rrf", depth)

    def fuse(self, document_run: Run, passage_run: Run, doc_of: np.ndarray) -> Run:
        """The passage run, re-scored and re-ranked (``doc_of`` as in ``Fuser.fuse``)."""
        if self.depth is not None:
            document_run, passage_run = document_run.top(self.depth), passage_run.top(self.depth)
        candidate_doc = _candidate_documents(document_run, passage_run, doc_of)
        document_ranks = _ranks(document_run.offsets)
        mapped = _map_document_scores(document_run, document_ranks, passage_run, candidate_doc)
        document_side = np.where(np.isnan(mapped), 0.0, 1 / (self.k + mapped))
        fused = 1 / (self.k + _ranks(passage_run.offsets)) + document_side
        return _reranked(passage_run, fused)

    def fuse_passages(self, first: Run, second: Run) -> Run:
        """``1 / (k + rank in first) + 1 / (k + rank in second)`` over the union of two passage
        runs; a list that lacks a passage adds 0."""
        if self.depth is not None:
            first, second = first.top(self.depth), second.top(self.depth)
        ranked_first = Run(
            first.queries, first.offsets, first.items, _ranks(first.offsets), first.vocab
        )
        ranked_second = Run(
            second.queries, second.offsets, second.items, _ranks(second.offsets), second.vocab
        )
        offsets, items, vocab, ranks = _union(ranked_first, ranked_second)
        on_first, on_second = (_filled(1 / (self.k + r), 0.0) for r in ranks)
        fused = on_first + on_second
        return _reranked(Run(first.queries, offsets, items, fused, vocab), fused)


def _checked_depth(kind: str, depth: int | None) -> int | None:
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
        raise DaprError(f"{kind} fusion: depth must be a positive integer or null, got {depth!r}")
    return depth


def _filled(scores: np.ndarray, value: float) -> np.ndarray:
    """``scores`` with NaN (a missing candidate) replaced by ``value``."""
    return np.where(np.isnan(scores), value, scores)


def _reranked(run: Run, scores: np.ndarray) -> Run:
    """``run``'s rows with new ``scores``, put into rank order."""
    order = rank_order(run.offsets, run.items, scores, run.vocab)
    return Run(run.queries, run.offsets, run.items[order], scores[order], run.vocab)


def _union(first: Run, second: Run) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple]:
    """The union of two runs' lists per query of ``first`` (queries only ``second`` answers are
    dropped): ``(offsets, items, vocab, (first scores, second scores))``, NaN where a list lacks
    the item. Items are codes into a vocabulary that extends ``first.vocab`` with ``second``'s
    other ids."""
    vocab = {item: code for code, item in enumerate(first.vocab.tolist())}
    recode = np.fromiter(
        (vocab.setdefault(i, len(vocab)) for i in second.vocab.tolist()),
        np.int64,
        len(second.vocab),
    )
    position = {qid: j for j, qid in enumerate(second.queries.tolist())}
    items, scores_a, scores_b = [], [], []
    for q, qid in enumerate(first.queries.tolist()):
        a_items = first.items[first.offsets[q] : first.offsets[q + 1]]
        a_scores = first.scores[first.offsets[q] : first.offsets[q + 1]]
        j = position.get(qid)
        if j is None:
            b_items, b_scores = np.zeros(0, np.int64), np.zeros(0)
        else:
            b_items = recode[second.items[second.offsets[j] : second.offsets[j + 1]]]
            b_scores = second.scores[second.offsets[j] : second.offsets[j + 1]]
        union = np.union1d(a_items, b_items)
        a_side = np.full(len(union), np.nan)
        b_side = np.full(len(union), np.nan)
        a_side[np.searchsorted(union, a_items)] = a_scores
        b_side[np.searchsorted(union, b_items)] = b_scores
        items.append(union)
        scores_a.append(a_side)
        scores_b.append(b_side)
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum([len(i) for i in items], out=offsets[1:])
    flat = [np.concatenate(x) if x else np.zeros(0) for x in (items, scores_a, scores_b)]
    ids = np.array(list(vocab), dtype=object)
    return offsets, flat[0].astype(np.int64), ids, (flat[1], flat[2])


def _ranks(offsets: np.ndarray) -> np.ndarray:
    """1-based positions of the rows of a run within their query (rows are in rank order)."""
    lengths = np.diff(offsets)
    return (np.arange(offsets[-1]) - np.repeat(offsets[:-1], lengths) + 1).astype(np.float64)


def _candidate_documents(document_run: Run, passage_run: Run, doc_of: np.ndarray) -> np.ndarray:
    """The document code of every passage-run row (-1 when unknown), after checking ``doc_of``."""
    doc_of = np.asarray(doc_of)
    if doc_of.shape != (len(passage_run.vocab),):
        raise DaprError(
            f"fusion: doc_of must hold one document code per passage of the passage run's "
            f"vocabulary ({len(passage_run.vocab)}), got shape {doc_of.shape}"
        )
    if len(doc_of) and not -1 <= doc_of.min() <= doc_of.max() < len(document_run.vocab):
        raise DaprError(
            f"fusion: doc_of codes must be -1 or index the document run's vocabulary "
            f"(size {len(document_run.vocab)}), got values in [{doc_of.min()}, {doc_of.max()}]"
        )
    return doc_of.astype(np.int64, copy=False)[passage_run.items]


def _map_document_scores(
    document_run: Run, document_scores: np.ndarray, passage_run: Run, candidate_doc: np.ndarray
) -> np.ndarray:
    """Per passage-run row, its document's score in the same query's document list, else NaN.

    One dense table indexed by document code is filled with a query's document list, read at the
    query's candidates and cleared again; its extra last slot stays NaN for code -1.
    """
    out = np.full(len(candidate_doc), np.nan)
    table = np.full(len(document_run.vocab) + 1, np.nan)
    position = {qid: j for j, qid in enumerate(document_run.queries.tolist())}
    doc_bounds = document_run.offsets.tolist()
    bounds = passage_run.offsets.tolist()
    for q, qid in enumerate(passage_run.queries.tolist()):
        j = position.get(qid)
        if j is None:
            continue
        docs = document_run.items[doc_bounds[j] : doc_bounds[j + 1]]
        table[docs] = document_scores[doc_bounds[j] : doc_bounds[j + 1]]
        out[bounds[q] : bounds[q + 1]] = table[candidate_doc[bounds[q] : bounds[q + 1]]]
        table[docs] = np.nan
    return out
