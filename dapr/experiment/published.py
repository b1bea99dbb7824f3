"""An experiment file's ``published:`` block checked: the paper's values beside which
``dapr report`` and the reproduction matrix print dapr's, for systems and metrics of the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dapr import registry
from dapr.errors import ConfigError
from dapr.evaluation import parse_metric
from dapr.experiment.spec import OVERLAP_ROWS, Published, PublishedRow, check_fields, wrapped


def published_block(raw: Any, path: Path, metrics: tuple[str, ...], systems: list) -> Published:
    """``published: {source, values: {system: {metric: fraction}}, rows: [...]}`` for systems
    and metrics of this experiment; a (system, metric, dataset) is given by one row at most."""
    check_fields(raw, Published, path, "published")
    if "source" not in raw:
        raise ConfigError(f"{path}: published: missing key 'source' (the paper and its table)")
    ours = {(m.measure, m.cutoff): m.name for m in map(parse_metric, metrics)}
    values: dict[str, dict[str, float]] = {}
    for system, given in raw.get("values", {}).items():
        where = f"published.values.{system}"
        if system not in systems:
            raise ConfigError(
                f"{path}: {where}: not a system of this experiment; choose from: "
                f"{', '.join(systems)}"
            )
        if not isinstance(given, dict):
            raise ConfigError(f"{path}: {where}: give {{metric: value}}, e.g. {{MRR@10: 0.3239}}")
        values[system] = {}
        for metric, value in given.items():
            parsed = wrapped(path, where, lambda m=metric: parse_metric(str(m)))
            if (parsed.measure, parsed.cutoff) not in ours:
                raise ConfigError(
                    f"{path}: {where}.{metric}: not a metric of this experiment; choose from: "
                    f"{', '.join(metrics)}"
                )
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise ConfigError(
                    f"{path}: {where}.{metric} must be a fraction in [0, 1] as dapr prints it "
                    f"(32.39% is 0.3239), got {value!r}"
                )
            values[system][ours[parsed.measure, parsed.cutoff]] = float(value)
    rows = raw.get("rows", [])
    found = tuple(
        _published_row(r, path, f"published.rows[{n}]", ours, systems) for n, r in enumerate(rows)
    )
    seen: dict[tuple[str, str, str, str], str] = {}
    for n, row in enumerate(found):
        for dataset in row.values:
            key = (row.system, row.metric, row.overlap, dataset)
            if key in seen:
                raise ConfigError(
                    f"{path}: published.rows[{n}].values.{dataset}: {seen[key]} gives this "
                    "system, metric and dataset already; keep one of them"
                )
            seen[key] = f"{row.table}, {row.row}"
    return Published(raw["source"], values, found)


def _published_row(
    raw: Any, path: Path, where: str, ours: dict[tuple[Any, Any], str], systems: list
) -> PublishedRow:
    """One row of ``published.rows``: a system and metric of this experiment (or a row of
    ``dapr overlap``) and its value per registered dataset."""
    check_fields(raw, PublishedRow, path, where)
    for key in ("table", "row", "values"):
        if key not in raw:
            raise ConfigError(f"{path}: {where}: missing key {key!r} (the paper's table and row)")
    if "overlap" in raw:
        if raw["overlap"] not in OVERLAP_ROWS or "system" in raw or "metric" in raw:
            raise ConfigError(
                f"{path}: {where}.overlap: give one of {', '.join(OVERLAP_ROWS)} (the rows of "
                "`dapr overlap`) and no system or metric"
            )
        metric = ""
    else:
        for key in ("system", "metric"):
            if key not in raw:
                raise ConfigError(
                    f"{path}: {where}: missing key {key!r}; name the system and metric of this "
                    "experiment that run the row (or overlap: alone / with title)"
                )
        if raw["system"] not in systems:
            raise ConfigError(
                f"{path}: {where}.system: {raw['system']!r} is not a system of this experiment; "
                f"choose from: {', '.join(systems)}"
            )
        parsed = wrapped(path, f"{where}.metric", lambda: parse_metric(str(raw["metric"])))
        if (parsed.measure, parsed.cutoff) not in ours:
            raise ConfigError(
                f"{path}: {where}.metric: {raw['metric']!r} is not a metric of this experiment; "
                f"choose from: {', '.join(ours.values())}"
            )
        metric = ours[parsed.measure, parsed.cutoff]
    values: dict[str, float] = {}
    for dataset, value in raw["values"].items():
        if dataset not in registry.datasets:
            raise ConfigError(
                f"{path}: {where}.values.{dataset}: not a registered dataset; choose from: "
                f"{', '.join(registry.datasets.names())}"
            )
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise ConfigError(
                f"{path}: {where}.values.{dataset} must be a fraction in [0, 1] as dapr prints "
                f"it (44.5 is 0.445), got {value!r}"
            )
        values[dataset] = float(value)
    return PublishedRow(
        raw["table"], raw["row"], values, raw.get("system", ""), metric, raw.get("overlap", "")
    )
