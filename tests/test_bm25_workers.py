"""BM25 indexes tokenized by worker processes equal those tokenized by one process, term ids and
all (the vocabulary is numbered in order of first sight over the whole stream)."""

from __future__ import annotations

import json

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


@pytest.mark.parametrize("language", ["en", "zh"])
def test_texts_tokenized_by_worker_processes_give_the_index_of_one_process(
    monkeypatch, tmp_path, language
):
    texts = ENGLISH if language == "en" else [text for _, text in CHINESE]
    items = [(f"p{i:03d}", texts[i % len(texts)] + f" {i}") for i in range(60)]
    one = BM25(threads=1, language=language)
    one.index(items, tmp_path / "one")
    monkeypatch.setattr(postings, "BATCH", 7)  # nine batches over two workers
    spawned = []
    real = postings.ProcessPoolExecutor
    monkeypatch.setattr(
        postings, "ProcessPoolExecutor", lambda **kw: spawned.append(kw) or real(**kw)
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
    monkeypatch.setattr(postings._Mapping, "apply", lambda *a: seen.append(len(read)) or real(*a))
    BM25(threads=threads).index(items(), tmp_path / "index")
    # the first batch is given back when at most two (one process) or two per worker and the
    # one being read are held, not the whole corpus
    assert len(seen) == 40 and seen[0] <= 5 * (2 * threads + 1) < 200


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
