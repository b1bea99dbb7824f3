"""The paper's published numbers in the experiment files, `dapr report` printing them beside
dapr's, and the generated reproduction matrix (docs/reproduction-matrix.md)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

from dapr.cli import main
from dapr.errors import ConfigError
from dapr.experiment.config import load, load_grid
from dapr.experiment.manifest import plain

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
sys.path.insert(0, str(ROOT / "docs" / "_hooks"))

import matrix  # noqa: E402  (docs/_hooks/matrix.py, the page's generator)

# Typed once from the paper (Wang et al., ACL 2024): (file, table, row, system, dataset, x 100)
PAPER = [
    ("paper_table3_full", "Table 3", "passage only / BM25", "bm25", "MSMARCO", 44.5),
    ("paper_table3_full", "Table 3", "passage only / BM25", "bm25", "MIRACL", 28.7),
    ("paper_table3_full", "Table 3", "passage only / ColBERTv2", "colbertv2", "Genomics", 43.5),
    (
        "paper_table3_full",
        "Table 3",
        "rank fusion / SPLADEv2",
        "spladev2+rank-fusion",
        "NQ-hard",
        2.6,
    ),
    (
        "paper_table3_full",
        "Table 3",
        "hierarchical / ColBERTv2",
        "colbertv2+hierarchical",
        "MIRACL",
        54.8,
    ),
    (
        "paper_table3_full",
        "Table 3",
        "prepending titles / DRAGON+",
        "dragon_plus+title",
        "ConditionalQA",
        29.2,
    ),
    (
        "paper_table3_full",
        "Table 3",
        "prepending titles / SPLADEv2",
        "spladev2+title",
        "NQ-hard",
        39.8,
    ),
    (
        "paper_table3_full",
        "Table 3",
        "prepending document keyphrases / ColBERTv2",
        "colbertv2+keyphrases",
        "Genomics",
        41.0,
    ),
    (
        "paper_table3_full",
        "Table 3",
        "coreference resolution / DRAGON+",
        "dragon_plus+coref",
        "NaturalQuestions",
        49.5,
    ),
    (
        "paper_table3_full",
        "Table 4",
        "passage only (BM25) (document)",
        "bm25@maxp",
        "NQ-hard",
        44.3,
    ),
    (
        "paper_table3_full",
        "Table 4",
        "prepending titles (document)",
        "dragon_plus+title@maxp",
        "NQ-hard",
        75.9,
    ),
    (
        "paper_table3_full",
        "Table 4",
        "coreference resolution (document)",
        "dragon_plus+coref@maxp",
        "NQ-hard",
        67.3,
    ),
    ("prepending_titles", "Table 5", "without titles", "", "ConditionalQA", 10.5),
    ("prepending_titles", "Table 5", "with titles", "", "NaturalQuestions", 7.6),
    ("prepending_titles", "Table 5", "with titles", "", "Genomics", 3.2),
    ("paper_table7_full", "Table 7", "passage only / JinaV2", "jinav2", "NQ-hard", 4.0),
    (
        "paper_table7_full",
        "Table 7",
        "rank fusion (JinaV2 documents) / SPLADEv2",
        "spladev2+jinav2-fusion",
        "Genomics",
        39.6,
    ),
    (
        "paper_table7_full",
        "Table 7",
        "rank fusion (JinaV2 documents) / ColBERTv2",
        "colbertv2+jinav2-fusion",
        "MSMARCO",
        70.9,
    ),
    (
        "paper_table3",
        "Table 3",
        "passage only / DRAGON+ (MiniLM stands in)",
        "dense",
        "NaturalQuestions",
        47.7,
    ),
]


@pytest.mark.parametrize("file", sorted({f for f, *_ in PAPER}))
def test_published_rows_match_the_paper(file: str):
    published = load_grid(EXPERIMENTS / f"{file}.yaml")[0].published
    assert published is not None
    rows = {(r.table, r.row, r.system, d): v for r in published.rows for d, v in r.values.items()}
    for _, table, row, system, dataset, value in (p for p in PAPER if p[0] == file):
        assert rows[(table, row, system, dataset)] == pytest.approx(value / 100, abs=1e-9)


def _results(folder: Path, file: str, dataset: str, means: dict[str, float]) -> Path:
    """A results folder as `dapr run` writes it (metrics.json, manifest.json) for one dataset."""
    experiment = next(e for e in load_grid(EXPERIMENTS / f"{file}.yaml") if e.dataset == dataset)
    systems = {
        name: {
            "level": "document" if name.endswith("@maxp") else "passage",
            "approach": name,
            "retriever": "",
            "mean": {"nDCG@10": mean},
            "per_query": {"nDCG@10": {"q1": mean, "q2": mean}},
        }
        for name, mean in means.items()
    }
    folder.mkdir(parents=True)
    metrics = {"experiment": experiment.name, "dataset": dataset, "split": "test"}
    metrics |= {"dataset_fingerprint": "f", "depth": 1000, "labels": {}, "systems": systems}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    manifest = {
        "experiment": plain(experiment),
        "finished": "2026-11-27T18:00:00+00:00",
        "hardware": {"cpus": 2, "gpus": []},
        "git": {"revision": "6341516abcdef", "dirty": False},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_report_prints_the_paper_beside_a_full_run(tmp_path: Path, capsys):
    folder = _results(
        tmp_path / "paper_table3_full" / "NaturalQuestions",
        "paper_table3_full",
        "NaturalQuestions",
        {"bm25": 0.25, "dragon_plus+title": 0.5},
    )
    assert main(["report", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "| bm25 | NaturalQuestions | 0.2500 | 0.2410 | +0.0090 |" in out
    assert "| dragon_plus+title | NaturalQuestions | 0.5000 | 0.5360 | -0.0360 |" in out
    assert "Table 3, prepending titles / DRAGON+" in out


def test_report_on_wiki_sample_shows_the_papers_columns_without_a_difference(
    tmp_path: Path, capsys
):
    folder = _results(tmp_path / "paper_table3", "paper_table3", "wiki-sample", {"dense": 0.6})
    assert main(["report", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "| dense | wiki-sample | 0.6000 | MSMARCO 0.6950; NaturalQuestions 0.4770;" in out
    assert "none: the paper has no wiki-sample column" in out


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("{table: T, row: r, system: nope, metric: nDCG@10, values: {MSMARCO: 0.1}}", "nope"),
        ("{table: T, row: r, system: bm25, metric: MAP, values: {MSMARCO: 0.1}}", "MAP"),
        ("{table: T, row: r, system: bm25, metric: nDCG@10, values: {Nowhere: 0.1}}", "Nowhere"),
        ("{table: T, row: r, system: bm25, metric: nDCG@10, values: {MSMARCO: 44.5}}", "0.445"),
        ("{table: T, row: r, overlap: sideways, values: {MSMARCO: 0.1}}", "with title"),
        ("{row: r, system: bm25, metric: nDCG@10, values: {MSMARCO: 0.1}}", "'table'"),
    ],
)
def test_a_wrong_published_row_is_one_line_naming_it(tmp_path: Path, row: str, message: str):
    file = tmp_path / "e.yaml"
    file.write_text(
        "dataset: wiki-sample\nmetrics: [nDCG@10]\nretrievers: {bm25: {name: bm25}}\n"
        f"published: {{source: paper, rows: [{row}]}}\n"
    )
    with pytest.raises(ConfigError, match=r"published\.rows\[0\]") as caught:
        load(file)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_value_given_twice_is_refused(tmp_path: Path):
    row = "{table: T, row: r, system: bm25, metric: nDCG@10, values: {MSMARCO: 0.1}}"
    file = tmp_path / "e.yaml"
    file.write_text(
        "dataset: wiki-sample\nmetrics: [nDCG@10]\nretrievers: {bm25: {name: bm25}}\n"
        f"published: {{source: paper, rows: [{row}, {row}]}}\n"
    )
    with pytest.raises(ConfigError, match=r"rows\[1\]\.values\.MSMARCO: T, r gives"):
        load(file)


def test_matrix_has_a_row_per_table_dataset_and_system_with_its_command(tmp_path: Path):
    found = matrix.rows(EXPERIMENTS, tmp_path)
    keys = {(r["table"], r["dataset"], r["system"]) for r in found}
    assert len(keys) == len(found) == 19 * 6 + 7 + 2 * 5 + 4 * 6
    by = {(r["table"], r["dataset"], r["system"]): r for r in found}
    nq = by[("Table 3", "NaturalQuestions", "dragon_plus+coref")]
    assert nq["paper"] == pytest.approx(0.495)
    assert nq["command"] == (
        "dapr run experiments/paper_table3_full.yaml --set dataset=NaturalQuestions"
    )
    assert "the published coref" in nq["needs"] and "dragon_plus" in nq["needs"]
    assert nq["dapr"] == "not run yet" and not nq["laptop"]
    assert by[("Table 3", "ConditionalQA", "bm25")]["laptop"]
    assert by[("Table 5", "MIRACL", "dapr overlap: with title")]["command"] == (
        "dapr overlap MIRACL --split test"
    )
    assert all(r["dataset"] != "wiki-sample" for r in found)  # stand-ins are not the paper's


def test_matrix_shows_a_recorded_result_with_date_hardware_and_commit(tmp_path: Path):
    _results(tmp_path / "paper_table3_full" / "ConditionalQA", "paper_table3_full",
             "ConditionalQA", {"bm25": 0.1234})  # fmt: skip
    text = matrix.matrix(EXPERIMENTS, tmp_path)
    assert "| 0.1234 (2026-11-27, 2 CPUs, 6341516) |" in text
    assert "not run yet" in text


def test_the_page_is_generated_and_in_the_site():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    assert "docs/_hooks/matrix.py" in config["hooks"]
    assert "reproduction-matrix.md" in json.dumps(config["nav"])
    page = (ROOT / "docs" / "reproduction-matrix.md").read_text()
    assert matrix.MARKER in page and "| Table 3 |" not in page  # nothing typed by hand
    assert "| Table 7 | passage only / JinaV2 |" in matrix.on_page_markdown(page)


def _priced(command: str, device: str, system: str | None = None) -> str:
    """``<device> <time>, <memory>`` of ``command`` (``dapr run FILE --set ...``) from a cold
    cache, through the estimator's public functions; with ``system``: of it and the systems it
    fuses alone."""
    from dapr.experiment import estimate
    from dapr.experiment.config import raw_grid
    from dapr.experiment.sizes import table1_sizes
    from dapr.experiment.summary import duration
    from dapr.experiment.validate import validate

    file = ROOT / command.split()[2]
    (raw,) = raw_grid(file, tuple(re.findall(r"--set (\S+)", command)))
    experiment = validate(raw, file)
    steps = estimate.cold_steps(experiment)
    if system is not None:
        fusion = experiment.fusion.get(system)
        mine = {system, *((fusion.document, fusion.passage) if fusion else ())}
        steps = [step for step in steps if step.system in mine]
    found = estimate.estimate(
        experiment, steps, table1_sizes(experiment.dataset, experiment.split), device
    )
    return f"{duration(found.seconds)}, {estimate.size(found.memory)}"


def test_every_row_has_the_estimated_cost_of_its_command(tmp_path: Path):
    found = matrix.rows(EXPERIMENTS, tmp_path)
    assert all(r["cost"] and "not estimated" not in r["cost"] for r in found)
    by = {(r["table"], r["dataset"], r["system"]): r for r in found}
    miracl = by[("Table 3", "MIRACL", "colbertv2+hierarchical")]
    assert miracl["cost"] == "v100 " + _priced(miracl["command"], "v100")
    for system in ("bm25", "dragon_plus+rank-fusion"):  # laptop rows: the system alone, too
        row = by[("Table 3", "ConditionalQA", system)]
        assert row["laptop"]
        assert row["cost"] == (
            f"v100 {_priced(row['command'], 'v100')}; "
            f"alone on cpu:2 {_priced(row['command'], 'cpu:2', system)}"
        )
    overlap = by[("Table 5", "MSMARCO", "dapr overlap: alone")]["cost"]
    reading = "dapr run experiments/prepending_titles.yaml --set dataset=MSMARCO"
    assert overlap == f"cpu:2 {_priced(reading, 'cpu:2', '')}"  # no system: reading the data
    assert f"| {miracl['cost']} |" in matrix.matrix(EXPERIMENTS, tmp_path)
