"""The NQ-hard rule on hand-made per-query scores, and gathering them from metrics.json."""

from __future__ import annotations

from pathlib import Path

import pytest

from dapr.analysis.categories import category_means, read_labels, write_labels
from dapr.analysis.hard import gather_scores, hard_subset
from dapr.errors import DaprError

SCORES = {
    "bm25": {"q1": 0.0, "q2": 0.0, "q3": 0.3, "q4": 0.0},
    "dense": {"q1": 0.0, "q2": 0.1, "q3": 0.0, "q4": 0.0},
    "splade": {"q4": 0.0, "q3": 0.0, "q2": 0.0, "q1": 0.0},
}


def test_hard_when_every_system_fails():
    assert hard_subset(SCORES) == {
        "q1": ("hard",),
        "q2": ("not hard",),  # dense finds something
        "q3": ("not hard",),  # bm25 finds something
        "q4": ("hard",),
    }


def test_threshold_is_inclusive():
    assert hard_subset(SCORES, threshold=0.1) == {
        "q1": ("hard",),
        "q2": ("hard",),
        "q3": ("not hard",),
        "q4": ("hard",),
    }
    assert hard_subset({"one": {"a": 0.5, "b": 0.51}}, threshold=0.5) == {
        "a": ("hard",),
        "b": ("not hard",),
    }


def test_query_missing_from_a_system_is_named():
    scores = {"bm25": {"q1": 0.0, "q2": 0.0}, "dense": {"q1": 0.0}}
    with pytest.raises(DaprError, match="system 'dense' has no score for query 'q2'"):
        hard_subset(scores)
    scores["dense"] |= {"q2": 0.0, "q3": 0.0}  # now bm25 lacks q3
    with pytest.raises(DaprError, match="system 'bm25' has no score for query 'q3'"):
        hard_subset(scores)
    with pytest.raises(DaprError, match="no systems given"):
        hard_subset({})
    with pytest.raises(DaprError, match="score no queries"):
        hard_subset({"a": {}})


def results(experiment: str, systems: dict, dataset: str = "wiki-sample") -> dict:
    return {
        "experiment": experiment,
        "dataset": dataset,
        "dataset_fingerprint": "f" + dataset,
        "split": "test",
        "systems": {
            name: {"level": level, "per_query": {"nDCG@10": scores, "R@100": scores}}
            for name, (level, scores) in systems.items()
        },
    }


def test_gather_scores_defaults_to_passage_systems():
    one = results("a", {"bm25": ("passage", {"q": 0.0}), "maxp": ("document", {"q": 1.0})})
    two = results("b", {"dense": ("passage", {"q": 0.5})})
    assert gather_scores([one, two]) == {"bm25": {"q": 0.0}, "dense": {"q": 0.5}}
    assert gather_scores([one], "R@100", ["maxp"]) == {"maxp": {"q": 1.0}}


def test_one_name_in_two_files_is_qualified():
    one = results("a", {"bm25": ("passage", {"q": 0.0})})
    two = results("b", {"bm25": ("passage", {"q": 0.7}), "dense": ("passage", {"q": 0.1})})
    gathered = gather_scores([one, two])
    assert gathered == {"a/bm25": {"q": 0.0}, "b/bm25": {"q": 0.7}, "dense": {"q": 0.1}}
    assert gather_scores([one, two], systems=["b/bm25", "b/dense"]) == {
        "b/bm25": {"q": 0.7},
        "b/dense": {"q": 0.1},
    }
    choices = "unknown system 'bm25'; choose from: a/bm25, b/bm25, dense"
    with pytest.raises(DaprError, match=choices):
        gather_scores([one, two], systems=["bm25"])


def test_gather_scores_errors():
    one = results("a", {"bm25": ("passage", {"q": 0.0})})
    with pytest.raises(DaprError, match="has no per-query 'MRR@10'; choose from: nDCG@10, R@100"):
        gather_scores([one], "MRR@10")
    other = results("b", {"dense": ("passage", {"q": 0.0})}, dataset="NQ")
    with pytest.raises(DaprError, match="differ in 'dataset'"):
        gather_scores([one, other])
    with pytest.raises(DaprError, match="no passage-level system"):
        gather_scores([results("a", {"maxp": ("document", {"q": 0.0})})])
    with pytest.raises(DaprError, match="no metrics.json given"):
        gather_scores([])


def test_hard_labels_as_a_category_table(tmp_path: Path):
    labels = hard_subset(SCORES)
    write_labels(tmp_path / "hard.tsv", labels)
    assert read_labels(tmp_path / "hard.tsv") == labels
    means = category_means({"nDCG@10": SCORES["dense"]}, labels)
    assert means == {
        "all": {"nDCG@10": 0.1 / 4},
        "hard": {"nDCG@10": 0.0},
        "not hard": {"nDCG@10": 0.05},
    }
