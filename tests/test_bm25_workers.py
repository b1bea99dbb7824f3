"""BM25 indexes tokenized by worker processes equal those tokenized by one process, term ids and
all (the vocabulary is numbered in order of first sight over the whole stream)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_bm25_zh import ITEMS as CHINESE

from dapr.retrievers.bm25 import BM25
from dapr.retrievers.support import term_batches

ENGLISH = [
    "The cat sat on the mat near the door.",
    "Stock markets fell sharply today as investors sold shares.",
    "The King's men don't run 3.14 miles; café généralisation trekked ecology 1990s.",
    "A kitten is a young domestic cat, and kittens' games are abilities.",
]


@pytest.mark.parametrize("language", ["en", "zh"])
def test_texts_tokenized_by_worker_processes_give_the_index_of_one_process(
    monkeypatch, tmp_path, language
):
    texts = ENGLISH if language == "en" else [text for _, text in CHINESE]
    items = [(f"p{i:03d}", texts[i % len(texts)] + f" {i}") for i in range(60)]
    one = BM25(threads=1, language=language)
    one.index(items, tmp_path / "one")
    monkeypatch.setattr(term_batches, "BATCH", 7)  # nine batches over two workers
    spawned = []
    real = term_batches.ProcessPoolExecutor
    monkeypatch.setattr(
        term_batches, "ProcessPoolExecutor", lambda **kw: spawned.append(kw) or real(**kw)
    )
    two = BM25(threads=2, language=language)
    two.index(iter(items), tmp_path / "two")
    assert [kw["max_workers"] for kw in spawned] == [2]
    for key in ("data", "indices", "indptr"):
        assert np.array_equal(one._model.scores[key], two._model.scores[key])
    vocab = json.loads((tmp_path / "two" / "bm25s" / "vocab.index.json").read_text())
    assert vocab == json.loads((tmp_path / "one" / "bm25s" / "vocab.index.json").read_text())
    assert (tmp_path / "one" / "ids.json").read_text() == (
        tmp_path / "two" / "ids.json"
    ).read_text()
