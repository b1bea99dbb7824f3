"""The DAPR paper's Table 3 from results directories: rows approach x retriever, columns the
datasets, their average, then the datasets kept apart (NQ-hard), with the best value per column
and paired t-tests against a baseline (Holm-corrected per column).

Rendered as markdown, CSV and LaTeX (booktabs).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import fmean
from typing import Any

from dapr.analysis.significance import Comparison, holm, paired_tests
from dapr.errors import DaprError

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
    """One metrics.json written by ``dapr run``."""

    path: Path
    dataset: str
    split: str
    fingerprint: str
    systems: Mapping[str, SystemScores]


@dataclass(frozen=True)
class Cell:
    """A row's mean metric in one column, its comparison with the baseline (Holm-adjusted over
    the column) when there is one, and whether it is the column's best."""

    mean: float
    comparison: Comparison | None = None
    best: bool = False

    def significant(self, level: float = 0.05) -> bool:
        return self.comparison is not None and self.comparison.significant(level)


@dataclass(frozen=True)
class Table:
    """Table 3: ``cells[(row, column)]``; a missing key is a blank cell."""

    metric: str
    rows: tuple[Row, ...]
    datasets: tuple[str, ...]  # averaged
    apart: tuple[str, ...]  # shown after the average
    cells: Mapping[tuple[Row, str], Cell]
    baseline: str | None = None
    baseline_kind: str | None = None  # "system" or "approach"
    level: float = 0.05

    @property
    def columns(self) -> tuple[str, ...]:
        return self.datasets + ((AVERAGE,) if self.datasets else ()) + self.apart

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
    return Result(
        path=file,
        dataset=data["dataset"],
        split=str(data.get("split", "")),
        fingerprint=str(data.get("dataset_fingerprint", "")),
        systems=systems,
    )


@dataclass(frozen=True)
class _Entry:
    mean: float
    scores: Mapping[str, float]
    system: str
    path: Path


def table3(
    results: Sequence[Result],
    metric: str = "nDCG@10",
    baseline: str | None = None,
    apart: Sequence[str] = ("nq-hard",),
    level: float = 0.05,
    system_level: str | None = "passage",
) -> Table:
    """Build Table 3 for ``metric``.

    Rows (approach, retriever) and dataset columns keep their first-seen order; ``apart``
    datasets (matched case-insensitively) follow "Avg.", the mean over the other datasets of a
    row that has them all. ``baseline`` names a system (each row against that system's row in
    the same dataset) or an approach (each row against the row with that approach and the same
    retriever). ``system_level`` keeps only systems of that level (Table 3 is passage retrieval;
    "document" for MaxP document runs, None for all).
    """
    entries: dict[tuple[Row, str], _Entry] = {}
    rows: dict[Row, None] = {}
    named: dict[tuple[str, str], dict[Row, None]] = {}  # (system, dataset) -> its rows
    datasets: dict[str, Result] = {}
    for result in results:
        _same_dataset(datasets.setdefault(result.dataset, result), result)
        for system in result.systems.values():
            if system_level is not None and system.level != system_level:
                continue
            row = (system.approach, system.retriever)
            entry = _entry(result, system, metric)
            named.setdefault((system.name, result.dataset), {})[row] = None
            key = (row, result.dataset)
            if key in entries:
                _same_entry(entries[key], entry, row, result.dataset)
                continue
            entries[key] = entry
            rows.setdefault(row)
    if not entries:
        only = f" at level {system_level!r}" if system_level else ""
        raise DaprError(
            f"no systems{only} in the results given; pass results of `dapr run` or another level"
        )
    folded = {a.casefold() for a in apart}
    main = tuple(d for d in datasets if d.casefold() not in folded)
    kept_apart = tuple(d for d in datasets if d.casefold() in folded)

    means: dict[tuple[Row, str], float] = {key: e.mean for key, e in entries.items()}
    for row in rows:
        if main and all((row, d) in entries for d in main):
            means[(row, AVERAGE)] = fmean(entries[(row, d)].mean for d in main)
    comparisons: dict[tuple[Row, str], Comparison] = {}
    kind = None
    if baseline is not None:
        kind = _baseline_kind(baseline, named, entries)
        for dataset in datasets:
            if kind == "system":
                base_rows = list(named.get((baseline, dataset), ()))
                if len(base_rows) > 1:
                    raise DaprError(
                        f"baseline system {baseline!r} is several rows on {dataset!r} "
                        f"({', '.join(map(_label, base_rows))}); name an approach instead"
                    )
                base_of = {row: base_rows[0] for row in rows} if base_rows else {}
            else:
                base_of = {row: (baseline, row[1]) for row in rows}
            comparisons |= _column_tests(entries, base_of, dataset)

    columns = main + ((AVERAGE,) if main else ()) + kept_apart
    best = {c: max((v for (_, col), v in means.items() if col == c), default=None) for c in columns}
    cells = {
        key: Cell(value, comparisons.get(key), math.isclose(value, best[key[1]], abs_tol=1e-12))
        for key, value in means.items()
    }
    return Table(metric, tuple(rows), main, kept_apart, cells, baseline, kind, level)


def _entry(result: Result, system: SystemScores, metric: str) -> _Entry:
    mean = system.mean.get(metric)
    scores = system.per_query.get(metric)
    if not isinstance(mean, (int, float)) or not isinstance(scores, dict):
        have = ", ".join(system.mean) or "none"
        raise DaprError(
            f"{result.path}: system {system.name!r} has no mean and per-query {metric!r}; "
            f"choose a metric from: {have}"
        )
    return _Entry(float(mean), scores, system.name, result.path)


def _same_dataset(first: Result, other: Result) -> None:
    known = first.fingerprint and other.fingerprint  # the reference code records none
    if first.split != other.split or (known and first.fingerprint != other.fingerprint):
        raise DaprError(
            f"{first.path} and {other.path}: dataset {first.dataset!r} differs (split "
            f"{first.split!r} vs {other.split!r}, fingerprint {first.fingerprint!r} vs "
            f"{other.fingerprint!r}); report results of one split of the same data"
        )


def _same_entry(first: _Entry, other: _Entry, row: Row, dataset: str) -> None:
    same = first.scores.keys() == other.scores.keys() and all(
        math.isclose(first.scores[q], other.scores[q], rel_tol=1e-9, abs_tol=1e-12)
        for q in first.scores
    )
    if not same:
        raise DaprError(
            f"{first.path} (system {first.system!r}) and {other.path} (system {other.system!r})"
            f": row {_label(row)} on {dataset!r} has different per-query scores; pass one of "
            "them, give the systems distinct approach/retriever fields, or choose a system level"
        )


def _baseline_kind(
    baseline: str,
    named: Mapping[tuple[str, str], Mapping[Row, None]],
    entries: Mapping[tuple[Row, str], _Entry],
) -> str:
    """A system name wins over an approach of the same name."""
    systems = {name for name, _ in named}
    approaches = {row[0] for row, _ in entries}
    if baseline in systems:
        return "system"
    if baseline in approaches:
        return "approach"
    raise DaprError(
        f"baseline {baseline!r} is neither a system nor an approach in the results; choose a "
        f"system ({', '.join(sorted(systems))}) or an approach ({', '.join(sorted(approaches))})"
    )


def _column_tests(
    entries: Mapping[tuple[Row, str], _Entry], base_of: Mapping[Row, Row], dataset: str
) -> dict[tuple[Row, str], Comparison]:
    """Paired tests in ``dataset`` of each row against its baseline row (``base_of``), where
    both have scores; p-values Holm-adjusted over the column."""
    found: dict[tuple[Row, str], Comparison] = {}
    for row, base in base_of.items():
        if row == base or (row, dataset) not in entries or (base, dataset) not in entries:
            continue
        entry = entries[(row, dataset)]
        if not entry.scores or not entries[(base, dataset)].scores:
            continue  # means only (the reference code's metrics files): nothing to test
        try:
            tested = paired_tests(entries[(base, dataset)].scores, {"row": entry.scores})
        except DaprError as e:
            raise DaprError(
                f"{entry.path}: row {_label(row)} against {_label(base)} on {dataset!r}: {e}"
            ) from e
        found[(row, dataset)] = tested["row"]
    adjusted = holm({repr(key): c.p_value for key, c in found.items()})
    return {key: replace(c, adjusted=adjusted[repr(key)]) for key, c in found.items()}


def _label(row: Row) -> str:
    return f"{row[0]} / {row[1]}" if row[1] else row[0]


# Renderers


def _number(value: float, digits: int, percent: bool) -> str:
    return f"{value * 100 if percent else value:.{digits}f}"


def _texts(table: Table, row: Row, digits: int, percent: bool, bold: str, mark: str) -> list[str]:
    """A row's cells as text: blank when missing, ``bold`` (a format) when best, then ``mark``
    when significant."""
    texts = []
    for column in table.columns:
        cell = table.cell(row, column)
        if cell is None:
            texts.append("")
            continue
        text = _number(cell.mean, digits, percent)
        text = bold.format(text) if cell.best else text
        texts.append(text + (mark if cell.significant(table.level) else ""))
    return texts


def _legend(metric: str, percent: bool, times: str = "×") -> str:
    return f"{metric}{f' {times}100' if percent else ''}; best per column in bold."


def _against(table: Table) -> str:
    same = " (same retriever)" if table.baseline_kind == "approach" else ""
    return f"against {table.baseline}{same}, paired t-test, Holm-corrected"


def _show_retriever(table: Table) -> bool:
    return any(retriever for _, retriever in table.rows)


def to_markdown(table: Table, digits: int = 1, percent: bool = True) -> str:
    """A markdown table: best per column in **bold**, a dagger on significant cells."""
    heads = ["Approach"] + (["Retriever"] if _show_retriever(table) else []) + list(table.columns)
    lines = [
        "| " + " | ".join(_md(h) for h in heads) + " |",
        "|" + "---|" * (len(heads) - len(table.columns)) + "---:|" * len(table.columns),
    ]
    for row in table.rows:
        values = _texts(table, row, digits, percent, "**{}**", "†")
        names = [row[0]] + ([row[1]] if _show_retriever(table) else [])
        lines.append("| " + " | ".join([_md(n) for n in names] + values) + " |")
    lines += ["", _legend(table.metric, percent)]
    if table.baseline is not None:
        lines.append(f"† p < {table.level:g} {_against(table)}")
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def to_csv(table: Table) -> str:
    """Raw means (6 decimals) per column and, with a baseline, "<dataset> p" columns holding
    the Holm-adjusted p-values; blank where there is no value."""
    datasets = table.datasets + table.apart
    p_heads = [f"{d} p" for d in datasets] if table.baseline is not None else []
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["approach", "retriever", *table.columns, *p_heads])
    for row in table.rows:
        cells = [table.cell(row, c) for c in table.columns]
        values = ["" if c is None else f"{c.mean:.6f}" for c in cells]
        ps = []
        for dataset in datasets if p_heads else ():
            cell = table.cell(row, dataset)
            p = None if cell is None or cell.comparison is None else cell.comparison.adjusted
            ps.append("" if p is None or math.isnan(p) else f"{p:.6g}")
        writer.writerow([*row, *values, *ps])
    return buffer.getvalue()


_LATEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def _tex(text: str) -> str:
    return "".join(_LATEX.get(ch, ch) for ch in text)


def to_latex(table: Table, digits: int = 1, percent: bool = True) -> str:
    """A booktabs tabular (needs ``\\usepackage{booktabs}``): best per column in \\textbf{},
    $^\\dagger$ on significant cells, and the legend as a last row."""
    retriever = _show_retriever(table)
    names = 2 if retriever else 1
    width = names + len(table.columns)
    heads = ["Approach"] + (["Retriever"] if retriever else []) + list(table.columns)
    lines = [
        r"\begin{tabular}{" + "l" * names + "r" * len(table.columns) + "}",
        r"\toprule",
        " & ".join(_tex(h) for h in heads) + r" \\",
        r"\midrule",
    ]
    for row in table.rows:
        values = _texts(table, row, digits, percent, r"\textbf{{{}}}", r"$^\dagger$")
        lines.append(" & ".join([_tex(n) for n in row[:names]] + values) + r" \\")
    lines.append(r"\bottomrule")
    notes = [_legend(_tex(table.metric), percent, times=r"$\times$")]
    if table.baseline is not None:
        notes.append(rf"$^\dagger$ $p < {table.level:g}$ {_tex(_against(table))}")
    lines += [rf"\multicolumn{{{width}}}{{l}}{{\footnotesize {note}}} \\" for note in notes]
    lines.append(r"\end{tabular}")
    return "\n".join(lines) + "\n"
