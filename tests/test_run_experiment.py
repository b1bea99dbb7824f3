"""End to end: `dapr run experiments/rank_fusion.yaml` on a slice of the embedded dataset."""

import json
from pathlib import Path

import pytest

from dapr.cli import main
from dapr.evaluation import evaluate
from dapr.io import read_trec_run
from dapr.retrievers.bm25 import BM25
from dapr.retrievers.dense import Dense

EXPERIMENT = Path(__file__).resolve().parents[1] / "experiments" / "rank_fusion.yaml"
SYSTEMS = ["bm25-passage", "dense-passage", "bm25-document", "bm25-document+dense-passage"]


def _run(dataset: Path, out: Path) -> int:
    return main(["run", str(EXPERIMENT), "--set", f"dataset={dataset}", "--out", str(out)])


def test_rank_fusion_end_to_end_then_fully_cached(wiki_slice, tmp_path, capsys, monkeypatch):
    dataset, split = wiki_slice
    assert _run(dataset, tmp_path / "first") == 0
    first = capsys.readouterr().out
    assert "computed" in first
    table = (tmp_path / "first" / "summary.md").read_text()
    assert table in first
    assert all(f"| {system} |" in table for system in SYSTEMS)

    metrics = json.loads((tmp_path / "first" / "metrics.json").read_text())
    assert metrics["dataset"] == "wiki-slice" and metrics["split"] == "test"
    for system in ("bm25-passage", "dense-passage", "bm25-document+dense-passage"):
        run = read_trec_run(tmp_path / "first" / "runs" / f"{system}.trec")
        recomputed = evaluate(run, split.qrels, ["nDCG@10", "R@100", "MRR@10"])
        reported = metrics["systems"][system]
        assert reported["mean"] == pytest.approx(recomputed.means)
        assert set(reported["per_query"]["nDCG@10"]) == set(split.qrels)
    assert metrics["systems"]["bm25-document"]["level"] == "document"
    # the fused run re-ranks the dense candidates: the same passages, other scores
    fused = read_trec_run(tmp_path / "first" / "runs" / "bm25-document+dense-passage.trec")
    dense = read_trec_run(tmp_path / "first" / "runs" / "dense-passage.trec")
    fused_dict, dense_dict = fused.to_dict(), dense.to_dict()
    assert all(fused_dict[q].keys() == dense_dict[q].keys() for q in dense_dict)
    assert fused_dict != dense_dict

    def forbidden(*args, **kwargs):
        raise AssertionError("a cached step ran again")

    monkeypatch.setattr(BM25, "index", forbidden)
    monkeypatch.setattr(Dense, "index", forbidden)
    monkeypatch.setattr(Dense, "search", forbidden)
    monkeypatch.setattr(BM25, "search", forbidden)
    assert _run(dataset, tmp_path / "second") == 0
    second = capsys.readouterr().out
    steps = [line.split() for line in second.splitlines() if line.startswith("  ")]
    assert {s[0] for s in steps} == {"search", "fuse"}  # cached runs need no index at all
    assert len(steps) == 4 and all(s[2] == "cached" for s in steps)
    again = json.loads((tmp_path / "second" / "metrics.json").read_text())
    assert again["systems"] == metrics["systems"]


def test_interrupted_run_resumes_without_redoing_finished_steps(
    wiki_slice, tmp_path, capsys, monkeypatch
):
    dataset, _ = wiki_slice
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Dense, "index", interrupted)
    assert _run(dataset, tmp_path / "out") == 130
    assert not (tmp_path / "out" / "metrics.json").exists()
    leftovers = list((tmp_path / "home" / "cache").rglob(".*.tmp"))
    assert leftovers == []
    capsys.readouterr()

    monkeypatch.undo()
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    indexed = []
    original = BM25.index
    monkeypatch.setattr(
        BM25,
        "index",
        lambda self, items, store: indexed.append(store) or original(self, items, store),
    )
    assert _run(dataset, tmp_path / "out") == 0
    out = capsys.readouterr().out
    # the passage index finished before the interruption; only the document index is new
    status = {
        tuple(line.split()[:2]): line.split()[2]
        for line in out.splitlines()
        if line.startswith("  ")
    }
    assert status[("search", "bm25-passage")] == "cached"
    assert status[("index", "dense-passage")] == "computed"
    assert status[("index", "bm25-document")] == "computed"
    assert len(indexed) == 1


def test_profile_prints_the_slowest_functions_and_writes_the_whole_profile(
    wiki_slice, tmp_path, capsys
):
    dataset, _ = wiki_slice
    file = tmp_path / "profiled.yaml"
    file.write_text(
        f"dataset: {dataset}\nmetrics: [nDCG@10]\nretrievers:\n  bm25: {{name: bm25}}\n"
    )
    out = tmp_path / "out"
    assert main(["run", str(file), "--out", str(out), "--profile"]) == 0
    printed = capsys.readouterr().out
    assert "profile of profiled:" in printed and "cumulative" in printed
    assert "_run_one" in printed  # the whole run is under the profiler
    whole = (out / "profile.txt").read_text()
    assert whole.startswith("profile of profiled:") and whole.count("\n") > printed.count("\n")
    assert main(["run", str(file), "--out", str(out)]) == 0  # not asked for: not kept
    assert not (out / "profile.txt").exists()
