"""What would stop a ``train:`` block, found before any work: ``dapr check``, ``dapr train`` and
``dapr run`` ask the same questions, so that none of them loads a model, runs a teacher or mines
negatives for a training that is then refused.

:func:`check_training` reads only the file (it runs when the file is validated): a cross-encoder
without negatives, a precision this machine cannot train in, a distillation its teacher's run is
too short for, and a model whose training needs itself (trained from, mined, taught or judged
with ``trained/<name>``, directly or through other systems); :func:`training_order` trains each
model after those it needs. :func:`training_problems` reads the datasets: every source's split,
and the augmentation queries.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from dapr.checkpoints import TRAINED
from dapr.data import Dataset
from dapr.errors import ConfigError, DaprError
from dapr.experiment.spec import Experiment, RetrieverSpec, TrainSpec
from dapr.experiment.train_sources import augment_queries, load_sources


def check_training(
    train: dict[str, TrainSpec],
    retrievers: dict[str, RetrieverSpec],
    depth: int,
    gpus: float,
    path: Path,
) -> None:
    """A ConfigError naming the file and key for the first entry of ``train`` that cannot train
    (``depth``: the experiment's, of every run a teacher gives; ``gpus``: its ``gpus_per_job``)."""
    for name, spec in train.items():
        where = f"{path}: train.{name}"
        negatives = spec.negatives
        mined = negatives.get("count", 1) if "mined" in negatives else 0
        if spec.kind == "cross" and not negatives.get("same_document", 0) and not mined:
            raise ConfigError(
                f"{where}.negatives: a cross-encoder needs negatives (labels 0) and this entry "
                "gets none; set negatives: {same_document: n} or {mined: <retriever>, count: n}"
            )
        precision = spec.args.get("precision", "auto")
        device = _training_device(spec.workers, gpus)
        if precision != "auto" and device is not None:
            from dapr.precision import check_device

            try:
                check_device(precision, device, f"{where}.args")
            except DaprError as error:
                raise ConfigError(str(error)) from None
        count = spec.distill.get("count", 3) if spec.distill else 0
        if spec.distill and count + 1 > depth:
            raise ConfigError(
                f"{where}.distill.count: a row takes the teacher's best and {count} others, and "
                f"its run ranks depth: {depth}; lower count below {depth} or raise depth"
            )
    for name in train:
        loop = _loop(name, train, retrievers)
        if loop is not None:
            raise ConfigError(
                f"{path}: train.{name}: its training needs the model it makes: "
                f"{' -> '.join(loop)}; break the loop (mine, teach, judge or start from a model "
                f"that is not trained/{name}), or train it in a file of its own first"
            )


def _training_device(workers: int, gpus: float) -> str | None:
    """The torch device type a training computes on, where this machine can tell: ``cuda`` or
    ``cpu`` here (a model placed by default), ``cpu`` for Ray workers without GPUs; None for
    Ray workers with GPUs (the cluster's, not this machine's)."""
    from dapr.retrievers.support.encoding import cuda_available

    if workers > 1:
        return None if gpus > 0 else "cpu"
    if cuda_available():
        return "cuda"
    if sys.platform == "darwin":
        import torch

        return "mps" if torch.backends.mps.is_available() else "cpu"
    return "cpu"


def _needs(
    node: str, train: dict[str, TrainSpec], retrievers: dict[str, RetrieverSpec]
) -> Iterator[tuple[str, str]]:
    """What ``node`` (``train.<name>`` or ``retrievers.<system>``) needs first: each a node and
    why, as the loop names it (``retrievers.mine (model: trained/de)``)."""
    kind, _, name = node.partition(".")
    if kind == "train":
        spec = train[name]
        for key, system in (
            ("negatives.mined", spec.negatives.get("mined")),
            ("distill.teacher", spec.distill.get("teacher")),
            ("augment.retriever", spec.augment.get("retriever")),
        ):
            if isinstance(system, str) and system in retrievers:
                yield f"retrievers.{system}", key
        models = {"model": spec.model, "augment.model": spec.augment.get("model")}
        models["negatives.denoise.model"] = (spec.negatives.get("denoise") or {}).get("model")
        for n, step in enumerate(spec.contextualizer):
            models |= {f"contextualizer[{n}].args.{k}": v for k, v in step.args.items()}
        models = {k: v for k, v in models.items() if k.split(".")[-1].endswith("model")}
    else:
        retriever = retrievers[name]
        if retriever.first_stage is not None:
            yield f"retrievers.{retriever.first_stage}", "first_stage"
        models = {f"args.{k}": v for k, v in retriever.args.items()}
        for n, step in enumerate(retriever.contextualizer):
            models |= {f"contextualizer[{n}].args.{k}": v for k, v in step.args.items()}
        models = {k: v for k, v in models.items() if k.split(".")[-1].endswith("model")}
    for key, model in models.items():
        if isinstance(model, str) and model.startswith(TRAINED) and model[len(TRAINED) :] in train:
            yield f"train.{model[len(TRAINED) :]}", f"{key.removeprefix('args.')}: {model}"


def _loop(
    name: str, train: dict[str, TrainSpec], retrievers: dict[str, RetrieverSpec]
) -> list[str] | None:
    """The path from ``train.<name>`` back to itself, a model each step uses named on the step
    (``train.de -> retrievers.mine (model: trained/de) -> train.de``), or None."""
    start = f"train.{name}"
    seen: set[str] = set()

    def walk(node: str) -> list[tuple[str, str]] | None:
        for after, why in _needs(node, train, retrievers):
            if after == start:
                return [(after, why)]
            if after not in seen:
                seen.add(after)
                rest = walk(after)
                if rest is not None:
                    return [(after, why), *rest]
        return None

    edges = walk(start)
    if edges is None:
        return None
    steps = [start]
    for after, why in edges:
        if after.startswith("train."):  # the model it uses: said of the step that uses it
            steps[-1] += f" ({why})"
        steps.append(after)
    return steps


def training_order(train: dict[str, TrainSpec], retrievers: dict[str, RetrieverSpec]) -> list[str]:
    """The names of ``train`` in the order they train: each after the models its training uses
    (through its mining, teacher, judges or starting model), otherwise as the file lists them."""
    order: list[str] = []

    def visit(node: str, seen: set[str]) -> None:
        for after, _ in _needs(node, train, retrievers):
            if after in seen:
                continue
            seen.add(after)
            visit(after, seen)
            name = after.partition(".")[2]
            if after.startswith("train.") and name not in order:
                order.append(name)

    for name in train:
        visit(f"train.{name}", {f"train.{name}"})
        if name not in order:
            order.append(name)
    return order


def training_problems(
    experiment: Experiment,
    dataset: Dataset,
    readable: Callable[[str, dict[str, Any]], bool] | None = None,
) -> list[str]:
    """One line per ``train:`` entry whose data is not there: a source's dataset or split, the
    augmentation queries (``readable(dataset, args)``: whether a dataset may be read now; by
    default every one is)."""
    problems = []
    loaded: dict[str, Dataset] = {}
    for name, spec in experiment.train.items():
        try:
            load_sources(name, spec, dataset, loaded, readable)
            other = spec.augment.get("dataset")  # else the experiment's own, read already
            if spec.augment and (other is None or readable is None or readable(other, {})):
                augment_queries(name, spec.augment, dataset)
        except DaprError as error:
            problems.append(str(error))
    return problems


def readable_now(experiment: Experiment) -> Callable[[str, dict[str, Any]], bool]:
    """Whether a dataset may be read without building or downloading it (as ``dapr check`` reads
    the experiment's own)."""
    from dapr.experiment.plan import dataset_source

    def readable(name: str, args: dict[str, Any]) -> bool:
        if name == experiment.dataset and args == experiment.dataset_args:
            return True  # read already
        try:
            return dataset_source(replace(experiment, dataset=name, dataset_args=args)).readable
        except DaprError:
            return True  # reading it says what is wrong

    return readable


def check_data(experiment: Experiment, dataset: Dataset, path: Path) -> None:
    """A ConfigError naming the file for the first of :func:`training_problems`: what ``dapr
    train`` and ``dapr run`` ask before any work."""
    problems = training_problems(experiment, dataset)
    if problems:
        raise ConfigError(f"{path}: {problems[0]}")
