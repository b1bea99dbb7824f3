"""A griffe extension for the API reference (``mkdocs.yml`` loads it into mkdocstrings): the
docstrings are written with reST roles (``:class:`~dapr.data.Run```), which Markdown would show
raw, so each role becomes code as Sphinx would name it (``Run``; without ``~``, the full path).
The ``:param NAME:`` fields stay for mkdocstrings' Sphinx-style parser."""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

ROLE = re.compile(r":(?:py:)?[a-z]+:`(~?)([^`]+)`")
"""A reST role: ``:meth:`search```, ``:py:class:`~a.B```, ``:data:`LOSSES```."""


def markdown(text: str) -> str:
    """``text`` with each reST role made a Markdown code span."""

    def code(match: re.Match[str]) -> str:
        name = match.group(2)
        return f"`{name.rsplit('.', 1)[-1] if match.group(1) else name}`"

    return ROLE.sub(code, text)


class Roles(Extension):
    """Every object's docstring with its reST roles made code, as it is loaded."""

    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
