"""The GPU batch plan: a shard's texts sorted by token length once, fixed batches padded within
the batch, each text tokenized once; the same embeddings whatever the number of workers."""

from __future__ import annotations

import numpy as np
import pytest

from dapr.retrievers.dense import Dense
from dapr.retrievers.support import batches as plan
from dapr.retrievers.support.batches import encode_padded

STORY = (
    "the venue of the final was announced after the committee met in the old town hall while "
    "rain fell on the harbour and the ferries waited for the storm to pass over the bay"
)
WORDS = STORY.split(" ")
TEXTS = [f"{i}: " + " ".join(WORDS[i % 9 : i % 9 + 1 + (i * 7) % 30]) for i in range(40)]


@pytest.fixture(scope="module")
def minilm():
    from dapr.checkpoints import sentence_transformer

    return sentence_transformer("sentence-transformers/all-MiniLM-L6-v2", None, None, "cpu")


def test_direct_forward_gives_the_models_own_encode_of_the_same_batches(minilm, monkeypatch):
    batches: list[list[str]] = []
    encode = minilm.encode_document

    def spy(texts, **options):
        batches.append(list(texts))
        return encode(texts, **options)

    direct = encode_padded(minilm, TEXTS, "document", batch_size=8)
    monkeypatch.setattr(minilm, "encode_document", spy)
    # an option the direct path does not take: the model's encode, batch by batch, same plan
    through_encode = encode_padded(
        minilm, TEXTS, "document", batch_size=8, normalize_embeddings=False
    )
    np.testing.assert_array_equal(direct, through_encode)
    lengths = minilm.tokenize(TEXTS)["attention_mask"].sum(1).numpy()
    assert [len(b) for b in batches] == [8] * 5  # fixed size
    order = [TEXTS.index(t) for b in batches for t in b]
    assert sorted(order) == list(range(40))  # every text once
    assert list(lengths[order]) == sorted(lengths)  # by token length
    # and sentence-transformers' encode of the whole list agrees to float32 rounding
    np.testing.assert_allclose(direct, encode(TEXTS, batch_size=8), atol=2e-6)


def test_each_text_is_tokenized_once(minilm, monkeypatch):
    calls: list[int] = []
    tokenize = minilm.tokenize
    monkeypatch.setattr(
        minilm, "tokenize", lambda texts, **o: calls.append(len(texts)) or tokenize(texts, **o)
    )
    encode_padded(minilm, TEXTS * 30, "document", batch_size=64)
    assert sum(calls) == 1200 and len(calls) == 2  # in pieces of 1,024


def test_padded_batches_rebuild_the_tokenizers_features(minilm):
    tokens = plan._Tokens.of(minilm, TEXTS, "document")
    assert tokens is not None
    rows = np.array([3, 17, 0, 39])
    rebuilt = dict(tokens.batch(rows))
    padded = minilm.tokenize([TEXTS[i] for i in rows])
    assert set(rebuilt) == set(padded)
    for key, values in padded.items():
        assert rebuilt[key].tolist() == values.tolist(), key


def test_a_prompt_falls_back_to_the_models_encode_with_the_same_plan(minilm, monkeypatch):
    monkeypatch.setattr(minilm, "prompts", {"query": "query: ", "document": "passage: "})
    assert plan._Tokens.of(minilm, TEXTS, "document") is None
    got = encode_padded(minilm, TEXTS[:5], "document", batch_size=2)
    np.testing.assert_allclose(got, minilm.encode_document(TEXTS[:5]), atol=2e-6)


def test_the_padded_plan_does_not_depend_on_the_number_of_workers(tmp_path, monkeypatch):
    items = [(f"p{i}", t) for i, t in enumerate(TEXTS)]
    one = Dense(batching="padded", batch_size=4, shard_size=16)
    model = one._model(one.document_name)
    # one process runs the model's forward itself, never its encode
    monkeypatch.setattr(model, "encode_document", None)
    one.index(items, tmp_path / "one")
    monkeypatch.undo()
    two = Dense(batching="padded", batch_size=4, shard_size=16, devices=["cpu", "cpu"])
    two.index(items, tmp_path / "two")
    assert len(one._shards) == 3
    for a, b in zip(one._shards, two._shards):
        np.testing.assert_array_equal(a, b)


def test_the_plan_and_precision_are_in_the_cache_key_only_when_they_change_it():
    base = Dense(device="cpu").identity()
    assert "batching" not in base and "precision" not in base  # CPU keys as before
    assert Dense(batching="exact", batch_size=7).identity() == base
    padded = Dense(batching="padded").identity()
    assert padded["batching"] == "padded" and padded["batch_size"] == 64
    assert padded["shard_size"] == 16_384
    assert Dense(batching="padded", batch_size=7).identity() != padded
    assert Dense(device="cuda:0").identity()["batching"] == "padded"  # the GPU default
    assert Dense(precision="bf16").identity()["precision"] == "bf16"


def test_bf16_encoding_runs_and_stays_close(tmp_path):
    items = [(f"p{i}", t) for i, t in enumerate(TEXTS[:12])]
    full = Dense(batching="padded")
    full.index(items, tmp_path / "fp32")
    half = Dense(batching="padded", precision="bf16")
    half.index(items, tmp_path / "bf16")
    assert half._shards[0].dtype == np.float32
    cosine = (full._shards[0] * half._shards[0]).sum(1)  # unit vectors (MiniLM normalizes)
    assert cosine.min() > 0.99 and not np.array_equal(full._shards[0], half._shards[0])


def test_bad_plan_and_precision_are_refused_in_one_line():
    from dapr.errors import DaprError

    with pytest.raises(DaprError, match="batching 'sorted' is not one of: auto, exact, padded"):
        Dense(batching="sorted")
    with pytest.raises(DaprError, match="precision 'half' is not one of"):
        Dense(precision="half")
    with pytest.raises(DaprError, match="search_memory"):
        Dense(search_memory=1.5)
