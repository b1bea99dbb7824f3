"""The tutorials (docs/tutorials/*.ipynb) run: each notebook is executed with nbclient on the
embedded data, in a kernel of the running interpreter, and its outputs show the work done. The
site renders them (mkdocs-jupyter); git keeps them without outputs."""

from __future__ import annotations

import importlib.metadata
import math
import os
import re
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="install the test extra")
nbclient = pytest.importorskip("nbclient", reason="install the test extra")
from conftest import write_shortest_wiki  # noqa: E402  (tests/conftest.py)
from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402  (after the skips)
from jupyter_client.manager import KernelManager  # noqa: E402

TUTORIALS = Path(__file__).resolve().parents[1] / "docs" / "tutorials"
NOTEBOOKS = sorted(TUTORIALS.glob("*.ipynb"))
ROW = re.compile(r"^\| (?P<name>[^|]+?) \|(?P<cells>.*)\|$", re.MULTILINE)


def kernel() -> KernelManager:
    """A kernel of the running interpreter: ipykernel's own ``python3`` spec (built from
    ``sys.executable``), not whatever ``python3`` spec a user or another environment installed."""
    return KernelManager(
        kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[])
    )


def execute(name: str, scratch: Path, **parameters: str) -> nbformat.NotebookNode:
    """Runs a tutorial as Jupyter does, from its own folder, its temporary files in ``scratch``
    (``DAPR_HOME`` is the session's); ``parameters`` are set in a cell after the one tagged
    ``parameters`` (papermill's convention)."""
    notebook = nbformat.read(TUTORIALS / f"{name}.ipynb", as_version=4)
    if parameters:
        (at,) = [
            i for i, c in enumerate(notebook.cells) if "parameters" in c.metadata.get("tags", [])
        ]
        source = "\n".join(f"{key} = {value!r}" for key, value in parameters.items())
        injected = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
        notebook.cells.insert(at + 1, injected)
    client = nbclient.NotebookClient(
        notebook,
        km=kernel(),
        timeout=900,
        resources={"metadata": {"path": str(TUTORIALS)}},
    )
    client.execute(env={**os.environ, "TMPDIR": str(scratch)})
    return notebook


def text(notebook: nbformat.NotebookNode, source: str = "") -> str:
    """What the code cells whose source contains ``source`` printed or showed as text (stdout,
    results, Markdown)."""
    out = []
    for cell in notebook.cells:
        if cell.cell_type != "code" or source not in cell.source:
            continue
        for output in cell.outputs:
            if output.output_type == "stream" and output.name == "stdout":
                out.append(output.text)  # a line may come in pieces
            elif "data" in output:
                data = output.data
                out.append((data.get("text/markdown") or data.get("text/plain", "")) + "\n")
    return "".join(out)


def rows(table: str) -> dict[str, list[str]]:
    """A Markdown table's cells by their first column."""
    return {m["name"]: [c.strip() for c in m["cells"].split("|")] for m in ROW.finditer(table)}


def finite(cell: str) -> float:
    value = float(re.sub(r"[*†‡]", "", cell))
    assert math.isfinite(value), cell
    return value


def test_the_three_tutorials_are_kept_without_outputs():
    assert [p.stem for p in NOTEBOOKS] == ["paper-table3", "plugin", "quick-tour"]
    for path in NOTEBOOKS:
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
        assert notebook.metadata.kernelspec.name == "python3", path.name
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, (path.name, cell.id)


def test_the_kernel_is_the_running_interpreter():
    spec = kernel().kernel_spec
    assert spec.argv[:3] == [sys.executable, "-m", "ipykernel_launcher"]


def images(notebook: nbformat.NotebookNode) -> list[str]:
    """The PNG images the code cells showed."""
    return [
        o.data["image/png"]
        for c in notebook.cells
        for o in c.get("outputs", [])
        if "image/png" in o.get("data", {})
    ]


def summary(out: str, systems: list[str]) -> dict[str, list[float]]:
    """The numbers of ``dapr run``'s table for these systems, each checked finite."""
    found = rows(out)
    return {s: [finite(cell) for cell in found[s][2:]] for s in systems}


@pytest.fixture(scope="module")
def tour_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 20 shortest articles of wiki-sample with their dev and test queries (84 passages, 12
    and 17 queries), so that the tour encodes its passages in seconds; the site's build runs it
    on the whole sample."""
    return write_shortest_wiki(tmp_path_factory.mktemp("data"), 20, "wiki-20")


@pytest.fixture(scope="module")
def tour(tour_data: Path, tmp_path_factory: pytest.TempPathFactory) -> nbformat.NotebookNode:
    return execute("quick-tour", tmp_path_factory.mktemp("tour"), dataset=str(tour_data))


def test_the_quick_tour_runs_the_main_experiment_and_plots_inline(tour, tour_data, tmp_path):
    from dapr.datasets import read_dataset

    assert "dapr.retrievers.dense:Dense" in text(tour, 'dapr("plugins")')
    assert "wiki-20" in text(tour, "data stats")
    fusion = summary(
        text(tour, "'rank_fusion.yaml'"),
        ["bm25-passage", "dense-passage", "bm25-document", "bm25-document+dense-passage"],
    )
    assert all(0 <= value <= 1 for values in fusion.values() for value in values)
    queries = len(read_dataset(tour_data).split("test").queries)
    counts = re.search(r"better on (\d+) and worse on (\d+) of (\d+) queries", text(tour, "gains"))
    assert counts and int(counts[1]) + int(counts[2]) <= int(counts[3]) == queries
    assert re.search(
        r"Chosen fusion\.rank-fusion\.args\.alpha = [01]\.\d", text(tour, "alpha_sweep")
    )
    assert len(images(tour)) == 2  # the per-query gains and the sweep, inline

    from mkdocs_jupyter.convert import nb2html  # the site's renderer keeps both plots

    executed = tmp_path / "quick-tour.ipynb"
    nbformat.write(tour, executed)
    assert nb2html(str(executed)).count('src="data:image/png;base64,') == 2


def test_the_paper_table3_column_is_reported(tmp_path):
    notebook = execute("paper-table3", tmp_path)
    run = summary(text(notebook, 'dapr(f"run'), ["bm25", "bm25+title", "bm25+rank-fusion"])
    table = rows(text(notebook, "Markdown("))
    assert list(table) == [
        "Approach",
        "passage only",
        "+ title",
        "rank fusion (convex)",
        "hierarchical",
    ]
    for retriever, value, average in list(table.values())[1:]:
        assert retriever == "bm25" and finite(value) == finite(average) and 0 < finite(value) <= 100
    # the report's numbers are the run's, x 100
    assert finite(table["passage only"][1]) == pytest.approx(100 * run["bm25"][0], abs=0.06)
    assert finite(table["+ title"][1]) == pytest.approx(100 * run["bm25+title"][0], abs=0.06)
    assert "paired t-test" in text(notebook, "Markdown(")
    assert "table3.md" in text(notebook, "iterdir") and "report.html" in text(notebook, "iterdir")


def test_the_plugin_is_written_installed_found_and_run(tmp_path):
    notebook = execute("plugin", tmp_path)
    found = text(notebook, "registry.retrievers.sources()")
    assert "'dapr-tutorial-plugin 0.1.0'" in found  # found by its entry point, with its package
    assert "'dapr_tutorial_plugin:WordCoverage'" in found
    tied = "{'q1': {'pub': 0.5, 'band': 0.5}}"  # the higher id first
    assert text(notebook, "toy.search").strip() == tied
    run = summary(text(notebook, 'dapr(f"run'), ["bm25", "coverage", "coverage+title"])
    assert all(values[0] > 0 for values in run.values())  # nDCG@10
    evaluated = rows(text(notebook, 'dapr(f"evaluate'))["coverage"]
    assert [finite(cell) for cell in evaluated[1:]] == run["coverage"]
    with pytest.raises(importlib.metadata.PackageNotFoundError):  # the environment is untouched
        importlib.metadata.distribution("dapr-tutorial-plugin")
