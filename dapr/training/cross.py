"""Cross-encoder training with sentence-transformers' ``CrossEncoderTrainer``: each example gives
its positive (label 1, or its grade scaled to [0, 1] for graded judgements) and its negatives
(label 0), fitted with binary cross-entropy; RocketQA trains its cross-encoder at 1e-5. The
result re-ranks in ``dapr run`` as ``{name: rerank, args: {model: trained/<name>}}``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dapr.errors import DaprError
from dapr.training.dual import Settings, fit
from dapr.training.examples import Example

ROCKETQA = Settings(learning_rate=1e-5)
"""RocketQA's cross-encoder learning rate, otherwise the defaults."""
LOSSES = ("bce",)
"""``bce``: binary cross-entropy on the labels (soft labels for graded judgements)."""


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


def train_cross_encoder(
    model: Any,
    rows: Sequence[Example],
    out: Path,
    loss: str = "bce",
    settings: Settings = ROCKETQA,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Fit ``model`` (a CrossEncoder with one output) on ``rows``; checkpoints and the final
    model as :func:`dapr.training.dual.train_dual_encoder` writes them."""
    from datasets import Dataset
    from sentence_transformers.cross_encoder import (
        CrossEncoderTrainer,
        CrossEncoderTrainingArguments,
        losses,
    )

    if loss not in LOSSES:
        raise DaprError(f"training: unknown cross-encoder loss {loss!r}; choose from: bce")
    if not any(row.negatives for row in rows):
        raise DaprError(
            "training: a cross-encoder needs negatives (labels 0); set negatives: "
            "{same_document: n} or {mined: <retriever>, count: n}"
        )
    if settings.max_length is not None:
        model.max_length = settings.max_length
    trainer = CrossEncoderTrainer(
        model=model,
        args=CrossEncoderTrainingArguments(**settings.trainer_arguments(out, model.device.type)),
        train_dataset=Dataset.from_dict(pairs(rows)),
        loss=losses.BinaryCrossEntropyLoss(model),
    )
    negatives = max(len(r.negatives) for r in rows)
    return fit(
        trainer, model, out, settings, log, kind="cross", loss=loss, negatives_per_example=negatives
    )
