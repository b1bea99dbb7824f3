"""Read an experiment file: YAML, a named variant of it, ``--set key.sub=value`` overrides, a
``dataset:`` list as a grid; then :func:`dapr.experiment.validate.validate` into an
:class:`Experiment`.

A file's ``variants:`` name sets of overrides written into the file, e.g. the full-size version
of a laptop-sized experiment: ``variants: {full: {dataset: MSMARCO, train.de.model: ...}}``,
chosen with ``--variant full`` and applied before any ``--set``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from dapr.datasets.irds import IRDS
from dapr.errors import ConfigError
from dapr.experiment.spec import Experiment
from dapr.experiment.validate import validate
from dapr.io import names
from dapr.io.files import read_at_most


def load(path: Path, overrides: Sequence[str] = (), variant: str | None = None) -> Experiment:
    """Read, override (``key.sub=value``, values parsed as YAML) and validate an experiment file."""
    return validate(_overridden(path, overrides, variant), path)


def _overridden(path: Path, overrides: Sequence[str], variant: str | None) -> dict:
    raw = _read(path)
    variants = raw.pop("variants", {})
    if not isinstance(variants, dict) or not all(isinstance(v, dict) for v in variants.values()):
        raise ConfigError(
            f"{path}: variants: give a mapping of names to overrides, e.g. "
            "{full: {dataset: MSMARCO, split: dev}}"
        )
    if variant is not None:
        if variant not in variants:
            have = ", ".join(map(str, variants)) or "none"
            raise ConfigError(f"{path}: --variant {variant}: no such variant; the file has: {have}")
        for key, value in variants[variant].items():
            _assign(raw, str(key), value, path, f"variants.{variant}")
    for assignment in overrides:
        _override(raw, assignment, path)
    return raw


MAX_BYTES = 1 << 20
"""An experiment file larger than this is refused (a real one is a few kilobytes)."""
MAX_VALUES = 100_000
"""Values an experiment file may expand to, aliases counted each time they are used."""
MAX_DEPTH = 64
"""How deep an experiment file's values may nest (a real one: under 10), aliases followed."""
TOO_DEEP = f"nested more than {MAX_DEPTH} levels deep (an experiment is under 10); flatten it"


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader that refuses a key given twice in one mapping, and nesting deeper
    than :data:`MAX_DEPTH` before its recursive composer recurses."""

    depth = 0

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        if self.depth >= MAX_DEPTH:
            line = self.peek_event().start_mark.line + 1
            raise ConfigError(f"{self.name}:{line}: {TOO_DEEP}")
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, list | dict):
                continue  # unhashable: the base class reports it
            line = key_node.start_mark.line + 1
            if key in seen:
                raise ConfigError(
                    f"{self.name}:{line}: key {key!r} is given twice in one mapping (first on "
                    f"line {seen[key]}); keep one of them"
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _count(value: object, budget: int) -> tuple[int, int]:
    """How many values ``value`` holds (shared ones counted at each use), up to ``budget``, and
    how deep they nest."""
    stack, seen, deepest = [(value, 1)], 0, 0
    while stack and seen <= budget:
        item, depth = stack.pop()
        seen += 1
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
    return seen, deepest


def _read(path: Path) -> dict:
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; give an experiment file (.yaml)")
    try:
        data = read_at_most(path, MAX_BYTES)  # a device or /proc file has no size to trust
        regular = path.is_file()
        if len(data) > MAX_BYTES:
            size = f"{path.stat().st_size:,} bytes" if regular else "what it gives"
            raise ConfigError(
                f"{path}: {size} is more than an experiment file holds (at most "
                f"{MAX_BYTES:,} bytes); give the YAML file of the experiment"
            )
        if not data and not regular:
            raise ConfigError(
                f"{path}: nothing to read (not a file: a pipe with no writer?); give the YAML "
                "file of the experiment"
            )
        raw = _yaml(data.decode("utf-8"), str(path))
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
    values, depth = _count(raw, MAX_VALUES)
    if values > MAX_VALUES:
        raise ConfigError(
            f"{path}: expands to more than {MAX_VALUES:,} values (YAML aliases used over and "
            "over?); write the settings out"
        )
    if depth > MAX_DEPTH:  # aliases nest what the text does not
        raise ConfigError(f"{path}: {TOO_DEEP} (YAML aliases inside aliases?)")
    return raw


def _yaml(text: str, name: str) -> object:
    """``text`` read as YAML by :class:`_StrictLoader` (``name``: where it comes from)."""
    loader = _StrictLoader(text)
    loader.name = name
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _override(raw: dict, assignment: str, path: Path) -> None:
    key, sep, value = assignment.partition("=")
    if not sep or not key:
        raise ConfigError(f"--set {assignment!r}: write it as key=value, e.g. --set split=dev")
    try:
        parsed = _yaml(value, f"--set {key}") if value else ""
    except yaml.YAMLError:
        raise ConfigError(
            f"--set {assignment!r}: the value is not valid YAML; quote it, e.g. --set "
            f"'{key}=\"{value}\"'"
        ) from None
    _assign(raw, key, parsed, path, "--set")


def _assign(raw: dict, key: str, value: object, path: Path, where: str) -> None:
    """Set the dotted ``key`` of ``raw`` to ``value``, making mappings on the way."""
    *parents, last = key.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{path}: {where} {key}: {part!r} is not a mapping")
    node[last] = value


def load_grid(
    path: Path, overrides: Sequence[str] = (), variant: str | None = None
) -> list[Experiment]:
    """Like :func:`load`, for a file whose ``dataset`` may be a list: one experiment per
    dataset, each named ``<name>/<dataset>``."""
    return [validate(raw, path) for raw in raw_grid(path, overrides, variant)]


def raw_grid(path: Path, overrides: Sequence[str] = (), variant: str | None = None) -> list[dict]:
    """The settings of each experiment of the file, read and overridden but not validated (so
    that ``dapr check`` reports each one's problem): one per dataset of a ``dataset:`` list."""
    raw = _overridden(path, overrides, variant)
    datasets = raw.get("dataset")
    if not isinstance(datasets, list):
        return [raw]
    if not datasets or not all(isinstance(d, str) for d in datasets):
        raise ConfigError(
            f"{path}: dataset must be a name, a directory, or a non-empty list of them"
        )
    name = raw.get("name", path.stem)
    folders = [_grid_folder(d, path, f"dataset[{n}]") for n, d in enumerate(datasets)]
    same = names.collide(zip(datasets, folders))
    if same is not None:
        (first, folder), (second, _) = same
        raise ConfigError(
            f"{path}: dataset: {first!r} and {second!r} would write their results to one folder, "
            f"{name}/{folder} (a grid point's folder is its dataset's folder name, and names that "
            "differ only by case are one folder on macOS and Windows); rename one of the "
            "folders, or run each on its own with --set dataset=DIR --out DIR"
        )
    if raw.get("train") and len(datasets) > 1:
        raise ConfigError(
            f"{path}: train: with a dataset: list each model would be trained once per dataset "
            "under one name, trained/<name>, each replacing the last; train on one dataset "
            "(--set dataset=DIR), or use a file per dataset whose models have names of their own"
        )
    return [{**raw, "dataset": d, "name": f"{name}/{f}"} for d, f in zip(datasets, folders)]


def _grid_folder(dataset: str, path: Path, key: str) -> str:
    """The folder of a grid point's results: its dataset's folder name (an ir_datasets id's
    last part, a directory's name also when given as ``.`` or ``..``), checked as a name."""
    folder = Path(dataset.removeprefix(IRDS)).name
    if folder in ("", ".", ".."):
        folder = Path(dataset).resolve().name
    return names.component(folder, path, key, "folder name", "wiki-sample")
