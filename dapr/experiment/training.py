"""The training step: a file's ``train:`` block, checked, then each model trained (or found in
the cache) before retrieval, and named ``trained/<name>`` for the retrievers that use it.

A model is stored in the cache under a hash of everything that makes it: the starting model
and its revision, the dataset, the split's queries and judgements, the contextualizer, the
negatives (with the key of the run they were mined from), the loss and the settings (``precision:
auto`` resolves by the device, and the card records what it used). Training writes checkpoints
into the entry's partial directory, so an interrupted run resumes from the last one. A changed
model has a new content hash, and with it every run that uses it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from dapr.data import Dataset, Split
from dapr.errors import ConfigError, DaprError
from dapr.experiment.chain import chain_for
from dapr.experiment.spec import Experiment, RetrieverSpec, TrainSpec, check_fields, default
from dapr.experiment.train_checks import training_order
from dapr.experiment.train_cross import (
    check_cross,
    denoised,
    fit_cross,
    held_out,
    pseudo,
    teacher_examples,
    warn_if_nothing,
)
from dapr.experiment.train_sources import (
    add_counts,
    augment_queries,
    check_sources,
    describe_source,
    key_parts,
    load_sources,
    write_card,
)
from dapr.store.cache import content_key
from dapr.training.span_pooling import check_span, in_documents

VERSION = "2"
"""Part of every model's key; 2: rows short of negatives are left out, not every row cut."""
NEGATIVES = ("same_document", "mined", "count", "sample_from", "denoise")
DENOISE = ("model", "below", "depth")
AUGMENT = (
    "split", "dataset", "queries", "retriever", "model", "depth", "positive_above", "negative_below"
)  # fmt: skip
KINDS = ("dual", "cross")


def train_spec(name: Any, spec: Any, path: Path, retrievers: dict[str, RetrieverSpec]) -> TrainSpec:
    """One entry of the ``train:`` block (its contextualizer left for the caller to parse), or a
    ConfigError naming the file and the key."""
    from dapr.training import cross, dual

    where = f"train.{name}"
    if not isinstance(name, str) or not name.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(f"{path}: {where}: name a model with letters, digits, '-' and '_'")
    check_fields(spec, TrainSpec, path, where)
    kind = spec.get("kind", default(TrainSpec, "kind"))
    if kind not in KINDS:
        raise ConfigError(f"{path}: {where}.kind: {kind!r} is not one of: {', '.join(KINDS)}")
    losses = cross.LOSSES if kind == "cross" else dual.LOSSES
    loss = spec.get("loss") or losses[0]
    if loss not in losses:
        raise ConfigError(
            f"{path}: {where}.loss: unknown loss {loss!r} for a {kind} model; choose from: "
            f"{', '.join(losses)}"
        )
    if spec.get("min_grade", 1) < 1:
        raise ConfigError(f"{path}: {where}.min_grade must be at least 1, got {spec['min_grade']}")
    negatives = spec.get("negatives", {})
    for key, value in negatives.items():
        if key not in NEGATIVES:
            choices = ", ".join(NEGATIVES)
            raise ConfigError(
                f"{path}: unknown key {f'{where}.negatives.{key}'!r}; valid keys: {choices}"
            )
        if key == "denoise":
            _check_denoise(value, negatives, path, f"{where}.negatives.denoise")
            continue
        if key != "mined" and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ConfigError(
                f"{path}: {where}.negatives.{key} must be an integer >= 0, got {value!r}"
            )
    mined = negatives.get("mined")
    if mined is None and negatives.get("sample_from"):
        raise ConfigError(f"{path}: {where}.negatives.sample_from needs negatives.mined")
    if mined is not None and (mined not in [*retrievers] or retrievers[mined].level != "passage"):
        passage = [s for s, r in retrievers.items() if r.level == "passage"]
        raise ConfigError(
            f"{path}: {where}.negatives.mined: {mined!r} is not a passage-level retriever of "
            f"this experiment; choose from: {', '.join(passage) or 'none defined'}"
        )
    check_cross(spec, kind, retrievers, path, where)
    if spec.get("augment"):
        _check_augment(spec["augment"], retrievers, path, f"{where}.augment")
    workers = spec.get("workers", 1)
    if workers < 1 or (workers > 1 and kind == "cross"):
        raise ConfigError(
            f"{path}: {where}.workers must be a positive integer (1 for a cross-encoder), "
            f"got {workers}"
        )
    fields = sorted(f.name for f in dataclasses.fields(dual.Settings))
    unknown = sorted(set(spec.get("args", {})) - set(fields))
    if unknown:
        raise ConfigError(
            f"{path}: unknown key {f'{where}.args.{unknown[0]}'!r}; valid keys: {', '.join(fields)}"
        )
    try:
        late = dual.Settings(**spec.get("args", {})).encoding == "late"
    except DaprError as e:
        raise ConfigError(f"{path}: {where}.args: {e}") from None
    model = spec.get("model", default(TrainSpec, "model"))
    if late and (problem := check_span(kind, loss, workers, bool(spec.get("augment")), model)):
        raise ConfigError(f"{path}: {where}.args.encoding: late {problem}")
    sources = check_sources(spec, path, where)
    spec = {k: v for k, v in spec.items() if k != "contextualizer"}
    return TrainSpec(**{**spec, "loss": loss, "sources": sources})


def _check_denoise(value: Any, negatives: dict, path: Path, where: str) -> None:
    """``denoise: {model: <cross-encoder>, below: 0.1, depth: 50}``, for mined negatives."""
    from dapr.training.denoise import check_threshold

    if not isinstance(value, dict) or "model" not in value:
        raise ConfigError(f"{path}: {where}: give {{model: <cross-encoder>, below: 0.1}}")
    unknown = sorted(set(value) - set(DENOISE))
    if unknown:
        raise ConfigError(
            f"{path}: unknown key {f'{where}.{unknown[0]}'!r}; valid keys: {', '.join(DENOISE)}"
        )
    if "mined" not in negatives:
        raise ConfigError(f"{path}: {where}: denoising filters mined negatives; set mined: too")
    try:
        check_threshold(value.get("below", 0.1))
    except DaprError as e:
        raise ConfigError(f"{path}: {where}: {e}") from None
    depth = value.get("depth", 50)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ConfigError(f"{path}: {where}.depth must be a positive integer, got {depth!r}")


def _check_augment(value: dict, retrievers: dict, path: Path, where: str) -> None:
    from dapr.training.augment import check_thresholds

    unknown = sorted(set(value) - set(AUGMENT))
    if unknown:
        raise ConfigError(
            f"{path}: unknown key {f'{where}.{unknown[0]}'!r}; valid keys: {', '.join(AUGMENT)}"
        )
    if "dataset" in value and "split" not in value:
        raise ConfigError(f"{path}: {where}.dataset: name the split of its queries (split: ...)")
    if ("queries" in value) == ("split" in value):
        raise ConfigError(
            f"{path}: {where}: give the unlabelled queries as split: <name> (of this dataset, or "
            "of dataset: <name>) or as queries: <file>, one of them"
        )
    for key in ("split", "dataset", "queries", "retriever", "model"):
        given = value.get(key)
        if (key in value or key in ("retriever", "model")) and not (
            given and isinstance(given, str)
        ):
            raise ConfigError(f"{path}: {where}.{key}: give a name (see the README's Training)")
    if "queries" in value and not Path(value["queries"]).is_file():
        raise ConfigError(
            f"{path}: {where}.queries: {value['queries']!r} is not a file; give a queries file "
            "(id<TAB>text lines, or JSON lines with _id and text)"
        )
    if value["retriever"] not in retrievers or retrievers[value["retriever"]].level != "passage":
        raise ConfigError(
            f"{path}: {where}.retriever: {value['retriever']!r} is not a passage-level retriever "
            f"of this experiment; choose from: {', '.join(retrievers) or 'none defined'}"
        )
    try:
        check_thresholds(value.get("positive_above", 0.9), value.get("negative_below", 0.1))
    except DaprError as e:
        raise ConfigError(f"{path}: {where}: {e}") from None
    depth = value.get("depth", 20)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ConfigError(f"{path}: {where}.depth must be a positive integer, got {depth!r}")


def train_models(experiment: Experiment, runner: Any, dataset: Dataset) -> list[dict]:
    """Each model of the experiment's ``train:`` block, trained or found in ``runner``'s cache,
    then named ``trained/<name>``; one record per model (name, key, status, seconds, its card). The
    runner contextualizes the passages and runs the retrievers that mine negatives. Every
    model's data is read before the first trains (a missing split stops it before any work), and
    each trains after the models its training uses."""
    loaded: dict[str, Dataset] = {}
    inputs = {
        name: (
            load_sources(name, spec, dataset, loaded),
            augment_queries(name, spec.augment, dataset) if spec.augment else None,
        )
        for name, spec in experiment.train.items()
    }
    return [
        _train_one(experiment, runner, dataset, name, experiment.train[name], *inputs[name])
        for name in training_order(experiment.train, experiment.retrievers)
    ]


def _train_one(
    experiment: Experiment,
    runner: Any,
    dataset: Dataset,
    name: str,
    spec: TrainSpec,
    sources: list[tuple[Dataset, str]],
    unlabelled: dict[str, str] | None,
) -> dict:
    from dapr.checkpoints import revision
    from dapr.training.dual import Settings
    from dapr.training.examples import examples

    cross_default = {"learning_rate": 1e-5} if spec.kind == "cross" else {}  # RocketQA's
    settings = Settings(**{**cross_default, **spec.args})
    cache, progress = runner.cache, runner.progress
    chains = [
        chain_for(spec.contextualizer, d) if spec.contextualizer else None for d, _ in sources
    ]
    mined_system = spec.negatives.get("mined")
    mined = [
        _run_on(experiment, runner, d, mined_system, s) if mined_system else (None, None)
        for d, s in sources
    ]
    teacher = spec.distill.get("teacher") if spec.distill else None
    taught = [_run_on(experiment, runner, d, teacher, s) if teacher else (None, None)
              for d, s in sources]  # fmt: skip
    denoiser = spec.negatives.get("denoise")
    augmented, augmented_key = None, None
    if spec.augment:
        augmented, augmented_key = _run_on(
            experiment, runner, dataset, spec.augment["retriever"], spec.augment.get("split"),
            unlabelled,
        )  # fmt: skip
    data, splits, hashes, chain_ids, mined_key = key_parts(spec, sources, chains, mined)
    key = content_key(
        spec.kind,
        VERSION,
        spec.model,
        revision(spec.model),
        data,
        splits,
        hashes,
        chain_ids,
        spec.min_grade,
        spec.negatives,
        mined_key,
        revision(denoiser["model"]) if denoiser else None,
        spec.augment,
        augmented_key,  # the key of the run over the augmentation queries: it covers them
        revision(spec.augment["model"]) if spec.augment else None,
        spec.loss,
        settings.identity(),
        *([spec.head] if spec.head != "fresh" else []),  # keys made before heads stay
        *(["usual-negatives"] if spec.augment else []),  # pseudo rows once took the fewest
        *(["seeded-head"] if spec.kind == "cross" else []),  # its head's start once drifted
        *([spec.calibration, spec.calibration_share] if spec.calibration != "none" else []),
        *([spec.distill, [k for _, k in taught]] if teacher else []),
    )
    status = "cached"
    started = time.perf_counter()
    with cache.lock("models", key):
        if not cache.valid("models", key):
            status = "computed"
            rows, denoising, trained_on, texts, distilled = [], None, [], None, []
            documents: dict[str, list[str]] = {}  # span pooling's
            for (source, split_name), chain, (mined_run, _), (teacher_run, _) in zip(
                sources, chains, mined, taught
            ):
                split = source.split(split_name)
                source_texts = dict(runner.passage_texts(source, chain, f"train {name}"))
                if source is dataset:
                    texts = source_texts
                if denoiser:
                    since = progress.started("denoise", name, f"{source.name}/{split_name}")
                    mined_run, counts = denoised(denoiser, mined_run, split, source_texts)
                    denoising = add_counts(denoising, counts)
                    removed = f"{sum(counts['removed']):,} of {sum(counts['scored']):,}"
                    progress.finished("denoise", name, since, f"{removed} candidates removed")
                if settings.encoding == "late":  # rows name their passages inside documents
                    tag = f"{source.corpus.fingerprint}:"
                    source_texts, found = in_documents(source.corpus, source_texts, tag)
                    documents.update(found)
                where = f"train.{name}: {source.name}/{split_name}: " if spec.sources else ""
                try:
                    rows += examples(
                        split.queries,
                        split.qrels,
                        source_texts,
                        source.corpus,
                        spec.min_grade,
                        spec.negatives.get("same_document", 0),
                        mined_run,
                        spec.negatives.get("count", 1 if mined_run is not None else 0),
                        settings.seed,
                        spec.negatives.get("sample_from", 0),
                    )
                except DaprError as e:
                    raise DaprError(f"{where}{e}") from None
                trained_on.append(describe_source(source, split_name, split))
                if teacher_run is not None:
                    distilled += teacher_examples(
                        spec.distill, teacher_run, split.queries, source_texts, settings.seed
                    )
            rows, held = held_out(name, spec, rows, settings.seed)  # before pseudo-labelled rows
            augmentation = None
            if augmented is not None:
                assert spec.augment is not None and unlabelled is not None  # set with it
                if texts is None:  # the augmentation run is over the experiment's corpus
                    chain = chain_for(spec.contextualizer, dataset) if spec.contextualizer else None
                    texts = dict(runner.passage_texts(dataset, chain, f"train {name}"))
                since = progress.started("label", name, f"{len(unlabelled):,} queries")
                labelled, augmentation = pseudo(spec.augment, augmented, unlabelled, texts, rows)
                progress.finished("label", name, since, f"{len(labelled):,} examples")
                rows += labelled
            if teacher and not distilled:  # once silently trained without its warm start
                raise DaprError(
                    f"train.{name}.distill: no training query has {spec.distill.get('count', 3)} "
                    f"+ 1 candidates of different scores in the run of {teacher!r}; lower count "
                    "or give a teacher that ranks more passages"
                )
            warn_if_nothing(name, denoising, augmentation)
            since = progress.started("train", name, f"{len(rows):,} examples")
            with cache.writing("models", key, resume=True) as entry:
                gpus = experiment.resources.get("gpus_per_job", 0)
                record = _fit(
                    spec, rows, entry, settings, progress.line, gpus, distilled, held, documents
                )
                if denoising is not None:
                    record["denoising"] = denoising
                if augmentation is not None:
                    record["augmentation"] = augmentation
                write_card(entry, name, spec, trained_on, record)
                for old in entry.glob("**/checkpoints/checkpoint-*"):
                    shutil.rmtree(old, ignore_errors=True)
            progress.finished("train", name, since, f"{record['steps']} steps")
    path = cache.path("models", key) / "model"
    _point(name, path)
    card = json.loads((path / "dapr_training.json").read_text())
    seconds = time.perf_counter() - started
    return {"name": name, "key": key, "status": status, "seconds": seconds, "card": card}


def _run_on(
    experiment: Experiment,
    runner: Any,
    dataset: Dataset,
    system: str,
    split: str | None,
    queries: dict[str, str] | None = None,
) -> tuple[Any, str]:
    """The run of the experiment's ``system`` (after its first stage, for a reranker) over the
    queries of ``split``, or over ``queries`` when they are not that split's (cached as any run
    is), and its cache key."""
    if queries is not None and (
        split not in dataset.splits or dataset.split(split).queries != queries
    ):
        split = AUGMENT_SPLIT
        dataset = replace(dataset, splits={**dataset.splits, split: Split(queries, {})})
    assert split is not None  # without a split the queries are given: AUGMENT_SPLIT above
    stages, stage = set(), experiment.retrievers[system]
    stages.add(system)
    while stage.first_stage is not None:
        stages.add(stage.first_stage)
        stage = experiment.retrievers[stage.first_stage]
    alone = replace(
        experiment,
        split=split,
        retrievers={s: spec for s, spec in experiment.retrievers.items() if s in stages},
        fusion={},
        maxp=(),
        sweep=None,
        train={},
    )
    outcome = type(runner)(alone, runner.cache).run(dataset, evaluate=())
    return outcome.runs[system], outcome.keys[system]


AUGMENT_SPLIT = "augmentation"
"""The name a run over augmentation queries from elsewhere (a file, another dataset) goes by."""


def _fit(
    spec: TrainSpec,
    rows: list,
    entry: Path,
    settings: Any,
    log: Any,
    experiment_gpus: float,
    teacher: list,
    held: list,
    documents: dict[str, list[str]] | None = None,
) -> dict:
    """Train ``spec``'s model on ``rows`` (a cross-encoder after distilling ``teacher``, then
    calibrated on the ``held`` rows; a dual encoder's span pooling in ``documents``) into the
    cache entry ``entry``."""
    from dapr.checkpoints import sentence_transformer

    if spec.kind == "cross":
        return fit_cross(spec, rows, entry, settings, log, teacher, held)
    loss = spec.loss
    assert loss is not None  # reading the file sets the kind's default
    if spec.workers > 1:  # Ray Train: on the cluster of --ray-address, else a local Ray
        import ray

        from dapr.ray_actors import start_ray
        from dapr.training.distributed import train_on_ray

        if not ray.is_initialized():
            start_ray(os.environ.get("RAY_ADDRESS"))
        gpus = experiment_gpus > 0
        return train_on_ray(spec.model, rows, entry, loss, settings, spec.workers, gpus)
    from dapr.training.dual import seeded, train_dual_encoder

    seeded(settings.seed)  # any module the model adds starts alike whatever trained before
    model = sentence_transformer(spec.model, None, None, None)
    return train_dual_encoder(model, rows, entry, loss, settings, log, documents=documents)


def _point(name: str, path: Path) -> None:
    """Record that ``trained/<name>`` is ``path`` (written atomically)."""
    from dapr.checkpoints import trained_pointer
    from dapr.io.files import write_bytes_atomic

    pointer = trained_pointer(name)
    pointer.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(pointer, [json.dumps({"path": str(path)}).encode()])
