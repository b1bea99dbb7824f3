"""Errors a user can fix: the CLI prints their one-line message and exits with status 2."""

from __future__ import annotations

import errno
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


_OS_FIXES: dict[int | None, str] = {  # an OSError's errno may be None
    errno.ENOSPC: "free some space, or point DAPR_HOME / --out at another disk",
    errno.EDQUOT: "free some space, or point DAPR_HOME / --out at another disk",
    errno.EFBIG: "the file grew past the size this process may write (ulimit -f); raise it",
    errno.EACCES: "make it writable, or point DAPR_HOME / --out at a writable directory",
    errno.EPERM: "make it writable, or point DAPR_HOME / --out at a writable directory",
    errno.EROFS: "the file system is read-only; point DAPR_HOME / --out elsewhere",
    errno.ENOTDIR: "a part of the path is a file, not a directory (check DAPR_HOME and --out)",
    errno.EEXIST: "a file stands where a directory is needed (check DAPR_HOME and --out)",
}


def os_error(error: OSError, where: str | None = None) -> str:
    """One line for an error of the file system: the path (``where``, else the error's file),
    the reason, the fix."""
    where = f"{where}: " if where else f"{error.filename}: " if error.filename else ""
    reason = error.strerror or str(error) or type(error).__name__
    fix = _OS_FIXES.get(error.errno, "check the path and its permissions")
    return f"{where}{reason}; {fix}"
