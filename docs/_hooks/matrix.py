"""The reproduction matrix (docs/reproduction-matrix.md), generated when the site is built: one
row per (table, dataset, system) of the paper's rows that the experiment files' ``published:``
blocks carry, with the command that runs it, what it needs, and dapr's value where a results
folder copied under ``docs/results/<experiment>/<dataset>/`` (its ``metrics.json`` and
``manifest.json``, as ``dapr run`` wrote them) holds it.

A page asks for it with the line ``<!-- matrix -->``; ``python docs/_hooks/matrix.py`` prints it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

MARKER = "<!-- matrix -->"
ROOT = Path(__file__).resolve().parents[2]

TABLE1 = {
    "MSMARCO": (1_359_163, None),
    "NaturalQuestions": (108_626, 24.7),
    "NQ-hard": (108_626, 24.7),
    "MIRACL": (5_758_285, 5.7),
    "Genomics": (162_259, 77.9),
    "ConditionalQA": (652, 106.1),
}
"""The paper's Table 1: documents and passages per document (NQ-hard searches NQ's corpus)."""
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


def _size(dataset: str) -> str:
    if dataset not in TABLE1:
        return dataset
    docs, per_doc = TABLE1[dataset]
    passages = f", about {docs * per_doc:,.0f} passages" if per_doc else ""
    return f"{dataset} ({docs:,} documents{passages})"


def _laptop(dataset: str, models: list[str]) -> bool:
    docs, per_doc = TABLE1.get(dataset, (0, None))
    passages = docs * (per_doc or 1)
    return passages <= LAPTOP_PASSAGES["neural" if models else "lexical"]


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
                if "overlap" in row:
                    command, models = f"dapr overlap {dataset} --split test", []
                    ours = "not run yet"
                elif dataset in _datasets(raw):
                    command = f"dapr run experiments/{file.name} --set dataset={dataset}"
                    models = _models(raw, row["system"])
                    name = raw.get("name", file.stem)
                    ours = _result(results, name, dataset, row["system"], row["metric"])
                else:
                    continue  # a stand-in on another dataset (wiki-sample), not the paper's row
                found.append(
                    {
                        "table": row["table"],
                        "row": row["row"],
                        "dataset": dataset,
                        "system": row.get("system", f"dapr overlap: {row.get('overlap')}"),
                        "paper": value,
                        "command": command,
                        "needs": _size(dataset) + "".join(f"; {m}" for m in models),
                        "laptop": _laptop(dataset, models),
                        "dapr": ours,
                    }
                )
    return sorted(found, key=lambda r: (r["table"], r["dataset"]))


def matrix(
    experiments: Path = ROOT / "experiments", results: Path = ROOT / "docs" / "results"
) -> str:
    """The matrix as a markdown table."""
    lines = [
        "| table | row | dataset | system | paper | command | needs | laptop | dapr |",
        "|---|---|---|---|---:|---|---|---|---|",
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
