"""Candidate search keeps each query's best rows and says how high a left-out row scored;
exact search built on it returns the exact top k, searching wider where ties demand it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dapr.retrievers.support import candidates, canonical
from dapr.retrievers.support.canonical import exact_scores, exact_search, fast_product


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    items=st.integers(1, 60),
    queries=st.integers(1, 9),
    width=st.integers(1, 70),
    tile=st.integers(1, 9),
    block=st.integers(1, 25),
    batch=st.integers(1, 4),
)
def test_pools_keep_the_best_and_the_floor_is_the_best_left_out(
    seed, items, queries, width, tile, block, batch
):
    rng = np.random.default_rng(seed)
    # small integers: products are exact and tie often
    rows = rng.integers(-2, 3, (items, 4)).astype(np.float32)
    vectors = rng.integers(-2, 3, (queries, 4)).astype(np.float32)
    cut = rng.integers(0, items + 1)
    shards = [rows[:cut], rows[cut:]]
    scores = vectors @ rows.T
    tiled = pytest.MonkeyPatch()
    tiled.setattr(candidates, "TILE", tile)
    try:
        found = candidates.search_candidates(
            vectors, shards, width, lambda q, x: q @ x.T, block, batch, lengths=True
        )
    finally:
        tiled.undo()
    kept = min(width, items)
    assert found.items.shape == found.scores.shape == (queries, kept)
    assert found.longest >= np.linalg.norm(rows, axis=1).max()
    for q in range(queries):
        codes = found.items[q]
        assert len(set(codes.tolist())) == kept
        np.testing.assert_array_equal(found.scores[q], scores[q, codes])
        left = np.setdiff1d(np.arange(items), codes)
        floor = scores[q, left].max() if len(left) else -np.inf
        assert found.floors[q] == floor
        assert found.scores[q].min() >= floor


SIMILARITIES = {
    "dot": lambda q, x: q @ x.T,
    "cosine": lambda q, x: q @ x.T,  # unused: fast_product computes cosine itself
    "euclidean": lambda q, x: -torch.cdist(q, x),
}


@pytest.mark.parametrize("similarity", SIMILARITIES)
def test_exact_search_is_the_exact_top_k_however_ties_fall(similarity, monkeypatch):
    rng = np.random.default_rng(7)
    rows = rng.standard_normal((700, 24)).astype(np.float32)
    rows[100:160] = rows[40]  # sixty-one copies: a query on them ties far past k
    vectors = rng.standard_normal((40, 24)).astype(np.float32)
    vectors[:3] = rows[40]
    searches = []
    real = canonical.search_candidates
    monkeypatch.setattr(
        canonical,
        "search_candidates",
        lambda q, *a, **kw: searches.append(len(q)) or real(q, *a, **kw),
    )
    fast = fast_product(similarity, SIMILARITIES[similarity])
    for shards, block, batch in [
        ([rows], 65_536, 4096),
        ([rows[:250], rows[250:251], rows[251:]], 33, 5),
    ]:
        searches.clear()
        items, scores = exact_search(
            torch.from_numpy(vectors), shards, 20, similarity, fast, block, batch
        )
        assert sum(searches) > len(vectors)  # the tied queries were searched again, wider
        for q, vector in enumerate(vectors):
            exact = exact_scores(similarity, torch.from_numpy(vector), rows)
            cut = np.sort(exact)[-20]
            np.testing.assert_array_equal(scores[q], exact[items[q]])
            assert set(np.flatnonzero(exact > cut)) <= set(items[q].tolist())
            assert (scores[q] >= cut).sum() >= 20


def test_exact_search_leaves_thread_settings_as_they_were():
    from threadpoolctl import threadpool_info

    before = (torch.get_num_threads(), [p["num_threads"] for p in threadpool_info()])
    rows = np.eye(5, dtype=np.float32)
    exact_search(torch.ones(3, 5), [rows], 2, "dot", fast_product("dot", None))
    assert (torch.get_num_threads(), [p["num_threads"] for p in threadpool_info()]) == before
