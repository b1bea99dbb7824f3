"""Cross-encoder training with sentence-transformers' ``CrossEncoderTrainer``.

Each example gives its positive (label 1, or its grade scaled to [0, 1] for graded judgements)
and its negatives (label 0). The loss is one of :data:`LOSSES`; RocketQA trains its
cross-encoder with binary cross-entropy at 1e-5. Optionally the model first learns to order
passages as a *teacher* does (a retriever's scores over its top candidates, unlabelled:
MarginMSE on the teacher's margins), which gives a fresh head a ranking to start from before the
labels refine it. The result re-ranks in ``dapr run`` as ``{name: rerank, args: {model:
trained/<name>}}``.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from dapr.errors import DaprError
from dapr.training.calibration import Calibration
from dapr.training.dual import Settings, fit
from dapr.training.examples import Example, uniform, usual_count

ROCKETQA = Settings(learning_rate=1e-5)
"""RocketQA's cross-encoder learning rate, otherwise the defaults."""
LOSSES = ("bce", "listnet", "mnrl")
"""``bce``: binary cross-entropy on each (query, passage) label (soft labels for graded
judgements), ``batch_size`` pairs a step; ``listnet``: a softmax over each query's positive and
negatives against its labels; ``mnrl``: the positive against the query's negatives and four other
queries' positives. For the two listwise losses ``batch_size`` counts queries."""
SCORING_CHUNK = 32 * 64
"""Pairs a :class:`Probabilities` scores per call (a whole number of its batches of 32)."""
HEADS = ("fresh", "prior")
"""How the classification head starts: ``fresh`` (as the model loads it) or ``prior`` (its bias
set to the log-odds of the positives' share, so the first steps start at the base rate's loss)."""


@dataclass(frozen=True)
class Scored:
    """A distillation row: a query, the teacher's best passage then others, and the teacher's
    scores for them (standardised within the query's candidates)."""

    query: str
    passages: tuple[str, ...]
    scores: tuple[float, ...]


def teacher_rows(
    run: Mapping[str, Mapping[str, float]],
    queries: Mapping[str, str],
    texts: Mapping[str, str],
    depth: int = 20,
    count: int = 3,
    seed: int = 0,
) -> list[Scored]:
    """Per query of ``run``: its best candidate and ``count`` others drawn from its top
    ``depth``, with the run's scores minus their mean over that top, over their standard
    deviation (a BM25 and a cosine teacher then give margins of one scale). Judgements play no
    part: any queries will do. Queries with fewer than ``count + 1`` candidates, or all of one
    score, are left out."""
    rng = random.Random(seed)
    rows = []
    for qid in sorted(run):
        ranked = sorted(
            ((p, s) for p, s in run[qid].items() if p in texts), key=lambda x: (-x[1], x[0])
        )[:depth]
        if qid not in queries or len(ranked) < count + 1:
            continue
        values = [s for _, s in ranked]
        mean = sum(values) / len(values)
        spread = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        if spread == 0:
            continue
        chosen = [ranked[0], *sorted(rng.sample(ranked[1:], count), key=lambda x: -x[1])]
        rows.append(
            Scored(
                queries[qid],
                tuple(texts[p] for p, _ in chosen),
                tuple((s - mean) / spread for _, s in chosen),
            )
        )
    return rows


def pairs(rows: Sequence[Example]) -> dict[str, list]:
    """The rows as (query, passage, label) columns: a positive with its label, then each
    negative with 0."""
    found: dict[str, list] = {"query": [], "passage": [], "label": []}
    for row in rows:
        for text, label in [(row.positive, row.label), *((n, 0.0) for n in row.negatives)]:
            found["query"].append(row.query)
            found["passage"].append(text)
            found["label"].append(float(label))
    return found


def lists(rows: Sequence[Example]) -> dict[str, list]:
    """The rows as (query, [positive, negatives...], [label, 0...]) columns, for listnet."""
    rows = uniform(rows)
    return {
        "query": [r.query for r in rows],
        "docs": [[r.positive, *r.negatives] for r in rows],
        "labels": [[float(r.label)] + [0.0] * len(r.negatives) for r in rows],
    }


def triples(rows: Sequence[Example]) -> dict[str, list]:
    """The rows as (query, positive, negative_1...) columns, for mnrl."""
    rows = uniform(rows)
    found: dict[str, list] = {"query": [r.query for r in rows]}
    found["positive"] = [r.positive for r in rows]
    for n in range(len(rows[0].negatives)):
        found[f"negative_{n + 1}"] = [r.negatives[n] for r in rows]
    return found


def train_cross_encoder(
    model: Any,
    rows: Sequence[Example],
    out: Path,
    loss: str = "bce",
    settings: Settings = ROCKETQA,
    log: Callable[[str], None] | None = None,
    head: str = "fresh",
    teacher: Sequence[Scored] = (),
    teacher_epochs: float = 1.0,
    calibration: str = "none",
    held_out: Sequence[Example] = (),
) -> dict[str, Any]:
    """Fit ``model`` (a CrossEncoder with one output) on ``rows``, after distilling ``teacher``
    rows into it for ``teacher_epochs`` when given (into ``out/distill``; a finished
    distillation is loaded, not redone); checkpoints and the final model as
    :func:`dapr.training.dual.train_dual_encoder` writes them. With a ``calibration`` (see
    :mod:`dapr.training.calibration`), it is then fitted on the ``held_out`` rows (questions kept
    out of ``rows`` and ``teacher``), stored beside the model and summarised in the record."""
    from datasets import Dataset
    from sentence_transformers.cross_encoder import losses

    check(loss, head, rows)
    check_calibration(calibration, held_out)
    if settings.max_length is not None:
        model.max_length = settings.max_length
    share = len(rows) / sum(1 + len(r.negatives) for r in rows)
    if head == "prior":
        _prior_head(model, share)
    distilled = None
    if teacher:
        model, distilled = distill(model, teacher, out / "distill", settings, teacher_epochs, log)
    made: Any  # the loss module
    if loss == "bce":
        data, made = pairs(rows), losses.BinaryCrossEntropyLoss(model)
    elif loss == "listnet":
        data, made = lists(rows), losses.ListNetLoss(model)
    else:
        negatives = min(4, max(0, settings.batch_size - 1))
        data, made = triples(rows), losses.MultipleNegativesRankingLoss(model, negatives)
    kept = len(rows) if loss == "bce" else len(data["query"])  # pairs keep ragged rows
    record = _fit(model, Dataset.from_dict(data), made, out, settings, log, loss=loss,
                  left_out=len(rows) - kept)  # fmt: skip
    per_row = max(len(r.negatives) for r in rows) if loss == "bce" else usual_count(rows)
    record |= {"head": head, "negatives_per_example": per_row}
    if loss == "bce":  # the loss of always predicting the positives' share
        record["base_rate_loss"] = -(share * math.log(share) + (1 - share) * math.log(1 - share))
    if distilled is not None:
        record["distilled"] = distilled
    if calibration != "none":
        record["calibration"] = calibrate(model, held_out, calibration, out / "model")
        if log is not None:
            c = record["calibration"]
            log(f"calibration: {calibration} on {c['questions']} held-out questions, expected "
                f"calibration error {c['ece_before']:.4f} -> {c['ece_after']:.4f}")  # fmt: skip
    if (out / "training.json").is_file():
        (out / "training.json").write_text(json.dumps(record, indent=2))
    return record


def check(loss: str, head: str, rows: Sequence[Example]) -> None:
    """A DaprError for an unknown loss or head, or rows without negatives."""
    if loss not in LOSSES:
        raise DaprError(
            f"training: unknown cross-encoder loss {loss!r}; choose from: {', '.join(LOSSES)}"
        )
    if head not in HEADS:
        raise DaprError(f"training: unknown head {head!r}; choose from: {', '.join(HEADS)}")
    if not any(row.negatives for row in rows):
        raise DaprError(
            "training: a cross-encoder needs negatives (labels 0); set negatives: "
            "{same_document: n} or {mined: <retriever>, count: n}"
        )


def check_calibration(calibration: str, held_out: Sequence[Example]) -> None:
    """A DaprError for an unknown calibration, or one without held-out rows with negatives."""
    from dapr.training.calibration import METHODS

    if calibration not in METHODS:
        raise DaprError(
            f"training: unknown calibration {calibration!r}; choose from: {', '.join(METHODS)}"
        )
    if calibration != "none" and not any(row.negatives for row in held_out):
        raise DaprError(
            f"training: calibration {calibration!r} needs held-out questions with negatives "
            "(calibration_share of the training questions)"
        )


def raw_scores(model: Any, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> Any:
    """The logits of ``model`` (a CrossEncoder with one output) for ``pairs``, before the
    activation its ``predict`` applies (which is left as it was)."""
    import torch

    own = model.activation_fn
    try:
        return model.predict(
            list(pairs), batch_size, show_progress_bar=False, activation_fn=torch.nn.Identity()
        )
    finally:
        model.activation_fn = own


@dataclass(frozen=True)
class Probabilities:
    """A :data:`~dapr.training.denoise.Scorer`: ``model``'s relevance probabilities of (query,
    passage) pairs, its ``calibration`` of its raw scores when given, else its own output (the
    sigmoid of its raw score, for a model with one output)."""

    model: Any
    calibration: Calibration | None = None

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> Any:
        """The probabilities, scored :data:`SCORING_CHUNK` pairs at a time under a progress bar
        (on a terminal): the same batches of 32 as one call, so the same scores."""
        from tqdm.auto import tqdm

        pairs, scored = list(pairs), []
        with tqdm(total=len(pairs), desc="cross-encoder scoring", unit=" pairs", delay=1,
                  disable=None) as bar:  # fmt: skip
            for start in range(0, len(pairs), SCORING_CHUNK):
                chunk = pairs[start : start + SCORING_CHUNK]
                scored.append(np.asarray(self._probabilities(chunk), dtype=np.float64).ravel())
                bar.update(len(chunk))
        return np.concatenate(scored) if scored else np.empty(0, dtype=np.float64)

    def _probabilities(self, pairs: list[tuple[str, str]]) -> Any:
        if self.calibration is not None:
            return self.calibration.probabilities(raw_scores(self.model, pairs))
        return self.model.predict(pairs, batch_size=32, show_progress_bar=False)


def calibrate(model: Any, held_out: Sequence[Example], method: str, folder: Path) -> dict:
    """Fit ``method`` on ``model``'s raw scores of the ``held_out`` rows' pairs, store it in
    ``folder`` beside the weights, and return what the card says of it."""
    from dapr.training import calibration

    pairs, labels, questions = calibration.pairs_of(held_out)
    _, about = calibration.report(raw_scores(model, pairs), labels, questions, method)
    calibration.write(folder, about)
    return about


def _fit(
    model: Any, data: Any, objective: Any, out: Path, settings: Settings, log: Any, **about: Any
) -> dict[str, Any]:
    from sentence_transformers.cross_encoder import (
        CrossEncoderTrainer,
        CrossEncoderTrainingArguments,
    )

    trainer = CrossEncoderTrainer(
        model=model,
        args=CrossEncoderTrainingArguments(**settings.trainer_arguments(out, model.device.type)),
        train_dataset=data,
        loss=objective,
    )
    return fit(trainer, model, out, settings, log, kind="cross", **about)


def distill(
    model: Any,
    rows: Sequence[Scored],
    out: Path,
    settings: Settings,
    epochs: float,
    log: Any,
) -> tuple[Any, dict[str, Any]]:
    """``model`` after MarginMSE on the teacher's margins (the best passage's score minus each
    other's), and the record; a distillation finished before is loaded from ``out``."""
    from datasets import Dataset
    from sentence_transformers.cross_encoder import CrossEncoder, losses

    if (out / "training.json").is_file() and (out / "model").is_dir():
        record = json.loads((out / "training.json").read_text())
        loaded = CrossEncoder(str(out / "model"), device=str(model.device))
        loaded.max_length = model.max_length
        return loaded, {**record, "reused": True}
    width = min(len(r.passages) for r in rows)
    data: dict[str, list] = {"query": [r.query for r in rows]}
    for n in range(width):
        data[f"passage_{n + 1}"] = [r.passages[n] for r in rows]
    data["label"] = [list(r.scores[:width]) for r in rows]
    record = _fit(
        model,
        Dataset.from_dict(data),
        losses.MarginMSELoss(model),
        out,
        replace(settings, epochs=epochs),
        log,
        loss="margin_mse",
        teacher_rows=len(rows),
    )
    return model, record


def _prior_head(model: Any, share: float) -> None:
    """Set the classifier's bias to the log-odds of ``share``."""
    import torch

    layer = getattr(model.model, "classifier", None)
    if not isinstance(layer, torch.nn.Linear) or layer.out_features != 1:
        raise DaprError(
            "training: head: prior needs a model whose head is one linear output (classifier); "
            "use head: fresh"
        )
    with torch.no_grad():
        layer.bias.fill_(math.log(share / (1 - share)))
