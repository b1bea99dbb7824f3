"""The API reference (``docs/api.md``) covers what plugins and users touch: every public name of
:data:`MODULES` and every public method of :data:`CLASSES` is under one of its ``:::``
directives and has a docstring (mkdocstrings leaves an undocumented object off the page).
tests/test_docs.py checks the built page holds each of them.

A module's public names are its ``__all__``, or without one the names it defines that do not
start with ``_``; a class of them brings its public methods and properties. The names are found
by griffe, which mkdocstrings renders the page with.
"""

from __future__ import annotations

import functools
import pkgutil
import re
from pathlib import Path
from typing import Any

import pytest

import dapr.io

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api.md"

MODULES = ["dapr.data", "dapr.interfaces", "dapr.pyterrier", "dapr.evaluation.interop", "dapr.io"]
MODULES += [f"dapr.io.{m.name}" for m in pkgutil.iter_modules(dapr.io.__path__)]
CLASSES = ["dapr.retrievers.bm25.BM25", "dapr.retrievers.dense.Dense"]
"""The classes of Getting started, documented alone (not their modules)."""

DIRECTIVE = re.compile(r"^::: ([\w.]+)\n((?:    .*\n)*)", re.MULTILINE)
MEMBERS = re.compile(r"^\s+members: (.*)$", re.MULTILINE)


@functools.cache
def _package() -> Any:
    griffe = pytest.importorskip("griffe", reason="install the docs extra")
    return griffe.GriffeLoader(search_paths=[str(ROOT)]).load("dapr")


def _load(path: str) -> Any:
    return _package()[path.removeprefix("dapr.")]


def _methods(cls: Any, path: str) -> list[tuple[str, Any]]:
    return [
        (f"{path}.{name}", member)
        for name, member in cls.members.items()
        if not name.startswith("_") and (member.is_function or "property" in member.labels)
    ]


def public_names() -> list[tuple[str, str, Any]]:
    """``(name, defining path, griffe object)`` of each public name the page must show: a
    package's ``__all__`` names an object of one of its modules (``dapr.io.read_trec_run`` is
    ``dapr.io.trec.read_trec_run``), shown under either path."""
    found = []
    for path in MODULES:
        module = _load(path)
        names = module.exports
        if names is None:
            names = [n for n, m in module.members.items() if not (m.is_alias or m.is_module)]
        for name in (n for n in names if not n.startswith("_")):
            member = module.members[name]
            target = member.final_target if member.is_alias else member
            found.append((f"{path}.{name}", target.path, target))
            if target.is_class:
                found += [(n, m.path, m) for n, m in _methods(target, f"{path}.{name}")]
    for path in CLASSES:
        cls = _load(path)
        found += [(path, path, cls)] + [(n, m.path, m) for n, m in _methods(cls, path)]
    return found


def directives(text: str) -> dict[str, list[str] | None]:
    """Each ``::: PATH`` of a page and the members its options keep (``None``: all of them)."""
    out: dict[str, list[str] | None] = {}
    for match in DIRECTIVE.finditer(text):
        members = MEMBERS.search(match.group(2))
        chosen = members.group(1).strip() if members else None
        if chosen is None:
            out[match.group(1)] = None
        elif chosen == "false":
            out[match.group(1)] = []
        else:
            out[match.group(1)] = [m.strip() for m in chosen.strip("[]").split(",") if m.strip()]
    return out


def _covered(name: str, shown: dict[str, list[str] | None]) -> bool:
    for path, members in shown.items():
        if name == path:
            return True
        if name.startswith(path + "."):
            first = name[len(path) + 1 :].split(".")[0]
            if members is None or first in members:
                return True
    return False


def test_directives_are_read_with_their_members():
    text = "::: a.b\n    options:\n      members: [C, d]\n\n::: a.e\n    options:\n"
    text += "      members: false\n\n::: a.f\n"
    shown = directives(text)
    assert shown == {"a.b": ["C", "d"], "a.e": [], "a.f": None}
    assert _covered("a.b.C.run", shown) and _covered("a.f.g", shown) and _covered("a.e", shown)
    assert not _covered("a.b.x", shown) and not _covered("a.e.h", shown)


def test_every_public_name_is_on_the_api_page():
    shown = directives(API.read_text())
    names = public_names()
    assert {"dapr.data.Run.from_lists", "dapr.io.trec.read_trec_run"} <= {n for n, _, _ in names}
    missing = [n for n, path, _ in names if not (_covered(n, shown) or _covered(path, shown))]
    assert missing == [], f"add a ::: directive to docs/api.md for {missing}"
    undocumented = [n for n, _, obj in names if not obj.docstring]
    assert undocumented == [], (
        f"mkdocstrings does not show these without a docstring: {undocumented}"
    )
