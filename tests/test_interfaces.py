"""Plugin roles and optional abilities are Protocols: the built-ins have the abilities the
experiment relies on, a plugin gains one by having the attribute, and metrics are registered
families with ir_measures names."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from dapr import registry
from dapr.contextualizers.coref import FastCoref, RulesCoref
from dapr.contextualizers.keyphrases import Keyphrases
from dapr.contextualizers.title import Title
from dapr.data import Qrels, Run
from dapr.errors import ConfigError, DaprError
from dapr.evaluation import evaluate, parse_metric
from dapr.experiment.config import load
from dapr.experiment.runner import describe
from dapr.fusion import RRF, Convex, Hierarchical
from dapr.interfaces import (
    BatchContextualizer,
    BoundedReranker,
    Contextualizer,
    Described,
    Fuser,
    HasPresets,
    Measure,
    Parallel,
    PassageFuser,
    Reranker,
    Resumable,
    Retriever,
    ScopedRetriever,
    ScopingFuser,
    identity_of,
    version_of,
)
from dapr.retrievers.bm25 import BM25
from dapr.retrievers.dense import Dense
from dapr.retrievers.late_interaction import LateInteraction
from dapr.retrievers.rerank import Rerank
from dapr.retrievers.sparse import Sparse


@pytest.mark.parametrize("retriever", [BM25, Dense, Sparse, LateInteraction])
def test_first_stage_retrievers_can_score_given_candidates(retriever):
    assert isinstance(retriever, Retriever) and isinstance(retriever, ScopedRetriever)
    assert not isinstance(retriever, Reranker)


def test_resumable_presets_and_bounded_reranking():
    assert isinstance(Dense, Resumable) and Dense.resumable is True
    assert not isinstance(BM25, Resumable)
    assert isinstance(Dense, HasPresets) and "dragon_plus" in Dense.presets
    assert isinstance(Rerank, Reranker) and not isinstance(Rerank, ScopedRetriever)
    # an attribute set by the constructor is an ability of the instance (the runner asks it)
    assert not isinstance(Rerank, BoundedReranker) and isinstance(Rerank(), BoundedReranker)
    assert Rerank(top_k=5).top_k == 5


def test_contextualizer_abilities():
    for component in (Title(), Keyphrases(), RulesCoref(), FastCoref()):
        assert isinstance(component, Contextualizer)
    assert isinstance(FastCoref(), BatchContextualizer) and not isinstance(
        RulesCoref(), BatchContextualizer
    )
    assert isinstance(RulesCoref(), Parallel) and RulesCoref().parallel is True


def test_fuser_abilities_and_how_tables_name_them():
    assert all(isinstance(f, Fuser) for f in (Convex, RRF, Hierarchical))
    assert isinstance(Convex, PassageFuser) and isinstance(RRF, PassageFuser)
    assert isinstance(Hierarchical, ScopingFuser) and not isinstance(Convex, ScopingFuser)
    assert isinstance(Hierarchical, Described) and not isinstance(Convex, Described)


class _Plain:
    """A plugin with no optional ability."""

    def fuse(self, document_run, passage_run, doc_of):
        return passage_run


class _Named(_Plain):
    approach = "my own fusion"
    version = "7"

    def identity(self) -> Mapping[str, object]:
        return {"what": "matters"}


def test_a_plugin_gains_an_ability_by_having_it(tmp_path):
    assert version_of(_Plain()) == "0" and version_of(_Named()) == "7"
    assert identity_of(_Plain(), {"a": 1}) == {"a": 1}
    assert identity_of(_Named(), {"a": 1}) == {"what": "matters"}
    text = (
        "dataset: wiki-sample\nretrievers:\n  d: {name: bm25, level: document}\n"
        "  p: {name: bm25}\nfusion:\n  f: {name: plain, document: d, passage: p}\n"
        "  g: {name: named, document: d, passage: p}\n"
    )
    (tmp_path / "e.yaml").write_text(text)
    registry.fusers.add("plain", _Plain)
    registry.fusers.add("named", _Named)
    try:
        exp = load(tmp_path / "e.yaml")
        assert describe(exp.fusion["f"], exp)["approach"] == "rank fusion (plain)"
        assert describe(exp.fusion["g"], exp)["approach"] == "my own fusion"
        # hierarchical needs a fuser that scopes and a passage system that scores
        (tmp_path / "h.yaml").write_text(text.replace("name: plain", "name: hierarchical"))
        with pytest.raises(ConfigError, match="missing alpha"):
            load(tmp_path / "h.yaml")
    finally:
        registry.fusers.remove("plain")
        registry.fusers.remove("named")


# -- metrics ------------------------------------------------------------------------------

RUN = Run.from_dict(
    {
        "q1": {"a": 3.0, "b": 2.0, "c": 1.0},
        "q2": {"x": 5.0, "y": 4.0, "z": 3.0},
        "q3": {"m": 1.0},
    }
)
QRELS: Qrels = {"q1": {"b": 1}, "q2": {"z": 2, "w": 1}, "q3": {"n": 1}}


def test_ir_measures_names_mean_what_trec_eval_computes():
    names = [
        "RR@10",
        "MRR@10",
        "AP",
        "MAP",
        "nDCG@10",
        "ndcg_cut_10",
        "R@2",
        "P@2",
        "Acc@1",
        "Acc@3",
    ]
    means = evaluate(RUN, QRELS, names).means
    assert means["RR@10"] == means["MRR@10"] == pytest.approx((1 / 2 + 1 / 3 + 0) / 3)
    assert means["AP"] == means["MAP"]
    assert parse_metric("ndcg_cut_10").name == "nDCG@10"
    assert means["R@2"] == pytest.approx((1 + 0 + 0) / 3)
    assert means["P@2"] == pytest.approx((1 / 2 + 0 + 0) / 3)
    # Acc@k: whether any relevant item is in the top k
    assert means["Acc@1"] == 0.0 and means["Acc@3"] == pytest.approx(2 / 3)
    assert parse_metric("success_5").name == "Acc@5"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nDCG", "needs a cutoff"),
        ("AP@10", "takes no cutoff"),
        (
            "F1@10",
            "unknown metric 'F1@10'; use nDCG@k, R@k, P@k, RR[@k], MRR[@k], AP, MAP, Acc@k, "
            "Judged[@k]",
        ),
    ],
)
def test_metric_names_that_do_not_parse(name, message):
    with pytest.raises(DaprError, match=message.replace("[", r"\[")):
        parse_metric(name)


class Hits:
    """A plugin measure: how many relevant items are in the top k."""

    cutoff = "required"

    def per_query(self, run, qrels, cutoff, relevance_level):
        out = {}
        for qid, ranked in run.items():
            top = sorted(ranked, key=lambda item: (-ranked[item], item))[:cutoff]
            out[qid] = float(sum(qrels.get(qid, {}).get(i, 0) >= relevance_level for i in top))
        return out


def test_a_registered_measure_is_a_metric_everywhere(tmp_path):
    assert isinstance(Hits(), Measure)
    registry.metrics.add("Hits", Hits())
    try:
        result = evaluate(RUN, QRELS, ["Hits@3", "nDCG@10"])
        assert result.per_query["Hits@3"] == {"q1": 1.0, "q2": 1.0, "q3": 0.0}
        assert "nDCG@10" in result.means
        path = tmp_path / "e.yaml"
        path.write_text(
            "dataset: wiki-sample\nretrievers: {b: {name: bm25}}\nmetrics: [Hits@5, RR@10]\n"
        )
        assert load(path).metrics == ("Hits@5", "RR@10")
        with pytest.raises(DaprError, match="Hits needs a cutoff|'Hits' needs a cutoff"):
            parse_metric("Hits")
        with pytest.raises(DaprError, match=r"Acc@k, Judged\[@k\], Hits@k"):
            parse_metric("Nope@1")
        registry.metrics.add("Broken", object())
        with pytest.raises(DaprError, match="'Broken' is registered but is not a measure"):
            parse_metric("Broken@1")
    finally:
        registry.metrics.remove("Hits")
        registry.metrics.remove("Broken")


def test_metrics_are_entry_points_of_dapr_itself():
    names = {name for name, dist, _ in registry.metrics.sources() if dist.startswith("dapr-ir ")}
    assert names == {"nDCG", "R", "P", "RR", "MRR", "AP", "MAP", "Acc", "Judged"}
    assert Path(registry.__file__).name == "registry.py"
