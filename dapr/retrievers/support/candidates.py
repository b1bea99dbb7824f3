"""Candidate search: the best few hundred rows of a large matrix per query, at the speed of
the matrix product.

Queries are scored against tiles of a few thousand rows (a product that stays in cache, as
FAISS tiles it); of each tile only the scores above a query's *floor* are kept, the floor being
the best score it has left out, no higher than the lowest of its ``width`` best so far. Past
the first tiles almost every score is below it, so keeping the best costs one comparison per
score instead of a top-k per tile.

Each query's pool holds its kept items unordered; when it fills, it is cut back to the best
``width`` and the floor rises to the best of what was cut. Every item left out scored at or
below the final floor, which :func:`search_candidates` returns with the pools: a caller
rescoring the candidates more precisely can prove that no item left out could have mattered.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

TILE = 2048
"""Rows scored against a batch of queries at a time."""

_POOL_BYTES = 256 << 20
"""Memory for the pools of one batch of queries (a score and an item code per slot)."""


class Pools:
    """Per query, at least its ``width`` best items seen so far (unordered), and the floor: the
    highest score of an item that was left out (``-inf`` while none was)."""

    def __init__(self, queries: int, width: int):
        self.width = width
        self.size = 2 * width + TILE  # a pool past 2 x width is cut back before the next tile
        self.scores = np.full((queries, self.size), -np.inf, dtype=np.float32)
        self.items = np.zeros((queries, self.size), dtype=np.int64)
        self.count = np.zeros(queries, dtype=np.int64)
        self.floor = np.full(queries, -np.inf, dtype=np.float32)
        self._mask = np.empty((queries, TILE), dtype=bool)

    def add(self, scores: np.ndarray, offset: int) -> None:
        """Keep, of ``scores`` (queries x tile) of items ``offset ..``, those above the floor."""
        if not self.count.any() and scores.shape[1] > self.width:  # a first tile: cut it
            keep, floor = _best(scores, self.width)
            self.floor = np.array(floor)
            self.scores[:, : self.width] = np.take_along_axis(scores, keep, 1)
            self.items[:, : self.width] = keep + offset
            self.count[:] = self.width
            return
        mask = np.greater(scores, self.floor[:, None], out=self._mask[:, : scores.shape[1]])
        rows, cols = _nonzero(mask)
        if len(rows):
            added = np.bincount(rows, minlength=len(self.count))
            starts = np.cumsum(added) - added
            slots = self.count[rows] + np.arange(len(rows)) - starts[rows]
            self.scores[rows, slots] = scores[rows, cols]
            self.items[rows, slots] = cols + offset
            self.count += added
        self.cut(np.flatnonzero(self.count > 2 * self.width))

    def cut(self, rows: np.ndarray) -> None:
        """Cut the pools of ``rows`` back to their best ``width`` items, raising their floors."""
        rows = rows[self.count[rows] > self.width]
        if not len(rows):
            return
        used = int(self.count[rows].max())  # slots past a pool's count hold -inf
        scores, items = self.scores[rows, :used], self.items[rows, :used]
        keep, dropped = _best(scores, self.width)
        self.floor[rows] = np.maximum(self.floor[rows], dropped)
        self.scores[rows, :used] = -np.inf
        self.scores[rows, : self.width] = np.take_along_axis(scores, keep, 1)
        self.items[rows, : self.width] = np.take_along_axis(items, keep, 1)
        self.count[rows] = self.width

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The best ``width`` item codes of each query (a row each; fewer if fewer items were
        seen: every query sees every item, so all rows are as long), their scores, the
        floors."""
        self.cut(np.arange(len(self.count)))
        kept = int(self.count[0]) if len(self.count) else 0
        return self.items[:, :kept], self.scores[:, :kept], self.floor


@dataclass
class Candidates:
    """What :func:`search_candidates` found: per query (a row each) its item codes and scores
    (unordered), the highest score of an item it left out (``-inf`` if none), and the largest
    Euclidean length of a row (an upper bound, if asked for; else ``nan``)."""

    items: np.ndarray
    scores: np.ndarray
    floors: np.ndarray
    longest: float


def search_candidates(
    queries: np.ndarray,
    shards: Sequence[np.ndarray],
    width: int,
    score: Callable[[np.ndarray, np.ndarray], np.ndarray],
    block_size: int = 65_536,
    query_batch: int = 4096,
    lengths: bool = False,
) -> Candidates:
    """Per query vector, its ``width`` best rows of the (memory-mapped) ``shards`` taken as one
    matrix, under ``score(query_batch, rows) -> queries x rows`` (float32); with ``lengths``,
    the longest row's length too (measured on the way, the rows being read anyway).

    Shards are read ``block_size`` rows at a time, each block once for all the queries; queries
    go in batches of at most ``query_batch``, fewer when their pools would not fit in
    ``_POOL_BYTES``."""
    batch = max(1, min(query_batch, _POOL_BYTES // (12 * (2 * width + TILE))))
    pools = [Pools(len(queries[s : s + batch]), width) for s in range(0, len(queries), batch)]
    offset, longest = 0, 0.0 if lengths else math.nan
    for shard in shards:
        for start in range(0, len(shard), block_size):
            block = np.asarray(shard[start : start + block_size], dtype=np.float32)
            if lengths and len(block):
                longest = max(longest, _longest(block))
            for first, pool in zip(range(0, len(queries), batch), pools):
                vectors = queries[first : first + batch]
                for tile in range(0, len(block), TILE):
                    pool.add(score(vectors, block[tile : tile + TILE]), offset + start + tile)
        offset += len(shard)
    if not pools:
        empty = np.zeros((0, 0), np.float32)
        return Candidates(empty.astype(np.int64), empty, np.zeros(0, np.float32), longest)
    items, scores, floors = (np.concatenate(part) for part in zip(*(p.result() for p in pools)))
    return Candidates(items, scores, floors, longest)


def _best(scores: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``scores`` (more than ``width`` columns), the columns of its ``width`` best
    scores (unordered) and the highest score of the rest."""
    top = torch.topk(torch.from_numpy(scores), width + 1, dim=1, sorted=True)
    return top.indices[:, :width].numpy(), top.values[:, width].numpy()


def _nonzero(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row and column of each true value of ``mask``, in row-major order; scanned eight bytes
    at a time, for past the first tiles almost all of it is false (a one-column tile's mask
    is a strided view: made contiguous first)."""
    flat = np.ascontiguousarray(mask).reshape(-1)
    if flat.size % 8 or np.count_nonzero(flat) > flat.size // 64:  # too many: scan bytes
        found = np.flatnonzero(flat)
    else:
        words = np.flatnonzero(flat.view(np.uint64))
        found = (words[:, None] * 8 + np.arange(8)).reshape(-1)
        found = found[flat[found]]
    return np.divmod(found, mask.shape[1])


def _longest(rows: np.ndarray) -> float:
    """An upper bound on the Euclidean length of the longest of ``rows`` (float32): the float32
    sum of squares raised by its worst-case rounding error."""
    squares = float(np.einsum("ij,ij->i", rows, rows).max())
    return math.sqrt(squares) * (1 + (rows.shape[1] + 2) * 2.0**-23)
