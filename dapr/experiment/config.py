"""Read an experiment file: YAML, ``--set key.sub=value`` overrides, a ``dataset:`` list as a
grid; then :func:`dapr.experiment.validate.validate` into an :class:`Experiment`."""

from __future__ import annotations

from pathlib import Path

import yaml

from dapr.errors import ConfigError
from dapr.experiment.spec import Experiment
from dapr.experiment.validate import validate


def load(path: Path, overrides: list[str] = ()) -> Experiment:
    """Read, override (``key.sub=value``, values parsed as YAML) and validate an experiment file."""
    raw = _read(path)
    for assignment in overrides:
        _override(raw, assignment, path)
    return validate(raw, path)


def _read(path: Path) -> dict:
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; give an experiment file (.yaml)")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such experiment file; check the path") from None
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {error.start}); save the file as UTF-8"
        ) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(
            f"{where}: not valid YAML ({error.problem}); fix the YAML there"
        ) from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML ({error}); fix the YAML there") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of settings at the top level")
    return raw


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


def load_grid(path: Path, overrides: list[str] = ()) -> list[Experiment]:
    """Like :func:`load`, for a file whose ``dataset`` may be a list: one experiment per
    dataset, each named ``<name>/<dataset>``."""
    raw = _read(path)
    for assignment in overrides:
        _override(raw, assignment, path)
    datasets = raw.get("dataset")
    if not isinstance(datasets, list):
        return [validate(raw, path)]
    if not datasets or not all(isinstance(d, str) for d in datasets):
        raise ConfigError(
            f"{path}: dataset must be a name, a directory, or a non-empty list of them"
        )
    name = raw.get("name", path.stem)
    return [
        validate({**raw, "dataset": d, "name": f"{name}/{Path(d).name}"}, path) for d in datasets
    ]
