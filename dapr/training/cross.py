"""Cross-encoder training with sentence-transformers' ``CrossEncoderTrainer``: each example gives
its positive (label 1, or its grade scaled to [0, 1] for graded judgements) and its negatives
(label 0), fitted with binary cross-entropy; RocketQA trains its cross-encoder at 1e-5. The
result re-ranks in ``dapr run`` as ``{name: rerank, args: {model: trained/<name>}}``."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dapr.errors import DaprError
from dapr.training.dual import Settings, last_checkpoint, progress_callback
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
    from transformers.trainer_callback import PrinterCallback

    if loss not in LOSSES:
        raise DaprError(f"training: unknown cross-encoder loss {loss!r}; choose from: bce")
    if not any(row.negatives for row in rows):
        raise DaprError(
            "training: a cross-encoder needs negatives (labels 0); set negatives: "
            "{same_document: n} or {mined: <retriever>, count: n}"
        )
    if settings.max_length is not None:
        model.max_length = settings.max_length
    data = Dataset.from_dict(pairs(rows))
    checkpoints = out / "checkpoints"
    arguments = CrossEncoderTrainingArguments(
        output_dir=str(checkpoints),
        num_train_epochs=settings.epochs,
        max_steps=settings.max_steps,
        per_device_train_batch_size=settings.batch_size,
        learning_rate=settings.learning_rate,
        warmup_ratio=settings.warmup_ratio,
        seed=settings.seed,
        data_seed=settings.seed,
        save_strategy="steps",
        save_steps=settings.save_steps,
        save_total_limit=2,
        logging_steps=max(1, settings.save_steps // 5),
        report_to="none",
        disable_tqdm=not sys.stderr.isatty(),
        use_cpu=model.device.type == "cpu",
    )
    trainer = CrossEncoderTrainer(
        model=model,
        args=arguments,
        train_dataset=data,
        loss=losses.BinaryCrossEntropyLoss(model),
        callbacks=[progress_callback(log)] if log else None,
    )
    if log is not None:
        trainer.remove_callback(PrinterCallback)
    resume = last_checkpoint(checkpoints)
    started = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    model.save(str(out / "model"))
    record = {
        "kind": "cross",
        "loss": loss,
        "settings": asdict(settings),
        "examples": len(data),
        "negatives_per_example": max(len(r.negatives) for r in rows),
        "steps": result.global_step,
        "training_loss": result.training_loss,
        "resumed": resume is not None,
        "seconds": round(time.perf_counter() - started, 3),
        "log": [entry for entry in trainer.state.log_history if "loss" in entry],
    }
    (out / "training.json").write_text(json.dumps(record, indent=2))
    return record
