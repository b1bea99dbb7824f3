"""Exact (brute-force) top-k search in bounded memory: score a block of items, keep the best.

The score matrix of all queries against all items is never held: a :class:`TopK` keeps the
best ``k`` items per query seen so far and merges each scored block into them, so memory is
``queries x (k + block)`` whatever the corpus size.

A retriever's ``score`` (ranking given candidates, as hierarchical retrieval does within the top
documents) reads only the candidates' rows: ``candidate_rows`` maps candidate ids to rows of the
index, :func:`score_candidates` reads the union of those rows piece by piece (``shard_pieces``;
both in :mod:`~dapr.retrievers.support.index_rows`, which needs no torch) and scores each query
against its own candidates only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from dapr.data import Run
from dapr.retrievers.support.cores import cores
from dapr.retrievers.support.index_rows import candidate_rows, shard_pieces

__all__ = ["TopK", "candidate_rows", "score_candidates", "shard_pieces", "use_all_cores"]


def use_all_cores() -> None:
    """Let torch's matrix products use every core this process may run on."""
    if torch.get_num_threads() < cores():
        torch.set_num_threads(cores())


class TopK:
    """The running top ``k`` items per query over blocks of scored items.

    Given ``ranks`` (each item code's :func:`dapr.data.id_ranks` rank), a tie across the cut
    goes to the larger id, as in :func:`dapr.data.rank_order`, so the kept items do not depend
    on how the items were split into blocks; without, tied items are kept by position. Ties at
    or below ``floor`` (scores the caller drops) are left unordered.
    """

    def __init__(
        self, queries: int, k: int, ranks: torch.Tensor | None = None, floor: float = -math.inf
    ):
        self.k = k
        self.ranks = ranks
        self.floor = floor
        self.scores = torch.full((queries, 0), float("-inf"))
        self.items = torch.zeros((queries, 0), dtype=torch.long)

    def add(self, scores: torch.Tensor, offset: int) -> None:
        """Merge ``scores`` (queries x block) of items ``offset .. offset + block``."""
        scores = scores.float()
        width = scores.shape[1]
        n = min(self.k, width)
        top = torch.topk(scores, n, dim=1)
        values, indices = top.values, top.indices
        if self.ranks is not None and 0 < n < width:
            # rows where more items tie with the last kept score than were kept
            last = values[:, -1:]
            tied = ((scores >= last).sum(dim=1) > n) & (last[:, 0] > self.floor)
            ranks = self.ranks[offset : offset + width]
            for row in tied.nonzero().flatten().tolist():
                pick = torch.topk(_keys(scores[row], ranks), n).indices
                values[row], indices[row] = scores[row, pick], pick
        merged_scores = torch.cat([self.scores, values], dim=1)
        merged_items = torch.cat([self.items, indices + offset], dim=1)
        n = min(self.k, merged_scores.shape[1])
        if self.ranks is None:
            keep = torch.topk(merged_scores, n, dim=1).indices
        else:
            keep = torch.topk(_keys(merged_scores, self.ranks[merged_items]), n, dim=1).indices
        self.scores = torch.gather(merged_scores, 1, keep)
        self.items = torch.gather(merged_items, 1, keep)

    def rows(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per query, the codes and scores of its best items; padding (``-inf``, a query that
        saw fewer than ``k`` items) left out."""
        scores = self.scores.double().numpy()
        items = self.items.numpy()
        finite = np.isfinite(scores)
        return (
            [row[keep] for row, keep in zip(items, finite)],
            [row[keep] for row, keep in zip(scores, finite)],
        )

    @staticmethod
    def merge(tops: Sequence[TopK], qids: Sequence[str], vocab: np.ndarray) -> Run:
        """One :class:`Run` from the TopKs of consecutive query batches, over item ids
        ``vocab``."""
        items: list[np.ndarray] = []
        scores: list[np.ndarray] = []
        for top in tops:
            rows = top.rows()
            items.extend(rows[0])
            scores.extend(rows[1])
        return Run.from_lists(qids, items, scores, vocab)

    def run(self, qids: Sequence[str], vocab: np.ndarray) -> Run:
        """The result as a :class:`Run` over item ids ``vocab``."""
        return TopK.merge([self], qids, vocab)


def _keys(scores: torch.Tensor, ranks: torch.Tensor) -> torch.Tensor:
    """One int64 per float32 score and id rank, ordered as (score, id): the float's bits mapped
    to a signed integer in the same order (-0.0 counted as 0.0), then the rank below them."""
    bits = (scores.float() + 0.0).view(torch.int32).to(torch.int64)
    ordered = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    return (ordered << 32) | ranks


# --- scoring given candidates (a retriever's ``score``) ---------------------------------------

_PASS_CANDIDATES = 1 << 22
"""Candidate (query, item) pairs placed in one pass over the index: bounds the bookkeeping
arrays (about 40 bytes a pair) whatever the size of the candidate run."""


def score_candidates(
    rows: Sequence[np.ndarray],
    pieces: Callable[[np.ndarray], Iterable[tuple[int, int, Any]]],
    score: Callable[[Any, int, np.ndarray], np.ndarray],
    workers: int | None = None,
) -> list[np.ndarray]:
    """Every query's scores of its candidate ``rows`` (ascending global rows of the index), in
    the same order, reading each candidate's data once for all the queries of a pass.

    ``pieces(union)`` splits the ascending union of the candidate rows into consecutive ranges
    and yields ``(lo, hi, data)``, ``data`` holding what is needed to score rows
    ``union[lo:hi]`` (read from the index); ``score(data, q, local)`` gives query ``q``'s scores
    of the rows at positions ``local`` of ``data``. Only candidates are read and scored; a
    query is scored once per piece holding some of its candidates. The queries of a piece are
    scored on ``workers`` threads (default: every core), torch running one thread in each:
    these products are too small to gain from torch's own threads, which slow them down."""
    out = [np.zeros(len(r), dtype=np.float64) for r in rows]
    workers = cores() if workers is None else max(1, workers)
    with torch_threads(1), ThreadPoolExecutor(max_workers=workers) as pool:
        first = 0
        while first < len(rows):
            last, placed = first, 0
            while last < len(rows) and (
                last == first or placed + len(rows[last]) <= _PASS_CANDIDATES
            ):
                placed += len(rows[last])
                last += 1
            if placed:
                _score_pass(rows, first, last, out, pieces, score, pool)
            first = last
    return out


def _score_pass(rows, first, last, out, pieces, score, pool: ThreadPoolExecutor) -> None:
    """:func:`score_candidates` for the queries ``first .. last``."""
    lengths = np.array([len(rows[q]) for q in range(first, last)], dtype=np.int64)
    flat = np.concatenate(rows[first:last])
    owner = np.repeat(np.arange(first, last, dtype=np.int64), lengths)
    slot = np.arange(len(flat), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    union = np.unique(flat)
    position = np.searchsorted(union, flat)
    order = np.argsort(position, kind="stable")
    position, owner, slot = position[order], owner[order], slot[order]
    del flat, order
    for lo, hi, data in pieces(union):
        start, stop = np.searchsorted(position, [lo, hi])
        if start == stop:
            continue
        within = np.argsort(owner[start:stop], kind="stable") + start
        queries = owner[within]
        groups = np.split(within, np.flatnonzero(queries[1:] != queries[:-1]) + 1)

        def place(group: np.ndarray, data=data, lo=lo) -> None:
            q = int(owner[group[0]])  # each group is one query: threads write apart
            out[q][slot[group]] = score(data, q, position[group] - lo)

        list(pool.map(place, groups))


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """Run torch's operations on ``count`` threads meanwhile."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
