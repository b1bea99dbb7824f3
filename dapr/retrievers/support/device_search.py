"""Exact dense search on torch devices: the GPU path of :func:`canonical.exact_search`.

Candidates come from float32 products and ``topk`` on the device, over the index's rows kept
resident there when they fit the memory share given, else streamed block by block from the
memory-mapped shards (each block read once per search). Several devices split the rows, each
keeping its own best per query; their tops are merged. The candidates are then rescored in
float64 with :data:`~dapr.retrievers.support.canonical.EXACT` (whose fixed-order sums give the
same bits on every device) and kept only where the error bound proves that nothing left out
could reach the cut, as on the CPU: so a run found here is the CPU path's, bit for bit. The CPU
device runs the same code, which is how the tests check it.

TF32 is switched off meanwhile: its 10-bit products would break the error bound.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

from dapr.retrievers.support.canonical import EXACT, _unit, error_bound, gather_rows
from dapr.retrievers.support.encoding import gpus

_MIN_BLOCK = 4096
"""The fewest rows scored at once before the query batch is made smaller instead."""

_RESCORE_BYTES = 256 << 20
"""Float64 candidate rows rescored at once on a device, at most (see :func:`_rescore_bytes`)."""


def search_devices(
    chosen: str | list[str] | None,
    encoder: torch.device | str,
    device: str | None,
    devices: list[str] | None,
) -> list[torch.device]:
    """The torch devices a dense retriever's search runs on; none for the CPU path (numpy's
    BLAS on every core). By default (``chosen`` None) the query model's (``encoder``) GPU, or
    every visible GPU when it runs on one and no ``device`` or ``devices`` was named;
    ``chosen`` (its ``search_device``) says: ``cpu``, a device, or a list of devices
    (``["cpu"]`` runs the GPU code on the CPU, as the tests do)."""
    if chosen is None:
        found = torch.device(encoder)
        if found.type != "cuda":
            return []
        if device is None and devices is None:
            return [torch.device(d) for d in gpus()]
        return [found]
    if isinstance(chosen, str):
        return [] if chosen == "cpu" else [torch.device(chosen)]
    return [torch.device(d) for d in chosen]


def device_memory(device: torch.device) -> int:
    """The bytes ``device`` holds: a GPU's memory, or this machine's for the CPU device."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@dataclass
class Part:
    """Rows ``start .. stop`` of the index, searched on ``device``: ``rows`` (and, for cosine,
    their float32 lengths) when resident there, else read from ``shards`` block by block."""

    device: torch.device
    start: int
    stop: int
    rows: torch.Tensor | None = None
    lengths: torch.Tensor | None = None
    longest: float = math.nan
    pieces: list[tuple[int, np.ndarray]] = field(default_factory=list)
    """Streamed: ``(first row, array)`` pieces of the shards, each within one shard."""


class DeviceIndex:
    """An index's rows (float32 ``shards`` taken as one matrix) split over ``devices``, each
    searching with at most ``share`` of its memory (rows kept resident plus the score
    workspace); ``memory`` (bytes per device) overrides what the device is measured to hold."""

    def __init__(
        self,
        shards: Sequence[np.ndarray],
        devices: Sequence[torch.device | str],
        similarity: str,
        share: float = 0.5,
        memory: int | None = None,
        query_batch: int = 4096,
    ):
        self.shards = list(shards)
        self.query_batch = query_batch
        self.devices = [torch.device(d) for d in devices]
        self.similarity = similarity
        self.total = sum(len(shard) for shard in self.shards)
        self.dim = int(self.shards[0].shape[1]) if self.shards else 0
        self.budget = [
            int(share * (memory if memory is not None else device_memory(d))) for d in self.devices
        ]
        bounds = np.linspace(0, self.total, len(self.devices) + 1).round().astype(np.int64)
        self.parts = [
            self._place(device, int(lo), int(hi), budget)
            for device, lo, hi, budget in zip(self.devices, bounds[:-1], bounds[1:], self.budget)
        ]

    def _place(self, device: torch.device, start: int, stop: int, budget: int) -> Part:
        part = Part(device, start, stop, pieces=list(self._pieces(start, stop)))
        if 4 * (stop - start) * (self.dim + 1) <= budget // 2:  # resident: half for the rows
            rows = [torch.from_numpy(np.array(a, np.float32)) for _, a in part.pieces]  # a copy
            part.rows = torch.cat(rows).to(device) if rows else torch.zeros(0, self.dim)
            part.lengths = _lengths(part.rows)
            part.longest = _longest(part.rows)
            part.pieces = []
        return part

    def _pieces(self, start: int, stop: int) -> Iterator[tuple[int, np.ndarray]]:
        offset = 0
        for shard in self.shards:
            lo, hi = max(start, offset), min(stop, offset + len(shard))
            if lo < hi:
                yield lo, shard[lo - offset : hi - offset]
            offset += len(shard)

    def free(self, part: Part) -> int:
        """What ``part``'s resident rows leave of its device's budget (at least 1 MiB)."""
        held = 0 if part.rows is None else 4 * (part.stop - part.start) * (self.dim + 1)
        return max(self.budget[self.parts.index(part)] - held, 1 << 20)

    def workspace(self, part: Part, queries: int) -> tuple[int, int]:
        """The queries and rows scored at once on ``part``'s device: their float32 scores (and
        ``topk``'s temporaries, as much again) fit what its resident rows leave of the budget.
        A streamed block costs its rows as well: the block uploaded, the one before it (still
        held while the next is read) and the float64 temporaries of its lengths (16 bytes a
        value), measured on an H100 to be what took a search past its share."""
        free = self.free(part)
        if part.rows is None:
            free //= 2
        batch = max(1, min(queries, self.query_batch, free // (8 * _MIN_BLOCK)))
        per_row = 8 * batch + (24 * self.dim if part.rows is None else 4 * self.dim)
        block = max(1, min(part.stop - part.start, free // per_row))
        return batch, block


@dataclass
class _Top:
    """The best ``width`` rows per query seen so far on one device, and the floor: the highest
    score of a row left out (``-inf`` while none was)."""

    width: int
    scores: torch.Tensor
    items: torch.Tensor
    floor: torch.Tensor

    @classmethod
    def empty(cls, queries: int, width: int, device: torch.device) -> _Top:
        return cls(
            width,
            torch.zeros((queries, 0), device=device),
            torch.zeros((queries, 0), dtype=torch.long, device=device),
            torch.full((queries,), -math.inf, device=device),
        )

    def add(self, scores: torch.Tensor, items: torch.Tensor) -> None:
        """Merge ``scores`` of ``items`` (queries x n each; ``items`` may be one row for all)."""
        if scores.shape[1] > self.width:
            top = torch.topk(scores, self.width + 1, dim=1)
            self.floor = torch.maximum(self.floor, top.values[:, -1])
            scores = top.values[:, :-1]
            items = items.expand(len(scores), -1).gather(1, top.indices[:, :-1])
        else:
            items = items.expand(len(scores), -1)
        merged = torch.cat([self.scores, scores], 1)
        codes = torch.cat([self.items, items], 1)
        if merged.shape[1] > self.width:
            top = torch.topk(merged, self.width + 1, dim=1)
            self.floor = torch.maximum(self.floor, top.values[:, -1])
            merged, codes = top.values[:, :-1], codes.gather(1, top.indices[:, :-1])
        self.scores, self.items = merged, codes


def device_search(
    index: DeviceIndex,
    queries: torch.Tensor,
    k: int,
    fallback: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """:func:`canonical.exact_search` on ``index``'s devices: per query vector (float32, on
    the CPU) the codes of its ``k`` best rows by exact score and those scores (any order,
    possibly a few more than ``k``). ``fallback`` is the model's float32 similarity, for
    similarities other than ``dot`` and ``cosine``."""
    depth = min(k, index.total)
    items: list[np.ndarray] = [np.zeros(0, np.int64)] * len(queries)
    scores: list[np.ndarray] = [np.zeros(0, np.float64)] * len(queries)
    if depth < 1 or not len(queries):
        return items, scores
    vectors = queries.float().contiguous()
    lengths = np.sqrt(np.square(vectors.double().numpy()).sum(1))
    todo = np.arange(len(queries))
    wide = min(index.total, depth + max(8, depth // 16))
    with _ieee_float32():
        while len(todo):
            found, floors, longest = _candidates(index, vectors[todo], wide, fallback)
            exact = _rescore(index, vectors[todo], found)
            cuts = np.partition(exact, wide - depth, axis=1)[:, wide - depth]
            if index.similarity == "cosine":
                longest = 1.0
            bounds = error_bound(index.similarity, index.dim, lengths[todo], longest)
            done = np.isneginf(floors) | (floors + bounds < cuts)
            for n in np.flatnonzero(done).tolist():
                items[todo[n]], scores[todo[n]] = found[n], exact[n]
            todo = todo[~done]
            wide = min(index.total, wide * 4)
    return items, scores


def _candidates(
    index: DeviceIndex,
    vectors: torch.Tensor,
    width: int,
    fallback: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> tuple[np.ndarray, np.ndarray, float]:
    """Per query its ``width`` best row codes by the float32 product (unordered), its floor,
    and the longest row's length (an upper bound; ``nan`` unless measured)."""
    tops: list[_Top] = []
    longest = 0.0
    for part in index.parts:
        batch, block = index.workspace(part, len(vectors))
        here = [
            _Top.empty(len(vectors[s : s + batch]), width, part.device)
            for s in range(0, len(vectors), batch)
        ]
        on_device = vectors.to(part.device)
        if index.similarity == "cosine":
            on_device = _unit(on_device)
        product = _product(index.similarity, fallback)
        for first, rows, row_lengths in _blocks(part, block):
            if part.rows is None:
                longest = max(longest, _longest(rows))
            codes = torch.arange(first, first + len(rows), device=part.device)[None]
            for n, top in enumerate(here):
                batch_vectors = on_device[n * batch : (n + 1) * batch]
                top.add(product(batch_vectors, rows, row_lengths), codes)
        if part.rows is not None:
            longest = max(longest, part.longest)
        tops.append(_joined(here))
    first_device = index.parts[0].device
    merged = tops[0]
    for top in tops[1:]:
        merged.add(top.scores.to(first_device), top.items.to(first_device))
        merged.floor = torch.maximum(merged.floor, top.floor.to(first_device))
    return merged.items.cpu().numpy(), merged.floor.cpu().numpy(), longest


def _joined(tops: list[_Top]) -> _Top:
    """The tops of consecutive query batches as one."""
    return _Top(
        tops[0].width,
        torch.cat([t.scores for t in tops]),
        torch.cat([t.items for t in tops]),
        torch.cat([t.floor for t in tops]),
    )


def _blocks(part: Part, block: int) -> Iterator[tuple[int, torch.Tensor, torch.Tensor | None]]:
    """``(first row, rows, their lengths)`` of ``part`` on its device, ``block`` rows at most."""
    if part.rows is not None:
        for lo in range(0, len(part.rows), block):
            lengths = None if part.lengths is None else part.lengths[lo : lo + block]
            yield part.start + lo, part.rows[lo : lo + block], lengths
        return
    for first, array in part.pieces:
        for lo in range(0, len(array), block):
            rows = np.array(array[lo : lo + block], dtype=np.float32)  # read from the shard
            on_device = torch.from_numpy(rows).to(part.device, non_blocking=True)
            yield first + lo, on_device, _lengths(on_device)


def _cosine(q: torch.Tensor, x: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
    """Cosine scores of unit query vectors against rows of the given lengths."""
    assert lengths is not None  # the rows' lengths come with every batch scored by cosine
    return (q @ x.T) / lengths


def _product(
    similarity: str, fallback: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]:
    """The float32 scores of a batch of queries against rows, as :func:`canonical.fast_product`
    computes them (within the same error bound)."""
    if similarity == "dot":
        return lambda q, x, _: q @ x.T
    if similarity == "cosine":
        return _cosine
    return lambda q, x, _: fallback(q, x)


def _lengths(rows: torch.Tensor) -> torch.Tensor:
    """Each row's Euclidean length in float32 (from float64 sums of squares), at least 1e-12."""
    return rows.double().square().sum(1).sqrt().clamp_min(1e-12).float()


def _longest(rows: torch.Tensor) -> float:
    """An upper bound on the Euclidean length of the longest of ``rows`` (float32), as
    :func:`candidates._longest`: any order of the float32 sum stays within it."""
    if not len(rows):
        return 0.0
    squares = float(rows.square().sum(1).max())
    return math.sqrt(squares) * (1 + (rows.shape[1] + 2) * 2.0**-23)


def _rescore(index: DeviceIndex, vectors: torch.Tensor, codes: np.ndarray) -> np.ndarray:
    """The exact scores of each query against its rows ``codes``, on the first device: the rows
    gathered from the resident parts, else read from the shards and uploaded. Either way the
    bits of :func:`canonical.rescore`."""
    device = index.parts[0].device
    out = np.empty(codes.shape, dtype=np.float64)
    step = max(1, _rescore_bytes(index) // (8 * max(1, codes.shape[1]) * max(1, index.dim)))
    similarity = EXACT[index.similarity]
    for start in range(0, len(codes), step):
        group = codes[start : start + step]
        rows = _gather(index, group.reshape(-1), device).reshape(*group.shape, -1).double()
        query = vectors[start : start + step].to(device).double().unsqueeze(-2)
        out[start : start + step] = similarity(query, rows).float().double().cpu().numpy()
    return out


def device_scores(
    index: DeviceIndex, vectors: torch.Tensor, rows: list[np.ndarray]
) -> list[np.ndarray]:
    """Each query's exact scores of its own candidate ``rows`` (global rows of the index), in
    their order, computed on the first device pair by pair: the bits of
    :func:`canonical.exact_scores` (hierarchical retrieval's scoring on a GPU)."""
    device = index.parts[0].device
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    if not lengths.sum():
        return [np.zeros(0, np.float64) for _ in rows]
    codes = np.concatenate(rows)
    owner = np.repeat(np.arange(len(rows)), lengths)
    similarity = EXACT[index.similarity]
    step = max(1, _rescore_bytes(index) // (16 * index.dim))  # the pair's two float64 rows
    on_device = vectors.to(device)
    flat = np.empty(len(codes), dtype=np.float64)
    for start in range(0, len(codes), step):
        items = _gather(index, codes[start : start + step], device).double()
        mine = torch.from_numpy(owner[start : start + step]).to(device)
        exact = similarity(on_device.index_select(0, mine).double(), items)
        flat[start : start + step] = exact.float().double().cpu().numpy()
    return np.split(flat, np.cumsum(lengths)[:-1])


def _rescore_bytes(index: DeviceIndex) -> int:
    """Float64 rows rescored at once: at most :data:`_RESCORE_BYTES`, and a sixth of what the
    first device's budget leaves (the exact similarities' temporaries take about four times
    the rows)."""
    return min(_RESCORE_BYTES, index.free(index.parts[0]) // 6)


def _gather(index: DeviceIndex, rows: np.ndarray, device: torch.device) -> torch.Tensor:
    """Rows ``rows`` of the index, in the order given, on ``device``: taken from the parts'
    resident rows, or read from the shards and uploaded when a part is streamed."""
    if any(part.rows is None for part in index.parts):
        return torch.from_numpy(gather_rows(index.shards, rows)).to(device)
    codes = torch.from_numpy(rows)
    out = torch.empty((len(codes), index.dim), device=device)
    for part in index.parts:
        assert part.rows is not None
        here = (codes >= part.start) & (codes < part.stop)
        if here.any():
            local = (codes[here] - part.start).to(part.device)
            out[here.to(device)] = part.rows.index_select(0, local).to(device)
    return out


@contextmanager
def _ieee_float32() -> Iterator[None]:
    """float32 matrix products in full precision (no TF32) meanwhile."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)
