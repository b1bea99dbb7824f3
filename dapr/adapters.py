"""Dataset adapters: a registered dataset's ready copy, and how to build it from its raw files.

An adapter is registered under the entry-point group ``dapr.datasets``. Calling it (or
:meth:`Adapter.load`) returns the :class:`Dataset`: from the local prepared copy under
``$DAPR_HOME/datasets/<name>`` when there is one, else, for the DAPR benchmark's datasets, from
the published hub dataset ``UKPLab/dapr`` (downloaded once into that prepared copy). Building
from raw files (``dapr data build NAME --source DIR``) writes the same prepared copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dapr.data import Dataset
from dapr.errors import DaprError, DataError
from dapr.paths import home


@dataclass(frozen=True)
class RawFile:
    """A file a builder reads: its path inside the source directory and where it comes from.

    ``url`` is None for files that must be obtained by hand (``how`` then says how).
    ``sha256`` is checked after a download when it is known.
    """

    path: str
    url: str | None = None
    sha256: str | None = None
    how: str = ""


class Adapter:
    """One dataset by name. Subclasses set the class attributes and implement :meth:`build`."""

    name: str = ""
    origin: str = ""
    """One line for ``dapr data list``: where the data comes from."""
    raw_files: tuple[RawFile, ...] = ()
    hub_repo: str | None = None
    """The hub dataset that publishes a prebuilt copy (configs ``<name>-corpus`` etc.)."""

    def __call__(self, **options: Any) -> Dataset:
        return self.load(**options)

    @property
    def prepared(self) -> Path:
        """Where the ready copy lives (written by a hub download or ``dapr data build``)."""
        return home() / "datasets" / self.name

    def cached(self) -> bool:
        return self.prepared.is_dir()

    def load(self, **options: Any) -> Dataset:
        """The ready dataset: the prepared copy, fetched from the hub first if needed."""
        from dapr.io import read_dataset

        if options:
            raise DaprError(
                f"dataset {self.name!r} takes no options when loaded ({', '.join(options)}); "
                f"pass build options to `dapr data build {self.name} --set KEY=VALUE`"
            )
        if not self.cached():
            if self.hub_repo is None:
                raise DaprError(
                    f"dataset {self.name!r} is not built yet; build it with "
                    f"`dapr data build {self.name} --source DIR` ({self.origin})"
                )
            from dapr.published import fetch_published

            fetch_published(self.name, self.prepared, repo=self.hub_repo)
        return read_dataset(self.prepared, self.name)

    def build(self, source: Path, **options: Any) -> Dataset:
        """The dataset built from the raw files in ``source``."""
        raise DaprError(f"dataset {self.name!r} cannot be built from raw files; load it by name")

    def require(self, source: Path, download: bool = False) -> None:
        """Check that every raw file is in ``source``; download the missing ones if asked."""
        from dapr.download import fetch

        for raw in self.raw_files:
            target = Path(source) / raw.path
            if target.is_file():
                continue
            if download and raw.url:
                fetch(raw.url, target, raw.sha256)
                continue
            if raw.url:
                fix = f"download {raw.url} there, or rerun with --download"
            else:
                fix = raw.how or "obtain it from the dataset's authors"
            raise DataError(f"{target}: missing raw file of {self.name}; {fix}")


def adapter_of(name: str) -> Adapter:
    """The registered adapter ``name``; plain loader functions are not adapters."""
    from dapr.registry import datasets

    found = datasets.get(name)
    if not isinstance(found, Adapter):
        raise DaprError(
            f"dataset {name!r} is registered as a loader function, not an adapter; "
            "it can be loaded by name but not built from raw files"
        )
    return found
