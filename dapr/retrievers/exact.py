"""Exact (brute-force) top-k search in bounded memory: score a block of items, keep the best.

The score matrix of all queries against all items is never held: a :class:`TopK` keeps the
best ``k`` items per query seen so far and merges each scored block into them, so memory is
``queries x (k + block)`` whatever the corpus size.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np
import torch

from dapr.data import Run


def cores() -> int:
    """How many cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def use_all_cores() -> None:
    """Let torch's matrix products use every core this process may run on."""
    if torch.get_num_threads() < cores():
        torch.set_num_threads(cores())


class TopK:
    """The running top ``k`` items per query over blocks of scored items."""

    def __init__(self, queries: int, k: int):
        self.k = k
        self.scores = torch.full((queries, 0), float("-inf"))
        self.items = torch.zeros((queries, 0), dtype=torch.long)

    def add(self, scores: torch.Tensor, offset: int) -> None:
        """Merge ``scores`` (queries x block) of items ``offset .. offset + block``."""
        scores = scores.float()
        top = torch.topk(scores, min(self.k, scores.shape[1]), dim=1)
        merged_scores = torch.cat([self.scores, top.values], dim=1)
        merged_items = torch.cat([self.items, top.indices + offset], dim=1)
        keep = torch.topk(merged_scores, min(self.k, merged_scores.shape[1]), dim=1)
        self.scores = keep.values
        self.items = torch.gather(merged_items, 1, keep.indices)

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


def search_shards(
    queries: torch.Tensor,
    shards: Sequence[np.ndarray],
    k: int,
    score: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    block_size: int = 65_536,
    query_batch: int = 1024,
) -> list[TopK]:
    """The best ``k`` rows of the (memory-mapped) ``shards``, taken as one matrix, for each
    query vector, under ``score(query_batch, block) -> scores``; one :class:`TopK` per batch of
    ``query_batch`` queries. Each block of ``block_size`` rows is read once and scored against
    every query batch, so memory is about ``block_size x dim + query_batch x block_size``."""
    use_all_cores()
    total = sum(len(shard) for shard in shards)
    batches = list(torch.split(queries, query_batch)) if len(queries) else []
    tops = [TopK(len(batch), min(k, total)) for batch in batches]
    offset = 0
    for shard in shards:
        for start in range(0, len(shard), block_size):
            block = torch.from_numpy(np.array(shard[start : start + block_size], np.float32))
            for batch, top in zip(batches, tops):
                top.add(score(batch, block), offset + start)
        offset += len(shard)
    return tops
