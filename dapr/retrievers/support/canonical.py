"""Dense scores that do not depend on how the work was split.

A float32 matrix product sums each dot product in an order chosen for the shapes at hand (a block
of 7 items is summed differently from one of 65,536, one query differently from a batch), so
the same pair scores differently in its last bits and nearly tied items swap with the shard
size. Here a pair's *exact* score is a function of its two float32 vectors alone: computed in
float64 (where products of float32 values are exact), summed along the vector, rounded to
float32.

:func:`exact_search` finds the best items with the fast float32 product, asking for more
candidates than needed, and ranks them by exact score. A bound on the fast product's error
proves that no item left out could have reached the cut; a query where it cannot is searched
again, wider.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence

import numpy as np
import torch

from dapr.retrievers.support.exact import search_shards


def _unit(vectors: torch.Tensor) -> torch.Tensor:
    """Each row scaled to length 1 (rows of zeros stay zero, as in sentence-transformers)."""
    return vectors / vectors.square().sum(-1, keepdim=True).sqrt().clamp_min(1e-12)


EXACT: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "cosine": lambda q, x: (_unit(q) * _unit(x)).sum(-1),
    "dot": lambda q, x: (q * x).sum(-1),
    "euclidean": lambda q, x: -(q - x).square().sum(-1).sqrt(),
    "manhattan": lambda q, x: -(q - x).abs().sum(-1),
}
"""Row-wise similarity of float64 vectors, one per sentence-transformers similarity name."""


def fast_product(
    similarity: str, fallback: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The float32 score of a query batch against a block for candidate search: for ``dot`` and
    ``cosine``, one GEMM through numpy's BLAS (OpenBLAS, which outruns torch's MKL on AMD
    processors: see ``benchmarks/exact_search.py``); for other similarities, ``fallback``."""
    if similarity == "dot":
        return lambda q, x: torch.from_numpy(q.numpy() @ x.numpy().T)
    if similarity == "cosine":
        seen: list = [lambda: None, None]  # the last block (a weak reference) and its lengths

        def cosine(q: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            rows = x.numpy()
            if seen[0]() is not x:  # a block is scored against every batch of queries
                lengths = np.sqrt(np.einsum("ij,ij->i", rows, rows, dtype=np.float64))
                seen[:] = [weakref.ref(x), np.maximum(lengths, 1e-12).astype(np.float32)]
            scores = _unit(q).numpy() @ rows.T
            scores /= seen[1]
            return torch.from_numpy(scores)

        return cosine
    return fallback


def exact_scores(similarity: str, query: torch.Tensor, rows: np.ndarray) -> np.ndarray:
    """The exact ``similarity`` of ``query`` (float32, one vector) to each of ``rows``
    (float32), as float64 values that float32 holds exactly; or of each of several queries to
    its own rows (``query`` of shape queries x dim, ``rows`` queries x n x dim), with the same
    operations row by row and so the same values."""
    items = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32)).double()
    found = EXACT[similarity](query.double().unsqueeze(-2), items)
    return found.float().double().numpy()


def error_bound(similarity: str, dim: int, query_norm: float, item_norm: float) -> float:
    """How far a float32 score (sentence-transformers' matrix product) of a query of length
    ``query_norm`` and an item of length at most ``item_norm`` may be from its exact score:
    twice the worst-case rounding error of a ``dim``-term sum with normalisation (the
    products of :func:`fast_product` have the same)."""
    units = (2 * dim + 16) * 2.0**-24
    gamma = units / (1 - units)
    reach = query_norm + item_norm
    if similarity == "euclidean":  # the error of a sum of squares, through its square root
        return 2 * math.sqrt(gamma) * reach
    spread = {"cosine": 1.0, "dot": query_norm * item_norm, "manhattan": math.sqrt(dim) * reach}
    return 2 * gamma * spread[similarity]


def gather_rows(shards: Sequence[np.ndarray], codes: np.ndarray) -> np.ndarray:
    """Rows ``codes`` of ``shards`` taken as one matrix, in the order given."""
    bounds = np.zeros(len(shards) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in shards], out=bounds[1:])
    which = np.searchsorted(bounds, codes, side="right") - 1
    out = np.empty((len(codes), shards[0].shape[1]), dtype=np.float32)
    for shard in np.unique(which).tolist():
        here = which == shard
        out[here] = shards[shard][codes[here] - bounds[shard]]
    return out


def longest_row(shards: Sequence[np.ndarray], block_size: int) -> float:
    """The largest Euclidean length of a row of ``shards``."""
    longest = 0.0
    for shard in shards:
        for start in range(0, len(shard), block_size):
            block = np.asarray(shard[start : start + block_size], dtype=np.float64)
            longest = max(longest, float(np.sqrt(np.square(block).sum(1).max(initial=0.0))))
    return longest


_RESCORE_BYTES = 2 << 20
"""Float64 candidate rows rescored at a time, in groups of queries (a few: the float64
temporaries then stay in cache; measured fastest on 100,000 x 768, top 100)."""


def _exact_group(
    similarity: str, queries: torch.Tensor, codes: list[np.ndarray], shards: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """:func:`exact_scores` of each query against the rows ``codes`` of ``shards``, for the
    group at once when every query has as many candidates."""
    if len({len(c) for c in codes}) != 1:
        return [exact_scores(similarity, q, gather_rows(shards, c)) for q, c in zip(queries, codes)]
    rows = gather_rows(shards, np.concatenate(codes)).reshape(len(codes), len(codes[0]), -1)
    return list(exact_scores(similarity, queries, rows))


def exact_search(
    queries: torch.Tensor,
    shards: Sequence[np.ndarray],
    k: int,
    similarity: str,
    fast: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    block_size: int = 65_536,
    query_batch: int = 1024,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per query vector, the codes of rows of ``shards`` holding its ``k`` best items by exact
    ``similarity`` score, with those scores (any order; possibly a few more than ``k``,
    which a rank-ordered cut at ``k`` removes). ``fast(batch, block)`` is the float32 product
    used to find candidates (see :func:`~dapr.retrievers.support.exact.search_shards`)."""
    total = sum(len(shard) for shard in shards)
    depth = min(k, total)
    items: list[np.ndarray] = [np.zeros(0, np.int64)] * len(queries)
    scores: list[np.ndarray] = [np.zeros(0, np.float64)] * len(queries)
    if depth < 1:
        return items, scores
    longest = 1.0 if similarity == "cosine" else longest_row(shards, block_size)
    todo = np.arange(len(queries))
    wide = min(total, depth + max(16, depth // 4))
    while len(todo):
        tops = search_shards(queries[todo], shards, wide, fast, block_size, query_batch)
        found = [row for top in tops for row in zip(*top.rows())]
        retry = []
        step = max(1, _RESCORE_BYTES // (8 * wide * queries.shape[1]))
        for start in range(0, len(todo), step):
            group, chosen = found[start : start + step], todo[start : start + step]
            exact_group = _exact_group(similarity, queries[chosen], [c for c, _ in group], shards)
            for q, (codes, fast_scores), exact in zip(chosen.tolist(), group, exact_group):
                if len(codes) < total:
                    cut = np.partition(exact, len(exact) - depth)[len(exact) - depth]
                    length = float(queries[q].double().norm())
                    bound = error_bound(similarity, queries.shape[1], length, longest)
                    if not fast_scores[-1] + bound < cut:  # a left-out item might reach the cut
                        retry.append(q)
                        continue
                items[q], scores[q] = codes, exact
        todo = np.array(retry, dtype=np.int64)
        wide = min(total, wide * 4)
    return items, scores
