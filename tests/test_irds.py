"""ir_datasets both ways: dapr datasets registered as dapr/<name>[/<split>], and any registered
ir_datasets id read as ``irds:<id>``. Every ir_datasets dataset here is built from local files."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ir_datasets = pytest.importorskip("ir_datasets")

from ir_datasets.datasets.base import Dataset as IrdsDataset  # noqa: E402
from ir_datasets.formats import TrecQrels, TsvDocs, TsvQueries  # noqa: E402
from ir_datasets.util import LocalDownload  # noqa: E402

import dapr.datasets  # noqa: E402
from dapr.datasets import load_dataset, read_dataset  # noqa: E402
from dapr.datasets.irds import register, windows  # noqa: E402
from dapr.errors import ConfigError, DaprError, DataError  # noqa: E402
from dapr.experiment.config import load  # noqa: E402
from dapr.experiment.runner import Runner  # noqa: E402
from dapr.store.cache import Cache  # noqa: E402

DOCS = {
    "d1": "one two three four five six seven",
    "d2": "alpha beta",
    "d3": "",
}


def _local(tmp_path: Path, dataset_id: str, queries: bool = True) -> str:
    """An ir_datasets dataset of three documents (one empty), two queries and their qrels,
    from TSV and TREC files; ``queries=False`` puts the queries in ``<id>/test`` instead."""
    docs = tmp_path / "docs.tsv"
    docs.write_text("".join(f"{d}\t{t}\n" for d, t in DOCS.items()))
    (tmp_path / "queries.tsv").write_text("q1\tfour five\nq2\tbeta\n")
    (tmp_path / "qrels.txt").write_text("q1 0 d1 2\nq2 0 d2 1\nq2 0 d3 0\n")
    parts = [
        TsvQueries(LocalDownload(tmp_path / "queries.tsv")),
        TrecQrels(LocalDownload(tmp_path / "qrels.txt"), {0: "no", 1: "yes", 2: "very"}),
    ]
    source = TsvDocs(LocalDownload(docs))
    if queries:
        ir_datasets.registry.register(dataset_id, IrdsDataset(source, *parts))
    else:
        ir_datasets.registry.register(dataset_id, IrdsDataset(source))
        ir_datasets.registry.register(f"{dataset_id}/test", IrdsDataset(source, *parts))
    return dataset_id


def test_a_dapr_dataset_round_trips_through_ir_datasets(wiki_splits):
    dataset = read_dataset(wiki_splits)
    ids = register(dataset)
    assert ids == ["dapr/wiki-splits", "dapr/wiki-splits/dev", "dapr/wiki-splits/test"]
    assert register(dataset) == ids  # the same data again: nothing to do

    test = ir_datasets.load("dapr/wiki-splits/test")
    first_document = next(iter(dataset.corpus))
    doc = next(test.docs_iter())
    assert (doc.doc_id, doc.text, doc.title, doc.document_id, doc.position) == (
        first_document.passages[0].id,
        first_document.passages[0].text,
        first_document.title,
        first_document.id,
        0,
    )
    assert doc.default_text() == f"{first_document.title} {first_document.passages[0].text}"
    assert test.docs_count() == sum(len(d.passages) for d in dataset.corpus)
    assert test.qrels_dict() == dataset.split("test").qrels
    assert {q.query_id: q.text for q in test.queries_iter()} == dataset.split("test").queries

    again = load_dataset("irds:dapr/wiki-splits")
    assert list(again.corpus) == list(dataset.corpus)
    assert again.splits == dataset.splits
    assert again.fingerprint == dataset.fingerprint
    assert again.notes == () and again.language == "en"


def test_other_data_under_a_registered_id_is_refused(wiki_splits):
    dataset = read_dataset(wiki_splits, "refused")
    register(dataset)
    del dataset.splits["dev"]
    dataset.__dict__.pop("fingerprint")
    with pytest.raises(DaprError, match=r"already has a dataset 'dapr/refused'.*name="):
        register(dataset)
    with pytest.raises(DaprError, match="without '/'"):
        register(dataset, name="a/b")


def test_a_document_level_source_is_cut_into_passages(tmp_path):
    dataset_id = _local(tmp_path, "local/cut")
    dataset = load_dataset(f"irds:{dataset_id}", passage_words=3, stride=2)
    passages = {p.id: (p.doc_id, p.position, p.text) for p in dataset.corpus.passages()}
    assert passages == {
        "d1-0": ("d1", 0, "one two three"),
        "d1-1": ("d1", 1, "three four five"),
        "d1-2": ("d1", 2, "five six seven"),
        "d2-0": ("d2", 0, "alpha beta"),
        "d3-0": ("d3", 0, ""),
    }
    split = dataset.split("test")  # the id's own queries, as the split named by `split`
    assert split.queries == {"q1": "four five", "q2": "beta"}
    assert split.qrels == {
        "q1": {"d1-0": 2, "d1-1": 2, "d1-2": 2},
        "q2": {"d2-0": 1, "d3-0": 0},
    }
    assert "cut into passages of 3 words every 2" in dataset.notes[0]


def test_a_document_level_source_is_one_passage_per_doc_by_default(tmp_path):
    dataset_id = _local(tmp_path, "local/whole")
    dataset = load_dataset(f"irds:{dataset_id}", split="dev", relevance_level=2)
    assert [(d.id, [p.id for p in d.passages]) for d in dataset.corpus] == [
        ("d1", ["d1"]),
        ("d2", ["d2"]),
        ("d3", ["d3"]),
    ]
    assert dataset.split("dev").qrels == {"q1": {"d1": 2}, "q2": {"d2": 1, "d3": 0}}
    assert dataset.relevance_level == 2
    assert "one document of one passage" in dataset.notes[0]


def test_splits_come_from_the_children_of_an_id_without_queries(tmp_path):
    dataset_id = _local(tmp_path, "local/parent", queries=False)
    dataset = load_dataset(f"irds:{dataset_id}")
    assert list(dataset.splits) == ["test"]
    assert dataset.split("test").qrels["q1"] == {"d1": 2}


def test_windows_cover_the_text():
    assert windows("a b c d e", 2, 2) == ["a b", "c d", "e"]
    assert windows("a b c d", 2, 2) == ["a b", "c d"]
    assert windows("a b c d", 3, 1) == ["a b c", "b c d"]
    assert windows("   ", 5, 5) == [""]


def test_an_experiment_reads_irds_ids_as_it_reads_the_dataset(wiki_splits, tmp_path):
    register(read_dataset(wiki_splits))
    base = (
        "split: test\nmetrics: [nDCG@10, RR@10]\n"
        "retrievers:\n  bm25: {name: bm25}\n  bm25-doc: {name: bm25, level: document}\n"
        "fusion:\n  fused: {name: convex, document: bm25-doc, passage: bm25, args: {alpha: 0.3}}\n"
    )
    means = {}
    for tag, source in (("irds", "irds:dapr/wiki-splits"), ("dir", str(wiki_splits))):
        path = tmp_path / f"{tag}.yaml"
        path.write_text(f"name: {tag}\ndataset: {source}\n" + base)
        outcome = Runner(load(path), Cache(tmp_path / f"cache-{tag}")).run()
        means[tag] = {s: e.means for s, e in outcome.evaluations.items()}
    assert means["irds"] == means["dir"]
    assert means["irds"]["fused"]["nDCG@10"] > 0


def test_experiment_files_check_irds_ids_and_their_args(tmp_path):
    _local(tmp_path, "local/checked")
    path = tmp_path / "exp.yaml"
    retrievers = "retrievers:\n  bm25: {name: bm25}\n"
    path.write_text("dataset: irds:local/checked\ndataset_args: {passage_words: 50}\n" + retrievers)
    assert load(path).dataset_args == {"passage_words": 50}
    path.write_text("dataset: irds:local/nowhere\n" + retrievers)
    with pytest.raises(ConfigError, match=r"exp.yaml: dataset: .*no dataset 'local/nowhere'"):
        load(path)
    path.write_text("dataset: irds:local/checked\ndataset_args: {words: 5}\n" + retrievers)
    with pytest.raises(ConfigError, match=r"unknown option 'words'; valid options: passage_words"):
        load(path)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"passage_words": 0}, "'passage_words' must be a positive integer"),
        ({"stride": 2}, "'stride' needs passage_words"),
        ({"split": ""}, "'split' must be a non-empty text"),
        ({"relevance_level": "1"}, "'relevance_level' must be an integer"),
    ],
)
def test_bad_options_are_one_line_errors(tmp_path, options, message):
    dataset_id = _local(tmp_path, f"local/bad-{len(options)}-{next(iter(options))}")
    with pytest.raises(DataError, match=message) as error:
        load_dataset(f"irds:{dataset_id}", **options)
    assert "\n" not in str(error.value)


def test_passages_of_dapr_docs_are_not_cut_again(wiki_splits):
    register(read_dataset(wiki_splits))
    with pytest.raises(DataError, match="passages of documents already; remove passage_words"):
        load_dataset("irds:dapr/wiki-splits", passage_words=10)


def test_unknown_ids_and_a_missing_ir_datasets_are_named(monkeypatch):
    with pytest.raises(DataError, match=r"irds:nowhere/at-all: ir_datasets has no dataset"):
        load_dataset("irds:nowhere/at-all")
    with pytest.raises(DataError, match="give an ir_datasets id after irds:"):
        load_dataset("irds:")
    monkeypatch.setitem(sys.modules, "ir_datasets", None)
    monkeypatch.delitem(sys.modules, "dapr.datasets.irds_export")
    monkeypatch.delattr(dapr.datasets, "irds_export")
    with pytest.raises(DaprError, match=r'pip install "dapr-ir\[irds\]"'):
        load_dataset("irds:anything")
