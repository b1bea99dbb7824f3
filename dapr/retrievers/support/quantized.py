"""Compressed dense search (opt-in): a first pass over int8 or binary codes of the float shards,
then the best ``k x rescore_multiplier`` candidates of each query rescored exactly.

The codes are made from the float32 shards with sentence-transformers'
:func:`~sentence_transformers.quantization.quantize_embeddings`, a shard block at a time:

- ``binary``: each dimension's sign, packed eight to a byte (``ubinary``): 32x smaller. The first
  pass ranks by Hamming distance: FAISS's ``knn_hamming`` over the memory-mapped codes on the
  CPU; on a torch device a matrix product of the codes unpacked to +-1 (``dim - 2 x Hamming``,
  exact in float16 or 32). With ``ivf_lists``, FAISS's ``IndexBinaryIVF`` over the codes (its
  own cache entry) searches only the lists nearest each query, on the CPU whatever the device.
- ``int8``: each dimension cut into 255 steps between its minimum and maximum over the corpus's
  own embeddings (the calibration; rows made unit length first for cosine): 4x smaller. The
  first pass ranks by ``sum(q[d] * step[d] * code[d])``, which orders items as the query's dot
  product with the codes' decoded rows does; the weights ``q * step`` are rounded to int8 per
  query and multiplied with torch's int8 matrix product on a device (``torch._int_mm``: int32
  sums, cuBLASLt on CUDA) and as float32 on the CPU (BLAS; the same integer sums, exact up to
  1,024 dimensions, float64 past them).

This module builds, caches and checks the codes without torch; the first pass and the
rescoring are :mod:`~dapr.retrievers.support.quantized_search`'s.

The codes are a cache entry of their own (kind ``indexes``) beside the shards' entry, keyed by
the shards' key, the quantization and :data:`VERSION`: built once per index, verified and
pruned as every entry is. An index outside a cache gets its codes built in memory at each load.

The candidates are rescored by :func:`~dapr.retrievers.support.canonical.rescore` (the exact
path's float64 sums of the float32 rows, read from the shard files), so every score
reported is the exact one. What the first pass can miss is an item it ranks below its cut; and
of items tied at the cut (frequent with Hamming distances) the kernel picks, so the CPU and a
GPU may keep different ones. A multiplier that covers the corpus gives exact search's top k.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dapr.errors import DaprError
from dapr.store.cache import Cache, content_key

QUANTIZATIONS = ("none", "int8", "binary")
VERSION = "1"
"""The codes' format and calibration: part of their cache key."""
_BLOCK = 16_384
"""Rows quantized at once while the codes are built (and added to an IVF at once)."""
_TRAIN_PER_LIST = 64
"""Rows an IVF's k-means trains on per list (FAISS warns below 39)."""


def scoring(
    base: str,
    quantization: str,
    multiplier: int,
    similarity: str | None,
    lists: int = 0,
    probe: int = 32,
) -> str:
    """The dense retriever's ``scoring`` (part of its runs' cache key, not of its index's) with
    its first pass; a one-line DaprError for a setting compressed search cannot take."""
    if quantization not in QUANTIZATIONS:
        raise DaprError(
            f"dense: quantization {quantization!r} is not one of: {', '.join(QUANTIZATIONS)}"
        )
    if isinstance(multiplier, bool) or not isinstance(multiplier, int) or multiplier < 1:
        raise DaprError(
            f"dense: rescore_multiplier {multiplier!r}: give a whole number >= 1 (candidates "
            "per result the compressed first pass keeps)"
        )
    for name, value, least in (("ivf_lists", lists, 0), ("ivf_probe", probe, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise DaprError(f"dense: {name} {value!r}: give a whole number >= {least}")
    if lists and quantization != "binary":
        raise DaprError(
            f"dense: ivf_lists {lists} partitions binary codes; set quantization: binary "
            "(or ivf_lists: 0)"
        )
    if quantization == "none":
        return base
    check_similarity(quantization, similarity)
    ivf = f", IVF of {lists} lists, {min(probe, lists)} probed" if lists else ""
    return f"{base}; {quantization} first pass x{multiplier}{ivf}"


def check_similarity(quantization: str, similarity: str | None) -> None:
    """Compressed codes rank by dot product or angle: a one-line DaprError for another."""
    if similarity not in (None, "cosine", "dot"):
        raise DaprError(
            f"dense: quantization {quantization} ranks by cosine or dot similarity, not "
            f"{similarity}; set quantization: none or similarity: cosine"
        )


@dataclass
class Codes:
    """An index's codes: int8 rows (with each dimension's ``steps``) or packed sign bits."""

    kind: str
    rows: np.ndarray
    dim: int
    steps: np.ndarray | None = None

    @property
    def bytes(self) -> int:
        return int(self.rows.nbytes)


def write_codes(shards: Sequence[np.ndarray], kind: str, unit: bool, folder: Path) -> None:
    """The codes of ``shards`` (rows made unit length first when ``unit``) into ``folder``:
    ``codes.npy``, ``ranges.npy`` (int8: each dimension's minimum and maximum over the corpus)
    and ``codes.json``, a block of rows at a time."""
    from sentence_transformers.quantization import quantize_embeddings

    dim, total = int(shards[0].shape[1]), sum(len(shard) for shard in shards)
    ranges = _ranges(shards, unit) if kind == "int8" else None
    width, dtype = (dim, np.int8) if kind == "int8" else (-(-dim // 8), np.uint8)
    out = np.lib.format.open_memmap(folder / "codes.npy", "w+", dtype, (total, width))
    at = 0
    for rows in _blocks(shards, unit):
        out[at : at + len(rows)] = (
            sign_bits(rows) if ranges is None else quantize_embeddings(rows, "int8", ranges=ranges)
        )
        at += len(rows)
    out.flush()
    del out
    if ranges is not None:
        np.save(folder / "ranges.npy", ranges)
    about = {"kind": kind, "dim": dim, "rows": total, "unit": unit, "version": VERSION}
    (folder / "codes.json").write_text(json.dumps(about) + "\n")


def sign_bits(rows: np.ndarray) -> np.ndarray:
    """``quantize_embeddings``' ``ubinary`` codes of float32 ``rows``, each row padded with
    zeros (bits 0) to whole bytes first: it packs the rows as one array."""
    from sentence_transformers.quantization import quantize_embeddings

    missing = -rows.shape[1] % 8
    if missing:
        rows = np.pad(rows, ((0, 0), (0, missing)))
    return quantize_embeddings(rows, "ubinary")


def _blocks(shards: Sequence[np.ndarray], unit: bool) -> Iterator[np.ndarray]:
    """The shards' rows, float32, a block at a time (unit length when ``unit``)."""
    for shard in shards:
        for start in range(0, len(shard), _BLOCK):
            rows = np.asarray(shard[start : start + _BLOCK], dtype=np.float32)
            if unit:
                lengths = np.sqrt(np.einsum("ij,ij->i", rows, rows, dtype=np.float64))
                rows = (rows / np.maximum(lengths, 1e-12)[:, None]).astype(np.float32)
            yield rows


def _ranges(shards: Sequence[np.ndarray], unit: bool) -> np.ndarray:
    """Each dimension's minimum and maximum over every row (the int8 calibration); a constant
    dimension gets a range of 1, so that its steps are not zero."""
    low = high = None
    for rows in _blocks(shards, unit):
        low = rows.min(0) if low is None else np.minimum(low, rows.min(0))
        high = rows.max(0) if high is None else np.maximum(high, rows.max(0))
    assert low is not None and high is not None  # an index has rows
    return np.stack([low, np.where(high > low, high, low + 1)]).astype(np.float32)


def read_codes(folder: Path) -> Codes:
    """The codes :func:`write_codes` wrote in ``folder`` (memory-mapped)."""
    about = json.loads((folder / "codes.json").read_text())
    rows = np.load(folder / "codes.npy", mmap_mode="r")
    steps = None
    if about["kind"] == "int8":
        low, high = np.load(folder / "ranges.npy")
        steps = ((high - low) / 255).astype(np.float32)
    return Codes(about["kind"], rows, int(about["dim"]), steps)


def write_ivf(rows: np.ndarray, lists: int, folder: Path) -> None:
    """FAISS's ``IndexBinaryIVF`` of the binary code ``rows`` in ``lists`` lists, into
    ``folder/ivf.faiss``: its centroids trained on up to :data:`_TRAIN_PER_LIST` rows a list
    (drawn with a fixed seed; FAISS's k-means seeds itself too), then every row added a block at
    a time."""
    import faiss

    if lists > len(rows):
        raise DaprError(
            f"dense: ivf_lists {lists} exceeds the index's {len(rows):,} rows; give fewer "
            f"lists (about the square root of the rows, {max(1, math.isqrt(len(rows)))}, is usual)"
        )
    dim = 8 * rows.shape[1]
    index = faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(dim), dim, lists)
    drawn = min(len(rows), _TRAIN_PER_LIST * lists)
    sample = np.sort(np.random.default_rng(0).choice(len(rows), drawn, replace=False))
    index.train(np.ascontiguousarray(rows[sample]))
    for start in range(0, len(rows), _BLOCK):
        index.add(np.ascontiguousarray(rows[start : start + _BLOCK]))
    faiss.write_index_binary(index, str(folder / "ivf.faiss"))


def read_ivf(folder: Path) -> Any:
    """The index :func:`write_ivf` wrote in ``folder`` (in memory: its lists hold the codes)."""
    import faiss

    return faiss.read_index_binary(str(folder / "ivf.faiss"))


def cached_ivf(store: Path, codes: Codes, unit: bool, lists: int) -> Any:
    """The IVF over ``codes`` of the index in ``store``: a cache entry of its own, keyed by the
    codes' key and ``lists``, built once under its lock (in a scratch folder for an index outside
    a cache)."""
    cache = Cache(store.parent.parent)
    if store.parent.name != "indexes" or not cache.has("indexes", store.name):
        with tempfile.TemporaryDirectory(prefix="dapr-ivf-") as scratch:
            write_ivf(codes.rows, lists, Path(scratch))
            return read_ivf(Path(scratch))
    key = content_key("ivf", VERSION, lists, codes_key(store, codes.kind, unit))
    with cache.lock("indexes", key):
        if cache.valid("indexes", key):
            cache.touch("indexes", key)
        else:
            with cache.writing("indexes", key) as entry:
                write_ivf(codes.rows, lists, entry)
    return read_ivf(cache.path("indexes", key))


def codes_key(store: Path, kind: str, unit: bool) -> str:
    """The cache key of the codes of the index entry ``store``."""
    return content_key("codes", VERSION, kind, unit, store.name)


def cached_codes(store: Path, shards: Sequence[np.ndarray], kind: str, unit: bool) -> Codes:
    """The codes of the index in ``store``: from the cache that holds it (built there once,
    under the entry's lock), or built in memory for an index outside a cache."""
    cache = Cache(store.parent.parent)
    if store.parent.name != "indexes" or not cache.has("indexes", store.name):
        with tempfile.TemporaryDirectory(prefix="dapr-codes-") as scratch:
            write_codes(shards, kind, unit, Path(scratch))
            codes = read_codes(Path(scratch))
            codes.rows = np.array(codes.rows)  # in memory: the folder goes
            return codes
    key = codes_key(store, kind, unit)
    with cache.lock("indexes", key):
        if cache.valid("indexes", key):
            cache.touch("indexes", key)
        else:
            with cache.writing("indexes", key) as entry:
                write_codes(shards, kind, unit, entry)
    return read_codes(cache.path("indexes", key))
