"""Errors a user can fix: the CLI prints their one-line message and exits with status 2."""


class DaprError(Exception):
    """Bad input: the message names the file or component, the field, and the fix."""


class ConfigError(DaprError):
    """An experiment file that does not validate."""


class DataError(DaprError):
    """A dataset file that cannot be read as the format it claims to be."""
