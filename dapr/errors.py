"""Errors a user can fix: the CLI prints their one-line message and exits with status 2."""

from __future__ import annotations

from collections.abc import Iterable


class DaprError(Exception):
    """Bad input: the message names the file or component, the field, and the fix."""


class ConfigError(DaprError):
    """An experiment file that does not validate."""


class DataError(DaprError):
    """A dataset file that cannot be read as the format it claims to be."""


def check_choice(component: str, key: str, value: object, choices: Iterable[object]) -> None:
    """The one way a component rejects a setting outside its choices (a backend, a language, a
    method): ``<component>: unknown <key> <value>; choose from: a, b``."""
    choices = list(choices)
    if value not in choices:
        listed = ", ".join(str(c) for c in choices)
        raise DaprError(f"{component}: unknown {key} {value!r}; choose from: {listed}")
