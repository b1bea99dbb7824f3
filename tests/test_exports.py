"""Exports for other tools: a dataset in BEIR's layout, a corpus with its document context
applied, and runs as TREC files whose header says what made them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dapr.cli import main
from dapr.data import Run
from dapr.datasets import load_dataset
from dapr.datasets.adapter import adapter_of
from dapr.errors import DataError
from dapr.io import read_trec_run, write_trec_run
from dapr.io.trec import read_run_header


def _documents(dataset) -> list[tuple]:
    return [
        (d.id, d.title, [(p.id, p.position, p.text) for p in d.passages]) for d in dataset.corpus
    ]


def test_a_dataset_exported_to_beir_reads_back_through_the_beir_adapter(wiki_slice, tmp_path):
    path, split = wiki_slice
    out = tmp_path / "b"
    assert main(["data", "export", str(path), "--format", "beir", "--out", str(out)]) == 0
    assert (out / "qrels" / "test.tsv").read_text().startswith("query-id\tcorpus-id")
    back = adapter_of("beir").build(out, group_by="doc_id")
    assert _documents(back) == _documents(load_dataset(str(path)))
    assert back.split("test").queries == split.queries
    assert back.split("test").qrels == split.qrels


def test_a_contextualized_export_carries_the_context_in_every_passage(wiki_slice, tmp_path):
    path, _ = wiki_slice
    original = load_dataset(str(path))
    out = tmp_path / "titled"
    args = ["data", "export", str(path), "--contextualized", "title", "--workers", "1"]
    assert main([*args, "--format", "parquet", "--out", str(out)]) == 0
    titled = load_dataset(str(out))
    expected = [
        (d.id, d.title, [(p.id, p.position, f"{d.title} {p.text}") for p in d.passages])
        for d in original.corpus
    ]
    assert _documents(titled) == expected
    assert titled.split("test") == original.split("test")
    # BEIR form: the title is already in the text, so the title field is left empty
    assert main([*args, "--format", "beir", "--out", str(tmp_path / "beir")]) == 0
    first = json.loads((tmp_path / "beir" / "corpus.jsonl").read_text().splitlines()[0])
    document = next(iter(original.corpus))
    passage = document.passages[0]
    assert first == {
        "_id": passage.id,
        "title": "",
        "text": f"{document.title} {passage.text}",
        "metadata": {"doc_id": document.id, "position": 0, "doc_title": document.title},
    }


def test_exported_runs_open_with_what_made_them_and_read_back_the_same(
    wiki_slice, tmp_path, capsys
):
    path, _ = wiki_slice
    file = tmp_path / "bm25.yaml"
    file.write_text(
        f"name: exported\ndataset: {path}\nmetrics: [nDCG@10]\n"
        "retrievers:\n  bm25: {name: bm25, args: {k1: 0.9}}\n"
    )
    results = tmp_path / "results"
    assert main(["run", str(file), "--out", str(results)]) == 0
    assert main(["runs", "export", str(results), "--out", str(tmp_path / "runs")]) == 0
    exported = tmp_path / "runs" / "bm25.trec"
    header = read_run_header(exported)
    metrics = json.loads((results / "metrics.json").read_text())
    manifest = json.loads((results / "manifest.json").read_text())
    assert header["system"] == "bm25" and header["experiment"] == "exported"
    assert header["settings"]["args"] == {"k1": 0.9}
    assert header["dataset_fingerprint"] == metrics["dataset_fingerprint"]
    assert header["mean"] == metrics["systems"]["bm25"]["mean"]
    assert header["cache_key"] == manifest["keys"]["bm25"]
    original = read_trec_run(results / "runs" / "bm25.trec")
    assert read_trec_run(exported).to_dict() == original.to_dict()
    plain = tmp_path / "plain"
    assert main(["runs", "export", str(results), "--out", str(plain), "--no-header"]) == 0
    assert (plain / "bm25.trec").read_bytes() == (results / "runs" / "bm25.trec").read_bytes()
    capsys.readouterr()
    assert main(["runs", "export", str(results), "--out", str(plain), "--systems", "bm42"]) == 2
    assert "no system 'bm42'; choose from: bm25" in capsys.readouterr().err


def test_a_run_header_is_skipped_by_both_readers_and_a_bad_one_is_named(tmp_path):
    run = Run.from_dict({"q1": {"a": 2.0, "b": 1.5}, "q2": {"c": 0.25}})
    spaced = tmp_path / "spaced.trec"
    write_trec_run(run, spaced, "sys", {"system": "sys", "mean": {"nDCG@10": 0.5}})
    assert read_run_header(spaced) == {"system": "sys", "mean": {"nDCG@10": 0.5}}
    assert read_trec_run(spaced).to_dict() == run.to_dict()
    tabbed = tmp_path / "tabbed.trec"  # tabs: read line by line instead of by pyarrow
    lines = spaced.read_text().splitlines()
    tabbed.write_text("\n".join(lines[:2] + [line.replace(" ", "\t") for line in lines[2:]]))
    assert read_trec_run(tabbed).to_dict() == run.to_dict()
    assert read_run_header(tmp_path / "spaced.trec") != {}
    bad = tmp_path / "bad.trec"
    bad.write_text("# system: not json\n" + "\n".join(lines[2:]) + "\n")
    with pytest.raises(DataError, match=r"bad.trec:1: header line is not '# key: <JSON value>'"):
        read_run_header(bad)
    assert read_trec_run(bad).to_dict() == run.to_dict()
    with pytest.raises(DataError, match="a header key holds ':'"):
        write_trec_run(run, tmp_path / "x.trec", "sys", {"a: b": 1})
    assert not Path(tmp_path / "x.trec").exists()
