"""A report as one self-contained web page: Table 3 with its significance marks, every
comparison with its p-values, a bar chart of the metric per system and, where the results give
their queries categories, a breakdown per category (a table and a chart per dataset).

The style sheet is inline and the charts are PNGs embedded as base64 ``data:`` URLs, so the one
file opens in any browser, offline. Without matplotlib the page says so in place of the charts.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from html import escape

from dapr.analysis.categories import category_counts, category_means
from dapr.analysis.model import Result, Row, Table, label
from dapr.analysis.table import against, number, text_marks
from dapr.errors import DaprError

Breakdown = tuple[str, dict[str, dict[str, float]], dict[str, int]]
"""A dataset, ``{system: {category: mean}}`` and ``{category: number of queries}``."""

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; color: #222; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.2rem; margin-top: 2rem; }
table { border-collapse: collapse; margin: 1rem 0; font-size: 0.9rem; }
caption { caption-side: bottom; text-align: left; padding-top: 0.4rem; color: #555; }
th, td { padding: 0.25rem 0.6rem; border-bottom: 1px solid #ddd; text-align: left; }
thead th { border-bottom: 2px solid #444; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.best { font-weight: bold; }
sup { color: #a40; font-weight: normal; }
figure { margin: 1rem 0; } figure img { max-width: 100%; height: auto; }
p.note { color: #a40; }
"""


def to_html(
    table: Table,
    results: Sequence[Result] = (),
    system_level: str | None = "passage",
    digits: int = 1,
    percent: bool = True,
) -> str:
    """The page for ``table``; ``results`` (those it was built from) give the per-category
    breakdowns of the systems of ``system_level`` (None for all)."""
    metric = escape(table.metric)
    scale = " ×100" if percent else ""
    parts = [f"<h1>dapr report: {metric}</h1>", _summary(table)]
    parts.append(_main_table(table, digits, percent))
    bars = {label(r): _row_means(table, r) for r in table.rows}
    y = table.metric + scale
    parts.append(_chart(_scaled(bars, percent), y, f"{y} per system", "dataset"))
    if table.baselines:
        parts += ["<h2>Comparisons</h2>", _comparisons(table, percent)]
    breakdowns = category_breakdowns(results, table.metric, system_level)
    for i, (dataset, means, counts) in enumerate(breakdowns, 1):
        parts.append(f"<h2>Query categories: {escape(dataset)}</h2>")
        parts.append(_category_table(means, counts, f"categories-{i}", digits, percent))
        title = f"{y} per query category on {dataset}"
        parts.append(_chart(_scaled(means, percent), y, title, "query category", counts))
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>dapr report: {metric}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(parts)
        + "\n</body>\n</html>\n"
    )


def category_breakdowns(
    results: Sequence[Result], metric: str, system_level: str | None = "passage"
) -> list[Breakdown]:
    """Per dataset whose results label their queries: each system's mean ``metric`` per
    category (``"all"`` first), systems named "approach / retriever"."""
    grouped: dict[str, tuple[dict[str, Sequence[str]], dict[str, Mapping[str, float]]]] = {}
    for result in results:
        if not result.labels:
            continue
        labels, systems = grouped.setdefault(result.dataset, ({}, {}))
        labels.update(result.labels)
        for system in result.systems.values():
            scores = system.per_query.get(metric)
            if scores and (system_level is None or system.level == system_level):
                systems.setdefault(label((system.approach, system.retriever)), scores)
    found = []
    for dataset, (labels, systems) in grouped.items():
        if not systems:
            continue
        means = {
            name: {c: m[metric] for c, m in category_means({metric: s}, labels).items()}
            for name, s in systems.items()
        }
        counts = category_counts({metric: next(iter(systems.values()))}, labels)
        found.append((dataset, means, counts))
    return found


def _summary(table: Table) -> str:
    columns = ", ".join(table.datasets) or "none"
    text = f"Rows: approach × retriever. Averaged over: {columns}."
    if table.apart:
        text += f" Kept apart: {', '.join(table.apart)}."
    return f"<p>{escape(text)}</p>"


def _main_table(table: Table, digits: int, percent: bool) -> str:
    retriever = any(r for _, r in table.rows)
    heads = ["Approach"] + (["Retriever"] if retriever else [])
    head = "".join(f'<th scope="col">{h}</th>' for h in heads)
    head += "".join(f'<th scope="col" class="num">{escape(c)}</th>' for c in table.columns)
    body = []
    for row in table.rows:
        cells = [f'<th scope="row">{escape(row[0])}</th>']
        cells += [f"<td>{escape(row[1])}</td>"] if retriever else []
        for column in table.columns:
            cells.append(_cell(table, row, column, digits, percent))
        body.append("<tr>" + "".join(cells) + "</tr>")
    notes = f"{table.metric}{' ×100' if percent else ''}; best per column in bold."
    if table.baselines:
        notes += " " + against(table)
    return (
        f'<table id="table3"><caption>{escape(notes)}</caption><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _cell(table: Table, row: Row, column: str, digits: int, percent: bool) -> str:
    cell = table.cell(row, column)
    if cell is None:
        return '<td class="num"></td>'
    marks = []
    for i in cell.marks(table.level):
        c = cell.comparisons[i]
        if c is None:  # marks() names compared baselines only
            continue
        about = f"against {table.baselines[i]}: difference {_signed(c.delta, percent)}, "
        about += f"p = {c.p_value:.3g}, adjusted p = {c.adjusted:.3g}"
        marks.append(f'<sup title="{escape(about)}">{text_marks([i])}</sup>')
    kind = "num best" if cell.best else "num"
    return f'<td class="{kind}">{number(cell.mean, digits, percent)}{"".join(marks)}</td>'


def _comparisons(table: Table, percent: bool) -> str:
    heads = ["Dataset", "Row", "Baseline", "Difference", "p", "Adjusted p", "Significant"]
    head = "".join(f'<th scope="col">{h}</th>' for h in heads)
    body = []
    for column in table.datasets + table.apart:
        for row in table.rows:
            cell = table.cell(row, column)
            for i, c in enumerate(cell.comparisons if cell else ()):
                if c is None:
                    continue
                values = [column, label(row), f"{text_marks([i])} {table.baselines[i]}"]
                values = [escape(v) for v in values]
                values += [_signed(c.delta, percent), _p(c.p_value), _p(c.adjusted)]
                values.append("yes" if c.significant(table.level) else "no")
                body.append("<tr>" + "".join(f"<td>{v}</td>" for v in values) + "</tr>")
    caption = escape(f"Differences{' ×100' if percent else ''}; " + against(table))
    return (
        f'<table id="comparisons"><caption>{caption}</caption><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _category_table(
    means: Mapping[str, Mapping[str, float]],
    counts: Mapping[str, int],
    identity: str,
    digits: int,
    percent: bool,
) -> str:
    categories = list(counts)
    head = '<th scope="col">System</th>' + "".join(
        f'<th scope="col" class="num">{escape(c)} (n={counts[c]})</th>' for c in categories
    )
    body = []
    for system, values in means.items():
        cells = [f'<th scope="row">{escape(system)}</th>']
        for category in categories:
            value = values.get(category, math.nan)
            shown = "" if math.isnan(value) else number(value, digits, percent)
            cells.append(f'<td class="num">{shown}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<table id="{identity}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _chart(
    bars: Mapping[str, Mapping[str, float]],
    y: str,
    title: str,
    x: str,
    counts: Mapping[str, int] | None = None,
) -> str:
    """Grouped bars (``{series: {group: value}}``) as an embedded PNG, or a note saying why
    there is no chart."""
    from dapr.analysis.plots import category_figure, encoded

    try:
        png = encoded(category_figure(bars, y, counts, title=title, xlabel=x))
    except DaprError as e:  # matplotlib is missing
        return f'<p class="note">No chart: {escape(str(e))}</p>'
    data = base64.b64encode(png).decode("ascii")
    return (
        f'<figure><img alt="{escape(title)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{escape(title)}</figcaption></figure>"
    )


def _row_means(table: Table, row: Row) -> dict[str, float]:
    return {c: cell.mean for c in table.columns if (cell := table.cell(row, c)) is not None}


def _scaled(bars: Mapping[str, Mapping[str, float]], percent: bool) -> dict[str, dict[str, float]]:
    factor = 100 if percent else 1
    return {name: {k: v * factor for k, v in values.items()} for name, values in bars.items()}


def _signed(delta: float, percent: bool) -> str:
    return f"{round(delta * (100 if percent else 1), 2) + 0.0:+.2f}"  # + 0.0: no "-0.00"


def _p(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.3g}"
