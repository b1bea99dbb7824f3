"""Dense scores that do not depend on how the work was split.

A float32 matrix product sums each dot product in an order chosen for the shapes at hand (a block
of 7 items is summed differently from one of 65,536, one query differently from a batch), so
the same pair scores differently in its last bits and nearly tied items swap with the shard
size. Here a pair's *exact* score is a function of its two float32 vectors alone: computed in
float64 (where products of float32 values are exact), summed along the vector in a fixed order
(:func:`tree_sum`: halves added pairwise, the same on every device, where torch's own ``sum``
picks its order per device and kernel), rounded to float32. So the scores of a GPU search are
those of a CPU search, bit for bit.

:func:`exact_search` finds the best items with the fast float32 product, asking for more
candidates than needed, and ranks them by exact score. A bound on the fast product's error
proves that no item left out could have reached the cut; a query where it cannot is searched
again, wider.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import torch

from dapr.retrievers.support.candidates import search_candidates
from dapr.retrievers.support.cores import cores
from dapr.retrievers.support.exact import torch_threads


def tree_sum(values: torch.Tensor) -> torch.Tensor:
    """The sum along the last dimension in an order fixed by the width alone: the second half
    added to the first until one column is left (an odd column carried to the next round).
    Each step is one IEEE addition per element, so CPU and GPU give the same bits."""
    while values.shape[-1] > 1:
        half = values.shape[-1] // 2
        summed = values[..., :half] + values[..., half : 2 * half]
        values = (
            torch.cat([summed, values[..., 2 * half :]], -1) if values.shape[-1] % 2 else summed
        )
    return values[..., 0]


def tree_sum_(values: torch.Tensor) -> torch.Tensor:
    """:func:`tree_sum` in ``values``' own memory (the same additions, so the same bits; the
    odd column carried moves to the end of the halves)."""
    width = values.shape[-1]
    while width > 1:
        half = width // 2
        values[..., :half] += values[..., half : 2 * half]
        if width % 2:
            values[..., half] = values[..., 2 * half]
        width = half + width % 2
    return values[..., 0]


def _unit(vectors: torch.Tensor) -> torch.Tensor:
    """Each row scaled to length 1 (rows of zeros stay zero, as in sentence-transformers)."""
    return vectors / tree_sum(vectors.square()).unsqueeze(-1).sqrt().clamp_min(1e-12)


EXACT: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "cosine": lambda q, x: tree_sum(_unit(q) * _unit(x)),
    "dot": lambda q, x: tree_sum(q * x),
    "euclidean": lambda q, x: -tree_sum((q - x).square()).sqrt(),
    "manhattan": lambda q, x: -tree_sum((q - x).abs()),
}
"""Row-wise similarity of float64 vectors, one per sentence-transformers similarity name, each
summed by :func:`tree_sum`."""


def fast_product(
    similarity: str, fallback: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The float32 scores of a batch of queries against rows (numpy arrays) for candidate
    search: for ``dot`` and ``cosine``, one GEMM through numpy's BLAS (OpenBLAS, which outruns
    torch's MKL on AMD processors: see ``benchmarks/exact_search.py``); for other similarities,
    the model's own ``fallback`` (torch)."""
    if similarity == "dot":
        return lambda q, x: q @ x.T
    if similarity == "cosine":

        def cosine(q: np.ndarray, x: np.ndarray) -> np.ndarray:
            lengths = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64))
            scores = _unit(torch.from_numpy(q)).numpy() @ x.T
            scores /= np.maximum(lengths, 1e-12).astype(np.float32)
            return scores

        return cosine
    return lambda q, x: fallback(torch.from_numpy(q), torch.from_numpy(np.array(x))).numpy()


def exact_scores(similarity: str, query: torch.Tensor, rows: np.ndarray) -> np.ndarray:
    """The exact ``similarity`` of ``query`` (float32, one vector) to each of ``rows``
    (float32), as float64 values that float32 holds exactly; or of each of several queries to
    its own rows (``query`` of shape queries x dim, ``rows`` queries x n x dim), with the same
    operations row by row and so the same values."""
    items = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32)).double()
    found = EXACT[similarity](query.double().unsqueeze(-2), items)
    return found.float().double().numpy()


def error_bound(
    similarity: str, dim: int, query_norm: float | np.ndarray, item_norm: float
) -> float | np.ndarray:
    """How far a float32 score (sentence-transformers' matrix product) of a query of length
    ``query_norm`` (or of several: one bound each) and an item of length at most ``item_norm``
    may be from its exact score:
    twice the worst-case rounding error of a ``dim``-term sum with normalisation (the
    products of :func:`fast_product` have the same)."""
    units = (2 * dim + 16) * 2.0**-24
    gamma = units / (1 - units)
    reach = query_norm + item_norm
    if similarity == "euclidean":  # the error of a sum of squares, through its square root
        return 2 * math.sqrt(gamma) * reach
    spread = {"cosine": 1.0, "dot": query_norm * item_norm, "manhattan": math.sqrt(dim) * reach}
    return 2 * gamma * spread[similarity]


def gather_rows(
    shards: Sequence[np.ndarray], codes: np.ndarray, out: np.ndarray | None = None
) -> np.ndarray:
    """Rows ``codes`` of ``shards`` taken as one matrix, in the order given (into ``out``, of
    that shape, when given)."""
    bounds = np.zeros(len(shards) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in shards], out=bounds[1:])
    which = np.searchsorted(bounds, codes, side="right") - 1
    if out is None:
        out = np.empty((len(codes), shards[0].shape[1]), dtype=np.float32)
    for shard in np.unique(which).tolist():
        here = which == shard
        out[here] = shards[shard][codes[here] - bounds[shard]]
    return out


_RESCORE_BYTES = 2 << 20
"""Float64 candidate rows rescored at a time, in groups of queries (a few: the float64
temporaries then stay in cache; measured fastest on 100,000 x 768, top 100)."""


Gather = Callable[[Sequence[np.ndarray], np.ndarray, np.ndarray], np.ndarray]
"""How rescoring takes rows of the shards into a buffer: :func:`gather_rows`'s signature."""


def rescore(
    similarity: str,
    queries: torch.Tensor,
    codes: np.ndarray,
    shards: Sequence[np.ndarray],
    gather: Gather = gather_rows,
) -> np.ndarray:
    """:func:`exact_scores` of each query against its rows ``codes`` (a row of codes per query)
    of ``shards`` (taken by ``gather``), a few queries at a time, in buffers allocated once (400
    candidates of 768 dimensions: 1.13 ms a query on one core of an H100 host, 1.65 with fresh
    arrays)."""
    out = np.empty(codes.shape, dtype=np.float64)
    width, dim = codes.shape[1], queries.shape[1]
    step = max(1, _RESCORE_BYTES // (8 * max(1, width) * dim))
    gathered = np.empty((min(step, len(codes)) * width, dim), dtype=np.float32)
    items = torch.empty((min(step, len(codes)), width, dim), dtype=torch.float64)
    spare = torch.empty_like(items) if similarity == "cosine" else None
    for start in range(0, len(codes), step):
        group = codes[start : start + step]
        n = len(group)
        rows = gather(shards, group.reshape(-1), gathered[: n * width])
        values = items[:n]
        values.copy_(torch.from_numpy(rows).view(n, width, dim))
        query = queries[start : start + n].double().unsqueeze(-2)
        found = _exact_in_place(similarity, query, values, None if spare is None else spare[:n])
        out[start : start + n] = found.float().double().numpy()
    return out


def _exact_in_place(
    similarity: str, query: torch.Tensor, rows: torch.Tensor, spare: torch.Tensor | None
) -> torch.Tensor:
    """:data:`EXACT`'s scores of float64 ``rows`` (overwritten) against ``query``: the same
    operations on the same values (``(x - q)^2`` and ``|x - q|`` equal ``(q - x)^2`` and
    ``|q - x|``), so the same bits. Cosine takes ``spare`` (as large as ``rows``)."""
    if similarity == "dot":
        return tree_sum_(rows.mul_(query))
    if similarity == "cosine":
        assert spare is not None  # cosine's row lengths are summed in it
        lengths = tree_sum_(torch.mul(rows, rows, out=spare)).unsqueeze(-1)
        rows.div_(lengths.sqrt().clamp_min(1e-12))
        return tree_sum_(rows.mul_(_unit(query)))
    if similarity == "euclidean":
        return -tree_sum_(rows.sub_(query).square_()).sqrt()
    return -tree_sum_(rows.sub_(query).abs_())


def exact_search(
    queries: torch.Tensor,
    shards: Sequence[np.ndarray],
    k: int,
    similarity: str,
    fast: Callable[[np.ndarray, np.ndarray], np.ndarray],
    block_size: int = 65_536,
    query_batch: int = 4096,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per query vector, the codes of rows of ``shards`` holding its ``k`` best items by exact
    ``similarity`` score, with those scores (any order; possibly a few more than ``k``,
    which a rank-ordered cut at ``k`` removes). ``fast(batch, rows)`` is the float32 product
    used to find candidates (see :func:`~dapr.retrievers.support.candidates.search_candidates`).

    The queries are split between the cores, each thread searching and rescoring its own with
    one-threaded BLAS and torch: threaded libraries would keep their threads spinning after
    each product, taking the cores from the filtering in between."""
    total = sum(len(shard) for shard in shards)
    depth = min(k, total)
    items: list[np.ndarray] = [np.zeros(0, np.int64)] * len(queries)
    scores: list[np.ndarray] = [np.zeros(0, np.float64)] * len(queries)
    if depth < 1:
        return items, scores
    shards = [np.asarray(shard) for shard in shards]  # a memmap's indexing is slow
    vectors = np.ascontiguousarray(queries.numpy(), dtype=np.float32)
    lengths = np.sqrt(np.square(vectors.astype(np.float64)).sum(1))

    def search(todo: np.ndarray, wide: int) -> np.ndarray:
        """Search ``todo`` with ``wide`` candidates each; the queries that must search wider."""
        found = search_candidates(
            vectors[todo], shards, wide, fast, block_size, query_batch, similarity != "cosine"
        )
        exact = rescore(similarity, queries[todo], found.items, shards)
        cuts = np.partition(exact, wide - depth, axis=1)[:, wide - depth]
        longest = 1.0 if similarity == "cosine" else found.longest
        bounds = error_bound(similarity, queries.shape[1], lengths[todo], longest)
        # an item left out scored at most its floor: could its exact score reach the cut?
        done = np.isneginf(found.floors) | (found.floors + bounds < cuts)
        for n in np.flatnonzero(done).tolist():
            items[todo[n]], scores[todo[n]] = found.items[n], exact[n]
        return todo[~done]

    todo = np.arange(len(queries))
    wide = min(total, depth + max(8, depth // 16))
    with one_thread(), ThreadPoolExecutor(max_workers=cores()) as threads:
        while len(todo):
            parts = np.array_split(todo, min(cores(), len(todo)))
            todo = np.concatenate(list(threads.map(search, parts, [wide] * len(parts))))
            wide = min(total, wide * 4)
    return items, scores


@contextmanager
def one_thread() -> Iterator[None]:
    """BLAS and torch on one thread each meanwhile."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"), torch_threads(1):
        yield
