"""The experiment file's reference, generated from the one schema (``dapr/experiment/spec.py``)
and the training settings (``dapr/training/dual.py``): each section's keys, what they accept,
their defaults and meanings (the docstring under each field). Parts of ``reference.py``."""

from __future__ import annotations

import ast
import dataclasses
import inspect

import reference_cells as md


def _field_docs(section: type) -> dict[str, str]:
    """The docstrings written under a dataclass's fields (read from its source)."""
    tree = ast.parse(inspect.getsource(section))
    body = tree.body[0].body
    docs = {}
    for here, after in zip(body, body[1:]):
        if (
            isinstance(here, ast.AnnAssign)
            and isinstance(here.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[here.target.id] = md.text(after.value.value)
    return docs


def sections() -> dict[str, type]:
    """Where each section of an experiment file sits, and its dataclass in the schema."""
    from dapr.experiment import spec

    return {
        "top level": spec.Experiment,
        "retrievers.NAME": spec.RetrieverSpec,
        "fusion.NAME": spec.FusionSpec,
        "sweep": spec.Sweep,
        "sweep.values (a range)": spec.Range,
        "resources": spec.Resources,
        "train.NAME": spec.TrainSpec,
        "train.NAME.sources[]": spec.TrainSource,
        "published": spec.Published,
        "published.rows[]": spec.PublishedRow,
    }


def keys(section: type) -> list[str]:
    """The keys a section of the file accepts, in the schema's order."""
    from dapr.experiment import spec

    return list(spec._accepted(section))


_UNSET = {"name": "the file's name", "dataset": "required"}


def experiment() -> str:
    """Every key of every section of an experiment file: what it accepts, its default, and
    what it does, from the dataclasses of :mod:`dapr.experiment.spec`."""
    from dapr.experiment import spec

    lines = [
        "Generated from `dapr/experiment/spec.py`, the one schema `dapr run`, `dapr train` and "
        "`dapr check` read, when this site was built. A key not listed here is refused with a "
        "line naming the valid ones.",
        "",
    ]
    for where, section in sections().items():
        lines += _section(where, section)
        if section is spec.TrainSource:
            lines += _section(*_training_args())
    return "\n".join(lines).rstrip() + "\n"


def training() -> str:
    """The keys of an entry of the ``train:`` block and of its ``args`` (the training
    settings), from :class:`dapr.experiment.spec.TrainSpec` and
    :class:`dapr.training.dual.Settings`."""
    lines = [
        "Generated from `dapr/experiment/spec.py` and `dapr/training/dual.py` when this site "
        "was built.",
        "",
    ]
    for where in ("train.NAME", "train.NAME.sources[]"):
        lines += _section(where, sections()[where])
    lines += _section(*_training_args())
    lines += [_cross_defaults(), ""]
    return "\n".join(lines).rstrip() + "\n"


def _cross_defaults() -> str:
    """Where a cross-encoder's settings start apart from the table's defaults."""
    from dapr.training import cross
    from dapr.training.dual import Settings

    given, usual = dataclasses.asdict(cross.ROCKETQA), dataclasses.asdict(Settings())
    changed = ", ".join(md.code(f"{k}: {md.yaml(v)}") for k, v in given.items() if usual[k] != v)
    return f"A cross-encoder (`kind: cross`) starts from RocketQA's {changed} instead."


def _training_args() -> tuple[str, type]:
    """The ``args`` of a ``train:`` entry and their dataclass."""
    from dapr.training.dual import Settings

    return "train.NAME.args", Settings


def _section(where: str, section: type) -> list[str]:
    """The table of one section of the experiment file: each key, what it accepts (and its
    range), its default and its meaning (the docstring under the field)."""
    from dapr.experiment import spec

    docs = _field_docs(section)
    bounds = spec._bounds(section)
    lines = [f"### `{where}`", ""]
    about = md.text(section.__doc__)
    if about and not about.startswith(section.__name__ + "("):
        lines += [about, ""]
    lines += ["| key | accepts | default | meaning |", "|---|---|---|---|"]
    for key, (_, kind) in spec._accepted(section).items():
        value = spec.default(section, key)
        if value is dataclasses.MISSING:
            shown = _UNSET[key] if section is spec.Experiment else "required"
        else:
            shown = md.code(md.yaml(value))
        accepts = md.cell(", ".join([kind, *([str(bounds[key])] if key in bounds else [])]))
        meaning = " ".join(filter(None, [docs.get(key, ""), _choices(section, key)]))
        lines.append(f"| `{key}` | {accepts} | {shown} | {meaning} |")
    if section is spec.Experiment:
        lines.append(
            "| `variants` | a mapping of names to overrides | `{}` | Named sets of "
            "overrides (dotted keys as for `--set`), chosen with `--variant NAME` and "
            "applied before any `--set`. |"
        )
    return [*lines, ""]


def _choices(section: type, key: str) -> str:
    """The values a key takes where the code lists them apart from its field."""
    if (section.__name__, key) != ("TrainSpec", "loss"):
        return ""
    from dapr.experiment.training import KINDS
    from dapr.training import cross, dual

    losses = {"dual": dual.LOSSES, "cross": cross.LOSSES}
    assert set(losses) == set(KINDS), "a kind of model without its losses"
    each = "; ".join(f"`{k}`: " + ", ".join(f"`{n}`" for n in losses[k]) for k in KINDS)
    return f"Per kind: {each}."
