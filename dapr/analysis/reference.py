"""Output folders of the DAPR reference code (UKPLab/acl2024-dapr) read as dapr results, so that
``dapr report`` puts the reference's numbers beside dapr's in one table.

The reference writes one folder per run,
``exps/<experiment>/<retriever>/data_dir_data/<Dataset>/split_<split>/.../git_hash_<sha>/``
(``data_dir_data/coref/<Dataset>`` for coreference), holding:

- ``metrics.json``: ``{"ndcg_cut_10": .., "recall_100": .., "recip_rank_10": ..}``, means only
  (``q2d_metrics.json`` for document retrieval);
- for fusion and hierarchical runs, ``metrics-pweight_<w>.json`` per passage weight ``w``, and
  ``metrics.json`` as a copy of the reported weight's (``report_passage_weight_<w>`` in the path);
  dapr's ``alpha`` is ``1 - w``;
- TREC runs ``ranking_results.txt``, ``ranking_results-pweight_<w>.txt``,
  ``doc_ranking_results.txt``.

A folder with a ``metrics.json`` gives one system (the reported weight); one without gives a
system per weight. Means are read as written; with a ``score`` function the run files are
evaluated instead, per query, so that significance tests can compare them with dapr's systems.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dapr.analysis.table import Result, SystemScores
from dapr.errors import DaprError
from dapr.io.rows import json_problem

APPROACHES = {
    "passage_only": "passage only",
    "prepending_titles": "+ title",
    "keyphrases": "+ keyphrases",
    "coref": "+ coref",
    "bm25_doc_passage_fusion": "rank fusion (convex)",
    "bm25_doc_passage_hierarchy": "hierarchical",
    "jinav2_doc_passage_fusion": "rank fusion (convex, jinav2 documents)",
    "bm25_doc_retrieval": "document",
    "doc_retrieval_with_titles": "document (titles)",
}
"""The reference's experiment folders, as dapr's tables name the approach."""

DOCUMENT_LEVEL = frozenset({"bm25_doc_retrieval", "doc_retrieval_with_titles"})
METRICS = {"ndcg_cut_10": "nDCG@10", "recall_100": "R@100", "recip_rank_10": "MRR@10"}
"""The reference's metric keys and dapr's names for them."""

Scorer = Callable[[Path, str, str, str], tuple[dict[str, float], dict[str, dict[str, float]]]]
"""``score(run_file, dataset, split, level)``: the run's means and per-query values by metric."""

_FILES = re.compile(r"(q2d_)?metrics(-pweight_(?P<w>[0-9.]+))?\.json")


@dataclass(frozen=True)
class RunFolder:
    """Where one reference run was written, and what its path says about it."""

    path: Path
    experiment: str
    retriever: str
    dataset: str
    split: str

    @property
    def level(self) -> str:
        return "document" if self.experiment in DOCUMENT_LEVEL else "passage"


def is_reference(path: Path) -> bool:
    """Whether ``path`` is (or holds) output of the reference code rather than of ``dapr run``."""
    if "data_dir_data" in path.parts:
        return True
    return path.is_dir() and next(path.glob("**/data_dir_data"), None) is not None


def reference_results(path: Path, score: Scorer | None = None) -> list[Result]:
    """Every run under ``path``, one :class:`Result` per dataset and split."""
    folders = sorted(
        {file.parent for file in path.rglob("*metrics*.json") if _FILES.fullmatch(file.name)}
    )
    if not folders and _FILES.fullmatch(path.name):
        folders = [path.parent]
    runs = [run for folder in folders if (run := _run_folder(folder)) is not None]
    if not runs:
        raise DaprError(
            f"{path}: no reference results (exps/<experiment>/<retriever>/data_dir_data/"
            "<Dataset>/split_<split>/.../metrics.json) here; give a folder the reference wrote"
        )
    grouped: dict[tuple[str, str], dict[str, SystemScores]] = {}
    for run in runs:
        for system in _systems(run, score):
            grouped.setdefault((run.dataset, run.split), {})[system.name] = system
    return [
        Result(path=path, dataset=dataset, split=split, fingerprint="", systems=systems)
        for (dataset, split), systems in grouped.items()
    ]


def _run_folder(folder: Path) -> RunFolder | None:
    parts = folder.parts
    if "data_dir_data" not in parts:
        return None
    at = parts.index("data_dir_data")
    dataset = parts[at + 1] if at + 1 < len(parts) else ""
    if dataset == "coref" and at + 2 < len(parts):
        dataset = parts[at + 2]
    split = next((p.removeprefix("split_") for p in parts[at:] if p.startswith("split_")), "")
    if at >= 1 and parts[at - 1] in APPROACHES:  # bm25_doc_retrieval has no retriever folder
        experiment, retriever = parts[at - 1], "bm25"
    elif at >= 2:
        experiment, retriever = parts[at - 2], parts[at - 1]
    else:
        return None
    return RunFolder(folder, experiment, retriever, dataset, split)


def _systems(run: RunFolder, score: Scorer | None) -> list[SystemScores]:
    """The systems of one folder: the reported one, or one per passage weight."""
    prefix = "q2d_" if run.level == "document" else ""
    reported = run.path / f"{prefix}metrics.json"
    weighted = sorted(run.path.glob("metrics-pweight_*.json"))
    if reported.is_file():
        chosen = [(reported, _reported_weight(run.path))]
    else:
        chosen = [(f, float(m["w"])) for f in weighted if (m := _FILES.fullmatch(f.name))]
    return [_system(run, file, weight, score) for file, weight in chosen]


def _reported_weight(folder: Path) -> float | None:
    for part in folder.parts:
        if part.startswith("report_passage_weight_"):
            try:
                return float(part.removeprefix("report_passage_weight_"))
            except ValueError:
                return None
    return None


def _system(run: RunFolder, file: Path, weight: float | None, score: Scorer | None) -> SystemScores:
    alpha = None if weight is None else round(1 - weight, 10)
    name = f"reference:{run.experiment}/{run.retriever}"
    retriever = f"{run.retriever} (reference)"
    if alpha is not None:
        name += f"@alpha={alpha:g}"
        retriever = f"{run.retriever} (reference, alpha={alpha:g})"
    approach = APPROACHES.get(run.experiment, run.experiment)
    if score is None:
        mean = _means(file)
        per_query: dict[str, dict[str, float]] = {metric: {} for metric in mean}
    else:
        mean, per_query = score(_run_file(run, weight), run.dataset, run.split, run.level)
    return SystemScores(name, run.level, approach, retriever, mean, per_query)


def _run_file(run: RunFolder, weight: float | None) -> Path:
    if run.level == "document":
        names: Sequence[str] = ("doc_ranking_results.txt",)
    elif weight is not None:
        names = (f"ranking_results-pweight_{weight}.txt",)
    else:
        names = ("ranking_results.txt",)
    for name in names:
        if (run.path / name).is_file():
            return run.path / name
    raise DaprError(f"{run.path}: no run file {names[0]} to evaluate; drop --evaluate-runs")


def _means(file: Path) -> dict[str, float]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, RecursionError) as e:
        raise DaprError(
            f"{file}: not a readable metrics file of the reference code ({json_problem(e)})"
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise DaprError(
            f"{file}: not a readable metrics file of the reference code ({e})"
        ) from None
    if not isinstance(data, Mapping):
        raise DaprError(f"{file}: expected a JSON object of metrics (ndcg_cut_10, ...)")
    means = {}
    for key, name in METRICS.items():
        value = data.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            means[name] = float(value)
    if not means:
        raise DaprError(
            f"{file}: none of {', '.join(METRICS)} in it; is it a reference metrics file?"
        )
    return means
