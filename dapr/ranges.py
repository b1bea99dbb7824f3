"""What an argument accepts beyond its type, declared once on its annotation.

A component's constructor (or a settings dataclass) says which numbers an argument takes with
``Annotated[float, Range(0, 1)]`` and that a string names a device with ``Annotated[str | None,
Device()]``; the argument checks that ``dapr check`` and ``dapr run`` share
(:mod:`dapr.experiment.arguments`) read these declarations for every component, a plugin's too.
A number is never NaN or infinite, whatever its range; ``true`` and ``false`` are not numbers.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from typing import Any

INT_LIMIT = 2**63
"""An integer argument's magnitude stays below this (a 64-bit integer's range)."""


@dataclass(frozen=True)
class Range:
    """The interval a numeric argument lies in: from ``min`` to ``max`` (None: unbounded),
    each end included unless ``min_open`` / ``max_open``. ``Range()`` is any finite number."""

    min: float | None = None
    max: float | None = None
    min_open: bool = False
    max_open: bool = False

    def __str__(self) -> str:
        """The range as error messages and the reference pages say it: ``in [0, 1]``, ``>= 1``,
        ``> 0``; empty for ``Range()``."""
        if self.min is not None and self.max is not None:
            left, right = "(" if self.min_open else "[", ")" if self.max_open else "]"
            return f"in {left}{_number(self.min)}, {_number(self.max)}{right}"
        if self.min is not None:
            return f"{'>' if self.min_open else '>='} {_number(self.min)}"
        if self.max is not None:
            return f"{'<' if self.max_open else '<='} {_number(self.max)}"
        return ""

    def __contains__(self, value: float) -> bool:
        if self.min is not None and (value <= self.min if self.min_open else value < self.min):
            return False
        return self.max is None or (value < self.max if self.max_open else value <= self.max)


@dataclass(frozen=True)
class Device:
    """Marks an argument that names where a model computes: ``cpu``, ``cuda``, ``cuda:N`` or
    ``mps`` (or a list of them, where its type is a list), checked against this machine."""


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def declared(hint: Any) -> tuple[Any, tuple[Any, ...]]:
    """``hint`` without its ``Annotated`` wrapper, and the metadata the wrapper carried."""
    if typing.get_origin(hint) is typing.Annotated:
        return hint.__origin__, hint.__metadata__
    return hint, ()


def number_problem(value: Any, kind: str, bounds: Range | None) -> str | None:
    """What is wrong with ``value`` for a number argument (``kind``: ``an integer`` or ``a
    number``) in ``bounds``: ``must be ...`` with the accepted range, or None when it fits."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None  # the type check says what is wrong with anything else
    if isinstance(value, int):
        fits, limit = abs(value) < INT_LIMIT, " (below 2**63 in magnitude)"
    else:
        fits, limit = math.isfinite(value), ""
    if fits and (bounds is None or value in bounds):
        return None
    interval = str(bounds) if bounds is not None else ""
    what = f"{kind} {interval}" if interval else kind.replace("a ", "a finite ", 1)
    what = {
        "an integer >= 1": "a positive integer",
        "an integer >= 0": "a non-negative integer",
    }.get(what, what)
    return f"must be {what}{limit if not fits else ''}, got {value!r}"
