"""What a ``train:`` entry does with a cross-encoder: checks its ``head``, ``distill:`` and
``calibration`` keys, fits it (after the teacher's warm start, its calibration on held-out
questions), and scores with a trained one to denoise mined negatives or pseudo-label augmentation
queries (RocketQA), through its calibration when it has one."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from dapr.errors import ConfigError
from dapr.ranges import Range, number_problem

DISTILL = ("teacher", "depth", "count", "epochs")
DISTILL_NUMBERS = {
    "depth": ("an integer", Range(2)),
    "count": ("an integer", Range(1)),
    "epochs": ("a number", Range(0, min_open=True)),
}
"""The numbers of ``distill:``: what each is and its range."""


def check_cross(spec: dict, kind: str, retrievers: dict, path: Path, where: str) -> None:
    """A ConfigError naming the key for a ``head``, ``distill:`` or ``calibration`` that is not a
    cross-encoder's, unknown, or names no passage-level retriever of the experiment."""
    from dapr.training.calibration import METHODS
    from dapr.training.cross import HEADS

    for key in ("head", "distill", "calibration", "calibration_share"):
        if key in spec and kind != "cross":
            raise ConfigError(f"{path}: {where}.{key}: only a cross-encoder (kind: cross) has it")
    head = spec.get("head", "fresh")
    if head not in HEADS:
        raise ConfigError(f"{path}: {where}.head: {head!r} is not one of: {', '.join(HEADS)}")
    calibration = spec.get("calibration", "none")
    if calibration not in METHODS:
        raise ConfigError(
            f"{path}: {where}.calibration: {calibration!r} is not one of: {', '.join(METHODS)}"
        )
    if "calibration_share" in spec and calibration == "none":
        raise ConfigError(
            f"{path}: {where}.calibration_share: holds questions out for a calibration; set "
            "calibration: platt (or temperature) too, or remove it"
        )
    distill = spec.get("distill")
    if not distill:
        return
    unknown = sorted(set(distill) - set(DISTILL))
    if unknown:
        raise ConfigError(
            f"{path}: unknown key {f'{where}.distill.{unknown[0]}'!r}; valid keys: "
            f"{', '.join(DISTILL)}"
        )
    teacher = distill.get("teacher")
    if teacher not in retrievers or retrievers[teacher].level != "passage":
        choices = [s for s, r in retrievers.items() if r.level == "passage"]
        raise ConfigError(
            f"{path}: {where}.distill.teacher: {teacher!r} is not a passage-level retriever of "
            f"this experiment; choose from: {', '.join(choices) or 'none defined'}"
        )
    for key, (kind, bounds) in DISTILL_NUMBERS.items():
        value = distill.get(key, 20)  # absent: its default, which fits
        accepted = (int,) if kind == "an integer" else (int, float)
        if isinstance(value, bool) or not isinstance(value, accepted):
            problem: str | None = f"must be {kind}, got {value!r}"
        else:
            problem = number_problem(value, kind, bounds)
        if problem is not None:
            raise ConfigError(f"{path}: {where}.distill.{key} {problem}")
    if distill.get("count", 3) >= distill.get("depth", 20):
        raise ConfigError(f"{path}: {where}.distill: count must be below depth")


def teacher_examples(distill: dict, run: Any, queries: dict, texts: dict, seed: int) -> list:
    """The distillation rows of one source: the teacher's run over its training queries."""
    from dapr.training.cross import teacher_rows

    depth, count = distill.get("depth", 20), distill.get("count", 3)
    return teacher_rows(run.to_dict(), queries, texts, depth, count, seed)


def held_out(name: str, spec: Any, rows: list, seed: int) -> tuple[list, list]:
    """The labelled rows to train on and those held out for the calibration of ``spec`` (the
    entry ``name``; none without one): the ``calibration_share`` of the questions, drawn with
    ``seed``."""
    from dapr.errors import DaprError
    from dapr.training.calibration import held_out as split

    if spec.kind != "cross" or spec.calibration == "none":
        return rows, []
    try:
        return split(rows, spec.calibration_share, seed)
    except DaprError as e:
        raise DaprError(f"train.{name}: {e}") from None


def fit_cross(
    spec: Any, rows: list, entry: Path, settings: Any, log: Any, teacher: list, held: list
) -> dict:
    """Train the cross-encoder of ``spec`` into the cache entry ``entry``, its calibration
    fitted on the ``held`` rows (whose questions the teacher's rows leave out)."""
    from sentence_transformers import CrossEncoder

    from dapr.checkpoints import load
    from dapr.training.cross import train_cross_encoder
    from dapr.training.dual import seeded

    seeded(settings.seed)  # the fresh head's weights: the same whatever trained before
    model = load(CrossEncoder, spec.model, num_labels=1)
    epochs = spec.distill.get("epochs", 1) if spec.distill else 0
    kept_out = {row.query for row in held}
    teacher = [row for row in teacher if row.query not in kept_out]
    return train_cross_encoder(
        model, rows, entry, spec.loss, settings, log, spec.head, teacher, epochs,
        spec.calibration, held,
    )  # fmt: skip


def cross_scorer(name: str) -> Any:
    """Relevance probabilities of (query, passage) pairs by the cross-encoder ``name``
    (a :class:`~dapr.training.cross.Probabilities`): through its calibration when it has one
    (checked as it is read). Without one, a warning when its card says it was trained with a
    listwise loss, whose scores are not probabilities."""
    from sentence_transformers import CrossEncoder

    from dapr.checkpoints import load, resolve
    from dapr.training.calibration import read
    from dapr.training.cross import Probabilities

    model = load(CrossEncoder, name)
    folder = Path(resolve(name))
    calibration = read(folder) if folder.is_dir() else None
    card = folder / "dapr_training.json"
    loss = json.loads(card.read_text()).get("loss") if card.is_file() else None
    if calibration is None and loss in ("listnet", "mnrl"):
        print(f"dapr: warning: {name} was trained with loss {loss}, whose scores are not "
              "probabilities, and has no calibration; train it with calibration: platt",
              file=sys.stderr)  # fmt: skip
    return Probabilities(model, calibration)


def _calibrated(score: Any) -> str | None:
    """The calibration method a scorer of :func:`cross_scorer` applies (None: none)."""
    from dapr.training.cross import Probabilities

    if isinstance(score, Probabilities) and score.calibration is not None:
        return score.calibration.method
    return None


def denoised(denoiser: dict, mined: Any, split: Any, texts: dict) -> tuple[Any, dict]:
    """The mined run without what the cross-encoder ``denoiser`` names scores at or above
    its threshold, and the counts per rank (for the model card)."""
    from dapr.training.denoise import denoise

    below, depth = denoiser.get("below", 0.1), denoiser.get("depth", 50)
    score = cross_scorer(denoiser["model"])
    done = denoise(mined, split.queries, split.qrels, texts, score, below, depth)
    counts = {"model": denoiser["model"], "below": below, "depth": depth}
    counts |= {"scored": list(done.scored), "removed": list(done.removed)}
    if calibrated := _calibrated(score):
        counts["calibration"] = calibrated
    return done.run, counts


def pseudo(augment: dict, run: Any, queries: dict, texts: dict, rows: list) -> tuple[list, dict]:
    """Pseudo-labelled examples from the cross-encoder ``augment`` names, each with as many
    negatives as most labelled ``rows`` have (what a batch keeps), and the counts for the model
    card."""
    from dapr.training.augment import pseudo_labelled
    from dapr.training.examples import usual_count

    negatives = usual_count(rows)
    score = cross_scorer(augment["model"])
    pseudo, counts = pseudo_labelled(
        run,
        queries,
        texts,
        score,
        augment.get("depth", 20),
        augment.get("positive_above", 0.9),
        augment.get("negative_below", 0.1),
        negatives,
    )
    source = {k: augment[k] for k in ("dataset", "split", "queries") if k in augment}
    if calibrated := _calibrated(score):
        source["calibration"] = calibrated
    return pseudo, {"model": augment["model"], **source, **counts}


def warn_if_nothing(name: str, denoising: dict | None, augmentation: dict | None) -> None:
    """A warning on stderr when the cross-encoder left no negative or labelled no query."""
    if denoising and sum(denoising["removed"]) == sum(denoising["scored"]) > 0:
        print(f"dapr: warning: train.{name}: the cross-encoder scored every mined candidate at "
              f"or above {denoising['below']}, so no negative is left; is it calibrated "
              "(calibration: platt on its train: entry)?",
              file=sys.stderr)  # fmt: skip
    if augmentation and not augmentation["examples"]:
        print(f"dapr: warning: train.{name}: augmentation labelled no example (no query has "
              "both a pseudo-positive and a pseudo-negative)", file=sys.stderr)  # fmt: skip
