"""What a report is made of: the results read from ``metrics.json`` files (:class:`Result`) and
the table built from them (:class:`Table` of :class:`Cell`), shared by the table builder
(:mod:`dapr.analysis.table`) and the HTML page (:mod:`dapr.analysis.html_report`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dapr.analysis.significance import Comparison

AVERAGE = "Avg."
Row = tuple[str, str]  # (approach, retriever)


@dataclass(frozen=True)
class SystemScores:
    """One system of a metrics.json: its row fields and its scores per metric."""

    name: str
    level: str
    approach: str
    retriever: str
    mean: Mapping[str, float]
    per_query: Mapping[str, Mapping[str, float]]


@dataclass(frozen=True)
class Result:
    """One metrics.json written by ``dapr run``; ``labels`` are its queries' categories."""

    path: Path
    dataset: str
    split: str
    fingerprint: str
    systems: Mapping[str, SystemScores]
    labels: Mapping[str, Sequence[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Cell:
    """A row's mean metric in one column, its comparison with each of the table's baselines
    (None where there is none; p-values adjusted over the table's families), and whether it is
    the column's best."""

    mean: float
    comparisons: tuple[Comparison | None, ...] = ()
    best: bool = False

    @property
    def comparison(self) -> Comparison | None:
        """The comparison with the table's first baseline."""
        return self.comparisons[0] if self.comparisons else None

    def significant(self, level: float = 0.05) -> bool:
        """Whether the difference with any baseline is significant."""
        return bool(self.marks(level))

    def marks(self, level: float = 0.05) -> list[int]:
        """The indexes of the baselines it differs from significantly."""
        return [i for i, c in enumerate(self.comparisons) if c is not None and c.significant(level)]


@dataclass(frozen=True)
class Table:
    """Table 3: ``cells[(row, column)]``; a missing key is a blank cell. ``baselines`` are
    systems or approaches (``baseline_kinds``: "system" or "approach"); the p-values of each
    family ("column": a column's comparisons with every baseline; "table": all of them) are
    adjusted by ``correction`` (holm, bonferroni or none)."""

    metric: str
    rows: tuple[Row, ...]
    datasets: tuple[str, ...]  # averaged
    apart: tuple[str, ...]  # shown after the average
    cells: Mapping[tuple[Row, str], Cell]
    baselines: tuple[str, ...] = ()
    baseline_kinds: tuple[str, ...] = ()
    level: float = 0.05
    correction: str = "holm"
    family: str = "column"

    @property
    def columns(self) -> tuple[str, ...]:
        return self.datasets + ((AVERAGE,) if self.datasets else ()) + self.apart

    @property
    def baseline(self) -> str | None:
        """The first baseline."""
        return self.baselines[0] if self.baselines else None

    @property
    def baseline_kind(self) -> str | None:
        return self.baseline_kinds[0] if self.baseline_kinds else None

    def cell(self, row: Row, column: str) -> Cell | None:
        return self.cells.get((row, column))


def result_from_metrics(file: Path, data: Mapping[str, Any]) -> Result:
    """The :class:`Result` of a ``metrics.json`` that :func:`dapr.experiment.results.read_metrics`
    read from ``file``."""
    systems = {
        name: SystemScores(
            name=name,
            level=str(entry.get("level", "passage")),
            approach=str(entry.get("approach") or name),
            retriever=str(entry.get("retriever") or ""),
            mean=entry["mean"],
            per_query=entry["per_query"],
        )
        for name, entry in data["systems"].items()
    }
    given = data.get("labels")
    labels = given if isinstance(given, dict) else {}
    return Result(
        path=file,
        dataset=data["dataset"],
        split=str(data.get("split", "")),
        fingerprint=str(data.get("dataset_fingerprint", "")),
        systems=systems,
        labels={str(q): (c,) if isinstance(c, str) else tuple(c) for q, c in labels.items()},
    )


def label(row: Row) -> str:
    """A row as one string: "approach / retriever", or the approach alone."""
    return f"{row[0]} / {row[1]}" if row[1] else row[0]
