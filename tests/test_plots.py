"""Figures 2 and 3: the drawn data equal the inputs; the files are real PNG and PDF."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from matplotlib.container import BarContainer  # noqa: E402

from dapr.analysis.plots import category_figure, category_plot, sweep_figure, sweep_plot  # noqa: E402
from dapr.errors import DaprError  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"
PDF = b"%PDF-"

CURVES = {
    "all queries": [(0.0, 0.40), (0.5, 0.48), (0.2, 0.45), (1.0, 0.30)],  # unsorted on purpose
    "hard": [(0.0, 0.05), (0.2, 0.09), (0.5, 0.12), (1.0, 0.02)],
}
TABLE = {
    "bm25": {"all": 0.41, "CR": 0.30, "MT": 0.35},
    "dense": {"all": 0.45, "CR": 0.33, "MT": 0.31, "AC": 0.52},
}


def assert_files(paths: list[Path], stem: Path) -> None:
    assert paths == [stem.with_name(stem.name + ".png"), stem.with_name(stem.name + ".pdf")]
    assert paths[0].read_bytes().startswith(PNG)
    assert paths[1].read_bytes().startswith(PDF)


def test_sweep_lines_hold_the_points_in_value_order():
    fig = sweep_figure(CURVES, "alpha", "nDCG@10", chosen=0.2)
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    for label, points in CURVES.items():
        xs, ys = zip(*sorted(points))
        assert list(lines[label].get_xdata()) == list(xs)
        assert list(lines[label].get_ydata()) == list(ys)
        assert lines[label].get_marker() == "o"
    chosen = lines["chosen: 0.2"]
    assert list(chosen.get_xdata()) == [0.2, 0.2] and chosen.get_linestyle() == "--"
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("alpha", "nDCG@10")
    assert ax.get_title() == "nDCG@10 against alpha"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["all queries", "hard", "chosen: 0.2"]
    assert all(g.get_visible() for g in ax.get_xgridlines())


def test_sweep_without_a_chosen_value_and_files(tmp_path: Path):
    fig = sweep_figure({"all queries": [(1, 0.5)]}, "k", "MRR@10", title="custom")
    assert len(fig.axes[0].get_lines()) == 1 and fig.axes[0].get_title() == "custom"
    stem = tmp_path / "plots" / "sweep"
    assert_files(sweep_plot(CURVES, "alpha", "nDCG@10", stem, chosen=0.5), stem)
    with pytest.raises(DaprError, match="no points"):
        sweep_figure({"all queries": []}, "alpha", "nDCG@10")


def test_category_bars_equal_the_table():
    counts = {"all": 100, "CR": 40, "MT": 10, "AC": 5}
    fig = category_figure(TABLE, "nDCG@10", counts)
    (ax,) = fig.axes
    containers = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert [c.get_label() for c in containers] == ["bm25", "dense"]
    categories = ["all", "CR", "MT", "AC"]  # first-seen order over the systems
    for container, system in zip(containers, TABLE):
        heights = [bar.get_height() for bar in container]
        expected = [TABLE[system].get(c, math.nan) for c in categories]
        assert heights == pytest.approx(expected, nan_ok=True)
        assert math.isnan(heights[3]) == (system == "bm25")  # no AC value for bm25: no bar
    # bars of one group sit side by side around the group's tick
    centres = [[bar.get_x() + bar.get_width() / 2 for bar in c] for c in containers]
    assert centres[0][1] < 1 < centres[1][1]
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["all\n(n=100)", "CR\n(n=40)", "MT\n(n=10)", "AC\n(n=5)"]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("query category", "nDCG@10")
    assert ax.get_title() == "nDCG@10 per query category"
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["bm25", "dense"]


def test_category_files_and_errors(tmp_path: Path):
    fig = category_figure({"bm25": {"hard": 0.0, "not hard": 0.5}}, "nDCG@10")
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["hard", "not hard"]  # no counts: bare names
    stem = tmp_path / "categories"
    assert_files(category_plot(TABLE, "nDCG@10", stem), stem)
    with pytest.raises(DaprError, match="no values"):
        category_figure({"bm25": {}}, "nDCG@10")


@pytest.mark.parametrize("fmt", ["pdf", "png"])
def test_a_figure_gives_the_same_bytes_whenever_it_is_written(fmt, monkeypatch):
    import time

    from dapr.analysis.plots import encoded

    figure = sweep_figure(CURVES, "alpha", "nDCG@10", chosen=0.2)
    first = encoded(figure, fmt)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(int(time.time()) + 86_400))  # a day later
    assert encoded(figure, fmt) == first
