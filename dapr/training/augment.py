"""RocketQA's data augmentation: queries without judgements get pseudo-labels from a
cross-encoder over a retriever's top passages. A passage it scores above ``positive_above``
(RocketQA: 0.9) becomes a positive, below ``negative_below`` (0.1) a negative; a score exactly at
a threshold is neither, and a query with no pseudo-positive gives no example. The scores are
probabilities: calibrated ones when the cross-encoder has a calibration (see
:data:`dapr.training.denoise.Scorer`)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from dapr.data import Queries, Run
from dapr.errors import DaprError
from dapr.training.denoise import Scorer
from dapr.training.examples import Example


def check_thresholds(positive_above: float, negative_below: float) -> None:
    for name, value in (("positive_above", positive_above), ("negative_below", negative_below)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise DaprError(
                f"training: augment.{name} must be a probability in [0, 1], got {value!r}"
            )
    if positive_above < negative_below:
        raise DaprError(
            f"training: augment.positive_above ({positive_above}) is below negative_below "
            f"({negative_below}); a positive must score higher than a negative (RocketQA: 0.9, 0.1)"
        )


def pseudo_labelled(
    run: Run,
    queries: Queries,
    texts: Mapping[str, str],
    score: Scorer,
    depth: int = 20,
    positive_above: float = 0.9,
    negative_below: float = 0.1,
    negatives: int = 1,
) -> tuple[list[Example], dict[str, int]]:
    """An example per pseudo-positive, with ``negatives`` pseudo-negatives of its query (best
    ranked first; a positive without that many is left out), and the counts to report."""
    check_thresholds(positive_above, negative_below)
    if not queries:
        raise DaprError("training: the augmentation source has no queries; give one that has")
    ranked = run.to_dict()
    candidates = {q: [p for p in ranked.get(q, {}) if p in texts][:depth] for q in queries}
    pairs = [(queries[q], texts[p]) for q, found in candidates.items() for p in found]
    probabilities = iter(np.asarray(score(pairs) if pairs else [], dtype=np.float64).tolist())
    rows: list[Example] = []
    counts = {"queries": len(queries), "with_positive": 0, "positives": 0, "negatives": 0}
    for qid, found in candidates.items():
        labelled = [(p, next(probabilities)) for p in found]
        positive = [p for p, s in labelled if s > positive_above]
        negative = [p for p, s in labelled if s < negative_below]
        counts["positives"] += len(positive)
        counts["negatives"] += len(negative)
        counts["with_positive"] += bool(positive)
        if len(negative) < negatives:
            continue
        chosen = tuple(texts[p] for p in negative[:negatives])
        rows += [Example(queries[qid], texts[p], chosen) for p in positive]
    counts["examples"] = len(rows)
    return rows, counts
