"""dapr in PyTerrier: pt.Experiment over dapr's transformers gives dapr run's numbers, and the
contextualizer, reranker and fusion transformers do what dapr's components do."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pandas as pd
import pytest

pt = pytest.importorskip("pyterrier")

import dapr.pyterrier as dpt  # noqa: E402
from dapr import registry  # noqa: E402
from dapr.data import Corpus, Dataset, Document, Passage, Split  # noqa: E402
from dapr.errors import DaprError  # noqa: E402
from dapr.experiment.runner import Runner  # noqa: E402
from dapr.experiment.validate import validate  # noqa: E402
from dapr.store.cache import Cache  # noqa: E402

METRICS = ["nDCG@10", "RR@10"]


def _experiment(systems, topics, qrels) -> dict[str, dict[str, float]]:
    """pt.Experiment's means per named system: nDCG@10, and RR@10 as trec_eval's RR of the top
    10 (``% 10`` cuts at the rank column; ir_measures' own RR@10 breaks score ties by
    ascending docno, trec_eval and dapr by descending)."""
    from pyterrier.measures import RR, nDCG

    names = list(systems)
    ndcg = pt.Experiment(list(systems.values()), topics, qrels, [nDCG @ 10], names=names)
    top10 = [system % 10 for system in systems.values()]
    rr = pt.Experiment(top10, topics, qrels, [RR], names=names)
    return {
        name: {"nDCG@10": ndcg.loc[n, "nDCG@10"], "RR@10": rr.loc[n, "RR"]}
        for n, name in enumerate(names)
    }


def test_pt_experiment_gives_the_numbers_of_dapr_run(wiki_splits, tmp_path):
    cache = Cache(tmp_path / "cache")
    wiki = dpt.dataset(str(wiki_splits))
    passages = dpt.DaprRetriever(wiki, "bm25", level="passage", cache=cache)
    documents = dpt.DaprRetriever(wiki, "bm25", level="document", cache=cache)
    systems = {
        "bm25-passage": passages,
        "convex": dpt.DocumentFusion(wiki, documents, passages, "convex", alpha=0.3),
        "hierarchical": dpt.DocumentFusion(wiki, documents, passages, "hierarchical", alpha=0.2),
    }
    topics = wiki.get_topics("test")
    through_pt = _experiment(systems, topics, wiki.get_qrels("test"))
    document_qrels = wiki.get_qrels("test", level="document")
    through_pt.update(_experiment({"bm25-document": documents}, topics, document_qrels))

    raw = {
        "dataset": str(wiki_splits),
        "split": "test",
        "depth": 1000,
        "metrics": METRICS,
        "retrievers": {
            "bm25-passage": {"name": "bm25", "level": "passage"},
            "bm25-document": {"name": "bm25", "level": "document"},
        },
        "fusion": {
            "convex": {"name": "convex", "document": "bm25-document", "passage": "bm25-passage",
                       "args": {"alpha": 0.3}},
            "hierarchical": {"name": "hierarchical", "document": "bm25-document",
                             "passage": "bm25-passage", "args": {"alpha": 0.2}},
        },
    }  # fmt: skip
    outcome = Runner(validate(raw, tmp_path / "rank_fusion.yaml"), cache).run()
    # the indexes PyTerrier built are the ones dapr run uses
    assert {s.system: s.status for s in outcome.steps if s.kind == "index"} == {
        "bm25-passage": "cached",
        "bm25-document": "cached",
    }
    for system, evaluation in outcome.evaluations.items():
        for metric in METRICS:
            assert through_pt[system][metric] == pytest.approx(evaluation.means[metric], abs=1e-6)
    assert through_pt["convex"]["nDCG@10"] != pytest.approx(through_pt["bm25-passage"]["nDCG@10"])

    fused = systems["convex"](topics)  # the fused ranking itself, not only its means
    expected = outcome.runs["convex"].to_dict()
    assert {q: dict(zip(g.docno, g.score)) for q, g in fused.groupby("qid")} == expected
    assert (fused.groupby("qid")["rank"].apply(lambda r: list(r) == list(range(len(r))))).all()


def _toy() -> dpt.DaprDataset:
    documents = [
        Document("a", "Alpha", (Passage("a-0", "a", 0, "one"), Passage("a-1", "a", 1, "two"))),
        Document("b", "Beta", (Passage("b-0", "b", 0, "three"),)),
    ]
    split = Split({"q": "question"}, {"q": {"a-1": 1}})
    return dpt.dataset(Dataset("toy", Corpus(documents), {"test": split}))


def test_fuse_meets_each_passage_with_its_document():
    toy = _toy()
    document = pd.DataFrame({"qid": ["q", "q"], "docno": ["b", "a"], "score": [4.0, 2.0]})
    passage = pd.DataFrame(
        {"qid": ["q"] * 3, "query": ["question"] * 3, "docno": ["a-0", "a-1", "b-0"],
         "score": [3.0, 1.0, 2.0]}
    )  # fmt: skip
    fused = dpt.fuse(document, passage, toy, "convex", alpha=0.5)
    # documents over the candidates: a-0 2, a-1 2, b-0 4 -> 0, 0, 1; passages -> 1, 0, 0.5
    assert list(fused.docno) == ["b-0", "a-0", "a-1"]
    assert fused.score.tolist() == pytest.approx([0.75, 0.5, 0.0])
    assert fused["rank"].tolist() == [0, 1, 2] and set(fused["query"]) == {"question"}


def test_the_contextualizer_rewrites_passage_texts():
    toy = _toy()
    frame = pd.DataFrame({"qid": ["q", "q"], "docno": ["b-0", "a-1"], "text": ["x", "y"]})
    titled = dpt.DaprContextualizer(toy, "title")(frame)
    assert titled.text.tolist() == ["Beta three", "Alpha two"]
    twice = dpt.DaprContextualizer(toy, ["title", {"name": "title"}])(frame)
    assert twice.text.tolist() == ["Beta Beta three", "Alpha Alpha two"]
    with pytest.raises(DaprError, match="passage 'zz' is not in dataset 'toy'"):
        dpt.DaprContextualizer(toy, "title")(frame.assign(docno=["zz", "a-1"]))


class _ByLength:
    """A reranker that scores an item by the length of its text."""

    top_k = None

    def rerank(self, queries, run, texts):
        from dapr.data import Run

        ranked = {}
        for q, qid in enumerate(run.queries):
            ids, _ = run.ranking(q)
            ranked[qid] = {i: float(len(texts[i])) for i in ids}
        return Run.from_dict(ranked)


def test_the_reranker_rescores_with_the_frame_or_dataset_texts():
    registry.retrievers.add("by-length", _ByLength)
    try:
        reranker = dpt.DaprReranker("by-length", dataset=_toy())
        frame = pd.DataFrame(
            {"qid": ["q"] * 3, "query": ["question"] * 3, "docno": ["a-0", "a-1", "b-0"]}
        )
        from_dataset = reranker(frame)
        assert list(from_dataset.docno) == ["b-0", "a-1", "a-0"]  # three > two > one (a tie)
        assert from_dataset.score.tolist() == [5.0, 3.0, 3.0]
        from_frame = reranker(frame.assign(text=["a long text", "b", "cc"]))
        assert list(from_frame.docno) == ["a-0", "b-0", "a-1"]
        with pytest.raises(DaprError, match="is not a reranker; use DaprRetriever"):
            dpt.DaprReranker("bm25")
        with pytest.raises(DaprError, match="give the frame a text column"):
            dpt.DaprReranker("by-length")(frame)
    finally:
        registry.retrievers.remove("by-length")


def test_bad_input_is_a_one_line_error(tmp_path):
    toy = _toy()
    with pytest.raises(DaprError, match="unknown retriever 'bm52'"):
        dpt.DaprRetriever(toy, "bm52")
    with pytest.raises(DaprError, match="level 'section' is not one of: passage, document"):
        dpt.DaprRetriever(toy, "bm25", level="section")
    with pytest.raises(DaprError, match="unknown key 'args.k2'"):
        dpt.DaprRetriever(toy, "bm25", k2=1.0)
    retriever = dpt.DaprRetriever(toy, "bm25", cache=Cache(tmp_path))
    with pytest.raises(DaprError, match="no column 'query'.*give a frame with qid, query"):
        retriever(pd.DataFrame({"qid": ["q"]}))
    with pytest.raises(DaprError, match="alpha"):
        dpt.DocumentFusion(toy, retriever, retriever, "convex", alpha=2)
    with pytest.raises(DaprError, match="has no split 'dev'"):
        toy.get_topics("dev")
    assert toy.get_qrels("test", level="document").to_dict("records") == [
        {"qid": "q", "docno": "a", "label": 1}
    ]


def test_scoring_candidates_keeps_the_scores_of_search(tmp_path):
    toy = _toy()
    retriever = dpt.DaprRetriever(toy, "bm25", cache=Cache(tmp_path))
    topics = pd.DataFrame({"qid": ["q"], "query": ["two three"]})
    searched = retriever(topics)
    scored = retriever(searched[["qid", "query", "docno"]].iloc[::-1])
    columns = ["docno", "score"]
    assert scored[columns].values.tolist() == searched[columns].values.tolist()
    assert np.all(searched.score > 0)


def test_without_pyterrier_the_bridge_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyterrier", None)
    for name in [m for m in sys.modules if m.startswith("dapr.pyterrier")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(DaprError, match=r'pip install "dapr-ir\[pyterrier\]"'):
        importlib.import_module("dapr.pyterrier")


def test_a_contextualized_retriever_indexes_the_contextualized_passages(tmp_path):
    toy = _toy()
    topics = pd.DataFrame({"qid": ["q"], "query": ["beta"]})
    plain = dpt.DaprRetriever(toy, "bm25", cache=Cache(tmp_path))
    titled = dpt.DaprRetriever(toy, "bm25", contextualizer="title", cache=Cache(tmp_path))
    assert plain(topics).empty  # no passage says "beta"; its document's title does
    assert titled(topics).docno.tolist() == ["b-0"]
    with pytest.raises(DaprError, match="contextualizers apply to passages"):
        dpt.DaprRetriever(toy, "bm25", level="document", contextualizer="title")
