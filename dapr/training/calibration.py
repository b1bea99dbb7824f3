"""Relevance probabilities from a cross-encoder's raw scores, fitted on held-out questions.

RocketQA's denoising and augmentation compare a cross-encoder's scores with 0.1 and 0.9 as
probabilities. Binary cross-entropy trains scores that are close to probabilities; the listwise
losses (``listnet``, ``mnrl``) train scores whose softmax over a query's candidates matters, so
their offset and scale are arbitrary. A calibration maps the raw score (the logit) ``s`` to
``sigmoid(slope * s + intercept)``, fitted by maximum likelihood on the (question, passage)
labels of training questions kept out of the cross-encoder's training:

- ``platt``: Platt scaling, slope and intercept (with Platt's smoothed targets, which keep the
  fit finite when the held-out scores separate the labels);
- ``temperature``: the slope alone (intercept 0), a temperature of ``1 / slope``: it can sharpen
  or soften scores but not move them, so it suits BCE-trained scores only.

The slope is kept at 0 or above (a model that ranks worse than chance on the held-out questions
gets the base rate everywhere), so the map never reverses an order. Reliability is the expected
calibration error (:func:`expected_calibration_error`) over equal-width bins.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dapr.errors import DaprError
from dapr.training.examples import Example

METHODS = ("none", "platt", "temperature")
"""``none``: the model's own sigmoid; ``platt``: slope and intercept; ``temperature``: slope."""
FILE = "calibration.json"
"""The calibration beside a model's weights (in its ``model/`` folder)."""
BINS = 10
"""Equal-width probability bins of the expected calibration error."""
WEIGHTS = ("*.safetensors", "*.bin")
"""The files whose digests a calibration records: the weights it was fitted for."""


@dataclass(frozen=True)
class Calibration:
    """``sigmoid(slope * score + intercept)``."""

    method: str
    slope: float
    intercept: float

    def probabilities(self, scores: Any) -> np.ndarray:
        """The probability of each raw score (monotone, in [0, 1])."""
        return _sigmoid(self.slope * np.asarray(scores, dtype=np.float64) + self.intercept)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    out: np.ndarray = 0.5 * (1.0 + np.tanh(0.5 * z))  # no overflow for large |z|
    return out


def fit(scores: Any, labels: Any, method: str = "platt") -> Calibration:
    """The calibration of ``method`` that best predicts ``labels`` (in [0, 1]; graded ones as
    their share) from ``scores``: Newton's method on the log-loss, with Platt's targets
    ``(positives + 1) / (positives + 2)`` and ``1 / (negatives + 2)`` in place of 1 and 0."""
    if method not in METHODS[1:]:
        raise DaprError(
            f"training: unknown calibration {method!r}; choose from: {', '.join(METHODS)}"
        )
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if s.shape != y.shape or s.ndim != 1 or not len(s):
        raise DaprError("training: a calibration needs one label per score, and some scores")
    if not (np.all(np.isfinite(s)) and np.all((y >= 0) & (y <= 1))):
        raise DaprError("training: a calibration needs finite scores and labels in [0, 1]")
    high = (y.sum() + 1) / (y.sum() + 2)
    low = 1 / ((1 - y).sum() + 2)
    target = y * high + (1 - y) * low
    platt = method == "platt"
    centre = float(s.mean()) if platt else 0.0
    spread = float(np.sqrt(np.mean((s - centre) ** 2)))
    if spread == 0:  # one score for every pair: only the base rate is left to fit
        return Calibration(method, 0.0, _logit(float(target.mean())) if platt else 0.0)
    x = (s - centre) / spread
    features = np.stack([x, np.ones_like(x)], axis=1) if platt else x[:, None]
    theta = _newton(features, target)
    if theta[0] < 0:  # the best order-keeping map is then a constant
        return Calibration(method, 0.0, _logit(float(target.mean())) if platt else 0.0)
    slope = float(theta[0] / spread)
    intercept = float(theta[1] - theta[0] * centre / spread) if platt else 0.0
    return Calibration(method, slope, intercept)


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def _loss(features: np.ndarray, target: np.ndarray, theta: np.ndarray) -> float:
    z = features @ theta
    return float(np.sum(np.logaddexp(0.0, z) - target * z))


def _newton(features: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The minimiser of the log-loss of ``sigmoid(features @ theta)`` against ``target``
    (convex: Newton's steps, halved until the loss does not rise)."""
    theta = np.zeros(features.shape[1])
    loss = _loss(features, target, theta)
    for _ in range(100):
        p = _sigmoid(features @ theta)
        gradient = features.T @ (p - target)
        hessian = (features * (p * (1 - p))[:, None]).T @ features
        hessian += 1e-12 * np.eye(len(theta))
        step = np.linalg.solve(hessian, gradient)
        size = 1.0
        while size > 1e-8:
            trial = theta - size * step
            trial_loss = _loss(features, target, trial)
            if trial_loss <= loss:
                break
            size /= 2
        else:
            break
        theta, moved, loss = trial, float(np.max(np.abs(size * step))), trial_loss
        if moved < 1e-10:
            break
    return theta


def expected_calibration_error(probabilities: Any, labels: Any, bins: int = BINS) -> float:
    """The expected calibration error: over ``bins`` equal-width bins of [0, 1] (the last one
    closed), each bin's share of the pairs times the gap between its mean probability and its
    mean label."""
    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if p.shape != y.shape or not len(p) or bins < 1:
        raise DaprError("training: the calibration error needs one label per probability")
    if not np.all((p >= 0) & (p <= 1)):
        raise DaprError("training: the calibration error needs probabilities in [0, 1]")
    which = np.minimum((p * bins).astype(np.int64), bins - 1)
    gaps = np.bincount(which, weights=y - p, minlength=bins)
    return float(np.sum(np.abs(gaps)) / len(p))


def held_out(
    rows: Sequence[Example], share: float, seed: int
) -> tuple[list[Example], list[Example]]:
    """The rows to train on and those of a ``share`` of their questions (drawn with ``seed``,
    at least two) kept out for the calibration; a question's rows stay together."""
    questions = sorted({r.query for r in rows})
    random.Random(seed).shuffle(questions)
    count = round(share * len(questions))
    if count < 2 or count >= len(questions):
        raise DaprError(
            f"training: calibration_share {share} of {len(questions)} training questions holds "
            f"out {count}; a calibration needs at least 2 held out and 1 left to train on"
        )
    kept = set(questions[:count])
    return [r for r in rows if r.query not in kept], [r for r in rows if r.query in kept]


def cross_fitted(scores: Any, labels: Any, groups: Sequence[str], method: str) -> np.ndarray:
    """Each pair's probability from a calibration fitted on the other half of the groups (the
    questions): an estimate of how the calibration does on questions it was not fitted on."""
    s, y = np.asarray(scores, dtype=np.float64), np.asarray(labels, dtype=np.float64)
    names = sorted(set(groups))
    half = {g: i % 2 for i, g in enumerate(names)}
    fold = np.array([half[g] for g in groups])
    out = np.empty_like(s)
    for side in (0, 1):
        other = fold != side
        out[~other] = fit(s[other], y[other], method).probabilities(s[~other])
    return out


def pairs_of(rows: Sequence[Example]) -> tuple[list[tuple[str, str]], list[float], list[str]]:
    """The (question, passage) pairs of ``rows``, their labels and their questions."""
    found: list[tuple[str, str]] = []
    labels: list[float] = []
    for row in rows:
        for text, label in [(row.positive, row.label), *((n, 0.0) for n in row.negatives)]:
            found.append((row.query, text))
            labels.append(float(label))
    return found, labels, [q for q, _ in found]


def report(scores: Any, labels: Any, groups: Sequence[str], method: str) -> tuple[
    Calibration, dict[str, Any]
]:  # fmt: skip
    """The calibration fitted on every held-out pair, and what the card says of it: its
    parameters, the pairs and questions it was fitted on, and the expected calibration error of
    the model's own sigmoid (``ece_before``) and of the calibration cross-fitted over two halves
    of the questions (``ece_after``), in :data:`BINS` bins."""
    calibration = fit(scores, labels, method)
    before = _sigmoid(np.asarray(scores, dtype=np.float64))
    after = cross_fitted(scores, labels, groups, method)
    return calibration, {
        "method": method,
        "slope": calibration.slope,
        "intercept": calibration.intercept,
        "questions": len(set(groups)),
        "pairs": len(groups),
        "positives": float(np.sum(labels)),
        "bins": BINS,
        "ece_before": expected_calibration_error(before, labels),
        "ece_after": expected_calibration_error(after, labels),
    }


def _weights(folder: Path) -> dict[str, str]:
    from dapr.store.checksums import digest

    found = sorted({p for pattern in WEIGHTS for p in folder.glob(pattern) if p.is_file()})
    return {p.name: digest(p) for p in found}


def write(folder: Path, about: dict[str, Any]) -> Path:
    """Store the calibration ``about`` describes (see :func:`report`) beside the weights in
    ``folder``, with their digests (a calibration is read back only with the weights it was
    fitted for)."""
    path = folder / FILE
    path.write_text(json.dumps({**about, "weights": _weights(folder)}, indent=2))
    return path


def read(folder: Path) -> Calibration | None:
    """The calibration stored beside the weights in ``folder`` (None without one), checked: a
    file dapr wrote, for these weights, and (in a cache entry) the bytes the entry recorded."""
    from dapr.store.checksums import CHECKSUMS, digest

    path = folder / FILE
    if not path.is_file():
        return None
    redo = "delete it to use the model's raw scores, or train the model again"
    sums = folder.parent / CHECKSUMS
    if sums.is_file():
        recorded = _json(sums).get(f"{folder.name}/{FILE}")
        if recorded is not None and recorded != [path.stat().st_size, digest(path)]:
            raise DaprError(f"{path}: not what was written (its checksum differs); {redo}")
    found = _json(path)
    method = found.get("method")
    numbers = [found.get(k) for k in ("slope", "intercept")]
    if method not in METHODS[1:] or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        for v in numbers
    ):
        raise DaprError(f"{path}: not a calibration (method, slope, intercept); {redo}")
    slope, intercept = (float(v) for v in numbers)  # type: ignore[arg-type]  # checked above
    if slope < 0 or (method == "temperature" and intercept != 0):
        raise DaprError(f"{path}: a calibration that reverses or shifts the order; {redo}")
    if found.get("weights") != _weights(folder):
        raise DaprError(f"{path}: fitted for other weights than those beside it; {redo}")
    return Calibration(str(method), slope, intercept)


def _json(path: Path) -> dict[str, Any]:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        found = None
    if not isinstance(found, dict):
        raise DaprError(f"{path}: unreadable JSON; delete it, or train the model again")
    return found
