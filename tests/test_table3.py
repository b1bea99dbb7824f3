"""Table 3 from hand-made results directories whose best cells, averages and significant
comparisons are known by hand."""

import csv
import io
import json
import math
import shutil
import statistics
from pathlib import Path

import pytest
from scipy.stats import t as t_dist

from dapr.analysis.table import table3, to_csv, to_latex, to_markdown
from dapr.errors import DaprError
from dapr.experiment.results import load_results

PO, TI = "passage only", "+ title"
# nDCG@10 of queries q0..q4, per dataset and (approach, retriever)
SCORES = {
    "A": {
        (PO, "bm25"): [0.2, 0.4, 0.6, 0.8, 0.7],  # mean 0.54
        (PO, "dense"): [0.5, 0.5, 0.5, 0.5, 0.5],  # mean 0.5
        (TI, "bm25"): [0.3, 0.5, 0.7, 0.9, 0.82],  # mean 0.644, +0.1/+0.12: significant, best
        (TI, "dense"): [0.7, 0.3, 0.6, 0.4, 0.5],  # mean 0.5, +-: not significant
    },
    "B": {
        (PO, "bm25"): [0.1, 0.2, 0.3, 0.4, 0.5],  # 0.3
        (PO, "dense"): [0.6, 0.7, 0.8, 0.9, 1.0],  # 0.8, best
        (TI, "bm25"): [0.1, 0.2, 0.3, 0.4, 0.5],  # 0.3, identical: p = 1
        (TI, "dense"): [0.6, 0.7, 0.8, 0.9, 0.9],  # 0.78
    },
    "NQ-hard": {
        (PO, "bm25"): [0.0, 0.0, 0.0, 0.0, 0.0],
        (PO, "dense"): [0.0, 0.0, 0.0, 0.0, 0.0],
        (TI, "bm25"): [1.0, 0.8, 0.9, 1.0, 0.8],  # 0.9, significant, best
        (TI, "dense"): [0.1, 0.0, 0.0, 0.0, 0.0],  # 0.02
    },
}
ROWS = [(PO, "bm25"), (PO, "dense"), (TI, "bm25"), (TI, "dense")]


def mean(values):
    return sum(values) / len(values)


def paired_p(system, baseline):
    d = [s - b for s, b in zip(system, baseline)]
    if not any(d):
        return 1.0
    t = statistics.mean(d) / (statistics.stdev(d) / math.sqrt(len(d)))
    return 2 * t_dist.sf(abs(t), len(d) - 1)


def holm2(p1, p2):
    """Holm over two p-values, by hand."""
    low, high = sorted([p1, p2])
    a_low = min(1.0, 2 * low)
    a_high = max(a_low, min(1.0, high))
    return (a_low, a_high) if p1 <= p2 else (a_high, a_low)


def write(directory: Path, dataset: str, systems: dict, split="test", fingerprint="f") -> Path:
    """A metrics.json as `dapr run` writes it; systems: {name: (approach, retriever, scores)}."""
    directory.mkdir(parents=True, exist_ok=True)
    entries = {}
    for name, (approach, retriever, values) in systems.items():
        per_query = {f"q{i}": v for i, v in enumerate(values)}
        entry = {"level": "passage", "mean": {"nDCG@10": mean(values), "MRR@10": 0.5}}
        entry["per_query"] = {"nDCG@10": per_query, "MRR@10": dict.fromkeys(per_query, 0.5)}
        if approach is not None:
            entry |= {"approach": approach, "retriever": retriever}
        entries[name] = entry
    metrics = {"experiment": directory.name, "dataset": dataset, "dataset_fingerprint": fingerprint}
    metrics |= {"split": split, "depth": 100, "labels": {}, "systems": entries}
    (directory / "metrics.json").write_text(json.dumps(metrics))
    return directory


@pytest.fixture
def dirs(tmp_path):
    """One results directory per dataset and approach, as two experiments would leave them."""
    out = []
    for dataset, rows in SCORES.items():
        for approach, suffix in ((PO, ""), (TI, "+title")):
            systems = {f"{r}{suffix}": (a, r, v) for (a, r), v in rows.items() if a == approach}
            out.append(write(tmp_path / f"{dataset}-{suffix or 'po'}", dataset, systems))
    return out


def test_load_results_reads_directories_and_files(dirs, tmp_path):
    results = load_results([dirs[0], dirs[1] / "metrics.json"])
    assert [r.dataset for r in results] == ["A", "A"]
    assert results[1].path == dirs[1] / "metrics.json"
    assert results[0].systems["bm25"].approach == PO
    assert results[1].systems["dense+title"].retriever == "dense"
    bare = write(tmp_path / "bare", "A", {"mine": (None, None, [0.1, 0.2])})
    (system,) = load_results([bare])[0].systems.values()
    assert (system.approach, system.retriever) == ("mine", "")


def test_load_results_names_the_bad_file(tmp_path):
    with pytest.raises(DaprError, match="nowhere"):
        load_results([tmp_path / "nowhere"])
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "metrics.json").write_text("{not json")
    with pytest.raises(DaprError, match="broken.*metrics.json.*not valid JSON"):
        load_results([tmp_path / "broken"])
    (tmp_path / "broken" / "metrics.json").write_text('{"dataset": "A"}')
    with pytest.raises(DaprError, match="broken.*'systems'"):
        load_results([tmp_path / "broken"])


def test_layout_means_average_and_best(dirs):
    table = table3(load_results(dirs))
    assert table.rows == tuple(ROWS)
    assert table.columns == ("A", "B", "Avg.", "NQ-hard")  # NQ-hard kept apart (any case)
    for dataset, rows in SCORES.items():
        for row, values in rows.items():
            assert table.cell(row, dataset).mean == pytest.approx(mean(values))
    for row in ROWS:  # the average leaves NQ-hard out
        expected = (mean(SCORES["A"][row]) + mean(SCORES["B"][row])) / 2
        assert table.cell(row, "Avg.").mean == pytest.approx(expected)
    best = {c: [r for r in ROWS if table.cell(r, c).best] for c in table.columns}
    assert best == {
        "A": [(TI, "bm25")],
        "B": [(PO, "dense")],
        "Avg.": [(PO, "dense")],  # 0.65 against 0.64
        "NQ-hard": [(TI, "bm25")],
    }
    assert all(table.cell(r, c).comparison is None for r in ROWS for c in table.columns)


def test_ties_are_all_best(tmp_path):
    results = load_results(
        [write(tmp_path / "t", "A", {"x": (PO, "x", [0.5]), "y": (PO, "y", [0.5])})]
    )
    table = table3(results)
    assert table.cell((PO, "x"), "A").best and table.cell((PO, "y"), "A").best


def expected_approach_tests():
    """{(row, dataset): adjusted p} against "passage only" of the same retriever, by hand."""
    out = {}
    for dataset, rows in SCORES.items():
        p_bm25 = paired_p(rows[(TI, "bm25")], rows[(PO, "bm25")])
        p_dense = paired_p(rows[(TI, "dense")], rows[(PO, "dense")])
        a_bm25, a_dense = holm2(p_bm25, p_dense)
        out[((TI, "bm25"), dataset)] = a_bm25
        out[((TI, "dense"), dataset)] = a_dense
    return out


def test_baseline_approach_compares_the_same_retriever(dirs):
    table = table3(load_results(dirs), baseline=PO)
    expected = expected_approach_tests()
    for (row, dataset), adjusted in expected.items():
        assert table.cell(row, dataset).comparison.adjusted == pytest.approx(adjusted, rel=1e-9)
    assert expected[((TI, "bm25"), "A")] < 0.05 < expected[((TI, "dense"), "A")]
    assert expected[((TI, "bm25"), "B")] == 1.0  # identical scores
    marked = {(r, c) for r in ROWS for c in table.columns if table.cell(r, c).significant(0.05)}
    assert marked == {((TI, "bm25"), "A"), ((TI, "bm25"), "NQ-hard")}
    assert table.cell((PO, "bm25"), "A").comparison is None  # the baseline itself
    assert table.cell((TI, "bm25"), "Avg.").comparison is None


def test_baseline_system_compares_every_row_with_it(dirs):
    table = table3(load_results(dirs), baseline="bm25")
    base = SCORES["B"][(PO, "bm25")]
    raw = {r: paired_p(SCORES["B"][r], base) for r in ROWS[1:]}
    # Holm over three by hand: sorted p times 3, 2, 1, running maximum
    order = sorted(raw, key=raw.get)
    running, adjusted = 0.0, {}
    for k, row in zip((3, 2, 1), order):
        running = max(running, min(1.0, k * raw[row]))
        adjusted[row] = running
    for row in ROWS[1:]:
        comparison = table.cell(row, "B").comparison
        assert comparison.p_value == pytest.approx(raw[row], rel=1e-9)
        assert comparison.adjusted == pytest.approx(adjusted[row], rel=1e-9)
        assert comparison.delta == pytest.approx(mean(SCORES["B"][row]) - mean(base))
    assert table.cell((PO, "bm25"), "B").comparison is None


def test_markdown(dirs):
    text = to_markdown(table3(load_results(dirs), baseline=PO))
    lines = text.splitlines()
    assert lines[0] == "| Approach | Retriever | A | B | Avg. | NQ-hard |"
    assert lines[1] == "|---|---|---:|---:|---:|---:|"
    assert lines[2:6] == [
        "| passage only | bm25 | 54.0 | 30.0 | 42.0 | 0.0 |",
        "| passage only | dense | 50.0 | **80.0** | **65.0** | 0.0 |",
        "| + title | bm25 | **64.4**† | 30.0 | 47.2 | **90.0**† |",
        "| + title | dense | 50.0 | 78.0 | 64.0 | 2.0 |",
    ]
    assert "† p < 0.05 against passage only (same retriever), paired t-test, Holm-corrected" in text
    plain = to_markdown(table3(load_results(dirs)), digits=3, percent=False)
    assert "| + title | bm25 | **0.644** | 0.300 | 0.472 | **0.900** |" in plain
    assert "†" not in plain


def test_csv_holds_raw_values_and_adjusted_p(dirs):
    text = to_csv(table3(load_results(dirs), baseline=PO))
    rows = list(csv.DictReader(io.StringIO(text)))
    assert list(rows[0]) == [
        "approach", "retriever", "A", "B", "Avg.", "NQ-hard", "A p", "B p", "NQ-hard p"
    ]  # fmt: skip
    assert "'" + TI in [r["approach"] for r in rows]  # "+ title" would run as a formula
    by_row = {(r["approach"].removeprefix("'"), r["retriever"]): r for r in rows}
    assert by_row[(TI, "bm25")]["A"] == "0.644000"
    assert by_row[(PO, "dense")]["Avg."] == "0.650000"
    for (row, dataset), adjusted in expected_approach_tests().items():
        assert float(by_row[row][f"{dataset} p"]) == pytest.approx(adjusted, rel=1e-5)
    assert by_row[(PO, "bm25")]["A p"] == ""
    no_baseline = next(csv.reader(io.StringIO(to_csv(table3(load_results(dirs))))))
    assert no_baseline == ["approach", "retriever", "A", "B", "Avg.", "NQ-hard"]


def test_latex_bold_marks_and_escaping(dirs, tmp_path):
    tex = to_latex(table3(load_results(dirs), baseline=PO))
    assert tex.startswith("\\begin{tabular}{llrrrr}\n\\toprule\n")
    assert (
        "+ title & bm25 & \\textbf{64.4}$^\\dagger$ & 30.0 & 47.2 & \\textbf{90.0}$^\\dagger$ \\\\"
        in tex
    )
    assert "\\bottomrule" in tex and tex.rstrip().endswith("\\end{tabular}")
    assert "nDCG@10 $\\times$100; best per column in bold." in tex
    assert "$^\\dagger$ $p < 0.05$ against passage only" in tex
    odd = write(tmp_path / "odd", "data_set#1", {"s": ("50% & more_x", "{a}~b^c$\\", [0.5])})
    tex = to_latex(table3(load_results([odd])))
    assert "data\\_set\\#1" in tex
    assert (
        "50\\% \\& more\\_x & \\{a\\}\\textasciitilde{}b\\textasciicircum{}c\\$\\textbackslash{}"
        " & \\textbf{50.0} & \\textbf{50.0} \\\\"
    ) in tex


def test_duplicates_accepted_when_equal_refused_when_not(dirs, tmp_path):
    copy = shutil.copytree(dirs[0], tmp_path / "copy")
    assert to_csv(table3(load_results([*dirs, copy]))) == to_csv(table3(load_results(dirs)))
    clash = write(tmp_path / "clash", "A", {"other": (PO, "bm25", [0.2, 0.4, 0.6, 0.8, 0.6])})
    with pytest.raises(DaprError, match=r"A-po.*clash.*passage only / bm25"):
        table3(load_results([*dirs, clash]))


def test_missing_row_leaves_the_average_blank(dirs):
    without_b_title = [d for d in dirs if d.name != "B-+title"]
    table = table3(load_results(without_b_title))
    assert table.cell((TI, "bm25"), "B") is None
    assert table.cell((TI, "bm25"), "Avg.") is None
    assert table.cell((PO, "bm25"), "Avg.").mean == pytest.approx(0.42)
    assert "| + title | bm25 | **64.4** |  |  | **90.0** |" in to_markdown(table)


def test_bad_requests_are_errors(dirs, tmp_path):
    results = load_results(dirs)
    with pytest.raises(DaprError, match="'nobody'.*neither.*bm25"):
        table3(results, baseline="nobody")
    with pytest.raises(DaprError, match="'P@3'.*nDCG@10"):
        table3(results, metric="P@3")
    other = write(tmp_path / "dev", "A", {"x": (PO, "x", [0.1])}, split="dev")
    with pytest.raises(DaprError, match="A-po.*dev.*'test' vs 'dev'"):
        table3([*results, *load_results([other])])


def test_document_systems_are_left_out_unless_asked_for(tmp_path):
    mixed = write(tmp_path / "mixed", "A", {"p": (PO, "bm25", [0.2, 0.4])})
    data = json.loads((mixed / "metrics.json").read_text())
    data["systems"]["d"] = data["systems"]["p"] | {"level": "document", "retriever": "maxp"}
    (mixed / "metrics.json").write_text(json.dumps(data))
    results = load_results([mixed])
    assert table3(results).rows == ((PO, "bm25"),)
    assert table3(results, system_level=None).rows == ((PO, "bm25"), (PO, "maxp"))
    assert table3(results, system_level="document").rows == ((PO, "maxp"),)
    with pytest.raises(DaprError, match="no systems at level 'other'"):
        table3(results, system_level="other")
