"""One source for every number: each table of figures in README.md and docs/ is the render of a
results file under docs/results/ (docs/_hooks/results_tables.py), each results file says how its
figures were produced, and a ratio claimed in prose is a figure a rendered table shows.

A table of figures is a markdown table with at least one cell that is a number (markup, a unit
or an ``x`` allowed: ``0.5454``, ``**61.5**†``, ``1,198 MB``, ``1.53x``), except the settings
tables that compare configurations (header ``| setting ...``). Generated reference tables are
not in the pages' sources, so they are not checked here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_hooks"))

import results_tables as rt  # noqa: E402  (docs/_hooks/results_tables.py, the one renderer)

FIGURE = re.compile(r"^[-+~≈<>]?\d[\d,]*(\.\d+)?(e-?\d+)?\s*(%|x|[a-zA-Z/]{1,8})?$")
CLAIM = re.compile(r"(\d[\d.,]*)x (?:faster|slower|more|fewer|less)\b")
"""A comparative ratio in prose ("1.53x faster", "5.52x more queries")."""


def _figure(cell: str) -> bool:
    return bool(FIGURE.match(re.sub(r"[*†`]", "", cell).strip()))


def _tables(text: str) -> list[tuple[int, list[str]]]:
    """Each table of ``text``: its first line's index and its lines."""
    lines, found = text.splitlines(), []
    for i, line in enumerate(lines):
        if line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|")):
            end = i
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            found.append((i, lines[i:end]))
    return found


def _prose(text: str) -> str:
    """``text`` without its code blocks, tables and comments."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    return "\n".join(line for line in text.splitlines() if not line.startswith("|"))


def _unsourced(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    found = []
    for i, table in _tables(path.read_text()):
        cells = [c for row in table[2:] for c in rt.split_row(row)]
        if table[0].startswith("| setting ") or not any(_figure(c) for c in cells):
            continue
        if i == 0 or rt.parse_marker(lines[i - 1]) is None:
            found.append(f"{path.name}:{i + 1} {table[0]}")
    return found


def test_every_table_of_figures_is_the_render_of_a_results_file():
    unsourced = [where for path in rt.pages() for where in _unsourced(path)]
    assert unsourced == [], "put <!-- results: FILE --> above each, then --write"
    assert rt.stale() == [], "python docs/_hooks/results_tables.py --write"


def test_a_typed_table_and_a_stale_table_are_found(tmp_path):
    typed = tmp_path / "typed.md"
    typed.write_text("Fused:\n\n| system | nDCG@10 |\n|---|---:|\n| fused | 0.5454 |\n")
    assert _unsourced(typed) == ["typed.md:3 | system | nDCG@10 |"]
    marker = "<!-- results: rank_fusion/wiki-sample/summary.md -->"
    page = marker + "\n| system | nDCG@10 |\n|---|---:|\n"
    rendered = rt.rewrite(page)
    assert rendered != page and rt.rewrite(rendered) == rendered
    assert "| bm25-passage | passage |" in rendered


def test_a_marker_selects_rows_and_columns_and_the_site_names_the_source():
    spec = rt.parse_marker(
        '<!-- results: rocketqa_ablation/COVID-QA/summary.md rows="cross-batch; bm25" '
        'columns="system; MRR@10" -->'
    )
    assert spec is not None
    lines = rt.render(spec)
    assert lines[:2] == ["| system | MRR@10 |", "|---|---:|"]
    assert [rt.split_row(r)[0] for r in lines[2:]] == ["cross-batch", "bm25"]
    site = rt.on_page_markdown("<!-- results: bm25.json -->\n")
    assert "commit 665e2f3" in site and "transcribed" in site and "2-core" in site


@pytest.mark.parametrize(
    ("marker", "says"),
    [
        ("<!-- results: nothing.json -->", "docs/results/nothing.json: no such results file"),
        ("<!-- results: bm25.json table=other -->", "no table 'other'; choose from: backends"),
        ('<!-- results: bm25.json rows="nope" -->', "no row 'nope'"),
        ("<!-- results: bm25.json colour=red -->", "unknown option 'colour=red'"),
    ],
)
def test_a_bad_marker_is_one_line_naming_the_fix(marker, says):
    with pytest.raises(rt.ResultsError, match=re.escape(says)) as raised:
        rt.rewrite(marker + "\n")
    assert "\n" not in str(raised.value)


def test_every_results_file_says_how_it_was_produced():
    files = sorted(rt.RESULTS.glob("*.json"))
    assert files
    for file in files:
        found = rt.load_json(file)  # command, date, commit, hardware, source, tables
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", found["date"]), file.name
        assert re.match(r"[0-9a-f]{7,40}", found["commit"]), file.name


def test_a_results_file_without_its_stamp_is_refused(tmp_path):
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"tables": {"t": {"columns": ["a"], "rows": [["1"]]}}}))
    with pytest.raises(rt.ResultsError, match="give it command, date, commit, hardware, source"):
        rt.load_json(bare)


def test_a_ratio_claimed_in_prose_is_a_figure_of_a_table_on_its_page():
    unbacked = []
    for path in rt.pages():
        text = path.read_text()
        shown = set()
        for _, _end, spec in rt.blocks(text):
            for row in rt.render(spec)[2:]:
                shown |= {re.sub(r"[*`]", "", c).strip() for c in rt.split_row(row)}
        for claim in CLAIM.finditer(_prose(text)):
            if f"{claim.group(1)}x" not in shown:
                unbacked.append(f"{path.name}: {claim.group(0)}")
    assert unbacked == [], "render the figure from a results file on the page, or drop it"


def test_a_figure_shown_twice_has_one_value():
    """Two rendered tables with the same columns and a row of the same label (its cells that
    are not figures) agree on that row's figures, on one page or two; a run published per
    dataset (docs/results/<experiment>/<dataset>/) is a scope of its own, as its rows name
    systems, not datasets; so is a benchmark run at a corpus size of its own (its file's
    ``passages``) with the code of its ``commit`` (a rerun after a change measures other code),
    as its rows name steps."""
    seen: dict[tuple[str, str, str, str], tuple[str, str]] = {}
    clashes = []
    for path in rt.pages():
        for _, _, spec in rt.blocks(path.read_text()):
            table = rt.select(spec)
            scope = str(Path(spec["file"]).parent)
            if spec["file"].endswith(".json"):
                found = rt.load_json(rt.RESULTS / spec["file"])
                size = found.get("passages")
                scope += f" at {size} passages, commit {found['commit']}" if size else ""
            cells: dict[tuple[str, str, str, str], list[str]] = {}
            for row in table["rows"]:
                label = " / ".join(c for c in row if not _figure(c))
                for column, value in zip(table["columns"], row, strict=True):
                    if _figure(value):
                        key = (scope, " | ".join(table["columns"]), label, column)
                        cells.setdefault(key, []).append(value)
            for key, values in cells.items():
                if len(values) > 1:  # a label that is not unique in its table names no figure
                    continue
                first = seen.setdefault(key, (values[0], path.name))
                if first[0] != values[0]:
                    clashes.append(f"{key}: {first} against {values[0]} ({path.name})")
    assert clashes == []


def test_a_benchmark_writes_its_table_as_a_stamped_results_file(tmp_path):
    out = tmp_path / "fusion.json"
    script = ROOT / "benchmarks" / "fusion.py"
    small = ["--queries", "20", "--depth", "10", "--documents", "50", "--repeats", "1"]
    done = subprocess.run(
        [sys.executable, str(script), *small, "--json", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = rt.load_json(out)
    assert found["command"] == f"python benchmarks/fusion.py {' '.join(small)} --json {out}"
    assert found["source"] == "measured" and "-core" in found["hardware"]
    table = found["tables"]["fusion"]
    assert table["align"] == "lrrlr" and [r[0] for r in table["rows"]][1] == "`dapr.fusion.Convex`"
    printed = [line for line in done.stdout.splitlines() if line.startswith("| `dapr")]
    assert rt.split_row(printed[0]) == table["rows"][1]
