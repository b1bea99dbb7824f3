"""A component's keyword arguments from an experiment file, checked against its constructor:
the names it takes, the ones it requires, and plain types (``int``, ``float``, ``str``,
``bool``) its annotations ask for."""

from __future__ import annotations

import inspect
import types
import typing
from pathlib import Path
from typing import Any

from dapr.errors import ConfigError


def check_args(factory: Any, args: dict, path: Path, where: str) -> None:
    """Reject keyword arguments the component's constructor does not take."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return
    named = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    accepted = [n for n, p in parameters.items() if p.kind in named]
    for name in args:
        if name not in accepted:
            raise ConfigError(
                f"{path}: unknown key {f'{where}.{name}'!r}; "
                f"valid keys: {', '.join(accepted) or 'none'}"
            )
    missing = [
        n for n in accepted if parameters[n].default is inspect.Parameter.empty and n not in args
    ]
    if missing:
        raise ConfigError(f"{path}: {where}: missing required argument {missing[0]!r}")
    check_arg_types(factory, args, path, where)


_SIMPLE = {int: (int,), float: (int, float), str: (str,), bool: (bool,)}
_SIMPLE_KIND = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}


def check_arg_types(factory: Any, args: dict, path: Path, where: str) -> None:
    """Reject an argument whose constructor annotation is a plain ``int``, ``float``, ``str``
    or ``bool`` (or one of them or None) and whose value is not of that type."""
    made: Any = factory  # not narrowed to type below: a class's __init__ is what it annotates
    try:
        hints = typing.get_type_hints(made.__init__ if isinstance(factory, type) else made)
    except Exception:  # noqa: BLE001 - unresolvable annotations: nothing to check
        return
    for name, value in args.items():
        hint = hints.get(name)
        options = (
            typing.get_args(hint)
            if typing.get_origin(hint) in (types.UnionType, typing.Union)
            else (hint,)
        )
        simple = [o for o in options if o in _SIMPLE]
        if not simple or len(simple) != len([o for o in options if o is not type(None)]):
            continue
        if value is None and type(None) in options:
            continue
        accepted = tuple(t for o in simple for t in _SIMPLE[o])
        if not isinstance(value, accepted) or (isinstance(value, bool) and bool not in simple):
            kind = " or ".join(_SIMPLE_KIND[o] for o in simple)
            raise ConfigError(f"{path}: {where}.{name} must be {kind}, got {value!r}")
