"""Per-category means and counts, title-mention labels, and the category table file."""

from __future__ import annotations

from pathlib import Path

import pytest

from dapr.analysis.categories import (
    TITLE_IN_GOLD,
    TITLE_NOT_IN_GOLD,
    category_counts,
    category_means,
    category_table,
    read_labels,
    title_mention_labels,
    write_labels,
)
from dapr.data import Corpus, Dataset, Document, Passage, Split
from dapr.errors import DaprError, DataError

PER_QUERY = {
    "nDCG@10": {"q1": 1.0, "q2": 0.5, "q3": 0.0, "q4": 0.25},
    "R@100": {"q1": 1.0, "q2": 1.0, "q3": 0.0, "q4": 0.5},
}
LABELS = {
    "q1": ("MT", "CR"),
    "q2": ("CR",),
    "q3": ("AC",),
    # q4 unlabelled; q9 labelled but not scored
    "q9": ("CR", "MHR"),
}


def test_means_per_category_by_hand():
    means = category_means(PER_QUERY, LABELS)
    assert list(means) == ["all", "AC", "CR", "MT"]  # "all" first, then sorted; MHR unscored
    assert means["all"] == {"nDCG@10": (1.0 + 0.5 + 0.0 + 0.25) / 4, "R@100": 2.5 / 4}
    assert means["CR"] == {"nDCG@10": 0.75, "R@100": 1.0}  # q1 and q2
    assert means["MT"] == {"nDCG@10": 1.0, "R@100": 1.0}
    assert means["AC"] == {"nDCG@10": 0.0, "R@100": 0.0}


def test_counts_and_explicit_order():
    order = ("CR", "MT", "MHR", "AC")
    assert category_counts(PER_QUERY, LABELS, order) == {"all": 4, "CR": 2, "MT": 1, "AC": 1}
    assert list(category_means(PER_QUERY, LABELS, order)) == ["all", "CR", "MT", "AC"]
    # categories outside ``order`` follow it, sorted
    assert list(category_counts(PER_QUERY, LABELS, ("MT",))) == ["all", "MT", "AC", "CR"]


def test_repeated_category_counts_once():
    means = category_means({"m": {"a": 1.0, "b": 0.0}}, {"a": ("x", "x"), "b": ("x",)})
    assert means["x"] == {"m": 0.5}
    assert category_counts({"m": {"a": 1.0, "b": 0.0}}, {"a": ("x", "x")}) == {"all": 2, "x": 1}


def test_metrics_on_different_queries_are_an_error():
    with pytest.raises(DaprError, match="'nDCG@10' and 'R@100' score different queries"):
        category_means({"nDCG@10": {"a": 1.0}, "R@100": {"b": 1.0}}, {})
    with pytest.raises(DaprError, match="reserved"):
        category_means({"m": {"a": 1.0}}, {"a": ("all",)})
    with pytest.raises(DaprError, match="no per-query scores"):
        category_means({}, {})


def system(level: str, *scores: float) -> dict:
    return {"level": level, "per_query": {"nDCG@10": dict(zip(("q1", "q2", "q3"), scores))}}


def metrics_json() -> dict:
    return {
        "experiment": "e",
        "labels": {"q1": ["hard"], "q2": ["hard"]},
        "systems": {
            "bm25": system("passage", 0.0, 0.5, 1.0),
            "dense": system("passage", 0.2, 0.0, 0.0),
            "maxp": system("document", 1.0, 1.0, 1.0),
        },
    }


def test_category_table_from_metrics_json():
    table, counts = category_table(metrics_json(), "nDCG@10")
    assert list(table) == ["bm25", "dense"]  # passage-level systems only
    assert table["bm25"] == {"all": 0.5, "hard": 0.25}
    assert table["dense"] == pytest.approx({"all": 0.2 / 3, "hard": 0.1})
    assert counts == {"all": 3, "hard": 2}
    other, counts = category_table(metrics_json(), "nDCG@10", ["maxp"], labels={"q3": ("x",)})
    assert other == {"maxp": {"all": 1.0, "x": 1.0}}
    assert counts == {"all": 3, "x": 1}


def test_category_table_errors_name_the_choices():
    with pytest.raises(DaprError, match="no system 'bm'; choose from: bm25, dense, maxp"):
        category_table(metrics_json(), "nDCG@10", ["bm"])
    with pytest.raises(DaprError, match="no per-query 'R@100'; choose from: nDCG@10"):
        category_table(metrics_json(), "R@100")
    uneven = metrics_json()
    del uneven["systems"]["dense"]["per_query"]["nDCG@10"]["q3"]
    with pytest.raises(DaprError, match="system 'dense' scores other queries than 'bm25'"):
        category_table(uneven, "nDCG@10")


# --------------------------------------------------------------------------- title mentions


def toy_dataset() -> Dataset:
    def doc(doc_id: str, title: str, *texts: str) -> Document:
        passages = tuple(Passage(f"{doc_id}-{i}", doc_id, i, t) for i, t in enumerate(texts))
        return Document(doc_id, title, passages)

    corpus = Corpus(
        [
            doc("d1", "Paris", "PARIS is the capital.", "The Parisian metro is old.", "It rains."),
            doc("d2", "Mercury (planet)", "Mercury is closest to the Sun.", "It is small."),
            doc("d3", "C++", "Stroustrup designed c++ in 1985.", "Templates came later."),
        ]
    )
    qrels = {
        "upper": {"d1-0": 1},  # case-folded match
        "prefix": {"d1-1": 1},  # "Parisian" is no word-boundary match
        "any": {"d1-2": 1, "d1-0": 1},  # one of two gold passages names the title
        "disamb": {"d2-0": 1},  # "(planet)" dropped
        "none": {"d2-1": 1},
        "low": {"d1-0": 1, "d2-1": 2},  # only d2-1 reaches relevance level 2
        "unjudged": {"d1-0": 0},  # no relevant passage: no label
        "symbol": {"d3-0": 2},  # a title that is no \w run still matches literally
    }
    queries = {q: f"query {q}" for q in qrels}
    return Dataset("toy", corpus, {"test": Split(queries, qrels)}, relevance_level=1)


def test_title_mentions_by_hand():
    dataset = toy_dataset()
    labels = title_mention_labels(dataset, "test")
    yes, no = (TITLE_IN_GOLD,), (TITLE_NOT_IN_GOLD,)
    assert labels == {
        "upper": yes,
        "prefix": no,
        "any": yes,
        "disamb": yes,
        "none": no,
        "low": yes,
        "symbol": yes,
    }
    dataset.relevance_level = 2
    assert title_mention_labels(dataset, "test") == {"low": no, "symbol": yes}


def test_title_mentions_need_the_gold_passages_in_the_corpus():
    dataset = toy_dataset()
    dataset.splits["test"].qrels["lost"] = {"d9-0": 1}
    with pytest.raises(DataError, match="query 'lost' judges passage 'd9-0'"):
        title_mention_labels(dataset, "test")
    with pytest.raises(DaprError, match="no split 'dev'"):
        title_mention_labels(dataset, "dev")


# --------------------------------------------------------------------------- the label file


def test_labels_round_trip(tmp_path: Path):
    labels = {"q2": ("CR", "MT"), "q1": ("title not in gold",), "q3": ()}
    path = tmp_path / "sub" / "labels.tsv"
    write_labels(path, labels)
    assert path.read_text() == ("query_id\tcategory\nq2\tCR\nq2\tMT\nq1\ttitle not in gold\n")
    assert read_labels(path) == {"q2": ("CR", "MT"), "q1": ("title not in gold",)}
    assert [p.name for p in path.parent.iterdir()] == ["labels.tsv"]  # no temporary left


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("qid\tcat\nq1\tCR\n", 1),
        ("query_id\tcategory\nq1\tCR\nq2 CR\n", 3),
        ("query_id\tcategory\n\nq1\tCR\tMT\n", 3),
        ("query_id\tcategory\nq1\t\n", 2),
        ("", 1),
    ],
)
def test_malformed_label_files_name_file_and_line(tmp_path: Path, text: str, line: int):
    path = tmp_path / "labels.tsv"
    path.write_text(text)
    with pytest.raises(DataError, match=rf"labels\.tsv, line {line}:"):
        read_labels(path)


def test_label_values_must_fit_the_format(tmp_path: Path):
    with pytest.raises(DaprError, match="holds a tab"):
        write_labels(tmp_path / "x.tsv", {"q\t1": ("CR",)})
    assert not (tmp_path / "x.tsv").exists()
    with pytest.raises(DataError, match="no such file"):
        read_labels(tmp_path / "missing.tsv")
