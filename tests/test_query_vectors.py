"""Query vectors are encoded once per query encoder and process: search, scoped scoring and a
second search reuse them, and the results are the same as with fresh encoding."""

from __future__ import annotations

import numpy as np
from test_sparse import ITEMS

from dapr.data import Run
from dapr.retrievers.dense import Dense
from dapr.retrievers.support import query_vectors
from dapr.retrievers.support.query_vectors import QueryVectors

QUERIES = {"pets": "a cat and a kitten", "park": "dogs running in the park"}


def test_vectors_are_encoded_once_and_the_oldest_go_beyond_the_budget():
    calls: list[list[str]] = []

    def encode(texts):
        calls.append(texts)
        return np.array([[len(t), 1.0] for t in texts])

    vectors = QueryVectors(budget=3 * 8)  # three vectors of two float32
    first = vectors.get("m", ["ab", "abc", "ab"], encode)
    assert first.tolist() == [[2, 1], [3, 1], [2, 1]] and calls == [["ab", "abc"]]
    assert vectors.get("m", ["abc"], encode).tolist() == [[3, 1]] and len(calls) == 1
    vectors.get("other", ["ab"], encode)  # another encoder: encoded again
    assert calls[-1] == ["ab"] and vectors.encoded == 3
    vectors.get("m", ["abcd"], encode)  # over budget: the least recently used ("m", "ab") goes
    assert vectors.held == 3 * 8
    vectors.get("m", ["ab"], encode)
    assert calls[-1] == ["ab"] and vectors.encoded == 5


def test_search_and_scoped_scoring_share_the_query_vectors(tmp_path, monkeypatch):
    monkeypatch.setattr(query_vectors, "SHARED", QueryVectors())
    monkeypatch.setattr("dapr.retrievers.dense.SHARED", query_vectors.SHARED)
    dense = Dense(shard_size=3)
    dense.index(ITEMS, tmp_path)
    searched = dense.search(QUERIES, 5)
    assert query_vectors.SHARED.encoded == len(QUERIES)
    candidates = Run.from_dict(
        {q: dict.fromkeys(ranked, 0.0) for q, ranked in searched.to_dict().items()}
    )
    scored = dense.score(QUERIES, candidates)
    again = Dense(shard_size=3)  # another instance of the same encoder: still no encoding
    again.load(tmp_path)
    assert again.search(QUERIES, 5).to_dict() == searched.to_dict()
    assert query_vectors.SHARED.encoded == len(QUERIES)
    assert scored.to_dict() == searched.to_dict()  # the same scores as search, bit for bit
    # with a fresh store (everything encoded anew) the results are the same
    monkeypatch.setattr("dapr.retrievers.dense.SHARED", QueryVectors())
    fresh = Dense(shard_size=3)
    fresh.load(tmp_path)
    assert fresh.search(QUERIES, 5).to_dict() == searched.to_dict()
