"""What the shipped training recipes rest on: a paper's numbers printed beside ours
(``published:``), an experiment file's named variants, augmentation queries from a file or
another dataset, the training table, and the recipe files themselves."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tiny_models import trained_card

from dapr.cli import main
from dapr.datasets import load_dataset
from dapr.errors import DataError
from dapr.experiment.config import load, load_grid
from dapr.io.rows import read_queries

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
RECIPES = ["rocketqa_ablation", "dureader_baselines", "t2ranking_baselines"]

PUBLISHED = """
name: published
dataset: {dataset}
metrics: [MRR@10, nDCG@10]
retrievers:
  bm25: {{name: bm25}}
  bm25-document: {{name: bm25, level: document}}
published:
  source: A paper, Table 1
  values:
    bm25: {{RR@10: 0.5}}
"""


def test_published_numbers_print_beside_ours_with_the_query_counts(wiki_slice, tmp_path, capsys):
    dataset, split = wiki_slice
    file = tmp_path / "published.yaml"
    text = PUBLISHED.format(dataset=dataset)
    file.write_text(text)
    assert main(["run", str(file), "--out", str(tmp_path / "out")]) == 0
    table = (tmp_path / "out" / "summary.md").read_text()
    assert table in capsys.readouterr().out
    lines = table.splitlines()
    assert lines[0] == "| system | level | queries | MRR@10 | nDCG@10 | MRR@10 (published) |"
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    ours = metrics["systems"]["bm25"]["mean"]
    assert lines[2] == (
        f"| bm25 | passage | {len(split.qrels)} | {ours['MRR@10']:.4f} | {ours['nDCG@10']:.4f} "
        "| 0.5000 |"
    )
    assert lines[3].startswith("| bm25-document | document | ") and lines[3].endswith("|  |")
    assert lines[-1] == "published: A paper, Table 1"
    csv = (tmp_path / "out" / "summary.csv").read_text().splitlines()
    assert csv[0] == "system,level,queries,MRR@10,nDCG@10,MRR@10 (published)"
    assert csv[1].endswith(",0.500000") and csv[2].endswith(",")
    for change, message in [
        (("bm25: {RR@10", "bm42: {RR@10"), "published.values.bm42: not a system"),
        (("{RR@10: 0.5}", "{R@100: 0.5}"), "published.values.bm25.R@100: not a metric"),
        (("{RR@10: 0.5}", "{RR@10: 32.39}"), "must be a fraction in [0, 1]"),
        (("  source: A paper, Table 1\n", ""), "missing key 'source'"),
    ]:
        assert change[0] in text
        file.write_text(text.replace(*change))
        assert main(["run", str(file), "--out", str(tmp_path / "bad")]) == 2
        error = capsys.readouterr().err
        assert message in error and error.count("\n") == 1


VARIANTS = """
name: varied
dataset: {dataset}
metrics: [nDCG@10]
retrievers:
  bm25: {{name: bm25}}
variants:
  small: {{metrics: [R@10], retrievers.bm25.args: {{k1: 0.5}}}}
"""


def test_a_variant_applies_its_overrides_before_set_into_a_folder_of_its_own(
    wiki_slice, tmp_path, capsys, monkeypatch
):
    dataset, _ = wiki_slice
    file = tmp_path / "varied.yaml"
    file.write_text(VARIANTS.format(dataset=dataset))
    assert load(file).metrics == ("nDCG@10",)
    small = load(file, variant="small")
    assert small.metrics == ("R@10",) and small.retrievers["bm25"].args == {"k1": 0.5}
    assert load(file, ["metrics=[P@5]"], "small").metrics == ("P@5",)  # --set comes last
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(file), "--variant", "small"]) == 0
    metrics = json.loads((tmp_path / "results" / "varied@small" / "metrics.json").read_text())
    assert set(metrics["systems"]["bm25"]["mean"]) == {"R@10"}
    capsys.readouterr()
    assert main(["run", str(file), "--variant", "large"]) == 2
    assert "--variant large: no such variant; the file has: small" in capsys.readouterr().err
    file.write_text(VARIANTS.format(dataset=dataset).split("variants:")[0] + "variants: [small]\n")
    assert main(["run", str(file), "--variant", "small"]) == 2
    assert "variants: give a mapping of names to overrides" in capsys.readouterr().err


def test_queries_files_read_as_tsv_or_json_lines_and_bad_lines_are_named(tmp_path):
    tsv = tmp_path / "queries.tsv"
    tsv.write_text("q1\twhat is alpha\n\nq2\t  beta?  \n")
    assert read_queries(tsv) == {"q1": "what is alpha", "q2": "beta?"}
    jsonl = tmp_path / "queries.jsonl"
    jsonl.write_text('{"_id": "q1", "text": "alpha"}\n{"id": "q2", "text": "beta"}\n')
    assert read_queries(jsonl) == {"q1": "alpha", "q2": "beta"}
    tsv.write_text("q1\talpha\nq2 has no tab\n")
    with pytest.raises(DataError, match=r"queries.tsv:2: expected query_id<TAB>text"):
        read_queries(tsv)
    jsonl.write_text('{"_id": "q1"}\n')
    with pytest.raises(DataError, match=r"queries.jsonl:1: missing field 'text'"):
        read_queries(jsonl)


AUGMENTED = """
name: tiny_augmented_sources
dataset: wiki-sample
dataset_args: {{train_articles: 0.3}}
train:
  tiny-ce:
    kind: cross
    model: {model}
    negatives: {{mined: bm25, count: 2}}
    args: {{max_steps: 2, batch_size: 8, save_steps: 2}}
  from-elsewhere:
    model: {model}
    augment:
      {source}
      retriever: bm25
      model: trained/tiny-ce
      depth: 3
      positive_above: 0.0
      negative_below: 0.0
    args: {{max_steps: 2, batch_size: 8}}
retrievers:
  bm25: {{name: bm25}}
"""


def test_augmentation_queries_come_from_a_file_or_another_dataset(tiny_encoder, tmp_path, capsys):
    queries = tmp_path / "unlabelled.tsv"
    queries.write_text("u1\tAnarchism history\nu2\tAutism causes\nu3\tAlbedo of snow\n")
    file = tmp_path / "augmented.yaml"
    dev = load_dataset("wiki-sample").split("dev").queries  # without train_articles: all of dev
    for source, expected in [
        (f"queries: {queries}", 3),
        ("dataset: wiki-sample\n      split: dev", len(dev)),
    ]:
        file.write_text(AUGMENTED.format(model=tiny_encoder, source=source))
        assert main(["train", str(file)]) == 0
        counts = trained_card("from-elsewhere")["augmentation"]
        assert counts["queries"] == expected and 0 < counts["examples"] <= 3 * expected
        log = capsys.readouterr().out  # the pseudo-labelling is a step of its own in the log
        assert f"label from-elsewhere: started ({expected:,} queries)" in log
        assert re.search(
            rf"label from-elsewhere: computed in [\d.]+ s, {counts['examples']:,} examples", log
        )
    # what dapr run reports: the training table, and the manifest's entry for the model
    assert main(["run", str(file), "--out", str(tmp_path / "out")]) == 0
    table = (tmp_path / "out" / "training.md").read_text()
    assert table in capsys.readouterr().out
    row = next(line for line in table.splitlines() if "trained/from-elsewhere" in line)
    assert f"{counts['examples']:,} examples from {counts['with_positive']:,} of " in row
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    entry = manifest["trained"]["from-elsewhere"]
    assert entry["augmentation"] == counts and "training.md" in entry["files"]
    assert all((tmp_path / "out" / name).is_file() for name in entry["files"])
    empty = tmp_path / "empty.tsv"
    empty.write_text("\n")
    for source, message in [
        (f"queries: {empty}", f"train.from-elsewhere.augment: the file {empty} has no queries"),
        (f"queries: {queries}\n      split: dev", "give the unlabelled queries as split"),
        (f"queries: {tmp_path / 'nowhere.tsv'}", "is not a file; give a queries file"),
        ("dataset: wiki-sample", "augment.dataset: name the split of its queries"),
    ]:
        file.write_text(AUGMENTED.format(model=tiny_encoder, source=source))
        assert main(["train", str(file)]) == 2
        error = capsys.readouterr().err
        assert message in error and error.count("\n") == 1


@pytest.mark.parametrize("name", RECIPES)
def test_the_recipe_files_run_here_and_name_the_papers_setup_in_their_full_variant(name):
    path = EXPERIMENTS / f"{name}.yaml"
    (laptop,) = load_grid(path)
    (full,) = load_grid(path, variant="full")
    assert laptop.dataset == "wiki-sample" and laptop.train
    assert full.dataset != "wiki-sample"
    assert all(spec.model != laptop.train[n].model for n, spec in full.train.items())
    reranked = [s for s in laptop.retrievers.values() if s.first_stage]
    assert all(s.args["top_k"] == 50 for s in reranked)


@pytest.mark.parametrize("name", ["dureader_baselines", "t2ranking_baselines", "rocketqa_ablation"])
def test_laptop_cross_encoders_learn_a_ranking_from_their_own_dataset(name):
    """At laptop size and on COVID-QA the cross-encoders take the loss that ranks from ~1,000
    questions (multiple negatives) and only the dataset's own questions; the full variant keeps
    the paper's binary cross-entropy. RocketQA's, whose scores meet the 0.1 / 0.9 thresholds,
    is calibrated where its loss is listwise."""
    path = EXPERIMENTS / f"{name}.yaml"
    thresholds = name == "rocketqa_ablation"
    for variant in (None, "covid-qa"):
        (experiment,) = load_grid(path, variant=variant)
        crosses = [s for s in experiment.train.values() if s.kind == "cross"]
        assert crosses and all(s.loss == "mnrl" for s in crosses)
        assert all(s.calibration == ("platt" if thresholds else "none") for s in crosses)
        assert all(
            source.dataset is None for s in experiment.train.values() for source in s.sources
        ), "no second dataset"
    (full,) = load_grid(path, variant="full")
    crosses = [s for s in full.train.values() if s.kind == "cross"]
    assert {s.loss for s in crosses} == {"bce"} and {s.calibration for s in crosses} == {"none"}


def test_the_recipes_carry_the_papers_thresholds_metrics_and_numbers():
    rocketqa = load_grid(EXPERIMENTS / "rocketqa_ablation.yaml")[0]
    published = rocketqa.published.values
    assert [published[s]["MRR@10"] for s in published] == [
        0.3239, 0.3332, 0.2603, 0.3638, 0.3702
    ]  # fmt: skip
    denoise = rocketqa.train["denoised"].negatives["denoise"]
    assert denoise["below"] == 0.1
    augment = rocketqa.train["augmented"].augment
    assert (augment["positive_above"], augment["negative_below"]) == (0.9, 0.1)
    assert rocketqa.train["cross-batch"].loss == "cached_mnrl"
    assert load_grid(EXPERIMENTS / "dureader_baselines.yaml")[0].metrics == (
        "MRR@10", "R@1", "R@50"
    )  # fmt: skip
    t2 = load_grid(EXPERIMENTS / "t2ranking_baselines.yaml", variant="full")[0]
    assert t2.metrics == ("MRR@10", "R@50", "R@1000", "nDCG@10")
    assert {spec.min_grade for spec in t2.train.values()} == {2}


def test_a_cross_encoder_that_leaves_nothing_is_warned_about(capsys):
    from dapr.experiment.train_cross import warn_if_nothing

    warn_if_nothing("de", {"below": 0.1, "scored": [3, 2], "removed": [1, 2]}, None)
    assert capsys.readouterr().err == ""  # some negatives left
    warn_if_nothing("de", {"below": 0.1, "scored": [3, 2], "removed": [3, 2]}, {"examples": 0})
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "dapr: warning: train.de: the cross-encoder scored every mined candidate at or above "
        "0.1, so no negative is left; is it calibrated (calibration: platt on its train: "
        "entry)?",
        "dapr: warning: train.de: augmentation labelled no example (no query has both a "
        "pseudo-positive and a pseudo-negative)",
    ]
