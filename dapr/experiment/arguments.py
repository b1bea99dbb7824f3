"""A component's keyword arguments from an experiment file, checked against its constructor:
the names it takes, the ones it requires, plain types (``int``, ``float``, ``str``, ``bool``)
its annotations ask for, and what they declare (:mod:`dapr.ranges`): a number's range, a
device this machine must have."""

from __future__ import annotations

import inspect
import types
import typing
from pathlib import Path
from typing import Any

from dapr import devices, ranges
from dapr.errors import ConfigError


def check_args(factory: Any, args: dict, path: Path, where: str) -> None:
    """Reject keyword arguments the component's constructor does not take."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        check_arg_types(factory, args, path, where)  # the names it annotates (Coref's __init__)
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
    or ``bool`` (or one of them or None) and whose value is not of that type; a number that is
    NaN, infinite or outside the :class:`~dapr.ranges.Range` its annotation declares; a
    :class:`~dapr.ranges.Device` this machine lacks."""
    hints = declared_hints(factory)
    for name, value in args.items():
        problem = value_problem(hints.get(name), value)
        if problem is not None:
            separator = " " if problem.startswith("must be") else ": "
            raise ConfigError(f"{path}: {where}.{name}{separator}{problem}")


def declared_hints(factory: Any) -> dict[str, Any]:
    """The constructor's annotations with their ``Annotated`` metadata; none when they cannot
    be resolved."""
    made: Any = factory  # not narrowed to type below: a class's __init__ is what it annotates
    try:
        return typing.get_type_hints(
            made.__init__ if isinstance(factory, type) else made, include_extras=True
        )
    except Exception:  # noqa: BLE001 - unresolvable annotations: nothing to check
        return {}


def value_problem(annotation: Any, value: Any) -> str | None:
    """What is wrong with ``value`` for an argument annotated ``annotation`` (``must be ...``,
    or a device's problem starting with the value), or None."""
    hint, declared = ranges.declared(annotation)
    options = (
        typing.get_args(hint)
        if typing.get_origin(hint) in (types.UnionType, typing.Union)
        else (hint,)
    )
    if any(isinstance(d, ranges.Device) for d in declared):  # a device, or a list where typed so
        lists = [o for o in options if typing.get_origin(o) is list]
        only_lists = lists == [o for o in options if o is not type(None)]
        if only_lists and value is not None and not isinstance(value, list):
            return f"must be a list of devices, e.g. [cuda:0, cuda:1], got {value!r}"
        many = isinstance(value, list) and bool(lists)
        for device in value if many else [value]:
            problem = None if value is None else devices.device_problem(device)
            if problem is not None:
                return problem
        return None
    simple = [o for o in options if o in _SIMPLE]
    if not simple or len(simple) != len([o for o in options if o is not type(None)]):
        return None
    if value is None and type(None) in options:
        return None
    accepted = tuple(t for o in simple for t in _SIMPLE[o])
    kind = " or ".join(_SIMPLE_KIND[o] for o in simple)
    if not isinstance(value, accepted) or (isinstance(value, bool) and bool not in simple):
        return f"must be {kind}, got {value!r}"
    if bool in simple or str in simple:
        return None
    bounds = next((d for d in declared if isinstance(d, ranges.Range)), None)
    return ranges.number_problem(value, kind, bounds)
