"""The ``sweep:`` section checked: the fusion argument it varies, its values (a list or a
range), the split it tunes on and the metric it picks by."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

from dapr import registry
from dapr.errors import ConfigError
from dapr.evaluation import parse_metric
from dapr.experiment.arguments import check_args, declared_hints, value_problem
from dapr.experiment.spec import (
    Experiment,
    FusionSpec,
    Range,
    Sweep,
    check_fields,
    default,
    wrapped,
)

MAX_SWEEP = 1000
"""Values a sweep may try (each is a fusion of the cached runs, evaluated on two splits)."""


def sweep_spec(spec: Any, path: Path, fusion: dict[str, FusionSpec], split: str) -> Sweep:
    check_fields(spec, Sweep, path, "sweep")
    for key in ("parameter", "values"):
        if key not in spec:
            raise ConfigError(f"{path}: sweep: missing key {key!r}")
    parts = spec["parameter"].split(".")
    if len(parts) != 4 or parts[0] != "fusion" or parts[2] != "args" or parts[1] not in fusion:
        raise ConfigError(
            f"{path}: sweep.parameter: {spec['parameter']!r} is not an argument of a fusion "
            f"system; write fusion.<system>.args.<argument> with <system> one of: "
            f"{', '.join(fusion) or 'none defined'}"
        )
    system, argument = parts[1], parts[3]
    factory = registry.fusers.get(fusion[system].name)
    values = values_of(spec["values"], path)
    declared = declared_hints(factory).get(argument)
    for value in values:
        problem = value_problem(declared, value)  # the value's type, range or device
        if problem is not None:
            raise ConfigError(f"{path}: sweep.values: {spec['parameter']} {problem}")
        check_args(factory, {**fusion[system].args, argument: value}, path, "sweep.parameter")
        args = {**fusion[system].args, argument: value}
        wrapped(path, "sweep.values", lambda args=args: factory(**args))
    tune_on = spec.get("tune_on", default(Sweep, "tune_on"))
    if tune_on == split:
        raise ConfigError(
            f"{path}: sweep.tune_on: tuning on {split!r}, the split results are reported on, "
            "would overfit it; tune on another split (e.g. tune_on: dev)"
        )
    metric = wrapped(
        path,
        "sweep.metric",
        lambda: parse_metric(str(spec.get("metric", default(Sweep, "metric")))),
    )
    return Sweep(
        spec["parameter"],
        values,
        tune_on,
        metric.name,
        spec.get("subset", default(Sweep, "subset")),
    )


def values_of(values: Any, path: Path) -> tuple[Any, ...]:
    """A list as given, or ``{start, stop, step}`` with ``stop`` included (rounded to the
    step's decimals, so 0.1 steps give 0.3, not 0.30000000000000004)."""
    if isinstance(values, list):
        if not values:
            raise ConfigError(f"{path}: sweep.values: give at least one value")
        if len(values) > MAX_SWEEP:
            raise ConfigError(
                f"{path}: sweep.values: {len(values):,} values, more than {MAX_SWEEP:,} fusions; "
                "list fewer"
            )
        return tuple(values)
    check_fields(values, Range, path, "sweep.values")
    if set(values) != {"start", "stop", "step"}:
        raise ConfigError(
            f"{path}: sweep.values: give start, stop and step, "
            "e.g. {start: 0.0, stop: 1.0, step: 0.1}"
        )
    start, stop, step = values["start"], values["stop"], values["step"]  # finite: check_fields
    if step <= 0 or stop < start:
        raise ConfigError(f"{path}: sweep.values: need step > 0 and stop >= start, got {values}")
    decimals = max(_decimals(start), _decimals(step))
    count = int(round((stop - start) / step)) + 1
    if start + (count - 1) * step > stop + step * 1e-9:
        count -= 1
    if count > MAX_SWEEP:
        raise ConfigError(
            f"{path}: sweep.values: {values} gives {count:,} values, more than {MAX_SWEEP:,} "
            "fusions; use a larger step or list the values"
        )
    as_int = all(isinstance(x, int) for x in (start, step))
    return tuple(
        start + n * step if as_int else round(start + n * step, decimals) for n in range(count)
    )


def with_value(experiment: Experiment, sweep: Sweep, value: Any) -> Experiment:
    """The experiment with the swept fusion argument set to ``value``."""
    spec = experiment.fusion[sweep.system]
    fused = replace(spec, args={**spec.args, sweep.argument: value})
    return replace(experiment, fusion={**experiment.fusion, sweep.system: fused})


def _decimals(x: float) -> int:
    """The digits after the point of a finite number as written (0.25: 2, 3.0: 0)."""
    exponent = Decimal(repr(float(x))).as_tuple().exponent
    assert isinstance(exponent, int)  # only NaN and infinity have a letter: refused above
    return -min(exponent, 0)
