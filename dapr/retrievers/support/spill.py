"""BM25's index files written in bounded memory, byte for byte what a build in memory writes.

:class:`Spill` takes the postings of an index build batch by batch (as
:func:`~dapr.retrievers.support.postings.stream_postings` yields them) and appends each batch's
to files in a temporary folder, keeping only every term's document frequency, every item's number
of terms and a run of ids. :meth:`Spill.write_ids` then writes the ids sorted (``ids.json``, a
JSON list) with each item's rank in that order: sorted in memory when they fit their share of the
budget, else as runs sorted apart on disk and merged. :meth:`Spill.write_matrix` writes bm25s'
term-major score matrix (its ``data``, ``indices`` and ``indptr`` arrays, in ``np.save``'s
format) one range of terms at a time, each range gathered from every batch's postings, so the
memory it holds is the budget's, not the corpus's.

The budget is shared out: a quarter for the ids held before a run is written, half for a range of
terms (its scores and rows, and the work of placing them), a quarter for what the build keeps
throughout, about 12 bytes an item (its number of terms, length factor and rank) and 20 a term;
past that quarter, the ranges shrink. Beside the budget are the vocabulary itself, the
tokenizer's memory of the words it analysed, and a batch of texts with their postings.
"""

from __future__ import annotations

import heapq
import json
import re
import shutil
import tempfile
from array import array
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from itertools import islice
from pathlib import Path
from typing import IO, NamedTuple, TypeVar

import numpy as np

from dapr.errors import DaprError
from dapr.retrievers.support.postings import Postings

MEMORY = "1GB"
"""Working memory of an index build unless the retriever is given another (``index_memory``)."""
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS.update({"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40})
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([a-z]*)\s*$", re.IGNORECASE)
_ID_SHARE = 4
"""The runs of ids get a quarter of the budget (a range of terms half, the rest a quarter)."""
_ID_BYTES = 120
"""Memory per id of a run besides its characters: the string, the list, the sort's arrays."""
_POSTING_BYTES = 16
"""Memory per posting of a range of terms: its weight and row (8 bytes), as much again spare."""
_SMALLEST_RANGE = 1024
"""Postings in a range of terms at least, however small the budget."""
_BLOCK = 10_000
"""Ids written (and ranks set) at a time."""
_LINE = 1_000
"""Ids a line of a run on disk: each run being merged holds one line."""

_T = TypeVar("_T")

Weights = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
"""(each posting's term, item position and term frequency) -> its float32 score."""


def parse_size(value: int | str, what: str) -> int:
    """``value`` in bytes: a positive number of bytes or a size like ``"1GB"`` (10^9 bytes),
    ``"200MB"``, ``"512MiB"`` (2^29); ``what`` names the setting in the error."""
    size = 0
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif isinstance(value, str) and (found := _SIZE.match(value)):
        size = int(float(found[1]) * _UNITS.get(found[2].lower(), 0))
    if size < 1:
        raise DaprError(
            f"{what} {value!r} is not a size; give a number of bytes above 0 or a size like "
            f"'1GB', '200MB' or '512MiB'"
        )
    return size


class _Batch(NamedTuple):
    """Where one batch's postings lie in the spill files."""

    first: int  # the position of its first item
    terms: int  # the offset of its terms (and their counts), in terms
    size: int  # its number of terms
    docs: int  # the byte offset of its postings' item positions
    tf: int  # the byte offset of its postings' term frequencies
    doc_type: np.dtype
    tf_type: np.dtype


class Spill:
    """The postings, numbers of terms and ids of an index build, in ``memory`` bytes (see the
    module), spilled into a temporary folder inside ``parent``: use it in a ``with`` block,
    which removes the folder."""

    def __init__(self, parent: Path, memory: int) -> None:
        self.memory = memory
        self.folder = Path(tempfile.mkdtemp(prefix=".spill-", dir=parent))
        self.documents = 0
        self._names = ("terms", "counts", "docs", "tf")
        self._open = ExitStack()  # the spill files, written batch by batch
        self._files = {
            n: self._open.enter_context(open(self.folder / n, "wb"))  # noqa: SIM115 - closed on exit
            for n in self._names
        }
        self._batches: list[_Batch] = []
        self._df = np.zeros(1 << 10, dtype=np.int64)
        self._lengths = array("i")
        self._ids = _IdRuns(self.folder, memory // _ID_SHARE)

    def __enter__(self) -> Spill:
        return self

    def __exit__(self, *exc: object) -> None:
        self._open.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def add(self, ids: list[str], chunk: Postings, lengths: np.ndarray) -> None:
        """One batch: its items' ids, its postings, its items' numbers of terms."""
        terms, counts, docs, tf = _term_major(chunk)
        if len(terms):
            if terms.max() >= len(self._df):
                grown = np.zeros(max(2 * len(self._df), int(terms.max()) + 1), dtype=np.int64)
                grown[: len(self._df)] = self._df
                self._df = grown
            self._df[terms] += counts
        files = self._files
        self._batches.append(
            _Batch(
                chunk.first,
                files["terms"].tell() // 4,
                len(terms),
                files["docs"].tell(),
                files["tf"].tell(),
                docs.dtype,
                tf.dtype,
            )
        )
        for name, values in zip(self._names, (terms, counts.astype(np.int32), docs, tf)):
            files[name].write(np.ascontiguousarray(values).data)
        self._lengths.frombytes(lengths.astype(np.int32).tobytes())
        self._ids.add(ids, self.documents)
        self.documents += len(lengths)

    def lengths(self) -> np.ndarray:
        """Every item's number of terms (int32)."""
        return np.frombuffer(self._lengths, dtype=np.int32)

    def df(self, terms: int) -> np.ndarray:
        """The document frequency of each of the first ``terms`` terms."""
        df = np.zeros(terms, dtype=np.int64)
        seen = min(terms, len(self._df))
        df[:seen] = self._df[:seen]
        return df

    def write_ids(self, path: Path) -> np.ndarray:
        """Write the ids sorted as a JSON list to ``path``; each item's rank in that order."""
        return self._ids.write(path, self.documents)

    def write_matrix(self, folder: Path, terms: int, weights: Weights, rank: np.ndarray) -> None:
        """Write bm25s' score matrix into ``folder`` (``data``, ``indices``, ``indptr``, as
        ``np.save`` writes them; over any there): per term, in order, its postings' scores
        (``weights``) and rows (``rank`` of each item), items in the order they came."""
        self._open.close()
        indptr = np.zeros(terms + 1, dtype=np.int64)
        np.cumsum(self.df(terms), out=indptr[1:])
        beside = 12 * self.documents + 20 * terms  # per item and term, past its quarter
        share = self.memory // 2 - max(beside - self.memory // 4, 0)
        cap = max(share // _POSTING_BYTES, _SMALLEST_RANGE)
        bounds = _ranges(indptr, cap)
        term_cuts, posting_cuts = self._cuts(bounds)
        np.save(folder / "indptr.csc.index.npy", indptr)
        with (
            ExitStack() as stack,
            open(folder / "data.csc.index.npy", "wb") as data,
            open(folder / "indices.csc.index.npy", "wb") as rows,
        ):
            for out, kind in ((data, np.float32), (rows, np.int32)):
                descr = np.lib.format.dtype_to_descr(np.dtype(kind))
                header = {"descr": descr, "fortran_order": False, "shape": (int(indptr[-1]),)}
                np.lib.format.write_array_header_1_0(out, header)
            readers: dict[str, IO[bytes]] = {
                n: stack.enter_context(open(self.folder / n, "rb")) for n in self._names
            }
            for r, (lo, hi) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
                pieces = [
                    (batch, term_cuts[b, r : r + 2], posting_cuts[b, r : r + 2])
                    for b, batch in enumerate(self._batches)
                    if posting_cuts[b, r + 1] > posting_cuts[b, r]
                ]
                size = int(indptr[hi] - indptr[lo])
                if size > cap:  # one term with more postings than a range holds: a batch at a time
                    for batch, _, (p0, p1) in pieces:
                        doc, tf = _read_postings(readers, batch, p0, p1)
                        data.write(weights(np.full(p1 - p0, lo), doc, tf).data)
                        rows.write(rank[doc].astype(np.int32, copy=False).data)
                    continue
                scores = np.empty(size, dtype=np.float32)
                places = np.empty(size, dtype=np.int32)
                free = indptr[lo:hi] - indptr[lo]  # where each term's next posting goes
                for batch, (t0, t1), (p0, p1) in pieces:
                    term = _read(readers["terms"], np.int32, 4 * (batch.terms + t0), t1 - t0)
                    count = _read(readers["counts"], np.int32, 4 * (batch.terms + t0), t1 - t0)
                    first = free[term - lo]
                    free[term - lo] += count
                    starts = np.cumsum(count) - count
                    at = np.repeat(first - starts, count) + np.arange(p1 - p0)
                    doc, tf = _read_postings(readers, batch, p0, p1)
                    scores[at] = weights(np.repeat(term, count), doc, tf)
                    places[at] = rank[doc]
                data.write(scores.data)
                rows.write(places.data)

    def _cuts(self, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per batch, where each range of terms (``bounds``) starts among its terms and among
        its postings."""
        term_cuts = np.zeros((len(self._batches), len(bounds)), dtype=np.int64)
        posting_cuts = np.zeros_like(term_cuts)
        with (
            open(self.folder / "terms", "rb") as terms,
            open(self.folder / "counts", "rb") as counts,
        ):
            for b, batch in enumerate(self._batches):
                found = _read(terms, np.int32, 4 * batch.terms, batch.size)
                term_cuts[b] = np.searchsorted(found, bounds)
                ends = np.zeros(batch.size + 1, dtype=np.int64)
                np.cumsum(_read(counts, np.int32, 4 * batch.terms, batch.size), out=ends[1:])
                posting_cuts[b] = ends[term_cuts[b]]
        return term_cuts, posting_cuts


def _term_major(chunk: Postings) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A batch's postings by term id (a worker's terms come in the order of its own ids)."""
    terms, counts = chunk.terms, chunk.counts
    if len(terms) < 2 or bool(np.all(terms[1:] > terms[:-1])):
        return terms, counts, chunk.docs, chunk.tf
    order = np.argsort(terms)
    sizes = counts[order]
    moved = (np.cumsum(counts) - counts)[order] - (np.cumsum(sizes) - sizes)
    gather = np.repeat(moved, sizes) + np.arange(int(sizes.sum()))
    return terms[order], sizes, chunk.docs[gather], chunk.tf[gather]


def _ranges(indptr: np.ndarray, cap: int) -> np.ndarray:
    """Bounds of consecutive ranges of terms holding at most ``cap`` postings each (or one
    term holding more)."""
    bounds = [0]
    terms = len(indptr) - 1
    while bounds[-1] < terms:
        lo = bounds[-1]
        hi = int(np.searchsorted(indptr, indptr[lo] + cap, side="right")) - 1
        bounds.append(min(max(hi, lo + 1), terms))
    return np.array(bounds, dtype=np.int64)


def _read(file: IO[bytes], kind: np.dtype | type, offset: int, count: int) -> np.ndarray:
    """``count`` values of type ``kind`` from byte ``offset`` of ``file``."""
    file.seek(offset)
    return np.fromfile(file, dtype=kind, count=count)


def _read_postings(
    readers: dict[str, IO[bytes]], batch: _Batch, p0: int, p1: int
) -> tuple[np.ndarray, np.ndarray]:
    """Postings ``p0:p1`` of ``batch``: their item positions (int64) and term frequencies."""
    docs = _read(
        readers["docs"], batch.doc_type, batch.docs + p0 * batch.doc_type.itemsize, p1 - p0
    )
    tf = _read(readers["tf"], batch.tf_type, batch.tf + p0 * batch.tf_type.itemsize, p1 - p0)
    return docs.astype(np.int64) + batch.first, tf


class _IdRuns:
    """The ids of an index build, held while they fit in ``memory`` bytes, else written to
    ``folder`` in sorted runs."""

    def __init__(self, folder: Path, memory: int) -> None:
        self.folder, self.memory = folder, memory
        self.held: list[str] = []
        self.first = 0  # the position of held[0]
        self.size = 0
        self.runs = 0

    def add(self, ids: list[str], first: int) -> None:
        if not self.held:
            self.first = first
        self.held.extend(ids)
        self.size += sum(map(len, ids)) + _ID_BYTES * len(ids)
        if self.size > self.memory:
            self._spill()

    def _order(self) -> np.ndarray:
        """The held ids' order by id, stable (equal ids stay in their order)."""
        return np.argsort(np.array(self.held, dtype=object), kind="stable")

    def _spill(self) -> None:
        """Write the held ids, sorted, as a run: JSON lists of a block of ids a line, and their
        positions (int64)."""
        order = self._order()
        with open(self.folder / f"ids-{self.runs}", "w", encoding="ascii") as out:
            for block in _blocks(order.tolist(), _LINE):
                out.write(json.dumps([self.held[i] for i in block]) + "\n")
        (order + self.first).astype(np.int64).tofile(self.folder / f"positions-{self.runs}")
        self.runs += 1
        self.held, self.size = [], 0

    def _run(self, r: int) -> Iterator[tuple[str, int]]:
        """Run ``r``: (id, position), by id."""
        with (
            open(self.folder / f"ids-{r}", encoding="ascii") as lines,
            open(self.folder / f"positions-{r}", "rb") as positions,
        ):
            for line in lines:
                ids = json.loads(line)
                yield from zip(ids, np.fromfile(positions, np.int64, len(ids)).tolist())

    def write(self, path: Path, count: int) -> np.ndarray:
        """Write every id, sorted (stable), to ``path`` as ``json.dumps`` writes the list; each
        item's rank in that order."""
        rank = np.empty(count, dtype=np.int32 if count < 2**31 else np.int64)
        if not self.runs:
            order = self._order()
            rank[order] = np.arange(count)
            _write_list(path, ([self.held[i] for i in block] for block in _blocks(order.tolist())))
            self.held = []
            return rank
        if self.held:
            self._spill()
        merged = heapq.merge(*(self._run(r) for r in range(self.runs)))

        def sorted_ids() -> Iterator[list[str]]:
            done = 0
            for block in _blocks(merged):
                ids, positions = zip(*block)
                rank[list(positions)] = np.arange(done, done + len(block))
                done += len(block)
                yield list(ids)

        _write_list(path, sorted_ids())
        return rank


def _blocks(values: Iterable[_T], size: int = _BLOCK) -> Iterator[list[_T]]:
    """``values`` in lists of ``size``."""
    items = iter(values)
    while block := list(islice(items, size)):
        yield block


def _write_list(path: Path, blocks: Iterable[list[str]]) -> None:
    """Write the strings of ``blocks`` as one JSON list, as ``json.dumps`` writes it."""
    with open(path, "w", encoding="ascii") as out:
        out.write("[")
        separator = ""
        for block in blocks:
            out.write(separator + json.dumps(block)[1:-1])
            separator = ", "
        out.write("]")
