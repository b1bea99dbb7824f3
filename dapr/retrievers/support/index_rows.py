"""Which rows of an index a candidate run needs, and in which pieces to read them: numpy only,
so that scoring given candidates (BM25's included) loads no torch."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from dapr.data import Run
from dapr.ids import IdIndex


def candidate_rows(
    queries: Mapping[str, str], candidates: Run, ids: np.ndarray
) -> tuple[list[str], list[np.ndarray]]:
    """The queries of ``candidates`` that ``queries`` has, in the run's order, and for each the
    rows in ``ids`` (the index's item ids, in index order) of its candidate items, ascending and
    each once. Candidates that are not in the index are left out."""
    if candidates.vocab is ids or np.array_equal(candidates.vocab, ids):
        row_of_code = np.arange(len(ids), dtype=np.int64)
    else:
        row_of_code = IdIndex(ids).locate(candidates.vocab)
    bounds = candidates.offsets.tolist()
    qids: list[str] = []
    rows: list[np.ndarray] = []
    for q, qid in enumerate(candidates.queries.tolist()):
        if qid not in queries:
            continue
        found = row_of_code[candidates.items[bounds[q] : bounds[q + 1]]]
        qids.append(qid)
        rows.append(np.unique(found[found >= 0]))
    return qids, rows


def shard_pieces(
    rows: np.ndarray, sizes: Sequence[int], block_size: int
) -> Iterator[tuple[int, int, int, np.ndarray]]:
    """Ascending global ``rows`` of shards of ``sizes`` rows (taken as one matrix) in pieces
    that lie in one shard and hold at most ``block_size`` rows: ``(lo, hi, shard, local)``,
    where ``rows[lo:hi]`` are rows ``local`` of shard ``shard``."""
    bounds = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=bounds[1:])
    cuts = np.searchsorted(rows, bounds).tolist()
    for shard in range(len(sizes)):
        for lo in range(cuts[shard], cuts[shard + 1], block_size):
            hi = min(lo + block_size, cuts[shard + 1])
            yield lo, hi, shard, rows[lo:hi] - bounds[shard]
