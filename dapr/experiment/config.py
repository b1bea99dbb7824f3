"""The experiment file: what it may contain, and its validation into typed settings."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dapr import registry
from dapr.contextualizers.pipeline import ContextStep
from dapr.errors import ConfigError, DaprError
from dapr.evaluation import DEFAULT_METRICS, parse_metric

LEVELS = ("passage", "document")


@dataclass(frozen=True)
class RetrieverSpec:
    """One retrieval system: a registered retriever over passages or whole documents."""

    name: str
    level: str = "passage"
    args: dict[str, Any] = field(default_factory=dict)
    contextualizer: tuple[ContextStep, ...] = ()
    """Steps applied in order to every document's passages before indexing."""
    first_stage: str | None = None
    """For a reranker: the system of the experiment whose run it re-scores."""


@dataclass(frozen=True)
class FusionSpec:
    """A fuser combining a document-level and a passage-level system of the same experiment."""

    name: str
    document: str
    passage: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Experiment:
    name: str
    dataset: str
    split: str = "test"
    depth: int = 1000
    metrics: tuple[str, ...] = DEFAULT_METRICS
    retrievers: dict[str, RetrieverSpec] = field(default_factory=dict)
    fusion: dict[str, FusionSpec] = field(default_factory=dict)
    dataset_args: dict[str, Any] = field(default_factory=dict)
    workers: int | None = None
    """Processes for contextualizing a corpus (default: every core)."""


_TOP = {
    "name": str,
    "dataset": str,
    "dataset_args": dict,
    "split": str,
    "depth": int,
    "metrics": list,
    "retrievers": dict,
    "fusion": dict,
    "workers": int,
}
_KIND = {
    str: "a string",
    int: "an integer",
    dict: "a mapping",
    list: "a list",
    (str, type(None)): "a string or null",
    (str, dict, list, type(None)): "a name, a mapping {name, args} or a list of them",
}
_RETRIEVER = {
    "name": str,
    "level": str,
    "args": dict,
    "contextualizer": (str, dict, list, type(None)),
    "first_stage": str,
}
_CONTEXT_STEP = {"name": str, "args": dict}
_FUSION = {"name": str, "document": str, "passage": str, "args": dict}


def load(path: Path, overrides: list[str] = ()) -> Experiment:
    """Read, override (``key.sub=value``, values parsed as YAML) and validate an experiment file."""
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such experiment file") from None
    except yaml.YAMLError as error:
        line = getattr(getattr(error, "problem_mark", None), "line", None)
        where = f"{path}:{line + 1}" if line is not None else str(path)
        raise ConfigError(f"{where}: not valid YAML ({getattr(error, 'problem', error)})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of settings at the top level")
    for assignment in overrides:
        _override(raw, assignment, path)
    return validate(raw, path)


def _override(raw: dict, assignment: str, path: Path) -> None:
    key, sep, value = assignment.partition("=")
    if not sep or not key:
        raise ConfigError(f"--set {assignment!r}: write it as key=value, e.g. --set split=dev")
    *parents, last = key.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{path}: --set {key}: {part!r} is not a mapping")
    node[last] = yaml.safe_load(value) if value else ""


def validate(raw: dict, path: Path) -> Experiment:
    """Typed settings, or a ConfigError naming the file, the key and the valid choices."""
    _check_fields(raw, _TOP, path, "")
    for required in ("dataset", "retrievers"):
        if required not in raw:
            raise ConfigError(f"{path}: missing key {required!r}")
    dataset = raw["dataset"]
    if dataset not in registry.datasets and not Path(dataset).is_dir():
        raise ConfigError(
            f"{path}: dataset: {dataset!r} is neither a registered dataset nor a directory; "
            f"choose from: {', '.join(registry.datasets.names())}, or give a dataset directory"
        )
    metrics = tuple(raw.get("metrics", DEFAULT_METRICS))
    for m in metrics:
        _wrap(path, "metrics", lambda m=m: parse_metric(str(m)))
    retrievers: dict[str, RetrieverSpec] = {}
    for system, spec in raw["retrievers"].items():
        retrievers[system] = _retriever(spec, path, f"retrievers.{system}", retrievers)
    fusion = {
        system: _fusion(spec, path, f"fusion.{system}", retrievers)
        for system, spec in raw.get("fusion", {}).items()
    }
    clash = set(retrievers) & set(fusion)
    if clash:
        raise ConfigError(f"{path}: system name {sorted(clash)[0]!r} is used twice; rename one")
    depth = raw.get("depth", 1000)
    if depth < 1:
        raise ConfigError(f"{path}: depth must be a positive integer, got {depth}")
    workers = raw.get("workers")
    if workers is not None and workers < 1:
        raise ConfigError(f"{path}: workers must be a positive integer, got {workers}")
    return Experiment(
        name=raw.get("name", path.stem),
        dataset=raw["dataset"],
        dataset_args=raw.get("dataset_args", {}),
        split=raw.get("split", "test"),
        depth=depth,
        metrics=metrics,
        retrievers=retrievers,
        fusion=fusion,
        workers=workers,
    )


def _retriever(
    spec: Any, path: Path, where: str, earlier: dict[str, RetrieverSpec]
) -> RetrieverSpec:
    _check_fields(spec, _RETRIEVER, path, where)
    if "name" not in spec:
        raise ConfigError(f"{path}: {where}: missing key 'name' (a registered retriever)")
    first_stage = spec.get("first_stage")
    default_level = earlier[first_stage].level if first_stage in earlier else "passage"
    level = spec.get("level", default_level)
    if level not in LEVELS:
        raise ConfigError(f"{path}: {where}.level: {level!r} is not one of: {', '.join(LEVELS)}")
    factory = _wrap(path, f"{where}.name", lambda: registry.retrievers.get(spec["name"]))
    _check_stage(factory, spec["name"], first_stage, level, earlier, path, where)
    args = _wrap(
        path,
        f"{where}.args.preset",
        lambda: registry.with_preset(spec["name"], factory, spec.get("args", {}), level),
    )
    _check_args(factory, args, path, f"{where}.args")
    steps = context_steps(spec.get("contextualizer"), path, f"{where}.contextualizer")
    if steps and level == "document":
        raise ConfigError(
            f"{path}: {where}.contextualizer: contextualizers apply to passages; "
            "remove it or set level: passage"
        )
    return RetrieverSpec(spec["name"], level, args, steps, first_stage)


def context_steps(value: Any, path: Path, where: str) -> tuple[ContextStep, ...]:
    """``title``, ``{name: keyphrases, args: {...}}`` or a list of these, applied in order."""
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    steps = []
    for n, item in enumerate(items):
        at = f"{where}[{n}]" if isinstance(value, list) else where
        if isinstance(item, dict):
            _check_fields(item, _CONTEXT_STEP, path, at)
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
        factory = _wrap(
            path,
            f"{at}.name" if isinstance(item, dict) else at,
            lambda s=step: registry.contextualizers.get(s.name),
        )
        _check_args(factory, dict(step.args), path, f"{at}.args")
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
    """A reranker needs a ``first_stage`` system defined before it, at the same level; a
    retriever takes none."""
    reranks = callable(getattr(factory, "rerank", None))
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


def _fusion(spec: Any, path: Path, where: str, systems: dict[str, RetrieverSpec]) -> FusionSpec:
    _check_fields(spec, _FUSION, path, where)
    for key in ("name", "document", "passage"):
        if key not in spec:
            raise ConfigError(f"{path}: {where}: missing key {key!r}")
    for key, level in (("document", "document"), ("passage", "passage")):
        system = systems.get(spec[key])
        if system is None or system.level != level:
            choices = [s for s, r in systems.items() if r.level == level]
            raise ConfigError(
                f"{path}: {where}.{key}: {spec[key]!r} is not a {level}-level retriever of this "
                f"experiment; choose from: {', '.join(choices) or 'none defined'}"
            )
    factory = _wrap(path, f"{where}.name", lambda: registry.fusers.get(spec["name"]))
    _check_args(factory, spec.get("args", {}), path, f"{where}.args")
    return FusionSpec(spec["name"], spec["document"], spec["passage"], spec.get("args", {}))


def _check_fields(spec: Any, schema: dict[str, Any], path: Path, where: str) -> None:
    prefix = f"{where}." if where else ""
    if not isinstance(spec, dict):
        raise ConfigError(f"{path}: {where or 'top level'}: expected a mapping")
    for key, value in spec.items():
        if key not in schema:
            raise ConfigError(
                f"{path}: unknown key {prefix + key!r}; valid keys: {', '.join(schema)}"
            )
        expected = schema[key]
        if not isinstance(value, expected) or (isinstance(value, bool) and expected is int):
            raise ConfigError(f"{path}: {prefix}{key} must be {_KIND[expected]}, got {value!r}")


def _check_args(factory: Any, args: dict, path: Path, where: str) -> None:
    """Reject keyword arguments the component's constructor does not take."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return
    named = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    accepted = [n for n, p in parameters.items() if p.kind in named]
    for name in args:
        if name not in accepted:
            raise ConfigError(
                f"{path}: unknown key {f'{where}.{name}'!r}; "
                f"valid keys: {', '.join(accepted) or 'none'}"
            )
    missing = [
        n for n in accepted if parameters[n].default is inspect.Parameter.empty and n not in args
    ]
    if missing:
        raise ConfigError(f"{path}: {where}: missing required argument {missing[0]!r}")


def _wrap(path: Path, where: str, thunk):
    try:
        return thunk()
    except DaprError as error:
        raise ConfigError(f"{path}: {where}: {error}") from None
