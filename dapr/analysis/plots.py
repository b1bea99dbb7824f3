"""The paper's figures as PNG and PDF, drawn headless with matplotlib (no display, no pyplot).

* :func:`sweep_plot` (Figure 2): a metric against a swept parameter (the fusion weight alpha)
  for several query sets on the same axes, the chosen value marked by a dashed line;
* :func:`category_plot` (Figure 3): a metric per query category, one bar per system;
* :func:`denoising_plot` (RocketQA's Figure 5): the share of mined negatives removed per rank.

Each ``*_figure`` function returns the :class:`~matplotlib.figure.Figure` (for inspection);
each ``*_plot`` function draws it and writes ``<stem>.png`` and ``<stem>.pdf`` atomically.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dapr.errors import DaprError
from dapr.io.files import write_bytes_atomic

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FORMATS = ("png", "pdf")
DPI = 150
BAR_INCHES = 0.4
"""The width a bar gets when the figure has room (value labels need about 0.3 inch)."""


def sweep_plot(
    curves: Mapping[str, Sequence[tuple[float, float]]],
    parameter: str,
    metric: str,
    stem: Path,
    chosen: float | None = None,
    title: str | None = None,
) -> list[Path]:
    """Write the sweep figure to ``<stem>.png`` and ``<stem>.pdf``; return their paths."""
    return save(sweep_figure(curves, parameter, metric, chosen, title), stem)


def sweep_figure(
    curves: Mapping[str, Sequence[tuple[float, float]]],
    parameter: str,
    metric: str,
    chosen: float | None = None,
    title: str | None = None,
) -> Figure:
    """``curves``: ``{query set: [(parameter value, metric value), ...]}``, drawn in value order."""
    if not curves or not any(curves.values()):
        raise DaprError("sweep plot: no points given; evaluate at least one swept value")
    fig = _figure((6.4, 4.2))
    ax = fig.add_subplot()
    for label, points in curves.items():
        xs, ys = zip(*sorted(points)) if points else ((), ())
        ax.plot(xs, ys, marker="o", markersize=5, linewidth=1.6, label=label)
    if chosen is not None:
        ax.axvline(chosen, color="0.35", linestyle="--", linewidth=1.2, label=f"chosen: {chosen:g}")
    ax.set_xlabel(parameter)
    ax.set_ylabel(metric)
    ax.set_title(title or f"{metric} against {parameter}")
    ax.grid(True, alpha=0.35)
    ax.legend(loc="best", frameon=True)
    return fig


def denoising_plot(
    scored: Sequence[int], removed: Sequence[int], below: float, stem: Path
) -> list[Path]:
    """RocketQA's Figure 5: per rank of the mining run, the share of candidates the
    cross-encoder scored at or above ``below`` (removed as likely positives)."""
    if not any(scored):
        raise DaprError("denoising plot: no candidate was scored")
    fig = _figure((6.4, 3.8))
    ax = fig.add_subplot()
    ranks = range(1, len(scored) + 1)
    shares = [r / s if s else 0.0 for r, s in zip(removed, scored)]
    ax.bar(list(ranks), shares, color="0.45")
    ax.set_xlabel("rank of the mined candidate")
    ax.set_ylabel(f"share removed (cross-encoder >= {below:g})")
    ax.set_ylim(0, 1)
    ax.set_title(f"Denoised negatives: {sum(removed):,} of {sum(scored):,} removed")
    ax.grid(True, axis="y", alpha=0.35)
    return save(fig, stem)


def category_plot(
    table: Mapping[str, Mapping[str, float]],
    metric: str,
    stem: Path,
    counts: Mapping[str, int] | None = None,
    title: str | None = None,
) -> list[Path]:
    """Write the category figure to ``<stem>.png`` and ``<stem>.pdf``; return their paths."""
    return save(category_figure(table, metric, counts, title), stem)


def category_figure(
    table: Mapping[str, Mapping[str, float]],
    metric: str,
    counts: Mapping[str, int] | None = None,
    title: str | None = None,
    xlabel: str = "query category",
) -> Figure:
    """``table``: ``{system: {category: value}}`` (as
    :func:`dapr.analysis.categories.category_table` returns it). Categories are the x-axis
    groups in first-seen order; a system without a value for a category has no bar there.
    Any other grouped bars fit too (a report's datasets as groups, with ``xlabel``)."""
    categories = list(dict.fromkeys(c for row in table.values() for c in row))
    if not categories:
        raise DaprError("category plot: no values given; compute category means first")
    systems = list(table)
    width = 0.8 / len(systems)
    ticks = [_tick(c, counts) for c in categories]
    group = max(
        len(systems) * BAR_INCHES / 0.8,
        max(len(line) for t in ticks for line in t.split("\n")) * 0.09 + 0.3,
    )
    fig_width = min(max(6.4, len(categories) * group + 1.2), 16.0)
    bar_inches = (fig_width - 1.2) / len(categories) * width
    fig = _figure((fig_width, 4.6 + 0.25 * math.ceil(len(systems) / 3)))
    ax = fig.add_subplot()
    for i, system in enumerate(systems):
        offset = (i - (len(systems) - 1) / 2) * width
        heights = [table[system].get(c, math.nan) for c in categories]
        bars = ax.bar(
            [x + offset for x in range(len(categories))], heights, width, label=system, zorder=2
        )
        if bar_inches >= 0.3:
            ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=2)
    ax.set_xticks(range(len(categories)), ticks)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(metric)
    ax.set_title(title or f"{metric} per query category")
    ax.grid(True, axis="y", alpha=0.35, zorder=0)
    top = max((h for row in table.values() for h in row.values() if not math.isnan(h)), default=1)
    ax.set_ylim(0, top * 1.15 if top > 0 else 1)
    fig.legend(loc="outside lower center", ncol=min(len(systems), 3), frameon=False)
    return fig


def save(fig: Figure, stem: Path) -> list[Path]:
    """Write ``fig`` as ``<stem>.png`` and ``<stem>.pdf`` (each atomically); return the paths."""
    stem = Path(stem)
    paths = []
    for fmt in FORMATS:
        path = stem.with_name(f"{stem.name}.{fmt}")
        write_bytes_atomic(path, [encoded(fig, fmt)])
        paths.append(path)
    return paths


STABLE = {"pdf": {"CreationDate": None}}
"""Metadata left out so that the same figure gives the same bytes at any time."""


def encoded(fig: Figure, fmt: str = "png") -> bytes:
    """``fig`` as the bytes of a ``fmt`` file (png, pdf, svg); png and pdf the same bytes
    whenever made."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=fmt, dpi=DPI, bbox_inches="tight", metadata=STABLE.get(fmt))
    return buffer.getvalue()


def _tick(category: str, counts: Mapping[str, int] | None) -> str:
    if counts is None or category not in counts:
        return category
    return f"{category}\n(n={counts[category]})"


def _figure(size: tuple[float, float]) -> Figure:
    """A figure on the Agg canvas, independent of pyplot and of any display."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise DaprError("plots need matplotlib: pip install matplotlib") from None
    fig = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(fig)
    return fig
