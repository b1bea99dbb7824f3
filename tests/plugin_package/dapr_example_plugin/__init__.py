"""A dapr retriever plugin: scores an item by how many distinct query words it contains."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from dapr.data import Run


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


class WordOverlap:
    """Ranks items by the number of distinct query words of at least ``min_length`` letters
    they contain (ties by id); items sharing no such word are not returned."""

    version = "1"

    def __init__(self, min_length: int = 3):
        self.min_length = min_length
        self._items: list[tuple[str, set[str]]] = []

    def index(self, items: Iterable[tuple[str, str]], store: Path) -> None:
        rows = [(item_id, sorted(_words(text))) for item_id, text in items]
        (store / "words.json").write_text(json.dumps(rows))
        self.load(store)

    def load(self, store: Path) -> None:
        rows = json.loads((store / "words.json").read_text())
        self._items = [(item_id, set(words)) for item_id, words in rows]

    def search(self, queries: Mapping[str, str], k: int) -> Run:
        ids = np.array([item_id for item_id, _ in self._items], dtype=object)
        qids, codes, scores = [], [], []
        for qid, text in queries.items():
            words = {w for w in _words(text) if len(w) >= self.min_length}
            overlap = np.array([len(words & item) for _, item in self._items], dtype=np.float64)
            best = np.flatnonzero(overlap > 0)
            best = best[np.lexsort((best, -overlap[best]))][:k]
            qids.append(qid)
            codes.append(best)
            scores.append(overlap[best])
        return Run.from_lists(qids, codes, scores, ids)
