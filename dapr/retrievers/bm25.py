"""BM25 on bm25s, configured like Lucene's (and Pyserini's) defaults."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from dapr.data import Run
from dapr.errors import DaprError

_PROGRESS_FROM = 50_000
"""Show bm25s' progress bars from this many items or queries on (steps that take seconds)."""


def _require_bm25s():
    try:
        import bm25s
        import Stemmer
    except ImportError as error:
        raise DaprError(
            f"retriever 'bm25' needs bm25s and PyStemmer ({error.name} is missing); "
            'install them with: pip install "dapr[bm25]"'
        ) from None
    return bm25s, Stemmer


class BM25:
    """Lucene's BM25 variant (k1=0.9, b=0.4 by default) with a Porter stemmer and Lucene's
    English stop words; items with no query term in common are not returned, as in Lucene."""

    version = "1"

    def __init__(self, k1: float = 0.9, b: float = 0.4, threads: int = 0):
        self.k1 = k1
        self.b = b
        self.threads = threads
        self._model = None
        self._ids: np.ndarray | None = None

    def _tokenize(self, texts: list[str]):
        bm25s, stemmer = _require_bm25s()
        return bm25s.tokenize(
            texts,
            stopwords="en",
            stemmer=stemmer.Stemmer("porter").stemWords,
            return_ids=False,
            show_progress=False,
        )

    def index(self, items: Iterable[tuple[str, str]], store: Path) -> None:
        bm25s, _ = _require_bm25s()
        ids, texts = [], []
        for item_id, text in items:
            ids.append(item_id)
            texts.append(text)
        model = bm25s.BM25(k1=self.k1, b=self.b, method="lucene")
        model.index(self._tokenize(texts), show_progress=len(texts) > _PROGRESS_FROM)
        store.mkdir(parents=True, exist_ok=True)
        model.save(str(store / "bm25s"))
        (store / "ids.json").write_text(json.dumps(ids))
        self._model, self._ids = model, np.array(ids, dtype=object)

    def load(self, store: Path) -> None:
        bm25s, _ = _require_bm25s()
        self._model = bm25s.BM25.load(str(store / "bm25s"))
        self._ids = np.array(json.loads((store / "ids.json").read_text()), dtype=object)

    def search(self, queries: Mapping[str, str], k: int) -> Run:
        if self._model is None or self._ids is None:
            raise RuntimeError("BM25.search called before index() or load()")
        qids = list(queries)
        tokens = self._tokenize([queries[q] for q in qids])
        depth = min(k, len(self._ids))
        codes, scores = self._model.retrieve(
            tokens, k=depth, show_progress=len(qids) > _PROGRESS_FROM, n_threads=self.threads
        )
        matched = scores > 0
        items = [row[keep] for row, keep in zip(codes, matched)]
        kept = [row[keep] for row, keep in zip(scores, matched)]
        return Run.from_lists(qids, items, kept, self._ids)
