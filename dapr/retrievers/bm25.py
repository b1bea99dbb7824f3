"""BM25 on bm25s, configured like Lucene's (and Pyserini's) defaults.

English text is tokenized as Lucene's English analyzer does (stop words, Porter stemmer). Chinese
(``language="zh"``), written without spaces, is segmented with jieba's search-engine mode
(:func:`jieba.lcut_for_search`): besides each word it emits the dictionary words inside long
ones (冠状病毒 -> 冠状, 病毒, 冠状病毒), so a query worded more briefly or at a finer grain than
the passage still matches. Latin letters are lowercased, tokens of only punctuation or
whitespace are dropped, and nothing is stemmed; no stop words are removed, since BM25's idf
already gives the frequent function words (的, 了, 是) almost no weight.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from dapr.data import Run
from dapr.errors import DaprError

_PROGRESS_FROM = 50_000
"""Show bm25s' progress bars from this many items or queries on (steps that take seconds)."""
LANGUAGES = ("en", "zh")
"""Languages with a tokenizer (ISO 639-1 codes)."""
_LANGUAGE_FILE = "language.json"
"""Written beside a non-English index, so it is never searched with another tokenizer."""


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


def _require_jieba():
    try:
        import jieba
    except ImportError:
        raise DaprError(
            "retriever 'bm25' with language 'zh' needs jieba; install it with: "
            'pip install "dapr[zh]"'
        ) from None
    jieba.setLogLevel(logging.WARNING)  # its dictionary loading reports on stderr otherwise
    return jieba


def chinese_tokens(text: str, jieba) -> list[str]:
    """jieba's search-engine segmentation of lowercased ``text``, without tokens holding no
    letter or digit (punctuation, whitespace)."""
    return [t for t in jieba.lcut_for_search(text.lower()) if any(c.isalnum() for c in t)]


class BM25:
    """Lucene's BM25 variant (k1=0.9, b=0.4 by default) with a Porter stemmer and Lucene's
    English stop words, or for ``language="zh"`` jieba's segmentation (see the module);
    items with no query term in common are not returned, as in Lucene."""

    version = "1"

    def __init__(self, k1: float = 0.9, b: float = 0.4, threads: int = 0, language: str = "en"):
        if language not in LANGUAGES:
            raise DaprError(
                f"retriever 'bm25': unknown language {language!r}; "
                f"choose one of: {', '.join(LANGUAGES)}"
            )
        self.k1 = k1
        self.b = b
        self.threads = threads
        self.language = language
        self._model = None
        self._ids: np.ndarray | None = None

    def _tokenize(self, texts: list[str]):
        if self.language == "zh":
            jieba = _require_jieba()
            return [chinese_tokens(text, jieba) for text in texts]
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
        corpus = self._tokenize(texts) if self.language == "en" else self._token_ids(texts)
        del texts
        model.index(corpus, show_progress=len(ids) > _PROGRESS_FROM)
        store.mkdir(parents=True, exist_ok=True)
        model.save(str(store / "bm25s"))
        (store / "ids.json").write_text(json.dumps(ids))
        if self.language != "en":
            (store / _LANGUAGE_FILE).write_text(json.dumps({"language": self.language}))
        self._model, self._ids = model, np.array(ids, dtype=object)

    def _token_ids(self, texts: list[str]) -> tuple[list[list[int]], dict[str, int]]:
        """Token ids per text and the vocabulary (Chinese): text by text, each token string
        held once in the vocabulary rather than once per occurrence."""
        jieba = _require_jieba()
        vocab: dict[str, int] = {}
        ids = [[vocab.setdefault(t, len(vocab)) for t in chinese_tokens(x, jieba)] for x in texts]
        return ids, vocab

    def load(self, store: Path) -> None:
        bm25s, _ = _require_bm25s()
        marker = store / _LANGUAGE_FILE
        indexed = json.loads(marker.read_text())["language"] if marker.is_file() else "en"
        if indexed != self.language:
            raise DaprError(
                f"{store}: this BM25 index was built for language {indexed!r}, not "
                f"{self.language!r}; rebuild it or search it with language={indexed!r}"
            )
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
