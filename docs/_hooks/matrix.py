"""The reproduction matrix (docs/reproduction-matrix.md), generated when the site is built: one
row per (table, dataset, system) of the paper's rows that the experiment files' ``published:``
blocks carry, with the command that runs it, what it needs, what the command costs (dapr's
estimator, as ``dapr check --cost`` prices it), and dapr's value where a results folder copied
under ``docs/results/<experiment>/<dataset>/`` (its ``metrics.json`` and ``manifest.json``, as
``dapr run`` wrote them; ``dapr results publish`` copies them) holds it.

A page asks for it with the line ``<!-- matrix -->``; ``python docs/_hooks/matrix.py`` prints it.
"""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path
from typing import Any

import yaml

MARKER = "<!-- matrix -->"
ROOT = Path(__file__).resolve().parents[2]

COST_DEVICES = ("v100", "cpu:2")
"""Where a row's command is priced: one NVIDIA V100, the paper's GPU (it ran its grid on four),
and, for the rows a laptop can do, a 2-core CPU."""
LAPTOP_PASSAGES = {"lexical": 3_000_000, "neural": 100_000}
"""The largest corpus (passages) a 2-core laptop takes for a BM25-only row, and a neural one."""


def _datasets(raw: dict) -> list[str]:
    given = raw.get("dataset")
    return list(given) if isinstance(given, list) else [given]


def _models(raw: dict, system: str, seen: set[str] | None = None) -> list[str]:
    """The checkpoints (presets or models) a system needs, through the systems it fuses."""
    seen = set() if seen is None else seen
    if system in seen:
        return []
    seen.add(system)
    base = system.removesuffix("@maxp")
    spec = {**raw.get("retrievers", {}), **raw.get("fusion", {})}.get(base, {})
    found = []
    args = spec.get("args", {})
    if "preset" in args or "model" in args:
        found.append(args.get("preset") or args["model"])
    context = spec.get("contextualizer")
    if isinstance(context, dict) and context.get("name") == "precomputed":
        found.append(f"the published {context['args']['kind']}")
    for key in ("document", "passage", "first_stage"):
        if key in spec:
            found += _models(raw, spec[key], seen)
    return list(dict.fromkeys(found))


def _table1(dataset: str) -> tuple[int, float | None] | None:
    """Documents and passages per document of the paper's Table 1 (NQ-hard: NQ's corpus)."""
    from dapr.experiment.sizes import TABLE1, corpus_of

    found = TABLE1.get(corpus_of(dataset))
    return None if found is None else found[:2]


def _size(dataset: str) -> str:
    found = _table1(dataset)
    if found is None:
        return dataset
    docs, per_doc = found
    passages = f", about {docs * per_doc:,.0f} passages" if per_doc else ""
    return f"{dataset} ({docs:,} documents{passages})"


def _laptop(dataset: str, models: list[str]) -> bool:
    docs, per_doc = _table1(dataset) or (0, None)
    passages = docs * (per_doc or 1)
    return passages <= LAPTOP_PASSAGES["neural" if models else "lexical"]


def _alone(experiment: Any, system: str) -> set[str]:
    """The systems a row's system runs on: itself and those it fuses or reranks."""
    base = system.removesuffix("@maxp")
    fusion, spec = experiment.fusion.get(base), experiment.retrievers.get(base)
    parts = (
        [fusion.document, fusion.passage, *fusion.passages]
        if fusion is not None
        else [spec.first_stage if spec is not None else None]
    )
    return {base}.union(*(_alone(experiment, part) for part in parts if part))


@cache
def _experiment(file: Path, overrides: tuple[str, ...]) -> tuple[Any, Any] | str:
    """The experiment ``dapr run file --set overrides`` runs and its Table 1 sizes, or why
    it is not priced."""
    from dapr.errors import DaprError
    from dapr.experiment.config import raw_grid
    from dapr.experiment.sizes import table1_sizes
    from dapr.experiment.validate import validate

    (raw,) = raw_grid(file, overrides)
    experiment = validate(raw, file)
    try:
        return experiment, table1_sizes(experiment.dataset, experiment.split)
    except DaprError:  # the page prices without data: by the paper's Table 1 alone
        return f"not estimated: the paper's Table 1 has no {experiment.dataset}"


def _cost(file: Path, overrides: tuple[str, ...], system: str, laptop: bool) -> str:
    """What a row costs by dapr's estimator (``dapr check --cost``) with the paper's Table 1
    sizes, time and peak memory: its command (``dapr run`` of ``file`` with ``--set``
    ``overrides``) on the paper's GPU, and for a ``laptop`` row its system alone on the laptop;
    a Table 5 row (no ``system``: ``dapr overlap``, which reads the dataset) on the laptop."""
    from dapr.experiment import estimate
    from dapr.experiment.summary import duration

    found = _experiment(file, overrides)
    if isinstance(found, str):
        return found
    experiment, sizes = found
    steps = estimate.cold_steps(experiment)
    gpu, cpu = COST_DEVICES
    priced = {cpu: []} if not system else {gpu: steps}  # []: the start, reading the dataset
    if system and laptop:
        mine = _alone(experiment, system)
        priced[f"alone on {cpu}"] = [step for step in steps if step.system in mine]
    cells = []
    for where, chosen in priced.items():
        cost = estimate.estimate(experiment, chosen, sizes, where.split()[-1])
        cells.append(f"{where} {duration(cost.seconds)}, {estimate.size(cost.memory)}")
    return "; ".join(cells)


def _result(results: Path, name: str, dataset: str, system: str, metric: str) -> str:
    """dapr's value with date, hardware and commit, or "not run yet"."""
    folder = results / name / dataset
    metrics_file, manifest_file = folder / "metrics.json", folder / "manifest.json"
    if not metrics_file.is_file():
        return "not run yet"
    mean = json.loads(metrics_file.read_text())["systems"].get(system, {}).get("mean", {})
    if metric not in mean:
        return "not run yet"
    about = json.loads(manifest_file.read_text()) if manifest_file.is_file() else {}
    hardware = about.get("hardware", {})
    gpus = ", ".join(hardware.get("gpus") or []) or f"{hardware.get('cpus', '?')} CPUs"
    commit = (about.get("git") or {}).get("revision", "?")
    return f"{mean[metric]:.4f} ({str(about.get('finished', '?'))[:10]}, {gpus}, {commit[:7]})"


def rows(experiments: Path, results: Path) -> list[dict[str, Any]]:
    """One row per (table, dataset, system) of every experiment file's ``published.rows``."""
    found = []
    for file in sorted(experiments.glob("*.yaml")):
        raw = yaml.safe_load(file.read_text())
        for row in (raw.get("published") or {}).get("rows", []):
            for dataset, value in row["values"].items():
                overrides = (f"dataset={dataset}",)
                if "overlap" in row:
                    command, models = f"dapr overlap {dataset} --split test", []
                    ours = "not run yet"
                elif dataset in _datasets(raw):
                    command = f"dapr run experiments/{file.name} --set {overrides[0]}"
                    models = _models(raw, row["system"])
                    name = raw.get("name", file.stem)
                    ours = _result(results, name, dataset, row["system"], row["metric"])
                else:
                    continue  # a stand-in on another dataset (wiki-sample), not the paper's row
                laptop = _laptop(dataset, models)
                found.append(
                    {
                        "table": row["table"],
                        "row": row["row"],
                        "dataset": dataset,
                        "system": row.get("system", f"dapr overlap: {row.get('overlap')}"),
                        "paper": value,
                        "command": command,
                        "needs": _size(dataset) + "".join(f"; {m}" for m in models),
                        "laptop": laptop,
                        "cost": _cost(file, overrides, row.get("system", ""), laptop),
                        "dapr": ours,
                    }
                )
    return sorted(found, key=lambda r: (r["table"], r["dataset"]))


def matrix(
    experiments: Path = ROOT / "experiments", results: Path = ROOT / "docs" / "results"
) -> str:
    """The matrix as a markdown table."""
    lines = [
        "| table | row | dataset | system | paper | command | needs | cost | laptop | dapr |",
        "|---|---|---|---|---:|---|---|---|---|---|",
    ]
    for r in rows(experiments, results):
        cells = [
            r["table"],
            r["row"],
            r["dataset"],
            f"`{r['system']}`",
            f"{r['paper']:.3f}",
            f"`{r['command']}`",
            r["needs"],
            r["cost"],
            "✓" if r["laptop"] else "",
            r["dapr"],
        ]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """The mkdocs hook: the marker line becomes the matrix."""
    return markdown.replace(MARKER, matrix()) if MARKER in markdown else markdown


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print(matrix())
