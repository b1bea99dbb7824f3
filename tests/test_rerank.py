"""The cross-encoder re-ranker, with a tiny randomly initialised BERT cross-encoder."""

import numpy as np
import pytest
import torch
from sentence_transformers import CrossEncoder
from tiny_models import tiny_bert

import dapr.retrievers.rerank as rerank_module
from dapr.data import Run
from dapr.errors import DaprError
from dapr.interfaces import Reranker
from dapr.retrievers.rerank import Rerank

TEXTS = {
    "a": "The cat sat on the mat near the door.",
    "b": "Dogs are running fast in the park.",
    "c": "Cats and dogs can live together.",
    "d": "Stock markets fell sharply today as investors sold shares.",
    "e": "A kitten is a young domestic cat.",
    "f": "The park opens at nine and closes at dusk, every day of the week.",
}
QUERIES = {"pets": "young cat", "money": "stock markets today", "park": "dogs in the park"}
FIRST_STAGE = Run.from_dict(
    {
        "pets": {"a": 6.0, "c": 5.0, "e": 4.0, "b": 3.0, "f": 2.0},
        "money": {"d": 9.0, "f": 1.0, "a": 0.5},
        "park": {"f": 3.0, "b": 2.5, "c": 2.0, "d": 1.5, "e": 1.0, "a": 0.5},
    }
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_cross_encoder")
    return str(tiny_bert(path, [*TEXTS.values(), *QUERIES.values()], head="classifier"))


def expected_scores(model_path: str, run: Run, top_k: int) -> dict[str, dict[str, float]]:
    """The cross-encoder's own scores (logits) of each query's first ``top_k`` items."""
    model = CrossEncoder(model_path, device="cpu")
    out = {}
    for qid, ranked in run.to_dict().items():
        items = list(ranked)[:top_k]
        scores = model.predict(
            [(QUERIES[qid], TEXTS[i]) for i in items], activation_fn=torch.nn.Identity()
        )
        out[qid] = dict(zip(items, np.asarray(scores, dtype=np.float64).tolist()))
    return out


def test_scores_are_the_cross_encoder_predictions_in_score_order(tiny):
    reranker = Rerank(model=tiny, top_k=100, device="cpu")
    assert isinstance(reranker, Reranker)
    run = reranker.rerank(QUERIES, FIRST_STAGE, TEXTS).to_dict()
    expected = expected_scores(tiny, FIRST_STAGE, 100)
    assert list(run) == list(FIRST_STAGE.queries)
    for qid, ranked in run.items():
        assert set(ranked) == set(expected[qid])
        for item, score in ranked.items():
            assert score == pytest.approx(expected[qid][item], abs=1e-5)
        by_expected = sorted(expected[qid], key=lambda i: -expected[qid][i])
        assert list(ranked) == by_expected
    # the random model does reorder: the result is not just the first stage again
    assert any(list(run[q]) != list(FIRST_STAGE.to_dict()[q]) for q in run)


def test_top_k_keeps_only_the_first_stage_head(tiny):
    run = Rerank(model=tiny, top_k=2, device="cpu").rerank(QUERIES, FIRST_STAGE, TEXTS).to_dict()
    expected = expected_scores(tiny, FIRST_STAGE, 2)
    assert {q: set(r) for q, r in run.items()} == {
        "pets": {"a", "c"},
        "money": {"d", "f"},
        "park": {"f", "b"},
    }
    for qid, ranked in run.items():
        assert list(ranked) == sorted(expected[qid], key=lambda i: -expected[qid][i])


def test_keep_rest_appends_the_tail_in_first_stage_order_below(tiny):
    head = Rerank(model=tiny, top_k=2, device="cpu").rerank(QUERIES, FIRST_STAGE, TEXTS)
    full = Rerank(model=tiny, top_k=2, keep_rest=True, device="cpu")
    run = full.rerank(QUERIES, FIRST_STAGE, TEXTS).to_dict()
    first = FIRST_STAGE.to_dict()
    for qid, ranked in run.items():
        items, scores = list(ranked), list(ranked.values())
        reranked = head.to_dict()[qid]
        assert items[:2] == list(reranked)
        assert scores[:2] == pytest.approx(list(reranked.values()))
        assert items[2:] == list(first[qid])[2:]  # the tail, in first-stage order
        assert len(items) == len(first[qid])
        assert all(s < min(scores[:2]) for s in scores[2:])
        assert all(a > b for a, b in zip(scores, scores[1:]))  # strictly decreasing


def test_batching_across_queries_matches_one_pair_at_a_time(tiny, monkeypatch):
    one = Rerank(model=tiny, batch_size=1, device="cpu").rerank(QUERIES, FIRST_STAGE, TEXTS)
    batched = Rerank(model=tiny, batch_size=8, device="cpu").rerank(QUERIES, FIRST_STAGE, TEXTS)
    monkeypatch.setattr(rerank_module, "_CHUNK_BATCHES", 1)  # chunks of 4 pairs cut queries
    chunked = Rerank(model=tiny, batch_size=4, device="cpu").rerank(QUERIES, FIRST_STAGE, TEXTS)
    for other in (batched, chunked):
        assert other.to_dict().keys() == one.to_dict().keys()
        for qid, ranked in one.to_dict().items():
            assert list(other.to_dict()[qid]) == list(ranked)
        assert np.allclose(other.scores, one.scores, atol=1e-5)


def test_empty_queries_and_missing_texts(tiny):
    reranker = Rerank(model=tiny, top_k=3, device="cpu")
    run = Run.from_dict({"pets": {}, "money": {"d": 1.0}})
    assert reranker.rerank(QUERIES, run, TEXTS).to_dict()["pets"] == {}
    without_e = {k: v for k, v in TEXTS.items() if k != "e"}
    with pytest.raises(DaprError, match=r"no text for item 'e' \(query 'pets'\)"):
        reranker.rerank(QUERIES, FIRST_STAGE, without_e)
    # an item below top_k needs no text
    Rerank(model=tiny, top_k=2, keep_rest=True, device="cpu").rerank(
        QUERIES, FIRST_STAGE, without_e
    )
    with pytest.raises(DaprError, match="no text for query 'money'"):
        reranker.rerank({"pets": "cat", "park": "park"}, FIRST_STAGE, TEXTS)


def test_unknown_model_offline_is_one_line_error():
    reranker = Rerank(model="nobody/no-such-cross-encoder")  # cheap: nothing loaded yet
    with pytest.raises(DaprError, match="cannot load model 'nobody/no-such-cross-encoder'") as e:
        reranker.rerank(QUERIES, FIRST_STAGE, TEXTS)
    assert "\n" not in str(e.value)


def test_identity_and_arguments(tiny):
    identity = Rerank(model=tiny, top_k=10, batch_size=3, device="cpu").identity()
    assert identity["model"] == tiny and identity["revision"].startswith("sha256:")
    assert identity == Rerank(model=tiny, top_k=10, batch_size=64).identity()  # speed only
    assert identity != Rerank(model=tiny, top_k=20).identity()
    assert identity != Rerank(model=tiny, top_k=10, keep_rest=True).identity()
    with pytest.raises(DaprError, match="top_k must be at least 1"):
        Rerank(top_k=0)
    assert Rerank.presets["minilm"].args["model"] == "cross-encoder/ms-marco-MiniLM-L-6-v2"


def test_a_rerank_depth_of_zero_stops_the_file_before_any_work(tmp_path, capsys):
    from dapr.cli import main

    file = tmp_path / "zero.yaml"
    file.write_text(
        "name: zero\ndataset: wiki-sample\nretrievers:\n  bm25: {name: bm25}\n"
        "  ce: {name: rerank, first_stage: bm25, args: {top_k: 0}}\n"
    )
    assert main(["run", str(file), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert f"{file}: retrievers.ce.args.top_k must be a positive integer, got 0" in error
    assert not (tmp_path / "out").exists()  # refused when the file was read


def test_an_onnx_cross_encoder_reranks_as_torch_does(tiny):
    torch_run = Rerank(model=tiny, top_k=4, device="cpu").rerank(QUERIES, FIRST_STAGE, TEXTS)
    onnx = Rerank(model=tiny, top_k=4, device="cpu", backend="onnx")
    assert onnx.identity()["backend"] == "onnx" and "backend" not in Rerank(model=tiny).identity()
    onnx_run = onnx.rerank(QUERIES, FIRST_STAGE, TEXTS).to_dict()
    for qid, ranked in torch_run.to_dict().items():
        assert list(onnx_run[qid]) == list(ranked)
        assert np.allclose(list(onnx_run[qid].values()), list(ranked.values()), atol=1e-4)
    with pytest.raises(DaprError, match="int8 is for backend onnx"):
        Rerank(model=tiny, backend="openvino", quantize="int8")
