"""The generated reference (``docs/_hooks/reference.py``): every table row has its header's
number of cells as a Markdown renderer splits it, every default shown is the one the code
declares (read here with :mod:`inspect` and :mod:`dataclasses`), every argument of every
registered component and every training setting has a meaning, and no reST role shows raw."""

from __future__ import annotations

import dataclasses
import html
import inspect
import re
import sys
from pathlib import Path, PurePath
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_hooks"))

import reference  # noqa: E402  (the site's generator)

pytest.importorskip("griffe", reason="install the docs extra (pip install -e '.[docs]')")

ARGUMENTS = ["argument", "type", "default", "meaning"]
KEYS = ["key", "accepts", "default", "meaning"]
ROLE = re.compile(r":[a-z]+:`")


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    """Every generated part, as the site's build makes it."""
    return {name: make() for name, make in reference.PARTS.items()}


def cells(row: str) -> list[str]:
    """A table row's cells as a Markdown renderer splits them: at every ``|`` that no backslash
    escapes (``\\\\|`` is an escaped backslash, then a border)."""
    found, cell, i = [], "", 0
    text = row.strip()
    while i < len(text):
        if text[i] == "\\":
            cell, i = cell + text[i : i + 2], i + 2
            continue
        if text[i] == "|":
            found.append(cell)
            cell = ""
        else:
            cell += text[i]
        i += 1
    found.append(cell)
    if text.startswith("|"):
        found = found[1:]
    if found and found[-1] == "" and text.endswith("|"):
        found = found[:-1]
    return [c.strip() for c in found]


def tables(markdown: str) -> list[list[list[str]]]:
    """The tables of ``markdown``, each a list of rows of cells (the header first, the
    delimiter row left out)."""
    found: list[list[list[str]]] = []
    lines: list[str] = []
    for line in [*markdown.splitlines(), ""]:
        if line.startswith("|"):
            lines.append(line)
        elif lines:
            found.append([cells(lines[0]), *(cells(x) for x in lines[2:])])
            lines = []
    return found


def sections(markdown: str) -> dict[str, str]:
    """The text under each ``### `NAME``` heading."""
    parts = re.split(r"^### `([^`]+)`$", markdown, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def shown(cell: str) -> Any:
    """The value a default cell shows (YAML in code), or ``inspect.Parameter.empty``."""
    if cell == "required":
        return inspect.Parameter.empty
    code = re.fullmatch(r"`([^`]*)`|<code>(.*)</code>", cell)
    assert code, f"a default that is not code: {cell!r}"
    return yaml.safe_load(code[1] if code[1] is not None else html.unescape(code[2]))


def plain(value: Any) -> Any:
    """``value`` as YAML reads it back: a list for a tuple, a string for a path."""
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    return str(value) if isinstance(value, PurePath) else value


def undocumented(markdown: str) -> list[str]:
    """``section.argument`` for each argument or key shown without a meaning."""
    missing = []
    for where, text in sections(markdown).items():
        for header, *rows in tables(text):
            if header[0] in ("argument", "key"):
                assert header == (ARGUMENTS if header[0] == "argument" else KEYS), header
                missing += [f"{where}.{r[0].strip('`')}" for r in rows if not r[3]]
    return missing


# -- the tables -----------------------------------------------------------------------------


def test_every_row_has_the_headers_number_of_cells(pages: dict[str, str]):
    for part, markdown in pages.items():
        for header, *rows in tables(markdown):
            for row in rows:
                assert len(row) == len(header), f"{part}: {header} vs {row}"
                for code in re.findall(r"`[^`]*`", " | ".join(row)):  # shown with its backslash
                    assert "\\|" not in code, f"{part}: {code}"


def _declared(found: Any, method: str = "__init__") -> dict[str, Any]:
    """The defaults the code declares: a class's ``__init__``'s, an object's ``method``'s."""
    target = getattr(found, method)
    skip = 1 if isinstance(found, type) else 0  # self
    params = list(inspect.signature(target).parameters.values())[skip:]
    if method == "build":
        params = params[1:]  # source
    return {p.name: p.default for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


def _shown_defaults(text: str) -> dict[str, Any]:
    return {
        row[0].strip("`"): shown(row[2])
        for header, *rows in tables(text)
        if header[0] == "argument"
        for row in rows
    }


@pytest.mark.parametrize("kind", ["retrievers", "contextualizers", "fusers", "datasets"])
def test_each_shown_default_is_the_one_the_code_declares(kind: str, pages: dict[str, str]):
    from dapr import registry

    found = getattr(registry, kind)
    by_name = sections(pages[kind])
    for name in found.names():
        component = found.get(name)
        text = by_name[name]
        if kind != "datasets":
            expected = [(text, _declared(component))]
        else:
            load, _, build = text.partition("Build options")
            expected = [
                (load, _declared(component, "load")),
                (build, _declared(component, "build")),
            ]
        for part, declared in expected:
            assert _shown_defaults(part) == {k: plain(v) for k, v in declared.items()}, name


def test_the_fusers_and_datasets_show_the_defaults_the_doubled_escape_cut_off(pages):
    fusers, datasets = sections(pages["fusers"]), sections(pages["datasets"])
    assert _shown_defaults(fusers["convex"])["normalize"] == "candidates"
    assert _shown_defaults(fusers["hierarchical"])["scaling"] == "min_max"
    assert _shown_defaults(datasets["Genomics"])["match"] == "overlap"
    assert _shown_defaults(datasets["DuReader-retrieval"])["subset"] == "main"
    assert _shown_defaults(datasets["MSMARCO"])["split"] == "auto"


def test_each_key_default_is_the_dataclass_default(pages: dict[str, str]):
    from dapr.training.dual import Settings

    classes = {**reference.sections(), "train.NAME.args": Settings}
    for part in ("experiment", "training"):
        for where, text in sections(pages[part]).items():
            fields = {f.name: f for f in dataclasses.fields(classes[where])}
            for _, *rows in tables(text):
                for row in rows:
                    key = row[0].strip("`")
                    if key == "variants" or not row[2].startswith(("`", "<code>")):
                        continue
                    f = fields[key]
                    default = (
                        f.default_factory()
                        if f.default_factory is not dataclasses.MISSING
                        else f.default
                    )
                    assert shown(row[2]) == plain(default), f"{part}: {where}.{key}"


# -- the meanings ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "part", ["retrievers", "contextualizers", "fusers", "datasets", "experiment", "training"]
)
def test_every_argument_and_setting_has_a_meaning(part: str, pages: dict[str, str]):
    from dapr import registry

    found = undocumented(pages[part])
    if part not in ("experiment", "training"):  # dapr's own components, not other plugins
        own = {n for n, dist, _ in getattr(registry, part).sources() if dist.startswith("dapr-ir")}
        found = [f for f in found if f.split(".", 1)[0] in own]
    assert found == [], "document each in its docstring (:param NAME: meaning)"


class _Documented:
    """A retriever's base.

    :param k1: Documented on the base class.
    """


class _Plugin(_Documented):
    """A retriever with one argument left undocumented."""

    def __init__(self, k1: float = 0.9, depth: int = 3) -> None:
        self.k1, self.depth = k1, depth


def _loader(path: str = "", limit: int = 3) -> None:
    """A dataset plugin that is a plain function.

    :param path: Documented on the function.
    """


@pytest.mark.parametrize(
    ("kind", "plugin", "missing"),
    [("retrievers", _Plugin, "depth"), ("datasets", _loader, "limit")],  # k1: from the base
)
def test_an_argument_without_a_meaning_is_found(kind: str, plugin: Any, missing: str):
    from dapr import registry

    getattr(registry, kind).add("undocumented-plugin", plugin)
    try:
        page = reference.components(kind)
    finally:
        getattr(registry, kind).remove("undocumented-plugin")
    assert undocumented(page) == [f"undocumented-plugin.{missing}"]


def test_the_training_settings_and_losses_come_from_the_code(pages: dict[str, str]):
    from dapr.experiment.training import KINDS
    from dapr.training import cross, dual

    found = sections(pages["training"])
    settings = {row[0].strip("`") for _, *rows in tables(found["train.NAME.args"]) for row in rows}
    assert settings == {f.name for f in dataclasses.fields(dual.Settings)}
    (loss,) = [r for _, *rows in tables(found["train.NAME"]) for r in rows if r[0] == "`loss`"]
    for kind, losses in zip(KINDS, (dual.LOSSES, cross.LOSSES), strict=True):
        assert f"`{kind}`: " + ", ".join(f"`{n}`" for n in losses) in loss[3]
    assert "<!-- reference: training -->" in (ROOT / "docs" / "training.md").read_text()


# -- reST roles -----------------------------------------------------------------------------


def test_no_generated_part_shows_a_raw_rest_role(pages: dict[str, str]):
    for part, markdown in pages.items():
        assert not ROLE.search(markdown), f"{part}: {ROLE.search(markdown)}"


def test_the_api_reference_extension_makes_roles_code():
    import docstrings  # docs/_hooks/docstrings.py, loaded by mkdocstrings

    text = "Returns a :class:`~dapr.data.Run` (see :meth:`search`, :mod:`dapr.registry`).\n"
    assert docstrings.markdown(text + ":param k: Depth.") == (
        "Returns a `Run` (see `search`, `dapr.registry`).\n:param k: Depth."
    )
