"""RocketQA's denoised hard negatives: a retriever's best unjudged passages are scored by a
cross-encoder, and only those it finds irrelevant (a probability below ``below``, RocketQA: 0.1)
are kept as negatives; the others are likely unlabelled positives. What was removed at each rank
is counted (RocketQA's Figure 5)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dapr.data import Qrels, Queries, Run
from dapr.errors import DaprError

Scorer = Callable[[Sequence[tuple[str, str]]], Sequence[float]]
"""Relevance probabilities (in [0, 1]) of (query text, passage text) pairs: a trained
cross-encoder's calibrated ones when it has a calibration (see
:mod:`dapr.training.calibration`), which a listwise loss's scores need."""


@dataclass(frozen=True)
class Denoised:
    """The kept candidates as a run, and per rank (1-based) how many were scored and removed."""

    run: Run
    scored: tuple[int, ...]
    removed: tuple[int, ...]


def check_threshold(below: float) -> None:
    if isinstance(below, bool) or not isinstance(below, (int, float)) or not 0 < below <= 1:
        raise DaprError(
            "training: denoise.below must be a probability in (0, 1] (RocketQA: 0.1), "
            f"got {below!r}"
        )


def denoise(
    run: Run,
    queries: Queries,
    qrels: Qrels,
    texts: Mapping[str, str],
    score: Scorer,
    below: float = 0.1,
    depth: int = 50,
) -> Denoised:
    """Of each query's top ``depth`` unjudged passages in ``run``, those ``score`` puts strictly
    below ``below`` (a passage scored exactly at it is removed), in their run order."""
    check_threshold(below)
    ranked = run.to_dict()
    candidates = {
        qid: [p for p in ranked.get(qid, {}) if p not in qrels.get(qid, {}) and p in texts][:depth]
        for qid in queries
    }
    pairs = [(queries[q], texts[p]) for q, found in candidates.items() for p in found]
    probabilities = np.asarray(score(pairs) if pairs else [], dtype=np.float64)
    if len(probabilities) != len(pairs) or not np.all((probabilities >= 0) & (probabilities <= 1)):
        raise DaprError("training: the denoising cross-encoder must give a probability per pair")
    scored = np.zeros(depth, dtype=np.int64)
    removed = np.zeros(depth, dtype=np.int64)
    kept: dict[str, dict[str, float]] = {}
    at = 0
    for qid, found in candidates.items():
        kept[qid] = {}
        for rank, passage in enumerate(found):
            probability = probabilities[at]
            at += 1
            scored[rank] += 1
            if probability < below:
                kept[qid][passage] = float(len(found) - rank)  # keeps the run's order
            else:
                removed[rank] += 1
    return Denoised(Run.from_dict(kept), tuple(scored.tolist()), tuple(removed.tolist()))
