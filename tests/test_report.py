"""dapr report against several baselines at once, with Holm, Bonferroni or no correction over a
column or the whole table, and its HTML page opened in a real headless browser (Debian's
chromium, driven by playwright, offline)."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import statistics
import struct
from pathlib import Path

import pytest
from scipy.stats import t as t_dist

from dapr.analysis.significance import adjust, bonferroni, paired_tests
from dapr.analysis.table import table3, to_csv, to_latex, to_markdown
from dapr.cli import main
from dapr.errors import DaprError
from dapr.experiment.results import load_results

PO, TI = "passage only", "+ title"
# nDCG@10 of queries q0..q4 per dataset and (approach, retriever); system names are the
# retriever, with "+title" for the title approach
SCORES = {
    "A": {
        (PO, "bm25"): [0.2, 0.4, 0.6, 0.8, 0.7],
        (PO, "dense"): [0.5, 0.5, 0.5, 0.5, 0.5],
        (TI, "bm25"): [0.3, 0.5, 0.7, 0.9, 0.82],
        (TI, "dense"): [0.7, 0.3, 0.6, 0.4, 0.5],
    },
    "B": {
        (PO, "bm25"): [0.1, 0.2, 0.3, 0.4, 0.5],
        (PO, "dense"): [0.6, 0.8, 0.7, 0.9, 1.0],
        (TI, "bm25"): [0.1, 0.2, 0.3, 0.4, 0.5],  # the same as passage only: p = 1
        (TI, "dense"): [0.6, 0.7, 0.8, 0.9, 0.9],
    },
    "NQ-hard": {
        (PO, "bm25"): [0.0, 0.0, 0.0, 0.0, 0.0],
        (PO, "dense"): [0.0, 0.0, 0.0, 0.0, 0.0],
        (TI, "bm25"): [1.0, 0.8, 0.9, 1.0, 0.8],
        (TI, "dense"): [0.1, 0.0, 0.0, 0.0, 0.0],
    },
}
ROWS = [(PO, "bm25"), (PO, "dense"), (TI, "bm25"), (TI, "dense")]
LABELS = {"q0": ["CR"], "q1": ["CR", "MT"], "q2": ["MT"], "q3": ["AC"]}  # q4 has none
FIGURES = Path(__file__).parents[1] / "docs" / "figures"
BASELINES = [PO, "dense"]  # an approach (same retriever), and the system "dense" = (PO, dense)


def paired_p(system, baseline):
    """The two-sided paired t-test by hand (1 when every difference is 0)."""
    d = [s - b for s, b in zip(system, baseline)]
    if not any(d):
        return 1.0
    t = statistics.mean(d) / (statistics.stdev(d) / math.sqrt(len(d)))
    return 2 * t_dist.sf(abs(t), len(d) - 1)


def holm_by_hand(ps: dict) -> dict:
    """The i-th smallest of m p-values times (m - i), capped at 1, running maximum."""
    out, running = {}, 0.0
    for i, key in enumerate(sorted(ps, key=ps.get)):
        running = max(running, min(1.0, (len(ps) - i) * ps[key]))
        out[key] = running
    return out


def raw_tests() -> dict:
    """{(row, dataset, baseline index): raw p} of every comparison the table makes."""
    out = {}
    for dataset, rows in SCORES.items():
        for row in ROWS:
            if row[0] != PO:  # baseline 0: passage only with the same retriever
                out[(row, dataset, 0)] = paired_p(rows[row], rows[(PO, row[1])])
            if row != (PO, "dense"):  # baseline 1: the system dense
                out[(row, dataset, 1)] = paired_p(rows[row], rows[(PO, "dense")])
    return out


@pytest.fixture
def dirs(tmp_path):
    """A results directory per dataset and approach; dataset A's queries have categories."""
    out = []
    for dataset, rows in SCORES.items():
        for approach, suffix in ((PO, ""), (TI, "+title")):
            systems = {}
            for (a, retriever), values in rows.items():
                per_query = {f"q{i}": v for i, v in enumerate(values)}
                entry = {"level": "passage", "approach": a, "retriever": retriever}
                entry |= {"mean": {"nDCG@10": statistics.fmean(values)}}
                entry |= {"per_query": {"nDCG@10": per_query}}
                if a == approach:
                    systems[retriever + suffix] = entry
            directory = tmp_path / f"{dataset}-{suffix or 'po'}"
            directory.mkdir()
            metrics = {"dataset": dataset, "split": "test", "dataset_fingerprint": "f"}
            metrics |= {"labels": LABELS if dataset == "A" else {}, "systems": systems}
            (directory / "metrics.json").write_text(json.dumps(metrics))
            out.append(directory)
    return out


def test_bonferroni_none_and_unknown_corrections():
    assert bonferroni({"a": 0.01, "b": 0.3, "c": math.nan, "d": 0.02}) == pytest.approx(
        {"a": 0.03, "b": 0.9, "c": math.nan, "d": 0.06}, nan_ok=True
    )  # m = 3: the undefined test does not count
    assert bonferroni({"a": 0.6, "b": 0.01}) == {"a": 1.0, "b": 0.02}
    assert adjust({"a": 0.01, "b": 0.04}, "none") == {"a": 0.01, "b": 0.04}
    assert adjust({"a": 0.01, "b": 0.04}, "holm") == pytest.approx({"a": 0.02, "b": 0.04})
    base, system = {"q0": 0.1, "q1": 0.2, "q2": 0.4}, {"q0": 0.3, "q1": 0.3, "q2": 0.9}
    got = paired_tests(base, {"s": system, "same": base}, correction="bonferroni")
    assert got["s"].adjusted == pytest.approx(2 * got["s"].p_value)
    with pytest.raises(DaprError, match="unknown --correction 'bh'; choose one of holm, bonf"):
        adjust({"a": 0.5}, "bh")


def test_each_row_is_tested_against_each_baseline(dirs):
    results = load_results(dirs)
    raw = raw_tests()
    assert len(raw) == 15  # per dataset: 2 rows against passage only, 3 against dense
    by_column = {}
    for dataset in SCORES:
        by_column |= holm_by_hand({k: p for k, p in raw.items() if k[1] == dataset})
    over_table = holm_by_hand(raw)
    tables = {
        "column": table3(results, baseline=BASELINES),
        "table": table3(results, baseline=BASELINES, family="table"),
        "bonferroni": table3(results, baseline=BASELINES, correction="bonferroni", family="table"),
        "none": table3(results, baseline=BASELINES, correction="none"),
    }
    expected = {
        "column": by_column,
        "table": over_table,
        "bonferroni": {k: min(1.0, 15 * p) for k, p in raw.items()},
        "none": raw,
    }
    for name, table in tables.items():
        assert table.baselines == tuple(BASELINES)
        assert table.baseline_kinds == ("approach", "system")
        for (row, dataset, i), p in raw.items():
            comparison = table.cell(row, dataset).comparisons[i]
            assert comparison.p_value == pytest.approx(p, rel=1e-9), (name, row, dataset, i)
            adjusted = expected[name][(row, dataset, i)]
            assert comparison.adjusted == pytest.approx(adjusted, rel=1e-9), (name, row, dataset)
        tested = {
            (r, d, i)
            for (r, d), cell in table.cells.items()
            for i, comparison in enumerate(cell.comparisons)
            if comparison is not None
        }
        assert tested == set(raw)  # no comparison of a baseline row with itself, none on Avg.
    assert over_table != by_column  # the family changes the numbers
    column = tables["column"]
    assert column.cell((PO, "dense"), "A").comparisons == (None, None)
    assert column.cell((TI, "bm25"), "NQ-hard").marks() == [0, 1]
    # one baseline given as a list is the same table as given alone
    alone, listed = table3(results, baseline=PO), table3(results, baseline=[PO, PO])
    assert to_markdown(alone) == to_markdown(listed) and listed.baselines == (PO,)


def test_renderings_mark_each_baseline(dirs):
    table = table3(load_results(dirs), baseline=BASELINES)
    adjusted = {}
    for dataset in SCORES:
        adjusted |= holm_by_hand({k: p for k, p in raw_tests().items() if k[1] == dataset})
    lines = to_markdown(table).splitlines()
    columns = ["A", "B", "Avg.", "NQ-hard"]
    assert lines[0] == "| Approach | Retriever | A | B | Avg. | NQ-hard |"
    for row, line in zip(ROWS, lines[2:6]):
        cells = [c.strip() for c in line.strip("|").split("|")][2:]
        for column, text in zip(columns, cells):
            marks = "".join("†‡"[i] for i in (0, 1) if adjusted.get((row, column, i), 1) < 0.05)
            shown = text.replace("*", "")
            assert shown[len(shown.rstrip("†‡")) :] == marks, (row, column)
    assert "| + title | bm25 | **64.4**† | 30.0‡ | 47.2 | **90.0**†‡ |" in lines
    note = (
        "† p < 0.05 against passage only (same retriever); ‡ p < 0.05 against dense, "
        "paired t-test, Holm-corrected per column"
    )
    assert lines[-1] == note
    tex = to_latex(table)
    assert "\\textbf{90.0}$^{\\dagger\\ddagger}$" in tex and "\\textbf{64.4}$^\\dagger$ &" in tex
    assert "$^\\ddagger$ $p < 0.05$ against dense, paired t-test, Holm-corrected per column" in tex
    rows = list(csv.DictReader(io.StringIO(to_csv(table))))
    assert list(rows[0])[6:] == [f"{d} p vs {b}" for d in ("A", "B", "NQ-hard") for b in BASELINES]
    by_row = {(r["approach"].removeprefix("'"), r["retriever"]): r for r in rows}
    for (row, dataset, i), p in adjusted.items():
        assert float(by_row[row][f"{dataset} p vs {BASELINES[i]}"]) == pytest.approx(p, rel=1e-5)
    assert by_row[(PO, "dense")]["A p vs dense"] == ""
    plain = to_markdown(table3(load_results(dirs), baseline="bm25", correction="none"))
    assert plain.endswith("† p < 0.05 against bm25, paired t-test, uncorrected\n")


def test_bad_report_requests_are_one_line_errors(dirs, capsys):
    paths = [str(d) for d in dirs]
    cases = {
        ("--baseline", "nobody"): "baseline 'nobody' is neither a system nor an approach",
        ("--correction", "bh"): "unknown --correction 'bh'; choose one of holm, bonferroni, none",
        ("--family", "row"): "unknown --family 'row'; choose one of column, table",
        tuple(a for i in range(7) for a in ("--baseline", f"b{i}")): "a table marks at most 6",
    }
    for extra, message in cases.items():
        assert main(["report", *paths, *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


def test_report_html_renders_in_a_real_browser(dirs, tmp_path, capsys):
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("no chromium on PATH: apt-get install -y chromium (the HTML report test)")
    out = tmp_path / "out"
    command = ["report", *map(str, dirs), "--baseline", PO, "--baseline", "dense"]
    assert main([*command, "--out", str(out)]) == 0
    assert "report.html" in capsys.readouterr().out
    assert {p.name for p in out.iterdir()} == {
        "table3.md", "table3.csv", "table3.tex", "report.html"
    }  # fmt: skip
    markdown = (out / "table3.md").read_text().splitlines()[2:6]
    expected_rows = [
        [c.strip().replace("*", "") for c in line.strip("|").split("|")] for line in markdown
    ]
    requests = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium)
        try:
            page = browser.new_page()
            page.on("request", lambda request: requests.append(request.url))
            page.goto((out / "report.html").as_uri(), wait_until="load")
            cells = "rows => rows.map(r => [...r.cells].map(c => c.innerText.trim()))"
            heads = page.eval_on_selector_all("#table3 thead th", "hs => hs.map(h => h.innerText)")
            rows = page.eval_on_selector_all("#table3 tbody tr", cells)
            comparisons = page.locator("#comparisons tbody tr").count()
            categories = page.eval_on_selector_all("#categories-1 tr", cells)
            images = page.eval_on_selector_all(
                "img", "imgs => imgs.map(i => [i.complete, i.naturalWidth, i.naturalHeight])"
            )
            bold = page.eval_on_selector_all("#table3 td.best", "cs => cs.map(c => c.innerText)")
            page.set_viewport_size({"width": 1000, "height": 800})
            shot = page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
    assert heads == ["Approach", "Retriever", "A", "B", "Avg.", "NQ-hard"]
    assert rows == expected_rows  # the same cells and marks as the markdown table
    # (+ title, bm25) on B: 40 to 60 points below dense on every query: significantly worse
    assert rows[2] == ["+ title", "bm25", "64.4†", "30.0‡", "47.2", "90.0†‡"]
    assert bold == ["80.0", "65.0", "64.4†", "90.0†‡"]
    assert comparisons == len(raw_tests())
    assert categories[0] == ["System", "all (n=5)", "AC (n=1)", "CR (n=2)", "MT (n=2)"]
    # passage only / bm25 on A: CR is q0 and q1, (0.2 + 0.4) / 2; AC is q3 alone
    assert categories[1] == ["passage only / bm25", "54.0", "80.0", "30.0", "50.0"]
    assert len(categories) == 1 + len(ROWS)
    assert len(images) == 2  # the systems chart and dataset A's categories chart
    assert all(done and width > 0 and height > 0 for done, width, height in images)
    assert requests and all(url.startswith(("file:", "data:")) for url in requests)
    # the page drawn: a PNG as wide as the window and taller than one screen (table, charts)
    width, height = struct.unpack(">II", shot[16:24])
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and width == 1000 and height > 800
    if os.environ.get("DAPR_WRITE_FIGURES"):  # the docs' screenshot: CONTRIBUTING.md
        shutil.copyfile(tmp_path / "report.png", FIGURES / "report.png")


def test_the_docs_screenshot_is_a_report_page():
    """docs/figures/report.png is the screenshot this file's browser test takes."""
    shot = (FIGURES / "report.png").read_bytes()
    width, height = struct.unpack(">II", shot[16:24])
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and width == 1000 and height > 800
