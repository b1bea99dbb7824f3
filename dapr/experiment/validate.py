"""Check an experiment file against the schema (:mod:`dapr.experiment.spec`) and against what
it names: registered components and their arguments, systems and their levels, abilities a
fusion needs (:mod:`dapr.interfaces`). Every error names the file, the key and the choices."""

from __future__ import annotations

import inspect
from dataclasses import replace
from pathlib import Path
from typing import Any

from dapr import registry
from dapr.datasets.irds import IRDS, check_irds
from dapr.errors import ConfigError
from dapr.evaluation import parse_metric
from dapr.experiment.arguments import check_args
from dapr.experiment.chain import ContextStep
from dapr.experiment.published import published_block
from dapr.experiment.spec import (
    CATEGORY_SOURCES,
    LEVELS,
    Experiment,
    FusionSpec,
    Resources,
    RetrieverSpec,
    TrainSpec,
    check_fields,
    default,
    wrapped,
)
from dapr.experiment.sweep_spec import sweep_spec
from dapr.experiment.train_checks import check_training
from dapr.experiment.training import train_spec
from dapr.interfaces import PassageFuser, Reranker, ScopedRetriever, ScopingFuser
from dapr.io import names
from dapr.retrievers.support.presets import tuned_fusion, with_preset


def validate(raw: dict, path: Path) -> Experiment:
    """Typed settings, or a ConfigError naming the file, the key and the valid choices."""
    check_fields(raw, Experiment, path, "")
    for required in ("dataset", "retrievers"):
        if required not in raw:
            raise ConfigError(f"{path}: missing key {required!r}")
    dataset = raw["dataset"]
    if str(dataset).startswith(IRDS):  # an ir_datasets id: known, and its dataset_args valid
        wrapped(path, "dataset", lambda: check_irds(dataset, raw.get("dataset_args") or {}))
    elif dataset not in registry.datasets and not Path(dataset).is_dir():
        raise ConfigError(
            f"{path}: dataset: {dataset!r} is neither a registered dataset nor a directory; "
            f"choose from: {', '.join(registry.datasets.names())}, or give a dataset directory"
        )
    elif raw.get("dataset_args") and dataset not in registry.datasets:
        raise ConfigError(
            f"{path}: dataset_args: {dataset!r} is a dataset directory, read as it is; remove "
            "dataset_args, or name a registered dataset that takes them"
        )
    if not raw["retrievers"]:
        raise ConfigError(f"{path}: retrievers: give at least one retrieval system")
    if "metrics" in raw and not raw["metrics"]:
        raise ConfigError(f"{path}: metrics: give at least one metric, e.g. [nDCG@10]")
    metrics = tuple(
        wrapped(path, "metrics", lambda m=m: parse_metric(str(m))).name
        for m in raw.get("metrics", default(Experiment, "metrics"))
    )
    for key in ("retrievers", "fusion"):
        for system in raw.get(key) or {}:  # runs/<system>.trec, and the run's tag
            names.component(system, path, key, "system name")
    retrievers: dict[str, RetrieverSpec] = {}
    for system, spec in raw["retrievers"].items():
        retrievers[system] = _retriever(spec, path, f"retrievers.{system}", retrievers)
    fusion = {
        system: _fusion(spec, path, f"fusion.{system}", retrievers, raw["retrievers"])
        for system, spec in raw.get("fusion", {}).items()
    }
    clash = set(retrievers) & set(fusion)
    if clash:
        raise ConfigError(f"{path}: system name {sorted(clash)[0]!r} is used twice; rename one")
    depth = raw.get("depth", default(Experiment, "depth"))  # its range: check_fields above
    workers = raw.get("workers")
    categories = raw.get("categories", default(Experiment, "categories"))
    if categories not in CATEGORY_SOURCES and not Path(categories).is_file():
        raise ConfigError(
            f"{path}: categories: {categories!r} is neither one of {', '.join(CATEGORY_SOURCES)} "
            "nor an existing TSV file of query_id<TAB>category rows"
        )
    split = raw.get("split", default(Experiment, "split"))
    sweep = sweep_spec(raw["sweep"], path, fusion, split) if "sweep" in raw else None
    maxp = _maxp(raw.get("maxp", False), path, retrievers, fusion)
    systems = [("retrievers", s) for s in retrievers] + [("fusion", s) for s in fusion]
    systems_named = [*retrievers, *fusion]
    twins = [(f"maxp (the twin of {s!r})", f"{s}@maxp") for s in maxp]
    _distinct(path, systems + twins, "runs/{}.trec")
    resources = raw.get("resources", {})
    check_fields(resources, Resources, path, "resources")  # each >= 0, as Resources declares
    return Experiment(
        name=_name(raw.get("name", path.stem), path),
        dataset=raw["dataset"],
        dataset_args=raw.get("dataset_args", {}),
        split=split,
        depth=depth,
        metrics=metrics,
        retrievers=retrievers,
        fusion=fusion,
        workers=workers,
        categories=categories,
        sweep=sweep,
        maxp=maxp,
        resources=resources,
        train=_train(raw.get("train", {}), path, retrievers, depth, resources),
        published=published_block(
            raw["published"], path, metrics, [*systems_named, *(name for _, name in twins)]
        )
        if "published" in raw
        else None,
    )


def _name(name: Any, path: Path) -> str:
    """The results folder's name: ``/`` nests folders under ``results/``, and each part is a
    name (:mod:`dapr.io.names`), so none climbs out, hides or holds a separator."""
    parts = name.split("/") if isinstance(name, str) else [name]
    for part in parts:
        wrong = names.problem(part) if part != "" else "is empty"
        if wrong is not None:
            raise ConfigError(
                f"{path}: name: {name!r} cannot name a folder under results/: its part {part!r} "
                f"{wrong}; {names.FIX}, e.g. rank_fusion"
            )
    return name


def _maxp(
    value: bool | list, path: Path, retrievers: dict[str, RetrieverSpec], fusion: dict
) -> tuple[str, ...]:
    """``true`` (every passage-level system), ``false``, or a list of passage-level systems."""
    passage_level = [s for s, r in retrievers.items() if r.level == "passage"] + list(fusion)
    if isinstance(value, bool):
        return tuple(passage_level) if value else ()
    for system in value:
        if system not in passage_level:
            raise ConfigError(
                f"{path}: maxp: {system!r} is not a passage-level system of this experiment; "
                f"choose from: {', '.join(passage_level) or 'none defined'}"
            )
    return tuple(value)


def _retriever(
    spec: Any, path: Path, where: str, earlier: dict[str, RetrieverSpec]
) -> RetrieverSpec:
    check_fields(spec, RetrieverSpec, path, where)
    if "name" not in spec:
        raise ConfigError(f"{path}: {where}: missing key 'name' (a registered retriever)")
    first_stage = spec.get("first_stage")
    default_level = (
        earlier[first_stage].level if first_stage in earlier else default(RetrieverSpec, "level")
    )
    level = spec.get("level", default_level)
    if level not in LEVELS:
        raise ConfigError(f"{path}: {where}.level: {level!r} is not one of: {', '.join(LEVELS)}")
    factory = wrapped(path, f"{where}.name", lambda: registry.retrievers.get(spec["name"]))
    _check_stage(factory, spec["name"], first_stage, level, earlier, path, where)
    args = wrapped(
        path,
        f"{where}.args.preset",
        lambda: with_preset(spec["name"], factory, spec.get("args", {}), level),
    )
    check_args(factory, args, path, f"{where}.args")
    # every retriever checks its settings at once (models load later, when it indexes)
    wrapped(path, f"{where}.args", lambda: factory(**args))
    steps = context_steps(spec.get("contextualizer"), path, f"{where}.contextualizer")
    if steps and level == "document":
        raise ConfigError(
            f"{path}: {where}.contextualizer: contextualizers apply to passages; "
            "remove it or set level: passage"
        )
    return RetrieverSpec(spec["name"], level, args, steps, first_stage, spec.get("approach"))


def _distinct(path: Path, named: list[tuple[str, str]], file: str) -> None:
    """A ConfigError when two of the ``(key, name)`` pairs would write one ``file``."""
    same = names.collide(named)
    if same is not None:
        (first, a), (second, b) = same
        raise ConfigError(
            f"{path}: {second}: {b!r} and {first} {a!r} would write one file, "
            f"{file.format(b)} (on macOS and Windows names that differ only by case or Unicode "
            "form are one file); rename one"
        )


def _train(
    raw: Any, path: Path, retrievers: dict[str, RetrieverSpec], depth: int, resources: dict
) -> dict[str, TrainSpec]:
    """The ``train:`` block, each entry checked, then all of them together (sources, loops,
    negatives, precision: :mod:`dapr.experiment.train_checks`)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: train: expected a mapping of model names to settings")
    for name in raw:  # $DAPR_HOME/trained/<name>.json, and denoising-<name>.png in the results
        names.component(name, path, "train", "model name", "wiki-title")
    _distinct(path, [("train", name) for name in raw], "$DAPR_HOME/trained/{}.json")
    train = {
        name: replace(
            train_spec(name, spec, path, retrievers),
            contextualizer=context_steps(spec.get("contextualizer"), path, f"train.{name}"),
        )
        for name, spec in raw.items()
    }
    check_training(train, retrievers, depth, resources.get("gpus_per_job", 0), path)
    return train


def context_steps(value: Any, path: Path, where: str) -> tuple[ContextStep, ...]:
    """``title``, ``{name: keyphrases, args: {...}}`` or a list of these, applied in order."""
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    steps = []
    for n, item in enumerate(items):
        at = f"{where}[{n}]" if isinstance(value, list) else where
        if isinstance(item, dict):
            check_fields(item, ContextStep, path, at)
            if "name" not in item:
                raise ConfigError(f"{path}: {at}: missing key 'name' (a registered contextualizer)")
            step = ContextStep(item["name"], item.get("args", {}))
        elif isinstance(item, str):
            step = ContextStep(item)
        else:
            raise ConfigError(
                f"{path}: {at} must be a contextualizer name or a mapping {{name, args}}, "
                f"got {item!r}"
            )
        factory = wrapped(
            path,
            f"{at}.name" if isinstance(item, dict) else at,
            lambda s=step: registry.contextualizers.get(s.name),
        )
        check_args(factory, dict(step.args), path, f"{at}.args")
        steps.append(step)
    return tuple(steps)


def _check_stage(
    factory: Any,
    name: str,
    first_stage: str | None,
    level: str,
    earlier: dict[str, RetrieverSpec],
    path: Path,
    where: str,
) -> None:
    """A reranker needs an earlier ``first_stage`` system at its level; a retriever, none."""
    reranks = isinstance(factory, Reranker)
    if reranks and first_stage is None:
        raise ConfigError(
            f"{path}: {where}: {name!r} re-ranks another system's run; add first_stage: <system> "
            f"naming one of: {', '.join(earlier) or 'none defined before it'}"
        )
    if not reranks and first_stage is not None:
        raise ConfigError(
            f"{path}: {where}.first_stage: {name!r} is a first-stage retriever, not a reranker; "
            "remove first_stage"
        )
    if first_stage is None:
        return
    if first_stage not in earlier:
        raise ConfigError(
            f"{path}: {where}.first_stage: {first_stage!r} is not a system defined before it; "
            f"choose from: {', '.join(earlier) or 'none'}"
        )
    if earlier[first_stage].level != level:
        raise ConfigError(
            f"{path}: {where}.level: a reranker works at the level of its first stage "
            f"{first_stage!r} ({earlier[first_stage].level}); remove level or set it to that"
        )


def _fusion(
    spec: Any, path: Path, where: str, systems: dict[str, RetrieverSpec], raw_systems: dict
) -> FusionSpec:
    """``{name, document, passage, args}`` or ``{name, passages: [a, b], args}``; the passage
    system's preset fills in what it tuned for this fuser."""
    check_fields(spec, FusionSpec, path, where)
    if "name" not in spec:
        raise ConfigError(f"{path}: {where}: missing key 'name' (a registered fuser)")
    factory = wrapped(path, f"{where}.name", lambda: registry.fusers.get(spec["name"]))
    if "passages" in spec:
        _passage_pair(spec, factory, path, where, systems)
    else:
        for key in ("document", "passage"):
            if key not in spec:
                raise ConfigError(
                    f"{path}: {where}: missing key {key!r} (or give passages: [a, b] to fuse "
                    "two passage-level systems)"
                )
            _input(spec[key], key, key, path, where, systems)
    if isinstance(factory, ScopingFuser):
        _scoring_system(spec, factory, path, where, systems)
    args = spec.get("args", {})
    if "passage" in spec:
        passage = raw_systems[spec["passage"]]
        retriever = registry.retrievers.get(passage["name"])
        document = (raw_systems[spec["document"]].get("args") or {}).get("preset")
        tuned = tuned_fusion(retriever, passage.get("args") or {}, spec["name"], document)
        args = {**tuned, **args}
        if "alpha" not in args and _required(factory, "alpha"):
            raise ConfigError(
                f"{path}: {where}.args: missing alpha (the weight of the document scores, 0 to "
                f"1); give it, or use a passage retriever preset the paper tuned it for (e.g. "
                f"preset: dragon_plus)"
            )
    check_args(factory, args, path, f"{where}.args")
    wrapped(path, f"{where}.args", lambda: factory(**args))
    return FusionSpec(
        spec["name"],
        spec.get("document"),
        spec.get("passage"),
        tuple(spec.get("passages", ())),
        args,
        spec.get("approach"),
    )


def _required(factory: Any, argument: str) -> bool:
    """Whether ``factory`` takes ``argument`` without a default."""
    parameter = inspect.signature(factory).parameters.get(argument)
    return parameter is not None and parameter.default is inspect.Parameter.empty


def _passage_pair(
    spec: dict, factory: Any, path: Path, where: str, systems: dict[str, RetrieverSpec]
) -> None:
    if "document" in spec or "passage" in spec:
        raise ConfigError(
            f"{path}: {where}: give either document and passage, or passages; not both"
        )
    pair = spec["passages"]
    if len(pair) != 2 or not all(isinstance(s, str) for s in pair) or pair[0] == pair[1]:
        raise ConfigError(
            f"{path}: {where}.passages: name two different passage-level systems, got {pair!r}"
        )
    if not isinstance(factory, PassageFuser):
        raise ConfigError(
            f"{path}: {where}.name: fuser {spec['name']!r} fuses a document and a passage run "
            "only; give document and passage instead of passages"
        )
    for n, system in enumerate(pair):
        _input(system, "passage", f"passages[{n}]", path, where, systems)


def _input(
    system: str, level: str, key: str, path: Path, where: str, systems: dict[str, RetrieverSpec]
) -> None:
    if system not in systems or systems[system].level != level:
        choices = [s for s, r in systems.items() if r.level == level]
        raise ConfigError(
            f"{path}: {where}.{key}: {system!r} is not a {level}-level retriever of this "
            f"experiment; choose from: {', '.join(choices) or 'none defined'}"
        )


def _scoring_system(
    spec: dict, factory: Any, path: Path, where: str, systems: dict[str, RetrieverSpec]
) -> None:
    """A hierarchical fuser needs a passage retriever that can score given passages."""
    if "passages" in spec:
        raise ConfigError(
            f"{path}: {where}: fuser {spec['name']!r} searches within the top documents; "
            "give document and passage instead of passages"
        )
    passage = systems[spec["passage"]]
    retriever = registry.retrievers.get(passage.name)
    if passage.first_stage is not None or not isinstance(retriever, ScopedRetriever):
        raise ConfigError(
            f"{path}: {where}.passage: {spec['passage']!r} ({passage.name}) cannot score "
            "passages within given documents; use a first-stage retriever that has a score "
            "method (bm25, dense, sparse, late_interaction)"
        )
