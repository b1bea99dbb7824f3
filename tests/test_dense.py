"""Dense retrieval: presets, cache identity, multi-process encoding, batched exact search."""

import numpy as np
import pytest

from dapr.errors import DaprError
from dapr.retrievers.dense import Dense
from dapr.retrievers.support.presets import with_preset

ITEMS = [
    (f"p{i}", text)
    for i, text in enumerate(
        [
            "The cat sat on the mat near the door.",
            "Dogs are running fast in the park.",
            "Stock markets fell sharply today as investors sold shares.",
            "A kitten is a young domestic cat.",
            "The central bank raised interest rates again.",
            "Volcanoes erupt when magma reaches the surface.",
            "The recipe needs flour, eggs and sugar.",
        ]
    )
]
QUERIES = {"pets": "young feline", "money": "stock exchange crash", "geo": "lava eruption"}


def test_query_batches_and_blocks_do_not_change_the_run(tmp_path):
    reference = Dense()
    reference.index(ITEMS, tmp_path)
    expected = reference.search(QUERIES, 5)
    small = Dense(query_batch=1, block_size=3)
    small.load(tmp_path)
    got = small.search(QUERIES, 5)
    assert got.to_dict().keys() == expected.to_dict().keys()
    for qid in QUERIES:
        assert list(got.to_dict()[qid]) == list(expected.to_dict()[qid])
        assert np.allclose(
            list(got.to_dict()[qid].values()), list(expected.to_dict()[qid].values())
        )
    assert next(iter(expected.to_dict()["geo"])) == "p5"


def test_two_encoding_processes_give_the_single_process_embeddings(tmp_path):
    single = Dense()
    single.index(ITEMS, tmp_path / "single")
    pooled = Dense(devices=["cpu", "cpu"])
    pooled.index(ITEMS, tmp_path / "pooled")
    np.testing.assert_array_equal(pooled._shards[0], single._shards[0])


def test_identity_names_model_and_revision_but_not_speed_settings(tmp_path):
    base = Dense().identity()
    assert base["document_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert base["document_revision"].startswith("sha256:")  # content hash of the packaged copy
    assert Dense(batch_size=7, block_size=3, query_batch=2, device="cpu").identity() == base
    assert Dense(max_length=32).identity() != base
    assert Dense(pooling="cls").identity() != base
    assert Dense(revision="abc123").identity()["document_revision"] == "abc123"


def test_max_length_truncates_documents(tmp_path):
    # two texts that differ only after their first 200 words
    items = [("a", "cat " * 200 + "volcano " * 200), ("b", "cat " * 400)]
    short = Dense(max_length=16)
    short.index(items, tmp_path / "short")
    assert np.allclose(short._shards[0][0], short._shards[0][1], atol=1e-6)
    full = Dense()  # all-MiniLM-L6-v2 reads 256 tokens: some volcanoes
    full.index(items, tmp_path / "full")
    assert not np.allclose(full._shards[0][0], full._shards[0][1], atol=1e-3)


def test_presets_expand_and_refuse_the_wrong_level():
    args = with_preset("dense", Dense, {"preset": "dragon_plus", "batch_size": 8}, "passage")
    assert args == {
        "query_model": "facebook/dragon-plus-query-encoder",
        "document_model": "facebook/dragon-plus-context-encoder",
        "pooling": "cls",
        "similarity": "dot",
        "max_length": 512,  # the reference's query and passage length
        "batch_size": 8,
    }
    jina = with_preset("dense", Dense, {"preset": "jinav2"}, "document")
    assert jina["max_length"] == 8192 and jina["pooling"] == "mean"
    with pytest.raises(DaprError, match="preset 'jinav2' of retriever 'dense' is for document"):
        with_preset("dense", Dense, {"preset": "jinav2"}, "passage")
    with pytest.raises(DaprError, match="no preset 'dragon'; choose from: dragon_plus, jinav2"):
        with_preset("dense", Dense, {"preset": "dragon"}, "passage")


def test_a_preset_model_missing_offline_is_one_line(tmp_path):
    retriever = Dense(**with_preset("dense", Dense, {"preset": "dragon_plus"}, "passage"))
    with pytest.raises(DaprError) as error:
        retriever.index(ITEMS, tmp_path)
    message = str(error.value)
    assert message.startswith("cannot load model 'facebook/dragon-plus-context-encoder'")
    assert "\n" not in message
    with pytest.raises(DaprError, match="cannot load model 'facebook/dragon-plus-query-encoder'"):
        retriever.identity()
