"""Compressed dense search (issue 40 item 4): a first pass over int8 or binary codes, its
candidates rescored exactly; the codes a cached step of their own; bad settings one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from sentence_transformers.util import cos_sim, dot_score

from dapr.data import Run
from dapr.errors import ConfigError, DaprError
from dapr.experiment.config import load
from dapr.experiment.runner import Runner
from dapr.retrievers.dense import Dense
from dapr.retrievers.support import quantized
from dapr.retrievers.support.canonical import exact_scores, exact_search, fast_product
from dapr.retrievers.support.quantized_search import Compressed
from dapr.store.cache import Cache

FAST = {"cosine": cos_sim, "dot": dot_score}
DIM = 44
"""Not a multiple of 8: the binary codes' padding bits and int8's padded columns are used."""


def _corpus(seed: int) -> tuple[list[np.ndarray], torch.Tensor]:
    """Clustered random rows (three shards, one of a single row) and queries near them."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((12, DIM)).astype(np.float32)
    rows = centres[rng.integers(0, 12, 601)] + 0.6 * rng.standard_normal((601, DIM))
    rows = rows.astype(np.float32)
    rows[500] = rows[3]  # an exact tie, ranked by id
    queries = centres[rng.integers(0, 12, 9)] + 0.6 * rng.standard_normal((9, DIM))
    return [rows[:200], rows[200:600], rows[600:]], torch.from_numpy(queries.astype(np.float32))


def _codes(shards: list[np.ndarray], kind: str, unit: bool, folder: Path) -> quantized.Codes:
    quantized.write_codes(shards, kind, unit, folder)
    return quantized.read_codes(folder)


def _run(found: tuple[list[np.ndarray], list[np.ndarray]], k: int) -> dict:
    vocab = np.array([f"d{i:05d}" for i in range(601)], dtype=object)
    return Run.from_lists([f"q{i}" for i in range(9)], *found, vocab).top(k).to_dict()


@pytest.mark.parametrize("kind", ["binary", "int8"])
@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_scores_are_exact_and_a_covering_multiplier_is_exact_search(kind, similarity, tmp_path):
    shards, queries = _corpus(0)
    every = np.concatenate(shards)
    codes = _codes(shards, kind, kind == "int8" and similarity == "cosine", tmp_path)
    exact = _run(
        exact_search(queries, shards, 10, similarity, fast_product(similarity, FAST[similarity])),
        10,
    )
    overlap = {}
    for device in (None, torch.device("cpu")):  # the CPU path (FAISS for binary); torch's
        first = Compressed(codes, shards, similarity, device, block_size=256, query_batch=5)
        for multiplier in (1, 4, 61):  # 61 x 10 candidates cover the corpus
            items, scores = first.search(queries, 10, multiplier)
            assert all(len(r) == min(601, 10 * multiplier) for r in items)
            for q, (rows, got) in enumerate(zip(items, scores)):
                expected = exact_scores(similarity, queries[q], every[rows])
                np.testing.assert_array_equal(got, expected)  # bit for bit
            run = _run((items, scores), 10)
            overlap[device, multiplier] = np.mean(
                [len(run[q].keys() & exact[q].keys()) for q in exact]
            )
            if multiplier == 61:
                assert run == exact, (kind, similarity, device)
    for device in (None, torch.device("cpu")):
        assert overlap[device, 1] <= overlap[device, 4] <= 10


def test_int8_codes_are_calibrated_on_the_corpus_itself(tmp_path):
    shards, _ = _corpus(1)
    shards[0][:, 5] = 0.25  # a constant dimension gets a range of 1, not a step of 0
    shards[1][:, 5] = shards[2][:, 5] = 0.25
    codes = _codes(shards, "int8", False, tmp_path)
    every = np.concatenate(shards)
    low, high = np.load(tmp_path / "ranges.npy")
    np.testing.assert_array_equal(np.delete(low, 5), np.delete(every.min(0), 5))
    np.testing.assert_array_equal(np.delete(high, 5), np.delete(every.max(0), 5))
    assert (low[5], high[5]) == (0.25, 1.25)
    assert codes.rows.dtype == np.int8 and codes.rows.shape == every.shape
    assert codes.rows.min() == -128 and codes.rows.max() == 127
    (tmp_path / "binary").mkdir()
    binary = _codes(shards, "binary", False, tmp_path / "binary")
    np.testing.assert_array_equal(binary.rows, np.packbits(every > 0, axis=1))


def _experiment(tmp_path: Path, dataset: Path | str, model: Path | str, args: str) -> Any:
    path = tmp_path / "exp.yaml"
    path.write_text(
        f"dataset: {dataset}\nmetrics: [nDCG@10]\nretrievers:\n"
        f"  dense: {{name: dense, args: {{model: {model}{args}}}}}\n"
    )
    return load(path)


def test_codes_are_a_cached_step_and_search_keys_carry_the_quantization(
    wiki_slice, tiny_encoder, tmp_path, monkeypatch
):
    dataset, _ = wiki_slice
    cache = Cache(tmp_path / "cache")
    built: list[str] = []
    write = quantized.write_codes
    monkeypatch.setattr(
        quantized,
        "write_codes",
        lambda shards, kind, *a: built.append(kind) or write(shards, kind, *a),
    )

    def run(args: str) -> tuple[list[tuple[str, str]], Run]:
        outcome = Runner(_experiment(tmp_path, dataset, tiny_encoder, args), cache).run()
        return [(s.kind, s.status) for s in outcome.steps], outcome.runs["dense"]

    steps, exact = run("")
    assert steps == [("index", "computed"), ("search", "computed")]
    items = len(exact.vocab)
    covering = f", rescore_multiplier: {-(-items // 100)}"  # the depth is 100
    steps, binary = run(", quantization: binary" + covering)
    assert steps == [("index", "cached"), ("search", "computed")]  # its own run, same index
    assert built == ["binary"]
    assert binary.to_dict() == exact.to_dict()  # candidates covering the corpus: exact search
    steps, _ = run(", quantization: binary, rescore_multiplier: 2")
    assert steps == [("index", "cached"), ("search", "computed")]
    assert built == ["binary"]  # the codes were not built again
    steps, _ = run(", quantization: binary, rescore_multiplier: 2")
    assert steps == [("search", "cached")]
    entries = sorted(p.name for p in (cache.root / "indexes").iterdir() if p.name[0] != ".")
    assert len(entries) == 2 and all(cache.valid("indexes", key) for key in entries)
    steps, _ = run(", quantization: int8")
    assert steps == [("index", "cached"), ("search", "computed")] and built == ["binary", "int8"]
    ivfs: list[int] = []
    write_ivf = quantized.write_ivf
    monkeypatch.setattr(
        quantized,
        "write_ivf",
        lambda rows, lists, *a: ivfs.append(lists) or write_ivf(rows, lists, *a),
    )
    steps, every_list = run(", quantization: binary, ivf_lists: 4, ivf_probe: 4" + covering)
    assert steps == [("index", "cached"), ("search", "computed")] and ivfs == [4]
    assert every_list.to_dict() == exact.to_dict()  # every list probed, covering: exact search
    steps, one_list = run(", quantization: binary, ivf_lists: 4, ivf_probe: 1")
    assert steps == [("index", "cached"), ("search", "computed")] and ivfs == [4]
    assert built == ["binary", "int8"]  # the IVF is built over the cached codes, once
    entries = sorted(p.name for p in (cache.root / "indexes").iterdir() if p.name[0] != ".")
    assert len(entries) == 4 and all(cache.valid("indexes", key) for key in entries)
    assert all(len(ranked) <= 10 for ranked in one_list.to_dict().values())


@pytest.mark.parametrize(
    "args, message",
    [
        ({"quantization": "int4"}, "quantization 'int4' is not one of: none, int8, binary"),
        ({"rescore_multiplier": 0}, "rescore_multiplier 0: give a whole number >= 1"),
        ({"rescore_multiplier": 2.5}, "rescore_multiplier 2.5: give a whole number >= 1"),
        (
            {"quantization": "binary", "similarity": "euclidean"},
            "quantization binary ranks by cosine or dot similarity, not euclidean",
        ),
        ({"quantization": "int8", "ivf_lists": 8}, "ivf_lists 8 partitions binary codes"),
        ({"quantization": "binary", "ivf_lists": -1}, "ivf_lists -1: give a whole number >= 0"),
        ({"quantization": "binary", "ivf_probe": 0}, "ivf_probe 0: give a whole number >= 1"),
    ],
)
def test_bad_settings_are_one_line(args, message):
    with pytest.raises(DaprError, match=message) as raised:
        Dense(**args)
    assert "\n" not in str(raised.value)


def test_a_bad_multiplier_in_a_file_names_its_key(tmp_path):
    with pytest.raises(ConfigError) as raised:
        _experiment(tmp_path, "wiki-sample", "m", ", rescore_multiplier: -3")
    assert "retrievers.dense.args.rescore_multiplier must be a positive integer" in str(
        raised.value
    )
    assert "\n" not in str(raised.value)


def test_exact_search_takes_a_last_tile_of_one_row_that_no_query_keeps():
    # found here: a shard whose last tile is one row (as 16,385 passages in shards of 16,384
    # make), beaten by every query's pool, crashed the exact path's candidate scan
    rng = np.random.default_rng(0)
    rows = np.abs(rng.standard_normal((41, 16))).astype(np.float32)
    rows[40] = -1
    queries = torch.from_numpy(np.abs(rng.standard_normal((16, 16))).astype(np.float32))
    items, _ = exact_search(
        queries, [rows[:40], rows[40:]], 5, "dot", fast_product("dot", dot_score)
    )
    assert all(40 not in found for found in items)


@pytest.mark.parametrize("dim", [44, 1100])  # float32 sums, and float64 past 1,024 dimensions
def test_int8_first_pass_scores_on_the_cpu_equal_the_int8_product(dim, tmp_path):
    from dapr.retrievers.support.quantized_search import _query_codes

    rng = np.random.default_rng(dim)
    shards = [rng.standard_normal((300, dim)).astype(np.float32)]
    codes = _codes(shards, "int8", False, tmp_path)
    cpu = Compressed(codes, shards, "dot", None, 64, 8)
    device = Compressed(codes, shards, "dot", torch.device("cpu"), 64, 8)
    vectors = rng.standard_normal((5, dim)).astype(np.float32)
    batch = _query_codes(codes, vectors, torch.device("cpu"))
    products = device._scores(batch, 0, 300)
    assert products.dtype == torch.int32
    assert torch.equal(cpu._scores(batch, 0, 300), products.to(cpu._scores(batch, 0, 1).dtype))


def _mapped(shards: list[np.ndarray], folder: Path) -> list[np.ndarray]:
    for n, shard in enumerate(shards):
        np.save(folder / f"shard-{n}.npy", shard)
    return [np.load(folder / f"shard-{n}.npy", mmap_mode="r") for n in range(len(shards))]


def test_rescoring_reads_the_rows_of_mapped_shards_from_their_files(tmp_path, monkeypatch):
    from dapr.retrievers.support.quantized_search import FileRows

    shards, queries = _corpus(2)
    mapped = _mapped(shards, tmp_path)
    codes = _codes(shards, "binary", False, tmp_path)
    files = FileRows.of(mapped)
    assert files is not None and FileRows.of(shards) is None  # arrays in memory: indexed
    rows = np.array([0, 199, 200, 599, 600, 3, 600, 250])  # every shard, both ends, repeats
    out = np.full((len(rows), DIM), np.nan, np.float32)
    np.testing.assert_array_equal(files.gather(mapped, rows, out), np.concatenate(shards)[rows])
    reads: list[int] = []
    gather = FileRows.gather
    monkeypatch.setattr(
        FileRows, "gather", lambda self, s, r, o: reads.append(len(r)) or gather(self, s, r, o)
    )
    found = Compressed(codes, mapped, "cosine", None, 256, 5).search(queries, 10, 4)
    in_memory = Compressed(codes, shards, "cosine", None, 256, 5).search(queries, 10, 4)
    assert sum(reads) == 9 * 40  # every candidate read from a file, none through the map
    for got, expected in zip(found, in_memory):
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a, b)
    with open(tmp_path / "shard-1.npy", "r+b") as damaged:
        damaged.truncate(damaged.seek(0, 2) - 4 * DIM)
    with pytest.raises(DaprError, match="a shard ends before row 599: the index is damaged"):
        files.gather(mapped, np.array([599]), out[:1])


def test_an_ivf_first_pass_returns_exact_scores_for_what_its_lists_hold(tmp_path):
    shards, queries = _corpus(3)
    every = np.concatenate(shards)
    codes = _codes(shards, "binary", False, tmp_path)
    quantized.write_ivf(codes.rows, 12, tmp_path)
    flat = Compressed(codes, shards, "dot", None, 256, 5).search(queries, 10, 4)
    for probe in (1, 12):
        ivf = quantized.read_ivf(tmp_path)
        items, scores = Compressed(codes, shards, "dot", None, 256, 5, ivf=ivf, probe=probe).search(
            queries, 10, 4
        )
        for q, (rows, got) in enumerate(zip(items, scores)):
            assert len(set(rows.tolist())) == len(rows) and rows.min() >= 0
            np.testing.assert_array_equal(got, exact_scores("dot", queries[q], every[rows]))
            assert len(rows) <= 40
        if probe == 12:  # every list probed: the flat first pass's candidates, ties aside
            for mine, theirs in zip(scores, flat[1]):
                np.testing.assert_array_equal(np.sort(mine)[-10:], np.sort(theirs)[-10:])
    with pytest.raises(DaprError, match="ivf_lists 700 exceeds the index's 601 rows"):
        quantized.write_ivf(codes.rows, 700, tmp_path)
