"""Exact search on torch devices gives the CPU path's run, bit for bit: the GPU code runs here
on the CPU device (resident or streamed rows, one device or several splitting them)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sentence_transformers.util import cos_sim, dot_score, euclidean_sim, manhattan_sim

from dapr.data import Run
from dapr.retrievers.dense import Dense
from dapr.retrievers.support import device_search as gpu
from dapr.retrievers.support.canonical import (
    EXACT,
    exact_scores,
    exact_search,
    fast_product,
    rescore,
    tree_sum,
    tree_sum_,
)

FALLBACK = {"dot": dot_score, "cosine": cos_sim, "euclidean": euclidean_sim}
FALLBACK["manhattan"] = manhattan_sim


def _corpus(seed: int, near_ties: bool = False) -> tuple[list[np.ndarray], torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randn(2300, 48, generator=generator)
    if near_ties:  # rows a few float32 steps apart: the float32 product cannot order them
        rows[:600] = rows[0] + 1e-7 * torch.randn(600, 48, generator=generator)
    rows[1500] = rows[7]  # an exact tie, ranked by id
    queries = torch.randn(30, 48, generator=generator)
    queries[:10] += 3 * rows[0]  # the near ties are these queries' best
    array = rows.numpy()
    return [array[:900], array[900:2295], array[2295:]], queries


def _run(found: tuple[list[np.ndarray], list[np.ndarray]], k: int) -> dict:
    vocab = np.array([f"d{i:05d}" for i in range(2300)], dtype=object)
    return Run.from_lists([f"q{i}" for i in range(30)], *found, vocab).top(k).to_dict()


@pytest.mark.parametrize("similarity", list(EXACT))
def test_device_search_is_the_cpu_search(similarity, monkeypatch):
    fallback = FALLBACK[similarity]
    searches = []
    candidates = gpu._candidates
    monkeypatch.setattr(
        gpu, "_candidates", lambda *args: searches.append(len(args[1])) or candidates(*args)
    )
    for seed, near_ties in ((0, False), (1, True)):
        shards, queries = _corpus(seed, near_ties)
        for k in (1, 10, 150):
            cpu = _run(
                exact_search(queries, shards, k, similarity, fast_product(similarity, fallback)), k
            )
            settings = [
                (["cpu"], None),  # resident
                (["cpu"], 1 << 20),  # streamed in blocks under a 0.5 MiB share
                (["cpu", "cpu"], None),
                (["cpu", "cpu", "cpu"], 1 << 20),
            ]
            for devices, memory in settings:
                index = gpu.DeviceIndex(shards, devices, similarity, memory=memory, query_batch=8)
                if memory is not None and len(devices) == 1:
                    assert index.parts[0].rows is None
                searches.clear()
                got = _run(gpu.device_search(index, queries, k, fallback), k)
                assert got == cpu, (similarity, seed, k, devices, memory)
                if near_ties and k == 10:  # the bound sent some queries back, wider
                    assert len(searches) > 1 and searches[1] < searches[0]


@pytest.mark.parametrize("similarity", list(EXACT))
def test_device_scores_of_given_candidates_are_the_exact_scores(similarity):
    shards, queries = _corpus(4)
    every = np.concatenate(shards)
    rows = [np.array([5, 900, 7, 2299]), np.array([], dtype=np.int64), np.arange(0, 2300, 97)]
    rows += [np.array([1500])] * 27
    for memory in (None, 1 << 20):  # resident; streamed, in chunks
        index = gpu.DeviceIndex(shards, ["cpu", "cpu"], similarity, memory=memory)
        got = gpu.device_scores(index, queries, rows)
        for q, found in enumerate(rows):
            expected = exact_scores(similarity, queries[q], every[found])
            np.testing.assert_array_equal(got[q], expected)


def test_the_workspace_stays_within_the_share():
    shards, _ = _corpus(2)
    for memory in (1 << 20, 4 << 20, 64 << 20):
        index = gpu.DeviceIndex(shards, ["cpu"], "dot", share=0.5, memory=memory)
        part = index.parts[0]
        held = 0 if part.rows is None else part.rows.numel() * 4 + part.lengths.numel() * 4
        for queries in (1, 30, 10_000):
            batch, block = index.workspace(part, queries)
            # a streamed block: its rows, the block before it, its lengths' float64 temporaries
            streamed = 24 * block * index.dim if part.rows is None else 0
            assert held + 8 * batch * block + streamed <= index.budget[0], (memory, queries)


def test_tree_sum_is_a_fixed_order_of_additions():
    values = torch.randn(5, 7, dtype=torch.float64)
    # (a0 + a3) + (a1 + a4) ... by halves, the odd column carried: the order written out
    first = torch.cat([values[:, :3] + values[:, 3:6], values[:, 6:]], 1)
    second = torch.cat([first[:, :2] + first[:, 2:4]], 1)
    expected = second[:, 0] + second[:, 1]
    assert torch.equal(tree_sum(values), expected)
    assert torch.allclose(tree_sum(values), values.sum(1))


@pytest.mark.parametrize("width", [1, 2, 3, 7, 48, 383])
def test_tree_sum_in_place_gives_tree_sums_bits(width):
    values = torch.randn(4, 5, width, dtype=torch.float64) * 1e3
    assert torch.equal(tree_sum_(values.clone()), tree_sum(values))


@pytest.mark.parametrize("similarity", sorted(EXACT))
def test_rescoring_in_buffers_gives_exact_scores_bits(similarity, monkeypatch):
    from dapr.retrievers.support import canonical

    shards, queries = _corpus(3)
    codes = np.random.default_rng(0).integers(0, 2300, (len(queries), 37))
    monkeypatch.setattr(canonical, "_RESCORE_BYTES", 8 * 37 * 48 * 4)  # groups of 4, one of 2
    found = rescore(similarity, queries, codes, shards)
    rows = np.concatenate(shards)
    for q in range(len(queries)):
        assert np.array_equal(found[q], exact_scores(similarity, queries[q], rows[codes[q]]))


def test_float32_products_run_without_tf32_during_search():
    seen = []
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")  # a user's TF32 setting
    try:
        original = gpu._rescore

        def spy(*args):
            seen.append(torch.get_float32_matmul_precision())
            return original(*args)

        gpu._rescore = spy
        shards, queries = _corpus(3)
        gpu.device_search(gpu.DeviceIndex(shards, ["cpu"], "dot"), queries, 5, dot_score)
        assert seen == ["highest"] and torch.get_float32_matmul_precision() == "high"
    finally:
        gpu._rescore = original
        torch.set_float32_matmul_precision(before)


def test_dense_search_on_a_device_list_is_the_default_search(tmp_path):
    items = [(f"p{i}", f"passage {i} about {w}") for i, w in enumerate("abcdefghij" * 3)]
    queries = {"one": "about a", "two": "passage 7", "three": "j"}
    default = Dense()
    default.index(items, tmp_path)
    expected = default.search(queries, 12)
    on_device = Dense(search_device=["cpu"])
    on_device.load(tmp_path)
    assert on_device.search(queries, 12).to_dict() == expected.to_dict()
    assert on_device._on_devices is not None  # the device path ran
    # hierarchical retrieval's scoring of given candidates, on the device: the same bits
    candidates = Run.from_dict({q: dict.fromkeys(["p3", "p7", "p29", "p1"], 0.0) for q in queries})
    assert (
        on_device.score(queries, candidates).to_dict()
        == default.score(queries, candidates).to_dict()
    )
    # the search device is a speed setting: it changes no cache key
    assert on_device.identity() == default.identity()
