"""`dapr results publish`: the results directory of a real run copied into the docs' results,
where the reproduction matrix (docs/_hooks/matrix.py) then shows dapr's value; incomplete,
mismatched or hostile results folders and a copy of a newer run are refused with one line."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest

from dapr.cli import main

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_hooks"))

import matrix  # noqa: E402  (docs/_hooks/matrix.py, the page's generator)

EXPERIMENT = """name: tiny
dataset: [wiki-sample]
split: dev
metrics: [nDCG@10]
retrievers: {bm25: {name: bm25}}
published:
  source: a test row
  rows: [{table: T, row: r, system: bm25, metric: nDCG@10, values: {wiki-sample: 0.5}}]
"""
ROW = "| T | r | wiki-sample | `bm25` | 0.500 |"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A real BM25 run of a one-dataset grid on wiki-sample's dev queries (a few seconds): its
    experiments folder and its results directory."""
    tmp = tmp_path_factory.mktemp("publish")
    (tmp / "experiments").mkdir()
    (tmp / "experiments" / "tiny.yaml").write_text(EXPERIMENT)
    argv = ["run", str(tmp / "experiments" / "tiny.yaml"), "--out", str(tmp / "results")]
    assert main(argv) == 0
    return tmp / "experiments", tmp / "results" / "wiki-sample"


def _files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line of a refused ``dapr`` command."""
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("dapr: error: "), err
    return err


def _copy(results: Path, tmp: Path, change=None) -> Path:
    """A copy of the results directory, its metrics.json and manifest.json edited by
    ``change(metrics, manifest)``."""
    copy = Path(shutil.copytree(results, tmp / "copy" / results.name))
    if change is not None:
        metrics = json.loads((copy / "metrics.json").read_text())
        manifest = json.loads((copy / "manifest.json").read_text())
        change(metrics, manifest)
        (copy / "metrics.json").write_text(json.dumps(metrics))
        (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


def test_publish_copies_the_run_and_the_matrix_shows_its_value(tiny_run, tmp_path, capsys):
    experiments, results = tiny_run
    docs = tmp_path / "docs" / "results"
    docs.mkdir(parents=True)
    row = next(line for line in matrix.matrix(experiments, docs).splitlines() if ROW in line)
    assert row.endswith("| not run yet |")

    capsys.readouterr()
    assert main(["results", "publish", str(results), "--docs", str(docs)]) == 0
    target = docs / "tiny" / "wiki-sample"
    assert f"to {target}: metrics.json, manifest.json, summary.md" in capsys.readouterr().out
    assert _files(target) == {
        name: hashlib.sha256((results / name).read_bytes()).hexdigest()
        for name in ("manifest.json", "metrics.json", "summary.md")
    }  # nothing else: no runs/, no summary.csv
    mean = json.loads((results / "metrics.json").read_text())["systems"]["bm25"]["mean"]
    manifest = json.loads((results / "manifest.json").read_text())
    row = next(line for line in matrix.matrix(experiments, docs).splitlines() if ROW in line)
    commit = (manifest["git"] or {}).get("revision", "?")[:7]
    assert f"| {mean['nDCG@10']:.4f} ({manifest['finished'][:10]}, " in row
    assert row.endswith(f", {commit}) |")

    (target / "notes.md").write_text("kept\n")  # publishing the same run again: files kept
    assert main(["results", "publish", str(results), "--docs", str(docs)]) == 0
    assert (target / "notes.md").read_text() == "kept\n"


def test_publish_goes_to_docs_results_of_the_working_directory(
    tiny_run, tmp_path, monkeypatch, capsys
):
    _, results = tiny_run
    monkeypatch.chdir(tmp_path)
    assert "no such directory" in _refused(["results", "publish", str(results)], capsys)
    (tmp_path / "docs" / "results").mkdir(parents=True)
    assert main(["results", "publish", str(results)]) == 0
    assert (tmp_path / "docs" / "results" / "tiny" / "wiki-sample" / "metrics.json").is_file()


def _no_manifest(results: Path, tmp: Path) -> Path:
    copy = _copy(results, tmp)
    (copy / "manifest.json").unlink()
    return copy


def _other_run(results: Path, tmp: Path) -> Path:
    return _copy(results, tmp, lambda metrics, manifest: manifest.update(dataset_fingerprint="x"))


@pytest.mark.parametrize(
    ("make", "names"),
    [
        (lambda results, tmp: results.parent, ("results:", "dataset: list", "wiki-sample")),
        (lambda results, tmp: results / "runs", ("runs/metrics.json", "no such file")),
        (_no_manifest, ("wiki-sample/manifest.json: no such file",)),
        (_other_run, ("different runs", "dataset_fingerprint")),
    ],
    ids=["a-grid-folder", "no-metrics", "no-manifest", "of-two-runs"],
)
def test_an_incomplete_results_folder_is_refused(tiny_run, tmp_path, capsys, make, names):
    _, results = tiny_run
    docs = tmp_path / "docs"
    docs.mkdir()
    err = _refused(
        ["results", "publish", str(make(results, tmp_path)), "--docs", str(docs)], capsys
    )
    assert all(name in err for name in names), err
    assert list(docs.iterdir()) == []


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("experiment", "../../escaped/wiki-sample", "experiment: '..'"),
        ("experiment", "tiny/.hidden", "experiment: '.hidden'"),
        ("dataset", "../../escaped", "dataset: '../../escaped'"),
    ],
)
def test_names_from_a_hostile_results_folder_write_nothing(
    tiny_run, tmp_path, capsys, key, value, named
):
    _, results = tiny_run

    def hostile(metrics: dict, manifest: dict) -> None:  # both agree: one run, hostile names
        metrics[key] = value
        if key == "experiment":
            manifest["experiment"]["name"] = value
        else:
            manifest[key] = value

    copy = _copy(results, tmp_path, hostile)
    docs = tmp_path / "a" / "b" / "docs"
    docs.mkdir(parents=True)
    before = _files(tmp_path)
    err = _refused(["results", "publish", str(copy), "--docs", str(docs)], capsys)
    assert named in err and "metrics.json" in err and "rerun `dapr run`" in err, err
    assert _files(tmp_path) == before and list(docs.iterdir()) == []


def test_a_copy_of_a_newer_run_is_kept_unless_overwrite(tiny_run, tmp_path, capsys):
    _, results = tiny_run
    docs = tmp_path / "docs"
    docs.mkdir()
    newer = _copy(results, tmp_path, lambda m, manifest: manifest.update(finished="2999-01-01"))
    assert main(["results", "publish", str(newer), "--docs", str(docs)]) == 0
    target = docs / "tiny" / "wiki-sample"
    published = _files(target)

    argv = ["results", "publish", str(results), "--docs", str(docs)]
    err = _refused(argv, capsys)
    assert "holds a newer run (finished 2999-01-01" in err and "--overwrite" in err, err
    assert _files(target) == published
    assert main([*argv, "--overwrite"]) == 0
    assert (target / "manifest.json").read_bytes() == (results / "manifest.json").read_bytes()
