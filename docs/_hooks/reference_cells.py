"""Text in the generated reference's tables (``reference.py``, ``reference_schema.py``): a
docstring's first paragraph, a cell escaped once, code, a value written as YAML."""

from __future__ import annotations

import html
import inspect
import re
from pathlib import PurePath
from typing import Any

import yaml as pyyaml

ROLE = re.compile(r":(?:py:)?[a-z]+:`(~?)([^`]+)`")
"""A reST role, shown as Sphinx shows it (``~`` keeps the last name), as ``docstrings.py``
does for the API reference."""


def text(doc: str | None) -> str:
    """A docstring as Markdown: its first paragraph on one line, reST roles made code."""
    first = inspect.cleandoc(doc or "").split("\n\n")[0]
    first = ROLE.sub(lambda m: f"`{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}`", first)
    first = first.replace("``", "`")
    return " ".join(first.split()).replace("|", "\\|")


def cell(value: Any) -> str:
    """``value`` as the text of one table cell: ``|`` escaped once, on one line."""
    text = value if isinstance(value, str) else repr(value)
    return text.replace("|", "\\|").replace("\n", " ")


def code(text: str) -> str:
    """``text`` as code in a table cell. A ``|`` stays a character: a code span would show its
    escape, so the code is an HTML element then."""
    if "|" in text or "`" in text:
        return "<code>" + html.escape(text).replace("|", "&#124;") + "</code>"
    return f"`{text}`"


def yaml(value: Any) -> str:
    """``value`` as an experiment file writes it: YAML in flow style, on one line, quoted
    where YAML would read it back as something else (``' '``, ``1.0e-05``)."""

    def plain(v: Any) -> Any:
        if isinstance(v, tuple | list):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {plain(k): plain(x) for k, x in v.items()}
        return str(v) if isinstance(v, PurePath) else v

    text = pyyaml.safe_dump(plain(value), default_flow_style=True, width=1_000_000)
    return text.strip().removesuffix("...").strip()
