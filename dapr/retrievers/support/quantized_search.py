"""The first pass of compressed dense search over int8 or binary codes, and the exact rescoring
of its candidates (see :mod:`~dapr.retrievers.support.quantized`, which builds the codes)."""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from dapr.errors import DaprError
from dapr.retrievers.support.cores import cores
from dapr.retrievers.support.quantized import (
    Codes,
    cached_codes,
    cached_ivf,
    check_similarity,
    sign_bits,
)

_BLOCK = 16_384
"""Rows of codes moved to a device at once."""
_FLOAT32_EXACT = 2**24 // (128 * 128)
"""Dimensions up to which a sum of int8 products is an integer float32 holds exactly (1,024)."""
_BITS = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8)
"""A byte's bits in ``np.packbits`` order (the first dimension in the highest bit)."""


class Compressed:
    """The first pass over ``codes`` of an index of ``shards`` on ``device`` (None: the CPU
    path, FAISS for binary codes), or over FAISS's binary ``ivf`` with ``probe`` lists searched
    (on the CPU, whatever the device), and the exact rescoring of its candidates."""

    def __init__(
        self,
        codes: Codes,
        shards: Sequence[np.ndarray],
        similarity: str,
        device: torch.device | None,
        block_size: int,
        query_batch: int,
        share: float = 0.5,
        ivf: Any = None,
        probe: int = 32,
    ):
        self.codes, self.similarity, self.device = codes, similarity, device
        self.files = FileRows.of(shards)
        self.shards = [np.asarray(shard) for shard in shards]  # a memmap's indexing is slow
        self.total = len(codes.rows)
        self.block = max(8, block_size // 8 * 8)  # whole groups of 8 rows (CUDA's _int_mm)
        self.query_batch = query_batch
        self.ivf = ivf
        self.placed: torch.Tensor | None = None
        if ivf is not None:
            ivf.nprobe = probe
        elif device is not None:
            self.placed = _place(codes, device, share)

    def search(
        self, queries: torch.Tensor, k: int, multiplier: int
    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per query vector, its ``k x multiplier`` candidates (rows of the shards) with their
        exact scores, in any order."""
        from dapr.retrievers.support.canonical import gather_rows, one_thread, rescore

        depth = min(self.total, k * multiplier)
        if depth < 1 or not len(queries):
            empty = [np.zeros(0, np.int64)] * len(queries)
            return empty, [np.zeros(0, np.float64)] * len(queries)
        vectors = np.ascontiguousarray(queries.numpy(), dtype=np.float32)
        found = self.candidates(vectors, depth)
        kept = found >= 0  # an IVF's probed lists may hold fewer than depth rows (-1)
        found = np.where(kept, found, 0)
        parts = np.array_split(np.arange(len(queries)), min(cores(), len(queries)))
        gather = gather_rows if self.files is None else self.files.gather

        def exact(part: np.ndarray) -> np.ndarray:
            return rescore(self.similarity, queries[part], found[part], self.shards, gather)

        with one_thread(), ThreadPoolExecutor(max_workers=len(parts)) as threads:
            scores = np.concatenate(list(threads.map(exact, parts)))
        return [f[m] for f, m in zip(found, kept)], [s[m] for s, m in zip(scores, kept)]

    def candidates(self, vectors: np.ndarray, depth: int) -> np.ndarray:
        """The ``depth`` best rows of each query by the first pass (queries x depth; -1 where an
        IVF's probed lists held fewer)."""
        if self.ivf is not None:
            return self.ivf.search(sign_bits(vectors), depth)[1].astype(np.int64)
        if self.device is None and self.codes.kind == "binary":  # FAISS, on the mapped codes
            import faiss

            return faiss.knn_hamming(sign_bits(vectors), self.codes.rows, depth)[1]
        device = self.device or torch.device("cpu")
        out = np.empty((len(vectors), depth), dtype=np.int64)
        for start in range(0, len(vectors), self.query_batch):
            batch = _query_codes(self.codes, vectors[start : start + self.query_batch], device)
            values = torch.full((len(batch), 0), -torch.inf, device=device)
            rows = torch.zeros((len(batch), 0), dtype=torch.long, device=device)
            for lo in range(0, self.total, self.block):
                scores = self._scores(batch, lo, min(self.total, lo + self.block))
                block = torch.topk(scores, min(depth, scores.shape[1]), 1)  # then merged: small
                merged = torch.cat([values, block.values.float()], 1)
                top = torch.topk(merged, min(depth, merged.shape[1]), 1)
                rows = torch.cat([rows, block.indices + lo], 1).gather(1, top.indices)
                values = top.values
            out[start : start + len(batch)] = rows.cpu().numpy()
        return out

    def _scores(self, batch: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
        """First-pass scores of the queries' codes ``batch`` against rows ``lo .. hi``, higher
        is better: float for binary; for int8, int32 sums on a device and the same sums on the
        CPU as float32 (exact up to :data:`_FLOAT32_EXACT` dimensions, float64 past them), where
        torch's int8 product ran 22x slower than BLAS's float32 one (200,000 x 768 codes,
        1,000 queries, 2 cores)."""
        if self.placed is not None:
            block = self.placed[lo : -(-hi // 8) * 8]
        else:  # the CPU path: a block of the memory-mapped codes
            block = _padded(torch.from_numpy(np.array(self.codes.rows[lo:hi])), batch.shape[1])
        if self.codes.kind == "binary":
            signs = _signs(block, batch.dtype)
            return (batch @ signs.T)[:, : hi - lo]
        if self.placed is None:  # the CPU: BLAS on the integers
            exact = torch.float32 if batch.shape[1] <= _FLOAT32_EXACT else torch.float64
            return batch.to(exact) @ block.to(exact).T
        if len(block) % 8:
            block = torch.cat([block, block.new_zeros((8 - len(block) % 8, block.shape[1]))])
        width = max(24, -(-len(batch) // 8) * 8)  # CUDA's _int_mm: more than 16 rows, by 8s
        weights = torch.cat([batch, batch.new_zeros((width - len(batch), batch.shape[1]))])
        return torch._int_mm(weights, block.T)[: len(batch), : hi - lo]


class FileRows:
    """Rows of float32 shards read from their ``.npy`` files with ``os.preadv`` into the caller's
    buffer, so that rescoring holds only the rows it reads. Touching a row of a memory-mapped
    shard maps the page-cache folio around it: 4,000 random rows of a 300,000 x 768 shard mapped
    all of its 0.9 GB, with ``MADV_RANDOM`` too."""

    def __init__(self, files: list[tuple[str, int]], sizes: list[int], width: int):
        self.fds = np.array([os.open(path, os.O_RDONLY) for path, _ in files])
        self.starts = np.array([offset for _, offset in files], dtype=np.int64)
        self.bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.width = width
        weakref.finalize(self, _close, self.fds.tolist())

    @classmethod
    def of(cls, shards: Sequence[np.ndarray]) -> FileRows | None:
        """The files of memory-mapped C-ordered float32 ``shards`` (None for any other)."""
        files = []
        for shard in shards:
            name = getattr(shard, "filename", None)
            if name is None or shard.dtype != np.float32 or not shard.flags.c_contiguous:
                return None
            files.append((str(name), int(getattr(shard, "offset", 0))))
        return cls(files, [len(shard) for shard in shards], 4 * int(shards[0].shape[1]))

    def gather(self, shards: Sequence[np.ndarray], rows: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Rows ``rows`` (of all the shards) into ``out``, in the order given."""
        which = np.searchsorted(self.bounds, rows, side="right") - 1
        offsets = self.starts[which] + (rows - self.bounds[which]) * self.width
        for at, (fd, offset) in enumerate(zip(self.fds[which].tolist(), offsets.tolist())):
            if os.preadv(fd, [out[at]], offset) != self.width:
                raise DaprError(
                    f"dense: a shard ends before row {int(rows[at])}: the index is damaged; "
                    "delete it to rebuild it"
                )
        return out


def _close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def _padded(codes: torch.Tensor, width: int) -> torch.Tensor:
    """``codes`` with zero columns up to ``width`` (int8 rows: whole groups of 8 for CUDA)."""
    missing = width - codes.shape[1]
    return torch.cat([codes, codes.new_zeros((len(codes), missing))], 1) if missing else codes


def _place(codes: Codes, device: torch.device, share: float) -> torch.Tensor:
    """The codes on ``device``, padded to whole groups of 8 rows (and columns for int8); a
    one-line DaprError when they exceed ``share`` of its memory."""
    from dapr.retrievers.support.device_search import device_memory

    if codes.bytes > share * device_memory(device):
        raise DaprError(
            f"dense: the {codes.kind} codes ({codes.bytes / 2**30:.1f} GiB) exceed "
            f"search_memory's share of {device}; raise search_memory or set search_device: cpu"
        )
    width = codes.rows.shape[1]
    if codes.kind == "int8":
        width = -(-width // 8) * 8
    rows = -(-len(codes.rows) // 8) * 8
    dtype = torch.int8 if codes.kind == "int8" else torch.uint8
    placed = torch.zeros((rows, width), dtype=dtype, device=device)
    for lo in range(0, len(codes.rows), _BLOCK):
        part = torch.from_numpy(np.array(codes.rows[lo : lo + _BLOCK]))
        placed[lo : lo + len(part), : part.shape[1]] = part.to(device)
    return placed


def _signs(packed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Packed sign bits as rows of +-1 (the padding bits too: 0 in every row, they add the same
    to every score)."""
    bits = (packed.unsqueeze(-1) & _BITS.to(packed.device)) != 0
    return bits.reshape(len(packed), -1).to(dtype) * 2 - 1


def _query_codes(codes: Codes, vectors: np.ndarray, device: torch.device) -> torch.Tensor:
    """The queries as the first pass takes them on a torch device: their sign bits as +-1
    (binary: float16 on CUDA, where its sums of +-1 are exact, else float32), or their weights
    ``q * step`` rounded to int8, each query on its own scale (int8, zero columns up to a
    multiple of 8)."""
    if codes.kind == "binary":
        packed = torch.from_numpy(sign_bits(vectors)).to(device)
        return _signs(packed, torch.float16 if device.type == "cuda" else torch.float32)
    assert codes.steps is not None  # int8 codes carry their steps
    weights = vectors.astype(np.float64) * codes.steps
    scale = np.abs(weights).max(1, keepdims=True) / 127
    rounded = np.rint(weights / np.where(scale > 0, scale, 1)).astype(np.int8)
    return _padded(torch.from_numpy(rounded), -(-codes.dim // 8) * 8).to(device)


def compressed(dense: Any, similarity: str, devices: list[torch.device]) -> Compressed:
    """The first pass of a dense retriever (``dense``: its quantization, loaded shards and
    store, search settings), opened once per load and device (the first of ``devices``)."""
    device = devices[0] if devices else None
    held = dense._compressed
    if held is not None and held.device == device:
        return held
    check_similarity(dense.quantization, similarity)
    unit = dense.quantization == "int8" and similarity == "cosine"
    codes = cached_codes(dense._store, dense._shards, dense.quantization, unit)
    lists = dense.ivf_lists
    ivf = cached_ivf(dense._store, codes, unit, lists) if lists else None
    return Compressed(
        codes,
        dense._shards,
        similarity,
        device,
        dense.block_size,
        dense.query_batch,
        dense.search_memory,
        ivf,
        dense.ivf_probe,
    )
