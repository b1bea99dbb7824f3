"""The cluster page's generated parts (docs/_hooks/cluster.py): the per-dataset table is the cost
estimator's, and the training recipes' rows are read from their ``full`` variants."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_hooks"))

import cluster  # noqa: E402  (docs/_hooks/cluster.py)


def _priced(retrievers: dict, device: str):
    """ConditionalQA's test split with ``retrievers``, priced cold from Table 1 on ``device``."""
    from dapr.experiment.estimate import cold_steps, estimate
    from dapr.experiment.sizes import table1_sizes
    from dapr.experiment.validate import validate

    raw = {"name": "t", "dataset": "ConditionalQA", "retrievers": retrievers}
    experiment = validate(raw, ROOT / "t.yaml")
    sizes = table1_sizes("ConditionalQA", "test")
    return estimate(experiment, cold_steps(experiment), sizes, device)


def test_the_sizes_row_of_a_dataset_is_the_estimators():
    from dapr.experiment.estimate import size
    from dapr.experiment.pricing import count
    from dapr.experiment.sizes import table1_sizes
    from dapr.experiment.summary import duration

    passages = table1_sizes("ConditionalQA", "test").passages
    bm25 = _priced({"b": {"name": "bm25"}}, "v100")
    dragon = {d: _priced({"d": {"name": "dense", "args": {"preset": "dragon_plus"}}}, d)
              for d in ("v100", "h100")}  # fmt: skip
    index = next(c for c in dragon["v100"].steps if c.kind == "index")
    assert index.disk == passages * 768 * 4  # float32 vectors of 768 dimensions
    row = cluster.size_row("ConditionalQA")
    assert row[:4] == [
        "ConditionalQA",
        count(passages),
        size(next(c.disk for c in bm25.steps if c.kind == "index")),
        size(index.disk),
    ]
    for cell, device in zip(row[5:], ("v100", "h100")):  # the three systems together
        everything = _priced(cluster.SYSTEMS, device)
        assert cell == duration(everything.seconds)
        assert everything.seconds > dragon[device].seconds
    table = cluster.sizes_table()
    assert "| " + " | ".join(row) + " |" in table
    assert "(768-dim float32)" in table and "(384-dim float32)" in table


def test_each_training_recipe_row_names_the_gpus_of_its_full_variant():
    from dapr.experiment.config import load_grid

    table = cluster.recipes_table()
    for name, gpus in (
        ("rocketqa_ablation", 8),
        ("dureader_baselines", 4),
        ("t2ranking_baselines", 4),
    ):
        (full,) = load_grid(ROOT / "experiments" / f"{name}.yaml", (), "full")
        most = max(spec.workers for spec in full.train.values())
        assert most * full.resources["gpus_per_job"] == gpus
        row = next(line for line in table.splitlines() if f"`experiments/{name}.yaml`" in line)
        assert f"| {gpus} GPUs |" in row and full.dataset in row
        assert f"`dapr fetch experiments/{name}.yaml --variant full`" in row


def test_the_page_asks_for_every_part_and_shows_the_slurm_script():
    page = (ROOT / "docs" / "cluster.md").read_text()
    for marker in cluster.MARKERS:
        assert marker in page
    shown = cluster.slurm_script()
    assert shown.startswith("<!-- illustrative: ")
    assert "--ray-address auto" in shown and "#SBATCH --requeue" in shown
