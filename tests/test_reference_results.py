"""``dapr report`` reads the reference code's output folders (UKPLab/acl2024-dapr) beside dapr's
own results: means from its metrics files, or its run files scored by dapr, per query."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dapr.analysis.reference import is_reference, reference_results
from dapr.analysis.table import table3
from dapr.cli import main
from dapr.errors import DaprError

RUN_PATH = (
    "data_dir_data/wiki-sample/split_{split}/topk_1000/per_device_eval_batch_size_32/fp16_True"
)


def _folder(root: Path, experiment: str, retriever: str, split: str = "test", weight=None) -> Path:
    folder = root / "exps" / experiment / retriever / RUN_PATH.format(split=split)
    if weight is not None:
        folder = folder / "report_metric_ndcg_cut_10" / f"report_passage_weight_{weight}"
    folder = folder / "git_hash_0123abcd"
    folder.mkdir(parents=True)
    return folder


def _metrics(ndcg: float) -> str:
    return json.dumps({"ndcg_cut_10": ndcg, "recall_100": 0.9, "recip_rank_10": ndcg - 0.05})


def _trec(queries: dict[str, list[str]], tag: str) -> str:
    """A run ranking each query's given passages first, as the reference writes runs."""
    return "".join(
        f"{q} Q0 {p} {rank} {10.0 - rank} {tag}\n"
        for q, passages in queries.items()
        for rank, p in enumerate(passages, 1)
    )


@pytest.fixture(scope="module")
def wiki_test():
    from dapr.datasets import load_dataset

    return load_dataset("wiki-sample").split("test")


@pytest.fixture
def reference(tmp_path, wiki_test):
    """Folders as the reference leaves them: a passage-only run, a fusion run reported at
    passage weight 0.7, and a dev sweep of a hierarchy run without a reported weight."""
    judged = sorted(wiki_test.qrels)
    # half of the queries get a relevant passage first, the others a wrong one
    good = {q: [max(wiki_test.qrels[q], key=wiki_test.qrels[q].get)] for q in judged[::2]}
    wrong = {q: ["no-such-passage"] for q in judged[1::2]}
    plain = _folder(tmp_path, "passage_only", "dragon_plus")
    (plain / "metrics.json").write_text(_metrics(0.41))
    (plain / "ranking_results.txt").write_text(_trec(good | wrong, "dragon_plus"))
    fused = _folder(tmp_path, "bm25_doc_passage_fusion", "dragon_plus", weight=0.7)
    for weight, ndcg in ((0.0, 0.2), (0.7, 0.55), (1.0, 0.41)):
        (fused / f"metrics-pweight_{weight}.json").write_text(_metrics(ndcg))
    (fused / "metrics.json").write_text(_metrics(0.55))
    (fused / "ranking_results-pweight_0.7.txt").write_text(_trec(good, "dragon_plus"))
    swept = _folder(tmp_path, "bm25_doc_passage_hierarchy", "colbertv2", split="dev")
    for weight, ndcg in ((0.0, 0.1), (0.9, 0.6)):
        (swept / f"metrics-pweight_{weight}.json").write_text(_metrics(ndcg))
    return tmp_path / "exps", len(good) / len(judged)


def test_reference_folders_become_systems_with_alpha_for_passage_weight(reference):
    root, _ = reference
    assert is_reference(root) and is_reference(next(root.rglob("metrics.json")))
    ours = root.parent / "results" / "rank_fusion"
    ours.mkdir(parents=True)
    (ours / "metrics.json").write_text("{}")
    assert not is_reference(ours) and not is_reference(ours / "metrics.json")
    by_split = {r.split: r for r in reference_results(root)}
    assert {r.dataset for r in by_split.values()} == {"wiki-sample"}
    test = by_split["test"].systems
    assert sorted(test) == [
        "reference:bm25_doc_passage_fusion/dragon_plus@alpha=0.3",  # the reported weight only
        "reference:passage_only/dragon_plus",
    ]
    fused = test["reference:bm25_doc_passage_fusion/dragon_plus@alpha=0.3"]
    assert (fused.approach, fused.retriever) == (
        "rank fusion (convex)",
        "dragon_plus (reference, alpha=0.3)",
    )
    assert fused.mean == {"nDCG@10": 0.55, "R@100": 0.9, "MRR@10": pytest.approx(0.5)}
    plain = test["reference:passage_only/dragon_plus"]
    assert (plain.approach, plain.retriever, plain.mean["nDCG@10"]) == (
        "passage only",
        "dragon_plus (reference)",
        0.41,
    )
    # without a reported weight, every weight of the sweep is a system
    assert {s.retriever: s.mean["nDCG@10"] for s in by_split["dev"].systems.values()} == {
        "colbertv2 (reference, alpha=1)": 0.1,
        "colbertv2 (reference, alpha=0.1)": 0.6,
    }
    # means only: a baseline gives no test, and no error
    table = table3([by_split["test"]], baseline="passage only")
    assert all(cell.comparison is None for cell in table.cells.values())


def test_report_scores_reference_runs_per_query_beside_dapr(reference, tmp_path, capsys, wiki_test):
    root, share = reference
    tested = [str(root / "passage_only"), str(root / "bm25_doc_passage_fusion")]
    ours = tmp_path / "results" / "passage_only"  # a dapr system that ranks every query right
    ours.mkdir(parents=True)
    perfect = dict.fromkeys(wiki_test.qrels, 1.0)
    system = {"level": "passage", "approach": "passage only", "retriever": "dense"}
    system |= {"mean": {"MRR@10": 1.0}, "per_query": {"MRR@10": perfect}}
    metrics = {"dataset": "wiki-sample", "split": "test", "dataset_fingerprint": "f"}
    (ours / "metrics.json").write_text(json.dumps(metrics | {"systems": {"dense": system}}))
    command = ["report", str(ours), *tested, "--evaluate-runs", "--metric", "MRR@10"]
    assert main([*command, "--baseline", "dense"]) == 0
    table = capsys.readouterr().out
    # the run ranks a relevant passage first for `share` of the queries: MRR@10 = share
    rows = {
        line.split("|")[1].strip() + " / " + line.split("|")[2].strip(): line
        for line in table.splitlines()
        if "reference" in line
    }
    assert f"{100 * share:.1f}" in rows["rank fusion (convex) / dragon_plus (reference, alpha=0.3)"]
    assert f"{100 * share:.1f}" in rows["passage only / dragon_plus (reference)"]
    # per query, so each is tested against dapr's system: half the queries worse, significant
    assert all(f"{100 * share:.1f}†" in line for line in rows.values())
    assert "| passage only | dense | **100.0** |" in table
    # the same file read by `dapr evaluate` gives the same mean
    run = next(root.rglob("ranking_results.txt"))
    assert main(["evaluate", str(run), "--dataset", "wiki-sample", "--metrics", "MRR@10"]) == 0
    assert f"{share:.4f}" in capsys.readouterr().out


def test_a_reference_metrics_file_without_metrics_is_named(tmp_path):
    folder = _folder(tmp_path, "passage_only", "bm25")
    (folder / "metrics.json").write_text(json.dumps({"accuracy": 1.0}))
    with pytest.raises(DaprError, match=r"metrics.json: none of ndcg_cut_10"):
        reference_results(tmp_path)
    with pytest.raises(DaprError, match="no reference results"):
        reference_results(tmp_path / "exps" / "passage_only" / "bm25" / "data_dir_data" / "x")
