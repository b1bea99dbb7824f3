"""Checks of a whole corpus made while it streams past, with no extra pass over a good one.

Every passage id is kept as a 64-bit hash (8 bytes a passage, a sort at the end of the pass), and
only ids judged in the qrels are looked up; the rows at fault are found by reading the files
again, which only a bad corpus pays for.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Collection, Iterable

import numpy as np

from dapr.errors import DataError

Located = Iterable[tuple[str, str]]
"""``(where, passage id)`` pairs: a corpus read again, to find the rows at fault."""


class PassageTally:
    """Passage ids seen in one pass: are they unique, and is every judged passage among them?"""

    def __init__(self, judged: Collection[str] = ()):
        self._hashes = array("q")
        self._judged = judged if isinstance(judged, (set, frozenset)) else set(judged)
        self._found: set[str] = set()

    def add(self, passage_id: str) -> None:
        """Count one passage of the pass."""
        self._hashes.append(hash(passage_id))
        if passage_id in self._judged:
            self._found.add(passage_id)

    def check(self, again: Callable[[], Located], judged_at: Callable[[], Located]) -> None:
        """Raise a DataError for the first repeated passage id (read ``again`` to find its row),
        then for the first judged passage the corpus lacks (``judged_at`` finds its qrels row)."""
        hashes = np.sort(np.frombuffer(self._hashes, dtype=np.int64))
        colliding = hashes[1:][hashes[1:] == hashes[:-1]]
        if len(colliding):
            _raise_repeated(again(), set(colliding.tolist()))
        missing = self._judged - self._found
        if missing:
            for where, item in judged_at():
                if item in missing:
                    raise DataError(
                        f"{where}: judged passage {item!r} is not in the corpus; judge only "
                        "passages of the corpus (check the corpus_id), or add the passage"
                    )


def _raise_repeated(rows: Located, colliding: set[int]) -> None:
    """The row of the second occurrence of a passage id whose hash is in ``colliding``."""
    first: dict[str, str] = {}
    for where, passage_id in rows:
        if hash(passage_id) not in colliding:
            continue
        if passage_id in first:
            raise DataError(
                f"{where}: passage id {passage_id!r} is used twice (first at "
                f"{first[passage_id]}); give every passage a unique id"
            )
        first[passage_id] = where
    # distinct ids with equal hashes: nothing is wrong
