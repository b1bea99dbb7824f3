"""The DAPR paper's Table 3 from results directories: rows approach x retriever, columns the
datasets, their average, then the datasets kept apart (NQ-hard), with the best value per column
and paired t-tests against one or more baselines, corrected for multiple testing (Holm's by
default) over each column or over the whole table.

Rendered as markdown, CSV and LaTeX (booktabs); :mod:`dapr.analysis.html_report` renders it as a
web page.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import fmean

from dapr.analysis.model import (
    AVERAGE,
    Cell,
    Result,
    Row,
    SystemScores,
    Table,
    label,
    result_from_metrics,
)
from dapr.analysis.significance import CORRECTED, Comparison, adjust, check_correction, paired_tests
from dapr.errors import DaprError
from dapr.io import spreadsheet

__all__ = [
    "AVERAGE",
    "FAMILIES",
    "MARKS",
    "Cell",
    "Result",
    "Row",
    "SystemScores",
    "Table",
    "against",
    "check_family",
    "corrected",
    "number",
    "result_from_metrics",
    "table3",
    "text_marks",
    "to_csv",
    "to_latex",
    "to_markdown",
]

FAMILIES = ("column", "table")
"""Which comparisons a correction adjusts together: each column's, or the whole table's."""
MARKS: tuple[tuple[str, str], ...] = (
    ("†", r"\dagger"),
    ("‡", r"\ddagger"),
    ("∗", r"\ast"),
    ("⋆", r"\star"),
)
MARKS += (("◇", r"\diamond"), ("∘", r"\circ"))
"""The mark of each baseline's significant differences, as text and in LaTeX math."""


@dataclass(frozen=True)
class _Entry:
    mean: float
    scores: Mapping[str, float]
    system: str
    path: Path


def table3(
    results: Sequence[Result],
    metric: str = "nDCG@10",
    baseline: str | Sequence[str] | None = None,
    apart: Sequence[str] = ("nq-hard",),
    level: float = 0.05,
    system_level: str | None = "passage",
    correction: str = "holm",
    family: str = "column",
) -> Table:
    """Build Table 3 for ``metric``.

    Rows (approach, retriever) and dataset columns keep their first-seen order; ``apart``
    datasets (matched case-insensitively) follow "Avg.", the mean over the other datasets of a
    row that has them all. ``baseline`` names a system (each row against that system's row in
    the same dataset) or an approach (each row against the row with that approach and the same
    retriever), or several of them (each row against each). The p-values are adjusted by
    ``correction`` (holm, bonferroni or none) over each ``family``: "column" (a dataset's
    comparisons with every baseline) or "table" (all comparisons). ``system_level`` keeps only
    systems of that level (Table 3 is passage retrieval; "document" for MaxP document runs,
    None for all).
    """
    baselines = _baselines(baseline, correction, family)
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
    kinds = tuple(_baseline_kind(b, named, entries) for b in baselines)
    tested: dict[tuple[Row, str, int], Comparison] = {}
    for index, (base, kind) in enumerate(zip(baselines, kinds)):
        for dataset in datasets:
            if kind == "system":
                base_rows = list(named.get((base, dataset), ()))
                if len(base_rows) > 1:
                    raise DaprError(
                        f"baseline system {base!r} is several rows on {dataset!r} "
                        f"({', '.join(map(label, base_rows))}); name an approach instead"
                    )
                base_of = {row: base_rows[0] for row in rows} if base_rows else {}
            else:
                base_of = {row: (base, row[1]) for row in rows}
            found = _column_tests(entries, base_of, dataset)
            tested |= {(row, column, index): c for (row, column), c in found.items()}
    tested = _corrected(tested, correction, family)

    columns = main + ((AVERAGE,) if main else ()) + kept_apart
    highest = (
        (c, max((v for (_, col), v in means.items() if col == c), default=None)) for c in columns
    )
    best = {c: value for c, value in highest if value is not None}
    cells = {
        key: Cell(
            value,
            tuple(tested.get((*key, i)) for i in range(len(baselines))),
            math.isclose(value, best[key[1]], abs_tol=1e-12),
        )
        for key, value in means.items()
    }
    return Table(
        metric, tuple(rows), main, kept_apart, cells, baselines, kinds, level, correction, family
    )


def _baselines(
    baseline: str | Sequence[str] | None, correction: str, family: str
) -> tuple[str, ...]:
    """The baselines asked for, each once, after checking the correction and family."""
    check_correction(correction)
    check_family(family)
    baselines = tuple(dict.fromkeys([baseline] if isinstance(baseline, str) else baseline or ()))
    if len(baselines) > len(MARKS):
        raise DaprError(
            f"{len(baselines)} baselines given; a table marks at most {len(MARKS)}, so give "
            "fewer --baseline options"
        )
    return baselines


def check_family(family: str) -> str:
    """``family`` if it is one of :data:`FAMILIES`, or a DaprError naming them."""
    if family not in FAMILIES:
        raise DaprError(f"unknown --family {family!r}; choose one of {', '.join(FAMILIES)}")
    return family


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
            f": row {label(row)} on {dataset!r} has different per-query scores; pass one of "
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
    both have scores; p-values not yet adjusted (see :func:`_corrected`)."""
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
                f"{entry.path}: row {label(row)} against {label(base)} on {dataset!r}: {e}"
            ) from e
        found[(row, dataset)] = tested["row"]
    return found


def _corrected(
    tested: Mapping[tuple[Row, str, int], Comparison], correction: str, family: str
) -> dict[tuple[Row, str, int], Comparison]:
    """The comparisons with p-values adjusted over each family: a column's, or the table's."""
    families: dict[str, dict[str, float]] = {}
    for key, comparison in tested.items():
        within = key[1] if family == "column" else ""
        families.setdefault(within, {})[repr(key)] = comparison.p_value
    adjusted = {k: p for ps in families.values() for k, p in adjust(ps, correction).items()}
    return {key: replace(c, adjusted=adjusted[repr(key)]) for key, c in tested.items()}


# Renderers


def number(value: float, digits: int = 1, percent: bool = True) -> str:
    """A mean as the tables show it: ``digits`` decimals, times 100 when ``percent``."""
    return f"{value * 100 if percent else value:.{digits}f}"


def _texts(
    table: Table, row: Row, digits: int, percent: bool, bold: str, marks: Callable[[list[int]], str]
) -> list[str]:
    """A row's cells as text: blank when missing, ``bold`` (a format) when best, then the
    ``marks`` of the baselines it differs from significantly."""
    texts = []
    for column in table.columns:
        cell = table.cell(row, column)
        if cell is None:
            texts.append("")
            continue
        text = number(cell.mean, digits, percent)
        text = bold.format(text) if cell.best else text
        texts.append(text + marks(cell.marks(table.level)))
    return texts


def text_marks(indexes: Sequence[int]) -> str:
    """The marks of baselines (by index) as text: † for the first, ‡ for the second, ..."""
    return "".join(MARKS[i][0] for i in indexes)


def _tex_marks(indexes: Sequence[int]) -> str:
    symbols = "".join(MARKS[i][1] for i in indexes)
    return "" if not indexes else f"$^{symbols}$" if len(indexes) == 1 else f"$^{{{symbols}}}$"


def _legend(metric: str, percent: bool, times: str = "×") -> str:
    return f"{metric}{f' {times}100' if percent else ''}; best per column in bold."


def corrected(table: Table) -> str:
    """How the table's p-values are corrected, in words."""
    words = CORRECTED[table.correction]
    if table.correction == "none":
        return words
    return words + (" per column" if table.family == "column" else " over the whole table")


def against(
    table: Table,
    mark: Callable[[Sequence[int]], str] = text_marks,
    below: str = "p < {level:g}",
    escape: Callable[[str], str] = str,
) -> str:
    """The significance note: each baseline's mark, the level and the baseline, then the test
    and the correction (``escape`` applies to the words, not to the marks)."""
    notes = []
    for i, (baseline, kind) in enumerate(zip(table.baselines, table.baseline_kinds)):
        same = " (same retriever)" if kind == "approach" else ""
        notes.append(
            f"{mark([i])} {below.format(level=table.level)} {escape(f'against {baseline}{same}')}"
        )
    return "; ".join(notes) + escape(f", paired t-test, {corrected(table)}")


def _show_retriever(table: Table) -> bool:
    return any(retriever for _, retriever in table.rows)


def to_markdown(table: Table, digits: int = 1, percent: bool = True) -> str:
    """A markdown table: best per column in **bold**, the mark of each baseline (a dagger for
    the first) it differs from significantly."""
    heads = ["Approach"] + (["Retriever"] if _show_retriever(table) else []) + list(table.columns)
    lines = [
        "| " + " | ".join(_md(h) for h in heads) + " |",
        "|" + "---|" * (len(heads) - len(table.columns)) + "---:|" * len(table.columns),
    ]
    for row in table.rows:
        values = _texts(table, row, digits, percent, "**{}**", text_marks)
        names = [row[0]] + ([row[1]] if _show_retriever(table) else [])
        lines.append("| " + " | ".join([_md(n) for n in names] + values) + " |")
    lines += ["", _legend(table.metric, percent)]
    if table.baselines:
        lines.append(against(table))
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def to_csv(table: Table) -> str:
    """Raw means (6 decimals) per column and, with a baseline, "<dataset> p" columns holding
    the adjusted p-values (with several, "<dataset> p vs <baseline>"); blank where there is no
    value."""
    datasets = table.datasets + table.apart
    tests = [(d, i) for d in datasets for i in range(len(table.baselines))]
    several = len(table.baselines) > 1
    p_heads = [f"{d} p" + (f" vs {table.baselines[i]}" if several else "") for d, i in tests]
    rows = []
    for row in table.rows:
        cells = [table.cell(row, c) for c in table.columns]
        values = ["" if c is None else f"{c.mean:.6f}" for c in cells]
        ps = []
        for dataset, i in tests:
            cell = table.cell(row, dataset)
            tested = None if cell is None else cell.comparisons[i]
            p = None if tested is None else tested.adjusted
            ps.append("" if p is None or math.isnan(p) else f"{p:.6g}")
        rows.append([*row, *values, *ps])
    header = ["approach", "retriever", *table.columns, *p_heads]
    return spreadsheet.csv_text(header, rows, lineterminator="\n")


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
    $^\\dagger$ (then $^\\ddagger$, ...: one per baseline) on significant cells, and the legend
    as a last row."""
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
        values = _texts(table, row, digits, percent, r"\textbf{{{}}}", _tex_marks)
        lines.append(" & ".join([_tex(n) for n in row[:names]] + values) + r" \\")
    lines.append(r"\bottomrule")
    notes = [_legend(_tex(table.metric), percent, times=r"$\times$")]
    if table.baselines:
        notes.append(against(table, _tex_marks, "$p < {level:g}$", _tex))
    lines += [rf"\multicolumn{{{width}}}{{l}}{{\footnotesize {note}}} \\" for note in notes]
    lines.append(r"\end{tabular}")
    return "\n".join(lines) + "\n"
