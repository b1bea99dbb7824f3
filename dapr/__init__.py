"""dapr: document-aware passage retrieval. Installed as the distribution ``dapr-ir`` (the PyPI
name ``dapr`` belongs to the Dapr SDK); imported and run as ``dapr``."""

DISTRIBUTION = "dapr-ir"


def version() -> str:
    """The installed version of dapr ("unknown" when it runs from a source tree not installed)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"
