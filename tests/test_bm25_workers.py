"""BM25 indexes tokenized by worker processes equal those tokenized by one process, term ids and
all (the vocabulary is numbered in order of first sight over the whole stream); workers start only
for a corpus long enough to pay for them (``postings.POOL_CHARS``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_bm25_zh import ITEMS as CHINESE

from dapr.retrievers.bm25 import BM25
from dapr.retrievers.support import postings

ENGLISH = [
    "The cat sat on the mat near the door.",
    "Stock markets fell sharply today as investors sold shares.",
    "The King's men don't run 3.14 miles; café généralisation trekked ecology 1990s.",
    "A kitten is a young domestic cat, and kittens' games are abilities.",
]


def _items(language: str = "en", count: int = 60) -> list[tuple[str, str]]:
    texts = ENGLISH if language == "en" else [text for _, text in CHINESE]
    return [(f"p{i:03d}", texts[i % len(texts)] + f" {i}") for i in range(count)]


def _index(items, store: Path, threads: int, language: str = "en") -> tuple:
    """What an index holds: its score matrix, vocabulary and ids."""
    retriever = BM25(threads=threads, language=language)
    retriever.index(iter(items), store)
    scores = tuple(retriever._model.scores[key] for key in ("data", "indices", "indptr"))
    vocab = json.loads((store / "bm25s" / "vocab.index.json").read_text())
    return scores, vocab, (store / "ids.json").read_text()


def _same(one: tuple, other: tuple) -> bool:
    return all(map(np.array_equal, one[0], other[0])) and one[1:] == other[1:]


def _pools(monkeypatch) -> list[dict]:
    """The settings of every worker pool started from now on."""
    started: list[dict] = []
    real = postings.ProcessPoolExecutor
    monkeypatch.setattr(
        postings, "ProcessPoolExecutor", lambda **kw: started.append(kw) or real(**kw)
    )
    return started


@pytest.mark.parametrize("language", ["en", "zh"])
def test_texts_tokenized_by_worker_processes_give_the_index_of_one_process(
    monkeypatch, tmp_path, language
):
    items = _items(language)
    one = _index(items, tmp_path / "one", 1, language)
    monkeypatch.setattr(postings, "BATCH", 7)  # nine batches over two workers
    monkeypatch.setattr(postings, "POOL_CHARS", 0)
    started = _pools(monkeypatch)
    two = _index(items, tmp_path / "two", 2, language)
    assert [kw["max_workers"] for kw in started] == [2]
    assert _same(one, two)


def test_a_small_corpus_starts_no_worker_process(monkeypatch, tmp_path):
    """Nine batches (which once started workers) but far fewer characters than the threshold:
    tokenized here, on any number of cores."""
    items = _items()
    one = _index(items, tmp_path / "one", 1)
    monkeypatch.setattr(postings, "BATCH", 7)

    def refuse(**_):
        raise AssertionError("a worker pool started for a small corpus")

    monkeypatch.setattr(postings, "ProcessPoolExecutor", refuse)
    assert _same(one, _index(items, tmp_path / "sixteen", 16))


def test_workers_start_from_the_threshold_on_and_give_the_same_index(monkeypatch, tmp_path):
    items = _items()
    chars = sum(len(text) for _, text in items)
    one = _index(items, tmp_path / "one", 1)
    monkeypatch.setattr(postings, "BATCH", 7)  # nine batches
    started = _pools(monkeypatch)
    monkeypatch.setattr(postings, "POOL_CHARS", chars + 1)
    below = _index(items, tmp_path / "below", 16)
    assert started == []
    monkeypatch.setattr(postings, "POOL_CHARS", chars)
    at = _index(items, tmp_path / "at", 16)
    assert [kw["max_workers"] for kw in started] == [9]  # no more workers than batches
    assert _same(one, below) and _same(one, at)


def test_long_texts_make_batches_of_their_own(monkeypatch, tmp_path):
    """A batch ends at ``BATCH_CHARS`` characters too, so a few long documents still spread
    over the workers; the index is the same."""
    items = [(f"d{i}", " ".join(ENGLISH * (i + 1))) for i in range(6)]
    one = _index(items, tmp_path / "one", 1)
    monkeypatch.setattr(postings, "BATCH_CHARS", 600)
    monkeypatch.setattr(postings, "POOL_CHARS", 0)
    batches = [len(b) for b in postings._batches(iter(items))]
    assert sum(batches) == 6 and len(batches) > 3
    started = _pools(monkeypatch)
    assert _same(one, _index(items, tmp_path / "two", 2))
    assert [kw["max_workers"] for kw in started] == [2]


@pytest.mark.parametrize("threads", [1, 2])
def test_the_corpus_streams_through_a_few_batches_at_a_time(monkeypatch, tmp_path, threads):
    read = []

    def items():
        for i in range(200):
            read.append(i)
            yield f"p{i:03d}", ENGLISH[i % len(ENGLISH)]

    seen = []
    real = postings._Mapping.apply
    monkeypatch.setattr(postings, "BATCH", 5)
    monkeypatch.setattr(postings, "POOL_CHARS", 0)  # workers for threads=2
    monkeypatch.setattr(postings._Mapping, "apply", lambda *a: seen.append(len(read)) or real(*a))
    BM25(threads=threads).index(items(), tmp_path / "index")
    # the first batch is given back when at most two (one process) or two per worker and the
    # one being read are held, not the whole corpus
    assert len(seen) == 40 and seen[0] <= 5 * (2 * threads + 1) < 200


def test_reading_ahead_stops_once_the_corpus_pays_for_workers(monkeypatch, tmp_path):
    read = []

    def items():
        for i in range(200):
            read.append(i)
            yield f"p{i:03d}", "x" * 10

    seen = []
    real = postings._Mapping.apply
    monkeypatch.setattr(postings, "BATCH", 5)
    monkeypatch.setattr(postings, "POOL_CHARS", 500)  # 50 texts
    monkeypatch.setattr(postings._Mapping, "apply", lambda *a: seen.append(len(read)) or real(*a))
    started = _pools(monkeypatch)
    BM25(threads=2).index(items(), tmp_path / "index")
    assert len(started) == 1 and len(seen) == 40 and seen[0] <= 50 + 5 * 4


PIECES = [
    "Café", "İstanbul", "ΣΑΣ", "don't", "U.S.A.", "3.14", "co-operate", "well-known", "x\u202fy",
    "the", "a", "King's", "1990–2000", "e-mail", "\uffff", "_", "..", "日本語", "ﾃｽﾄ", "\u200b",
]  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.lists(
            st.one_of(st.sampled_from(PIECES), st.text(max_size=6)),
            max_size=8,
        ).map(lambda words: " ".join(words)),
        min_size=1,
        max_size=6,
    )
)
def test_a_batch_gives_each_text_the_terms_the_analyzer_gives_it(texts):
    from dapr.retrievers.support.english import english_batch, process_analyzer

    analyzer = process_analyzer()
    memo: dict = {}
    seen: list[str] = []
    for batch in (texts, texts[::-1]):  # the second batch reuses the first one's chunks
        new, tokens, counts = english_batch(batch, memo)
        seen.extend(new)
        expected = [analyzer.terms(text) for text in batch]
        assert counts.tolist() == [len(terms) for terms in expected]
        assert [seen[t] for t in tokens.tolist()] == [t for terms in expected for t in terms]
    assert len(set(seen)) == len(seen)
