"""Dual-encoder training with sentence-transformers' trainer: queries through the model's query
encoder and prompt, passages through its document ones (where it has separate ones); in-batch
negatives (plus any mined or same-document negatives in each row) through
``MultipleNegativesRankingLoss``, or the same loss over a large batch on one device through
gradient caching (``CachedMultipleNegativesRankingLoss``, RocketQA's cross-batch negatives
without several GPUs).

Checkpoints are written every ``save_steps`` into the output directory, and a second call with
the same directory resumes from the last one instead of starting over.
"""

from __future__ import annotations

import json
import sys
import time
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Annotated, Any

from dapr.errors import DaprError
from dapr.precision import PRECISIONS, resolve
from dapr.precision import check as check_precision
from dapr.ranges import Range, declared, number_problem
from dapr.retrievers.support.late_chunking import ENCODINGS
from dapr.training.examples import Example, uniform

LOSSES = ("mnrl", "cached_mnrl")
"""``mnrl``: in-batch negatives; ``cached_mnrl``: the same, the batch encoded in mini-batches."""


@dataclass(frozen=True)
class Settings:
    """How a model is trained (RocketQA's dual encoder: learning rate 3e-5, 10% warm-up)."""

    epochs: Annotated[float, Range(0, min_open=True)] = 1.0
    """Passes over the training examples (a fraction stops part-way)."""
    batch_size: Annotated[int, Range(1)] = 32
    """Examples a step (per worker): queries for a dual encoder; for a cross-encoder, pairs
    with ``bce`` and queries with the listwise losses."""
    learning_rate: Annotated[float, Range(0, min_open=True)] = 3e-5
    """AdamW's peak learning rate, reached after the warm-up, then decayed linearly to 0."""
    warmup_ratio: Annotated[float, Range(0, 1, max_open=True)] = 0.1
    """The share of the steps over which the learning rate rises from 0 to its peak."""
    max_steps: Annotated[int, Range(-1)] = -1
    """Steps to train, in place of ``epochs`` (-1: as many as the epochs take)."""
    seed: Annotated[int, Range(0, 2**32 - 1)] = 0  # numpy's seeds
    """Seeds the new weights, the negatives drawn, the order of the examples and dropout."""
    mini_batch_size: Annotated[int, Range(1)] = 32
    """``cached_mnrl``: texts encoded at once; the loss still sees the whole batch."""
    save_steps: Annotated[int, Range(1)] = 50
    """Steps between checkpoints (the last two kept); a log line every fifth of them."""
    max_length: Annotated[int | None, Range(1)] = None
    """Tokens kept of each text (None: the model's own limit)."""
    precision: str = "auto"
    """``auto`` (bf16 mixed precision on a CUDA GPU with bfloat16, else fp32), ``fp32``,
    ``bf16`` or ``fp16`` (mixed precision: the weights stay float32)."""
    encoding: str = "passage"
    """How a dual encoder's passages are encoded in training: ``passage`` (each alone) or
    ``late``: span pooling (Günther et al., 2024), each passage of a row (positive and
    negatives) mean-pooled from its tokens' outputs inside its document's windows, as ``dense``
    with ``encoding: late`` encodes it, so the model learns for late chunking; queries as
    usual. Mean-pooled models, the ``mnrl`` loss and one worker."""
    late_window: Annotated[int | None, Range(3)] = None
    """``encoding: late``: tokens per window (None: the model's limit), as ``dense``'s."""
    late_overlap: Annotated[int | None, Range(0)] = None
    """``encoding: late``: tokens consecutive windows share (None: a quarter of a window)."""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self), include_extras=True)
        for field in fields(self):  # each of the type and in the range its annotation declares
            _check_type(field.name, getattr(self, field.name), hints[field.name])
        check_precision(self.precision, "training", ("auto", *PRECISIONS))
        if self.encoding not in ENCODINGS:
            raise DaprError(
                f"training: encoding {self.encoding!r} is not one of: {', '.join(ENCODINGS)}"
            )
        window, overlap = self.late_window, self.late_overlap
        if self.encoding == "passage" and (window, overlap) != (None, None):
            raise DaprError("training: late_window and late_overlap are settings of encoding: "
                            "late; set encoding: late or remove them")  # fmt: skip
        if window is not None and overlap is not None and overlap >= window:
            raise DaprError(f"training: late_overlap {overlap} must be below late_window {window}")

    def identity(self) -> dict[str, Any]:
        """The settings for a cache key; ``precision: auto`` and ``encoding: passage`` (the
        defaults) left out, so keys made before there were such settings stay."""
        found = asdict(self)
        if self.precision == "auto":
            del found["precision"]
        if self.encoding == "passage":
            del found["encoding"], found["late_window"], found["late_overlap"]
        return found

    def trainer_arguments(self, out: Path, device: str) -> dict[str, Any]:
        """What every dapr trainer is given on ``device`` (a torch device type): these settings
        (the precision resolved for the device), checkpoints under ``out/checkpoints`` (the last
        two kept), a log entry every fifth of ``save_steps``."""
        used = resolve(self.precision, device, "training")
        return {
            "output_dir": str(out / "checkpoints"),
            "num_train_epochs": self.epochs,
            "max_steps": self.max_steps,
            "per_device_train_batch_size": self.batch_size,
            "learning_rate": self.learning_rate,
            "warmup_ratio": self.warmup_ratio,
            "seed": self.seed,
            "data_seed": self.seed,
            "save_strategy": "steps",
            "save_steps": self.save_steps,
            "save_total_limit": 2,
            "logging_steps": max(1, self.save_steps // 5),
            "report_to": "none",
            "disable_tqdm": not sys.stderr.isatty(),
            "use_cpu": device == "cpu",
            "bf16": used == "bf16",
            "fp16": used == "fp16",
        }


_TYPES: dict[Any, tuple[tuple[type, ...], str]] = {
    int: ((int,), "an integer"),
    float: ((int, float), "a number"),
    str: ((str,), "a string"),
}
"""What a setting annotated with each type accepts (booleans never), and how to say it."""


def _check_type(name: str, value: Any, annotation: Any) -> None:
    """A one-line DaprError unless ``value`` fits ``annotation`` (``int``, ``float``, ``str``,
    each optionally ``| None``, a number within the :class:`~dapr.ranges.Range` it declares)."""
    hint, metadata = declared(annotation)
    union = typing.get_origin(hint) in (types.UnionType, typing.Union)
    options = typing.get_args(hint) if union else (hint,)
    if value is None and type(None) in options:
        return
    accepted, kind = _TYPES[next(o for o in options if o is not type(None))]
    if isinstance(value, bool) or not isinstance(value, accepted):
        raise DaprError(f"training: {name} must be {kind}, got {value!r}")
    bounds = next((m for m in metadata if isinstance(m, Range)), None)
    problem = None if str in accepted else number_problem(value, kind, bounds)
    if problem is not None:
        raise DaprError(f"training: {name} {problem}")


def columns(rows: Sequence[Example]) -> dict[str, list[str]]:
    """The rows as the trainer's dataset columns: anchor, positive, negative_1..n."""
    rows = uniform(rows)
    found: dict[str, list[str]] = {
        "anchor": [r.query for r in rows],
        "positive": [r.positive for r in rows],
    }
    for n in range(len(rows[0].negatives) if rows else 0):
        found[f"negative_{n + 1}"] = [r.negatives[n] for r in rows]
    return found


def make_loss(name: str, model: Any, settings: Settings, gather: bool = False) -> Any:
    """The sentence-transformers loss ``name`` (one of :data:`LOSSES`) for ``model``;
    ``gather``: negatives all-gathered across the workers of a distributed run."""
    from sentence_transformers import losses

    if name == "mnrl":
        return losses.MultipleNegativesRankingLoss(model, gather_across_devices=gather)
    if name == "cached_mnrl":
        return losses.CachedMultipleNegativesRankingLoss(
            model, mini_batch_size=settings.mini_batch_size, gather_across_devices=gather
        )
    raise DaprError(f"training: unknown loss {name!r}; choose from: {', '.join(LOSSES)}")


def train_dual_encoder(
    model: Any,
    rows: Sequence[Example],
    out: Path,
    loss: str = "mnrl",
    settings: Settings = Settings(),
    log: Callable[[str], None] | None = None,
    gather: bool = False,
    documents: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """Fit ``model`` (a SentenceTransformer) on ``rows``; checkpoints go to ``out/checkpoints``
    (resumed from when present) and the final model to ``out/model``. Returns the training
    record written beside it as ``out/training.json``. ``gather``: one of several distributed
    workers, whose loss sees every worker's passages (only the first worker writes). With
    ``encoding: late`` the rows' passages are references into ``documents``
    (:func:`~dapr.training.span_pooling.in_documents`), span-pooled."""
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )
    from sentence_transformers.training_args import BatchSamplers

    if not rows:
        raise DaprError("training: no examples to train on")
    if settings.max_length is not None:
        model.max_seq_length = settings.max_length
    data = Dataset.from_dict(columns(rows))
    arguments = SentenceTransformerTrainingArguments(
        **settings.trainer_arguments(out, model.device.type),
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        prompts=_prompts(model, list(data.column_names)),
        router_mapping=_routes(model, list(data.column_names)),
    )
    collator, objective = None, None
    if settings.encoding == "late":
        from dapr.training.span_pooling import span_training

        if documents is None or loss != "mnrl" or gather:
            raise DaprError("training: encoding late trains with loss mnrl on one worker, on "
                            "rows that name their passages' documents")  # fmt: skip
        card = getattr(model, "model_card_data", None)
        name = str(getattr(card, "base_model", None) or "the model to train")
        names = list(data.column_names)
        collator, objective = span_training(model, name, settings, documents, names, arguments)
    trainer = SentenceTransformerTrainer(
        model=model,
        args=arguments,
        train_dataset=data,
        loss=objective or make_loss(loss, model, settings, gather),
        data_collator=collator,
    )
    negatives = len(data.column_names) - 2
    return fit(trainer, model, out, settings, log, loss=loss, negatives_per_example=negatives,
               left_out=len(rows) - data.num_rows)  # fmt: skip


def fit(
    trainer: Any,
    model: Any,
    out: Path,
    settings: Settings,
    log: Callable[[str], None] | None,
    **about: Any,
) -> dict[str, Any]:
    """Run ``trainer`` from the last complete checkpoint under ``out`` (if any); the first
    worker saves ``model`` to ``out/model`` and the training record (``about``, the settings,
    the precision the trainer computed in, torch's CPU threads, steps, the step it resumed
    from, loss per logged step) to ``out/training.json``, which is returned. The threads are
    recorded because they decide the last bits of the weights: CPU kernels split their sums by
    thread, so a rerun gives the same bytes on as many threads, not on a different count."""
    import torch

    if log is not None:  # our lines replace the trainer's printed dictionaries
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)
        trainer.add_callback(progress_callback(log))
    resume = last_checkpoint(out / "checkpoints")
    started = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    record = {
        **about,
        "settings": asdict(settings),
        "precision": "bf16" if trainer.args.bf16 else "fp16" if trainer.args.fp16 else "fp32",
        "threads": torch.get_num_threads(),
        "examples": len(trainer.train_dataset),
        "steps": result.global_step,
        "training_loss": result.training_loss,
        "resumed": resume is not None,
        "resumed_from": int(resume.name.split("-")[-1]) if resume else None,
        "seconds": round(time.perf_counter() - started, 3),
        "log": [entry for entry in trainer.state.log_history if "loss" in entry],
    }
    if trainer.is_world_process_zero():
        model.save(str(out / "model"))
        (out / "training.json").write_text(json.dumps(record, indent=2))
    return record


def seeded(seed: int) -> None:
    """Seed Python's, numpy's and torch's generators with ``seed``, before a model to train is
    loaded: a head it lacks (a cross-encoder's classifier) starts from random weights, which
    otherwise depend on what consumed the generators earlier in the process (the trainer seeds
    them only once the model exists)."""
    from transformers import set_seed

    set_seed(seed)


def last_checkpoint(folder: Path) -> Path | None:
    """The latest complete checkpoint in ``folder`` (the trainer writes its state file last);
    checkpoints a killed process left half-written are removed (by whichever of several
    distributed workers gets there first)."""
    import shutil

    found = None
    steps = sorted(folder.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    for checkpoint in steps:
        if (checkpoint / "trainer_state.json").is_file():
            found = checkpoint
        else:
            shutil.rmtree(checkpoint, ignore_errors=True)
    return found


def _routes(model: Any, names: list[str]) -> dict[str, str] | None:
    """For a model with separate query and document encoders (a sentence-transformers
    ``Router``): the anchor column to the query route, the passages to the document route."""
    if type(model[0]).__name__ != "Router":
        return None
    return {name: "query" if name == "anchor" else "document" for name in names}


def _prompts(model: Any, names: list[str]) -> dict[str, str] | None:
    """The model's own query and document prompts for the anchor and passage columns."""
    prompts = getattr(model, "prompts", None) or {}
    query = prompts.get("query")
    document = next((prompts[n] for n in ("document", "passage", "corpus") if n in prompts), None)
    if query is None and document is None:
        return None
    found = {"anchor": query or ""}
    found |= {name: document or "" for name in names if name != "anchor"}
    return found


def progress_callback(log: Callable[[str], None]) -> Any:
    """A trainer callback that reports each logged step as one line: step, loss, examples/s."""
    from transformers import TrainerCallback

    class Progress(TrainerCallback):
        def __init__(self) -> None:
            self.started = time.perf_counter()

        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any
        ) -> None:
            if logs and "loss" in logs:
                seen = state.global_step * args.per_device_train_batch_size
                rate = seen / max(time.perf_counter() - self.started, 1e-9)
                log(
                    f"step {state.global_step}/{state.max_steps} loss {logs['loss']:.4f} "
                    f"{rate:.1f} examples/s"
                )

    return Progress()
