"""Corpus ids as compact arrays, found by hash: a corpus's passage and document ids, which
document each passage belongs to, and indexes that locate ids with no dictionary over them."""

from __future__ import annotations

import json
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dapr.errors import DataError

_CHUNK = 1 << 16
"""Ids handled as Python strings at a time (packed into arrays, hashed, compared)."""


def string_array(values: Sequence[str]) -> np.ndarray:
    """Strings as a numpy array: variable-width ``StringDType`` on numpy 2 (16 bytes for an id
    of up to 15, where an object array holds a Python string of about 60), else objects."""
    strings = getattr(np.dtypes, "StringDType", None)
    return np.array(values, dtype=strings() if strings else object)


def empty_strings(count: int) -> np.ndarray:
    """An array of ``count`` strings to fill, of :func:`string_array`'s type."""
    return np.empty(count, dtype=string_array([]).dtype)


_TEXT = 1 << 22
"""Characters of a JSON id list parsed at a time."""
_CUT_TRIES = 4
"""Places tried for a block's end before it is parsed together with the next one."""


def read_id_list(path: Path, count: int | None = None) -> np.ndarray:
    """The JSON list of strings in ``path`` (an index's ``ids.json``) as a string array (see
    :func:`string_array`), parsed a block at a time, never holding a Python string for every id
    at once; ``count``, when given, is checked, and the array is filled in place."""
    pieces: list[np.ndarray] = []
    out = None if count is None else empty_strings(count)
    done = 0
    with open(path, encoding="utf-8") as file:
        carry = file.read(_TEXT).lstrip()
        if not carry.startswith("["):
            raise DataError(f"{path}: not a JSON list of ids; delete the index to rebuild it")
        carry = carry[1:]
        while True:
            more = file.read(_TEXT)
            text = carry + more
            try:
                values, cut = _complete(text) if more else (json.loads("[" + text), len(text))
            except ValueError as error:
                raise DataError(f"{path}: {error}; delete the index to rebuild it") from None
            if values is None:  # no element ends in this block: read on
                carry = text
                continue
            if not all(isinstance(v, str) for v in values):
                raise DataError(f"{path}: an id is not a string; delete the index to rebuild it")
            if out is None:
                pieces.append(string_array(values))
            elif done + len(values) <= len(out):
                out[done : done + len(values)] = values
            done += len(values)
            if not more:
                break
            carry = text[cut:].lstrip().removeprefix(",")
    if out is not None:
        if done != len(out):
            raise DataError(f"{path}: {done} ids for {count} items; delete the index to rebuild it")
        return out
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces or [string_array([])])


def _complete(text: str) -> tuple[list | None, int]:
    """The complete elements at the start of a partial JSON list of strings (``"a", "b", "c``,
    its ``[`` read already) and where they end: up to the last closing quote a separator
    follows, proven by parsing (which fails where that quote lies inside a string); None if no
    such place is found."""
    end = len(text)
    for _ in range(_CUT_TRIES):
        at = text.rfind('", "', 0, end)
        if at < 0:
            break
        try:
            return json.loads("[" + text[: at + 1] + "]"), at + 1
        except ValueError:
            end = at
    return None, -1


class IdColumn:
    """Ids seen in a pass, packed a chunk at a time, with their hashes."""

    def __init__(self) -> None:
        self._pending: list[str] = []
        self._ids: list[np.ndarray] = []
        self._hashes: list[np.ndarray] = []

    def add(self, value: str) -> None:
        self._pending.append(value)
        if len(self._pending) >= _CHUNK:
            self._pack()

    def _pack(self) -> None:
        pending, self._pending = self._pending, []
        self._ids.append(string_array(pending))
        self._hashes.append(np.fromiter(map(hash, pending), np.int64, len(pending)))

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """The ids in order and their hashes; the chunks are let go of as each is joined."""
        self._pack()
        ids = _joined(self._ids)
        return ids, _joined(self._hashes)


def _joined(chunks: list[np.ndarray]) -> np.ndarray:
    """The chunks as one array, the list emptied (so the chunks go once it is made)."""
    out = np.concatenate(chunks)
    chunks.clear()
    return out


@dataclass
class ScannedIds:
    """What a pass over a corpus found: the ids in order, passages per document, and the ids'
    hashes under ``seed`` (:func:`hash_seed` then), which :meth:`take_hashes` hands over once."""

    passages: np.ndarray
    documents: np.ndarray
    sizes: np.ndarray
    seed: int
    hashes: dict[str, np.ndarray]
    """``"passage"`` / ``"document"`` -> the hashes of those ids."""

    def take_hashes(self, kind: str) -> np.ndarray | None:
        """The hashes of ``kind``'s ids, if made under this process's seed; kept no longer, so
        the index that sorts them holds the only copy."""
        hashes = self.hashes.pop(kind)
        return hashes if self.seed == hash_seed() else None


@dataclass(frozen=True)
class CorpusIds:
    """Positional views of a corpus: passage ``i`` belongs to document ``doc_of[i]``.

    ``passage_ids`` and ``doc_ids`` are string arrays (``StringDType`` when built by
    :attr:`Corpus.ids`, any array of strings otherwise); :meth:`passage_codes`,
    :meth:`document_codes` and :meth:`document_of` find ids in them by hash, with no
    dictionary over the corpus.
    """

    passage_ids: np.ndarray
    doc_ids: np.ndarray
    doc_of: np.ndarray
    _indexes: dict[str, IdIndex] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def passage_codes(self, ids: Sequence[str] | np.ndarray) -> np.ndarray:
        """The position in ``passage_ids`` of each of ``ids`` (-1 where the corpus lacks it)."""
        return self._index("passage").locate(ids)

    def document_codes(self, ids: Sequence[str] | np.ndarray) -> np.ndarray:
        """The position in ``doc_ids`` of each of ``ids`` (-1 where the corpus lacks it)."""
        return self._index("document").locate(ids)

    def document_of(self, passage_ids: Sequence[str] | np.ndarray) -> np.ndarray:
        """The document code (a position in ``doc_ids``) of each passage id, -1 if unknown."""
        codes = self.passage_codes(passage_ids)
        found = codes >= 0
        codes[found] = self.doc_of[codes[found]]
        return codes

    def _index(self, kind: str) -> IdIndex:
        index = self._indexes.get(kind)
        if index is None or index.seed != hash_seed():  # none yet, or made by another process
            ids = self.passage_ids if kind == "passage" else self.doc_ids
            index = self._indexes[kind] = IdIndex(ids)
        return index


class IdIndex:
    """Finds strings in an array by their hash: the hashes sorted, with the positions they came
    from (12 bytes an id). Python's string hashes are seeded per process, so an index that
    travels to another process (pickled, say) is only valid while ``seed`` equals
    :func:`hash_seed` there."""

    def __init__(self, ids: np.ndarray, hashes: np.ndarray | None = None):
        self.ids = ids
        self.seed = hash_seed()
        hashes = _hashes(ids) if hashes is None else hashes
        order = np.argsort(hashes, kind="stable")
        self.hashes = hashes[order]
        del hashes
        self.order = order.astype(np.int32) if len(order) < 2**31 else order

    def first_repeat(self) -> str | None:
        """The first id (in array order) that occurs earlier too, else None; only ids whose
        hash is shared are compared."""
        shared = self.hashes[1:] == self.hashes[:-1]
        if not shared.any():
            return None
        rows = np.flatnonzero(np.concatenate([shared, [False]]) | np.concatenate([[False], shared]))
        seen: set[str] = set()
        for value in self.ids[np.sort(self.order[rows])].tolist():
            if value in seen:
                return value
            seen.add(value)
        return None

    def locate(self, needles: Sequence[str] | np.ndarray) -> np.ndarray:
        """The position of each needle in the array (the first, if it repeats), -1 if absent."""
        if not isinstance(needles, np.ndarray):
            needles = np.array(list(needles), dtype=object)
        out = np.full(len(needles), -1, dtype=np.int64)
        if not len(self.hashes) or not len(needles):
            return out
        wanted = _hashes(needles)
        by_hash = np.argsort(wanted)  # searching sorted keys is an order of magnitude faster
        at = np.empty(len(needles), dtype=np.int64)
        at[by_hash] = np.searchsorted(self.hashes, wanted[by_hash])
        del by_hash
        np.minimum(at, len(self.hashes) - 1, out=at)
        hit = np.flatnonzero(self.hashes[at] == wanted)
        del wanted
        rows = self.order[at[hit]]
        same = _equal(self.ids, rows, needles[hit])
        out[hit[same]] = rows[same]
        for n in hit[~same].tolist():  # a hash shared by different strings: look further
            row, key = int(at[n]) + 1, self.hashes[at[n]]
            while row < len(self.hashes) and self.hashes[row] == key:
                if self.ids[self.order[row]] == needles[n]:
                    out[n] = self.order[row]
                    break
                row += 1
        return out


def hash_seed() -> int:
    """Stands for this process's string-hash seed (``PYTHONHASHSEED``)."""
    return hash("dapr corpus ids")


def _hashes(values: np.ndarray) -> np.ndarray:
    """``hash()`` of every string, a chunk at a time."""
    out = np.empty(len(values), dtype=np.int64)
    for i in range(0, len(values), _CHUNK):
        chunk = values[i : i + _CHUNK].tolist()
        out[i : i + len(chunk)] = np.fromiter(map(hash, chunk), np.int64, len(chunk))
    return out


def _equal(ids: np.ndarray, rows: np.ndarray, needles: np.ndarray) -> np.ndarray:
    """``ids[rows] == needles``, elementwise, a chunk at a time."""
    out = np.empty(len(rows), dtype=bool)
    for i in range(0, len(rows), _CHUNK):
        found = ids[rows[i : i + _CHUNK]].tolist()
        out[i : i + len(found)] = np.fromiter(
            map(operator.eq, found, needles[i : i + _CHUNK].tolist()), bool, len(found)
        )
    return out
