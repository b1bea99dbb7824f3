"""The generated parts of the documentation site: every registered component with its arguments
and presets, and the experiment file's keys, read from the registries and from the one schema
(:mod:`dapr.experiment.spec`) when the site is built, so the pages cannot drift from the code.

A page asks for a part with a marker line ``<!-- reference: NAME -->`` (NAME one of
:data:`PARTS`); ``mkdocs build`` runs :func:`on_page_markdown`, which puts the part there.
``python docs/_hooks/reference.py NAME`` prints a part. The experiment file's parts are made in
``reference_schema.py``, the tables' cells in ``reference_cells.py``.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import reference_cells as md
from reference_schema import experiment, training
from reference_schema import keys as keys  # re-exported: the tests read the schema's sections
from reference_schema import sections as sections

MARKER = re.compile(r"^<!-- reference: ([a-z-]+) -->$", re.MULTILINE)


def _type(annotation: Any) -> str:
    if annotation is inspect.Parameter.empty:
        return ""
    if isinstance(annotation, str):
        return annotation
    if typing.get_origin(annotation) is typing.Annotated:  # dapr.ranges: its range, a device
        shown = [
            str(m) if m.__class__.__name__ == "Range" else "a device"
            for m in annotation.__metadata__
        ]
        return ", ".join([_type(annotation.__origin__), *filter(None, shown)])
    if typing.get_origin(annotation) is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(annotation))
    name = getattr(annotation, "__name__", None)
    return name if name and not typing.get_args(annotation) else str(annotation)


def _parameters(factory: Any, skip: int = 0) -> list[inspect.Parameter]:
    """The arguments ``factory`` takes (a class: its ``__init__``'s, which a ``__new__`` that
    picks a subclass passes on), their annotations resolved."""
    own_init = isinstance(factory, type) and factory.__init__ is not object.__init__
    target = factory.__init__ if own_init else factory
    try:
        found = list(inspect.signature(target).parameters.values())[skip + own_init :]
    except (TypeError, ValueError):
        return []
    try:
        hints = typing.get_type_hints(target, include_extras=True)
    except Exception:  # noqa: BLE001 - unresolvable annotations: shown as written
        hints = {}
    return [p.replace(annotation=hints.get(p.name, p.annotation)) for p in found]


def meanings(owner: Any, method: str = "__init__") -> dict[str, str]:
    """Each argument's meaning, from the ``:param NAME: meaning`` fields of the docstrings of
    ``owner`` (a class, or an instance whose ``method`` takes the arguments) and of its bases:
    the class docstring and ``method``'s, the nearest class first; a function's own."""
    from griffe import Docstring

    found: dict[str, str] = {}
    function = not isinstance(owner, type) and not hasattr(owner, method)
    for cls in [owner] if function else (owner if isinstance(owner, type) else type(owner)).__mro__:
        docs = [cls] if function else [vars(cls).get(method), cls if method == "__init__" else None]
        for doc in (getattr(d, "__doc__", None) for d in docs if d is not None):
            for section in Docstring(inspect.cleandoc(doc or "")).parse("sphinx", warnings=False):
                if section.kind.value == "parameters":
                    for p in section.value:
                        found.setdefault(p.name, md.text(p.description))
    return found


def _argument_table(
    parameters: list[inspect.Parameter],
    meant: dict[str, str],
    rest_go: str = "Other keyword arguments go to the backend.",
) -> list[str]:
    named = [p for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    rest = [p for p in parameters if p.kind is p.VAR_KEYWORD]
    if not named:
        lines = ["Arguments: none."]
    else:
        lines = ["| argument | type | default | meaning |", "|---|---|---|---|"]
        for p in named:
            default = "required" if p.default is p.empty else md.code(md.yaml(p.default))
            kind = md.cell(_type(p.annotation))
            lines.append(f"| `{p.name}` | {kind} | {default} | {meant.get(p.name, '')} |")
    if rest and rest_go:
        lines += ["", rest_go]
    return lines


def _origin(registry: Any, name: str) -> str:
    rows = [f"`{target}` ({dist})" for n, dist, target in registry.sources() if n == name]
    return ", ".join(rows)


def _component(registry: Any, name: str, body: Callable[[Any], list[str]]) -> list[str]:
    try:
        found = registry.get(name)
    except Exception as error:  # noqa: BLE001 - a broken plugin is shown, not fatal
        return [f"### `{name}`", "", f"Cannot be loaded here: {md.cell(str(error))}", ""]
    about = md.text(found.__doc__ if isinstance(found, type) else type(found).__doc__)
    lines = [f"### `{name}`", "", f"Registered as {_origin(registry, name)}.", ""]
    if about:
        lines += [about, ""]
    return lines + body(found) + [""]


def _retriever(found: Any) -> list[str]:
    lines = _argument_table(_parameters(found), meanings(found))
    presets = getattr(found, "presets", None) or {}
    if presets:
        lines += ["", "| preset | levels | arguments | fusion | about |", "|---|---|---|---|---|"]
        for preset, p in sorted(presets.items()):
            args = ", ".join(md.code(f"{k}: {md.yaml(v)}") for k, v in p.args.items())
            fusion = ", ".join(
                f"`{fuser}`: " + ", ".join(f"{k} {md.cell(v)}" for k, v in given.items())
                for fuser, given in p.fusion.items()
            )
            levels = ", ".join(p.levels)
            lines.append(f"| `{preset}` | {levels} | {args} | {fusion} | {md.cell(p.about)} |")
    return lines


def _plain(found: Any) -> list[str]:
    return _argument_table(_parameters(found), meanings(found))


def _dataset(found: Any) -> list[str]:
    lines = []
    if getattr(found, "origin", ""):
        lines += [f"Source: {md.cell(found.origin)}.", ""]
    load = _parameters(getattr(found, "load", found))
    options = found.options() if hasattr(found, "options") else {}
    if any(p.kind is not p.VAR_KEYWORD for p in load):
        also = "The build options below are taken too." if options else ""
        table = _argument_table(load, meanings(found, "load"), also)
        lines += ["`dataset_args` when loaded:", "", *table, ""]
    if options:
        lines += [
            f"Build options (`dapr data build {found.name} --set KEY=VALUE`):",
            "",
            *_argument_table(list(options.values()), meanings(found, "build")),
            "",
        ]
    raw = getattr(found, "raw_files", ())
    if raw:
        files = ", ".join(f"`{r.path}`" for r in raw)
        lines += [f"Raw files for `dapr data build`: {files}.", ""]
    if getattr(found, "hub_repo", None):
        lines += [f"Published copy: the hub dataset `{found.hub_repo}` (`dapr data fetch`).", ""]
    return lines


def _metric(found: Any) -> list[str]:
    cutoff = getattr(found, "cutoff", "")
    about = getattr(found, "about", "")
    wording = {
        "required": "takes a cutoff (`NAME@k`)",
        "optional": "takes an optional cutoff (`NAME` or `NAME@k`)",
        "none": "takes no cutoff",
    }
    lines = [f"{md.cell(about).capitalize()}." if about else ""]
    if cutoff in wording:
        lines.append(f"It {wording[cutoff]}.")
    if getattr(found, "measure", None):
        lines.append(f"trec_eval measure: `{found.measure}`.")
    return [" ".join(line for line in lines if line)]


def components(kind: str) -> str:
    """The reference of one registry: every registered name, its arguments and presets."""
    from dapr import registry

    registries = {
        "retrievers": (registry.retrievers, _retriever),
        "contextualizers": (registry.contextualizers, _plain),
        "fusers": (registry.fusers, _plain),
        "datasets": (registry.datasets, _dataset),
        "metrics": (registry.metrics, _metric),
    }
    found, body = registries[kind]
    names = found.names()
    lines = [
        f"Generated from the `{found.group}` entry points when this site was built "
        f"({len(names)} registered): " + ", ".join(f"`{n}`" for n in names) + ".",
        "",
    ]
    for name in names:
        lines += _component(found, name, body)
    return "\n".join(lines).rstrip() + "\n"


def environment() -> str:
    """Every ``DAPR_*`` variable dapr reads: its type, default, effect and an example, from
    the declarations of :mod:`dapr.settings`."""
    from dapr import settings

    lines = ["| variable | type | default | effect | example |", "|---|---|---|---|---|"]
    for v in settings.VARIABLES:
        kind, effect = md.cell(v.kind).replace("<", "&lt;"), md.cell(v.effect)
        lines.append(f"| `{v.name}` | {kind} | `{v.default}` | {effect} | `{v.example}` |")
    return "\n".join(lines) + "\n"


PARTS: dict[str, Callable[[], str]] = {
    "retrievers": lambda: components("retrievers"),
    "contextualizers": lambda: components("contextualizers"),
    "fusers": lambda: components("fusers"),
    "datasets": lambda: components("datasets"),
    "metrics": lambda: components("metrics"),
    "experiment": experiment,
    "training": training,
    "environment": environment,
    "full-grid-cost": lambda: full_grid_cost(),
}


def full_grid_cost() -> str:
    """``dapr check --cost`` of the paper's full grid on 4 V100s (the paper's machine) and on
    one H100, priced from the calibration table with Table 1's sizes (no data needed)."""
    from dapr.experiment.estimate import estimate_file, grid_table

    path = "experiments/paper_table3_full.yaml"
    root = Path(__file__).resolve().parents[2]
    parts = []
    for device, devices in (("v100", 4), ("h100", 1)):
        found = estimate_file(root / path, device=device, devices=devices)
        found = dataclasses.replace(found, path=path)
        parts.append(grid_table(found))
    return "\n".join(parts)


def render(markdown: str) -> str:
    """``markdown`` with each reference marker replaced by its generated part."""

    def part(match: re.Match) -> str:
        name = match.group(1)
        if name not in PARTS:
            raise ValueError(f"unknown reference part {name!r}; choose from: {', '.join(PARTS)}")
        return PARTS[name]()

    return MARKER.sub(part, markdown)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """The mkdocs hook: generated parts are filled in before the page is rendered."""
    return render(markdown)


if __name__ == "__main__":
    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root))
    print(PARTS[sys.argv[1]]())
