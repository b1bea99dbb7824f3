"""The sweep block, MaxP, categories and the analysis commands, end to end on a slice of
wiki-sample with dev and test queries (BM25 only, so it runs in seconds)."""

import json
from pathlib import Path

import pytest

from dapr.cli import main
from dapr.data import Run
from dapr.datasets import read_dataset
from dapr.evaluation import document_qrels, evaluate, maxp
from dapr.fusion import Convex
from dapr.io import read_trec_run
from dapr.retrievers.bm25 import BM25

ALPHAS = (0.0, 0.5, 1.0)
EXPERIMENT = """
name: swept
dataset: {dataset}
categories: title_mention
maxp: [bm25]
retrievers:
  bm25-document: {{name: bm25, level: document}}
  bm25: {{name: bm25}}
fusion:
  fused:
    name: convex
    document: bm25-document
    passage: bm25
    args: {{alpha: 0.2}}
sweep:
  parameter: fusion.fused.args.alpha
  values: [0.0, 0.5, 1.0]
  tune_on: dev
  metric: nDCG@10
  subset: hard
"""


@pytest.fixture(scope="module")
def swept(wiki_splits, tmp_path_factory) -> tuple[Path, dict]:
    """Run the sweep once, counting BM25 searches."""
    root = tmp_path_factory.mktemp("sweep")
    experiment = root / "swept.yaml"
    experiment.write_text(EXPERIMENT.format(dataset=wiki_splits))
    searches = []
    original = BM25.search

    def counted(self, queries, k):
        searches.append(len(queries))
        return original(self, queries, k)

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DAPR_HOME", str(root / "home"))
        patch.setattr(BM25, "search", counted)
        assert main(["run", str(experiment), "--out", str(root / "out")]) == 0
    return root / "out", {"searches": searches}


def _expected_means(dataset_dir: Path, split: str, runs_dir: Path | None = None):
    """Per alpha, nDCG@10 of convex fusion recomputed from BM25 runs built here."""
    dataset = read_dataset(dataset_dir)
    queries = dataset.split(split)
    document, passage = BM25(), BM25()
    document.index(((d.id, d.text) for d in dataset.corpus), runs_dir / f"doc-{split}")
    passage.index(((p.id, p.text) for p in dataset.corpus.passages()), runs_dir / f"psg-{split}")
    document_run = document.search(queries.queries, 1000)
    passage_run = passage.search(queries.queries, 1000)
    pid2did = dict(
        zip(dataset.corpus.ids.passage_ids, dataset.corpus.ids.doc_ids[dataset.corpus.ids.doc_of])
    )
    code = {d: i for i, d in enumerate(document_run.vocab.tolist())}
    import numpy as np

    doc_of = np.array([code.get(pid2did[p], -1) for p in passage_run.vocab], np.int64)
    per_alpha = {}
    for alpha in ALPHAS:
        fused = Convex(alpha).fuse(document_run, passage_run, doc_of)
        per_alpha[alpha] = evaluate(fused, queries.qrels, ["nDCG@10"]).per_query["nDCG@10"]
    plain = evaluate(passage_run, queries.qrels, ["nDCG@10"]).per_query["nDCG@10"]
    hard = {q for q in plain if plain[q] == 0}  # bm25 is the only passage-level retriever
    return per_alpha, hard, passage_run, dataset


def test_sweep_chooses_on_dev_and_reports_test(swept, wiki_splits, tmp_path):
    out, seen = swept
    summary = json.loads((out / "sweep.json").read_text())
    # each split searched once per retriever; the three values only fused again
    assert len(seen["searches"]) == 4
    for split in ("dev", "test"):
        per_alpha, hard, _, _ = _expected_means(wiki_splits, split, tmp_path)
        means = [sum(v.values()) / len(v) for v in per_alpha.values()]
        assert summary["means"][split]["all"] == pytest.approx(means)
        assert summary["queries"][split]["hard"] == len(hard)
        assert hard, "the slice should hold queries BM25 fails on"
        hard_means = [sum(v[q] for q in hard) / len(hard) for v in per_alpha.values()]
        assert summary["means"][split]["hard"] == pytest.approx(hard_means)
    dev = summary["means"]["dev"]["all"]
    assert summary["chosen"] == ALPHAS[dev.index(max(dev))]
    # the reported fused run is the chosen alpha's, on test
    metrics = json.loads((out / "metrics.json").read_text())
    per_alpha, _, _, _ = _expected_means(wiki_splits, "test", tmp_path / "again")
    assert metrics["split"] == "test"
    assert metrics["systems"]["fused"]["per_query"]["nDCG@10"] == pytest.approx(
        per_alpha[summary["chosen"]]
    )
    table = (out / "sweep.md").read_text()
    assert f"**{summary['chosen']}**" in table and "Chosen fusion.fused.args.alpha" in table
    for name in ("sweep.png", "sweep.pdf", "sweep.csv"):
        assert (out / name).stat().st_size > 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["dataset_fingerprint"] == metrics["dataset_fingerprint"]
    assert manifest["experiment"]["sweep"]["argument"] == "alpha"
    assert manifest["keys"]["fused"] and manifest["wall_seconds"] > 0


def test_maxp_categories_and_tags(swept, wiki_splits, tmp_path):
    out, _ = swept
    metrics = json.loads((out / "metrics.json").read_text())
    _, _, passage_run, dataset = _expected_means(wiki_splits, "test", tmp_path)
    split = dataset.split("test")
    expected = evaluate(
        maxp(passage_run, dataset.corpus.ids), document_qrels(split.qrels, dataset.corpus.ids)
    )
    entry = metrics["systems"]["bm25@maxp"]
    assert entry["level"] == "document" and entry["approach"] == "passage only (MaxP)"
    assert entry["mean"] == pytest.approx(expected.means)
    assert metrics["systems"]["bm25"]["approach"] == "passage only"
    assert metrics["systems"]["fused"]["approach"] == "rank fusion (convex)"
    assert metrics["systems"]["fused"]["retriever"] == "bm25"
    assert set(metrics["labels"]) == set(split.queries)
    assert {c for labels in metrics["labels"].values() for c in labels} <= {
        "title in gold",
        "title not in gold",
    }
    assert "title in gold (n=" in (out / "categories.md").read_text()
    run = read_trec_run(out / "runs" / "bm25@maxp.trec")
    assert isinstance(run, Run) and set(run.vocab) <= set(dataset.corpus.ids.doc_ids)


def test_analysis_commands_on_the_results(swept, tmp_path, capsys):
    out, _ = swept
    metrics = json.loads((out / "metrics.json").read_text())
    hard_file = tmp_path / "hard.tsv"
    assert main(["hard-subset", str(out), "--systems", "bm25", "--out", str(hard_file)]) == 0
    zeros = [q for q, v in metrics["systems"]["bm25"]["per_query"]["nDCG@10"].items() if v == 0]
    assert capsys.readouterr().out.startswith(f"{len(zeros)} of {len(metrics['labels'])} queries")
    assert hard_file.read_text().count("\thard\n") == len(zeros)

    assert main(["plot", str(out), "--kind", "categories", "--out", str(tmp_path / "cat")]) == 0
    assert main(["plot", str(out), "--kind", "categories", "--labels", str(hard_file)]) == 0
    assert main(["plot", str(out), "--kind", "sweep", "--out", str(tmp_path / "sw")]) == 0
    for stem in ("cat", "sw"):
        assert (tmp_path / f"{stem}.png").read_bytes().startswith(b"\x89PNG")
        assert (tmp_path / f"{stem}.pdf").read_bytes().startswith(b"%PDF")

    capsys.readouterr()
    assert main(["report", str(out), "--baseline", "passage only", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "rank fusion (convex)" in text and "wiki-splits" in text
    assert (tmp_path / "table3.tex").read_text().count("\\textbf") >= 1

    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "no metrics.json here" in capsys.readouterr().err


HIERARCHICAL = """
dataset: {dataset}
depth: 50
retrievers:
  bm25-document: {{name: bm25, level: document}}
  bm25: {{name: bm25}}
  bm25+title: {{name: bm25, contextualizer: title}}
fusion:
  hierarchical:
    name: hierarchical
    document: bm25-document
    passage: bm25
    args: {{alpha: 0.3, documents: 2}}
  hybrid: {{name: rrf, passages: [bm25, bm25+title]}}
"""


def test_hierarchical_and_passage_hybrid(wiki_splits, tmp_path, monkeypatch):
    from dapr.experiment.config import load
    from dapr.experiment.runner import Runner, doc_codes
    from dapr.fusion import RRF, Hierarchical
    from dapr.store.cache import Cache

    path = tmp_path / "h.yaml"
    path.write_text(HIERARCHICAL.format(dataset=wiki_splits))
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    outcome = Runner(load(path), Cache()).run()
    dataset, runs = outcome.dataset, outcome.runs
    ids = dataset.corpus.ids
    doc_of = dict(zip(ids.passage_ids.tolist(), ids.doc_ids[ids.doc_of].tolist()))
    documents = runs["bm25-document"].to_dict()
    fused = runs["hierarchical"].to_dict()
    for qid, ranked in fused.items():
        assert ranked and {doc_of[p] for p in ranked} <= set(list(documents[qid])[:2])
    # the scoped run is BM25's own scores of those passages; the fusion is convex on it
    bm25 = BM25()
    bm25.index(((p.id, p.text) for p in dataset.corpus.passages()), tmp_path / "index")
    fuser = Hierarchical(0.3, documents=2)
    queries = dataset.split("test").queries
    scoped = bm25.score(queries, fuser.scope(runs["bm25-document"], ids)).top(50)
    doc_run = runs["bm25-document"]
    expected = fuser.fuse(doc_run, scoped, doc_codes(dataset, scoped, doc_run)).to_dict()
    assert fused.keys() == expected.keys()
    assert all(fused[q] == pytest.approx(expected[q]) for q in fused)
    assert [s.kind for s in outcome.steps if s.system == "hierarchical"] == ["score", "fuse"]
    assert outcome.tags["hierarchical"] == {"approach": "hierarchical", "retriever": "bm25"}
    # the passage-level hybrid is rrf over the union of the two passage runs
    hybrid = RRF().fuse_passages(runs["bm25"], runs["bm25+title"]).to_dict()
    assert runs["hybrid"].to_dict() == hybrid
    assert outcome.tags["hybrid"] == {
        "approach": "passage hybrid (rrf)",
        "retriever": "bm25 + bm25",
    }


def test_overlap_command_prints_table5(wiki_splits, capsys):
    from dapr.analysis.overlap import overlap_table

    assert main(["overlap", str(wiki_splits), "--split", "dev"]) == 0
    out = capsys.readouterr().out
    stats = overlap_table(read_dataset(wiki_splits), "dev")
    assert f"| alone | {stats[False].mean:.4f} | {stats[False].pairs:,} |" in out
    assert f"| with title | {stats[True].mean:.4f} |" in out
    assert stats[True].mean > stats[False].mean  # queries name the article: titles add overlap
    assert main(["overlap", str(wiki_splits), "--split", "train"]) == 2
