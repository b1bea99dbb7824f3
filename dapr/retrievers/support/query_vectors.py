"""Query vectors kept for the life of the process: a query is encoded once per query encoder,
and full search, scoped scoring (hierarchical retrieval) and every sweep value reuse it.

Reuse changes nothing: a text is encoded without padding and in batches of exact token length
(:mod:`~dapr.retrievers.support.batches`), so its vector does not depend on which other queries
were encoded with it. The memory held is bounded (:data:`BUDGET` bytes; the oldest go first).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

BUDGET = 1 << 30
"""Bytes of query vectors kept at most (1 GiB: 350,000 queries of 768 dimensions)."""


class QueryVectors:
    """Vectors by (encoder, text), filled by an encode function for the ones not yet held."""

    def __init__(self, budget: int = BUDGET):
        self.budget = budget
        self.held = 0
        self.encoded = 0
        """Texts encoded (not found) since creation: what reuse saved is visible in tests."""
        self._vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()

    def get(
        self, encoder: str, texts: Sequence[str], encode: Callable[[list[str]], np.ndarray]
    ) -> np.ndarray:
        """The vectors of ``texts`` (float32, one row each) for the encoder named ``encoder``
        (a key saying everything that changes a vector), encoding only the missing ones."""
        missing = list(dict.fromkeys(t for t in texts if (encoder, t) not in self._vectors))
        if missing:
            fresh = np.asarray(encode(missing), dtype=np.float32)
            self.encoded += len(missing)
            for text, vector in zip(missing, fresh, strict=True):
                self._vectors[encoder, text] = vector
                self.held += vector.nbytes
        rows = [self._vectors[encoder, t] for t in texts]
        for text in texts:
            self._vectors.move_to_end((encoder, text))
        while self.held > self.budget and len(self._vectors) > len(texts):
            _, dropped = self._vectors.popitem(last=False)
            self.held -= dropped.nbytes
        return np.stack(rows) if rows else np.zeros((0, 0), dtype=np.float32)


SHARED = QueryVectors()
"""The process's store, shared by every dense retriever."""
