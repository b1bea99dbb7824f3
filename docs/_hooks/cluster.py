"""The generated parts of the cluster page (docs/cluster.md), made when the site is built:

- ``<!-- cluster: sizes -->``: per dataset of the paper's Table 1 (:mod:`dapr.experiment.sizes`),
  its passages, the disk of a BM25 index and of dense embeddings (a 768-dim model, the paper's
  DRAGON+, and all-MiniLM-L6-v2), and the time of indexing and searching with the three on one
  GPU, priced by the estimator of ``dapr check --cost`` (:mod:`dapr.experiment.estimate`);
- ``<!-- cluster: recipes -->``: what ``--variant full`` of each training recipe (an experiment
  file with a ``train:`` block and a ``full`` variant) asks for, read from the file;
- ``<!-- cluster: slurm -->``: the Slurm script ``examples/slurm/dapr-grid.sbatch``.

``python docs/_hooks/cluster.py`` prints the tables.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SLURM = ROOT / "examples" / "slurm" / "dapr-grid.sbatch"
DEVICES = ("v100", "h100")
"""The GPUs the time columns are priced on (the paper's, and a current one)."""
SYSTEMS: dict[str, dict[str, Any]] = {
    "bm25": {"name": "bm25"},
    "dense-768": {"name": "dense", "args": {"preset": "dragon_plus"}},
    "minilm": {"name": "dense"},
}
"""What the sizes table prices: BM25, DRAGON+ (768 dimensions) and the default dense model."""


def _estimates(dataset: str) -> dict[str, Any]:
    """The cold estimate of :data:`SYSTEMS` on ``dataset``'s test split, per device."""
    from dapr.experiment.estimate import cold_steps, estimate
    from dapr.experiment.sizes import table1_sizes
    from dapr.experiment.validate import validate

    raw = {"name": "cluster", "dataset": dataset, "split": "test", "retrievers": SYSTEMS}
    experiment = validate(raw, ROOT / "docs" / "cluster.md")
    sizes = table1_sizes(dataset, "test")
    steps = cold_steps(experiment)
    return {device: estimate(experiment, steps, sizes, device) for device in DEVICES}


def size_row(dataset: str) -> list[str]:
    """The cells of ``dataset``'s row of the sizes table."""
    from dapr.experiment.estimate import size
    from dapr.experiment.pricing import count
    from dapr.experiment.summary import duration

    found = _estimates(dataset)
    first = found[DEVICES[0]]
    disk = {cost.system: cost.disk for cost in first.steps if cost.kind == "index"}
    cells = [dataset, count(first.sizes.passages)]
    cells += [size(disk[system]) for system in SYSTEMS]
    return cells + [duration(found[device].seconds) for device in DEVICES]


def sizes_table() -> str:
    """One row per dataset of Table 1."""
    from dapr.experiment.sizes import TABLE1, table1_sizes

    datasets = list(TABLE1)
    sizes = table1_sizes(datasets[0], "test")
    dims = {  # each model's width, as the estimator priced it: bytes per passage / 4
        system: round(cost.disk / sizes.passages / 4)
        for cost in _estimates(datasets[0])[DEVICES[0]].steps
        if cost.kind == "index" and cost.system != "bm25"
        for system in [cost.system]
    }
    head = [
        "dataset",
        "passages",
        "BM25 index",
        f"DRAGON+ embeddings ({dims['dense-768']}-dim float32)",
        f"MiniLM embeddings ({dims['minilm']}-dim float32)",
        *(f"all three, index + search, one {device.upper()}" for device in DEVICES),
    ]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    lines += ["| " + " | ".join(size_row(dataset)) + " |" for dataset in datasets]
    return "\n".join(lines) + "\n"


def recipes() -> list[dict[str, Any]]:
    """What ``--variant full`` of each training recipe of ``experiments/`` needs."""
    import yaml

    from dapr.experiment.config import load_grid
    from dapr.experiment.plan import models_needed, trained_here

    found = []
    for path in sorted((ROOT / "experiments").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text())
        if "full" not in (raw.get("variants") or {}) or not raw.get("train"):
            continue
        (experiment,) = load_grid(path, (), "full")
        per_job = experiment.resources.get("gpus_per_job", 0)
        workers = {name: spec.workers for name, spec in experiment.train.items()}
        models = [m for m in models_needed(experiment) if not trained_here(m, experiment)]
        found.append(
            {
                "file": f"experiments/{path.name}",
                "dataset": experiment.dataset,
                "gpus_per_job": per_job,
                "workers": workers,
                "gpus": max(workers.values()) * per_job,
                "models": models,
            }
        )
    return found


def recipes_table() -> str:
    lines = [
        "| recipe | dataset | GPUs per job | train entries (Ray Train workers) | the largest "
        "training job | models to fetch | fetch ahead |",
        "|---|---|---:|---|---|---|---|",
    ]
    for r in recipes():
        entries = ", ".join(f"{name} ({n})" for name, n in r["workers"].items())
        largest = f"{r['gpus']:g} GPUs" if r["gpus"] else "CPU"
        cells = [
            f"`{r['file']}`",
            r["dataset"],
            f"{r['gpus_per_job']:g}",
            entries,
            largest,
            ", ".join(f"`{m}`" for m in r["models"]),
            f"`dapr fetch {r['file']} --variant full`",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def slurm_script() -> str:
    """The script as a code block (marked illustrative: the docs test does not run it)."""
    text = SLURM.read_text()
    return f"<!-- illustrative: a Slurm batch script -->\n```bash\n{text}```\n"


MARKERS = {
    "<!-- cluster: sizes -->": sizes_table,
    "<!-- cluster: recipes -->": recipes_table,
    "<!-- cluster: slurm -->": slurm_script,
}


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """The mkdocs hook: each marker line becomes its part."""
    for marker, make in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print(sizes_table())
    print(recipes_table())
