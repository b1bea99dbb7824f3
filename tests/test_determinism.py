"""A run is a function of the data and the model: batch, block and shard sizes change speed,
never a score, and ties fall to the larger id however the items were split."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dapr.data import id_ranks
from dapr.retrievers.dense import Dense
from dapr.retrievers.support.batches import MIN_TOKENS, encode_unpadded, plan_batches
from dapr.retrievers.support.canonical import EXACT, error_bound, exact_scores, fast_product
from dapr.retrievers.support.exact import TopK

STORY = (
    "the venue of the final was announced after the committee met in the old town hall while "
    "rain fell on the harbour and the ferries waited for the storm to pass over the bay"
)
WORDS = STORY.split()
# lengths from one word to forty: short texts are where batch shapes matter most
TEXTS = [
    " ".join(WORDS[i % 7 : i % 7 + n]) for i, n in enumerate([1, 1, 2, 3, 3, 5, 8, 13, 21, 34])
]
QUERIES = {"venue": "where was the final", "storm": "storm over the bay", "one": "rain"}


@pytest.fixture(scope="module")
def minilm():
    from dapr.checkpoints import sentence_transformer

    return sentence_transformer("sentence-transformers/all-MiniLM-L6-v2", None, None, "cpu")


def test_batches_hold_one_length_enough_tokens_and_every_text():
    lengths = np.array([1, 3, 3, 40, 1, 7, 3, 40, 40])
    for fill in (False, True):
        for size in (1, 2, 64):
            batches = plan_batches(lengths, size, fill=fill)
            assert sorted(set(np.concatenate(batches).tolist())) == list(range(len(lengths)))
            for batch in batches:
                assert len(set(lengths[batch].tolist())) == 1
                assert len(batch) >= 2 and len(batch) * lengths[batch[0]] >= MIN_TOKENS
            if fill:  # a pool's chunks: all one width
                assert len({len(b) for b in batches}) == 1


def test_an_embedding_does_not_depend_on_the_texts_batched_with_it(minilm):
    alone = np.stack(
        [encode_unpadded(minilm, [t], "document", convert_to_numpy=True)[0] for t in TEXTS]
    )
    for size in (1, 2, 3, 64):
        together = encode_unpadded(
            minilm, TEXTS, "document", batch_size=size, convert_to_numpy=True
        )
        np.testing.assert_array_equal(together, alone)
    as_tensor = encode_unpadded(minilm, TEXTS[::-1], "query", batch_size=4, convert_to_tensor=True)
    queries = np.stack(
        [encode_unpadded(minilm, [t], "query", convert_to_numpy=True)[0] for t in TEXTS]
    )
    np.testing.assert_array_equal(as_tensor.numpy(), queries[::-1])


def test_shard_batch_and_block_sizes_do_not_change_a_score(tmp_path):
    items = [(f"p{i}", t) for i, t in enumerate(TEXTS)] + [("dup", TEXTS[6]), ("zdup", TEXTS[6])]
    runs = []
    settings = [
        {},
        {"shard_size": 1, "batch_size": 1},
        {"shard_size": 3, "batch_size": 5, "block_size": 2, "query_batch": 1},
    ]
    for n, options in enumerate(settings):
        retriever = Dense(**options)
        retriever.index(items, tmp_path / str(n))
        run = retriever.search(QUERIES, 6)
        # hierarchical scoring of the same candidates gives the search's scores, bit for bit
        assert retriever.score(QUERIES, run).to_dict() == run.to_dict()
        runs.append(run.to_dict())
    assert runs[1] == runs[0] and runs[2] == runs[0]
    ranked = Dense()
    ranked.load(tmp_path / "0")
    full = ranked.search(QUERIES, len(items)).to_dict()
    # the three copies of one text tie exactly and are ranked by descending id
    copies = [item for item in full["storm"] if item in ("p6", "dup", "zdup")]
    assert len({full["storm"][i] for i in copies}) == 1 and copies == ["zdup", "p6", "dup"]


def test_exact_scores_match_float64_and_the_bound_covers_float32():
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(384, generator=generator)
    rows = torch.randn(50, 384, generator=generator).numpy() * 3
    for name, similarity in EXACT.items():
        exact = exact_scores(name, query, rows)
        wide = similarity(query.double()[None], torch.from_numpy(rows).double()).numpy()
        np.testing.assert_array_equal(exact, wide.astype(np.float32).astype(np.float64))
    # sentence-transformers' float32 product stays within the bound the search relies on
    from sentence_transformers.util import cos_sim, dot_score

    for name, fast in {"cosine": cos_sim, "dot": dot_score}.items():
        # and so does the BLAS product dense search finds its candidates with
        products = {
            "model": fast(query[None], torch.from_numpy(rows))[0].double().numpy(),
            "blas": fast_product(name, fast)(query[None].numpy(), rows)[0].astype(np.float64),
        }
        for got in products.values():
            norms = np.linalg.norm(rows, axis=1).max()
            bound = error_bound(name, 384, float(query.norm()), float(norms))
            assert np.abs(got - exact_scores(name, query, rows)).max() <= bound
    # other similarities keep the model's own product
    euclidean = fast_product("euclidean", lambda q, x: -torch.cdist(q, x))
    expected = -torch.cdist(query[None], torch.from_numpy(rows)).numpy()
    np.testing.assert_array_equal(euclidean(query[None].numpy(), rows), expected)


def test_queries_rescored_together_score_as_one_at_a_time(monkeypatch):
    from dapr.retrievers.support import canonical

    generator = torch.Generator().manual_seed(1)
    shards = [torch.randn(n, 96, generator=generator).numpy() * 2 for n in (40, 25)]
    queries = torch.randn(6, 96, generator=generator)
    codes = np.stack([torch.randperm(65, generator=generator)[:12].numpy() for _ in range(6)])
    every = np.concatenate(shards)
    for name in EXACT:
        alone = np.stack([exact_scores(name, q, every[c]) for q, c in zip(queries, codes)])
        for group in (1, 4, 6):  # queries rescored at a time
            monkeypatch.setattr(canonical, "_RESCORE_BYTES", 8 * 12 * 96 * group)
            np.testing.assert_array_equal(canonical.rescore(name, queries, codes, shards), alone)


def test_top_k_keeps_the_larger_ids_of_a_tie_whatever_the_blocks():
    # a hundred items tied but two; the largest ids come first, where topk does not look
    ids = np.array([f"i{99 - p:02d}" for p in range(100)], dtype=object)
    scores = torch.full((1, 100), 2.0)
    scores[0, 50], scores[0, 70] = 3.0, 1.0
    ranks = torch.from_numpy(id_ranks(ids))
    expected = ["i49", "i99", "i98", "i97"]  # the 3.0, then the largest ids of the tie
    for width in (1, 7, 30, 100):
        top = TopK(1, 4, ranks)
        for start in range(0, 100, width):
            top.add(scores[:, start : start + width], start)
        assert list(TopK.merge([top], ["q"], ids).to_dict()["q"]) == expected
