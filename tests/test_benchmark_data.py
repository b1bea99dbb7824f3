"""The benchmarks that read real data take it as users get it: COVID-QA and XQuAD by name, from the
raw files ``dapr data build NAME --download`` keeps in ``$DAPR_HOME/raw/NAME`` (``--data`` /
``--xquad-file`` give another copy), the MS MARCO sample from ``--source``. A missing one stops
the script before any work with one line saying what to run or give.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _run(home: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DAPR_HOME": str(home)}
    command = [sys.executable, str(BENCHMARKS / script), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def _module(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # keyphrases imports benchmarks/child.py
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fetched(home: Path, samples: Path, name: str, relative: str) -> Path:
    """``samples/relative`` laid where ``dapr data build NAME --download`` puts it."""
    target = home / "raw" / name / Path(relative).name
    target.parent.mkdir(parents=True)
    shutil.copy(samples / relative, target)
    return target


def _one_line(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.count("\n") == 1, done.stderr[-2000:]
    for word in words:
        assert word in done.stderr


def test_missing_xquad_names_the_download(tmp_path: Path):
    done = _run(tmp_path, "keyphrases.py", "--wiki", "0", "--xquad", "1", "--no-pool")
    _one_line(done, "`dapr data build XQuAD --download`", str(tmp_path / "raw" / "XQuAD"))
    gone = _run(tmp_path, "keyphrases.py", "--xquad-file", str(tmp_path / "none.json"))
    _one_line(gone, "--xquad-file", "none.json")


def test_missing_covid_qa_and_xquad_name_the_download(tmp_path: Path, samples: Path):
    out = ["--out", str(tmp_path / "sweep.jsonl"), "--work", str(tmp_path / "work")]
    done = _run(tmp_path, "cross_encoder_sweep.py", *out, "--settings", "base")
    _one_line(done, "`dapr data build COVID-QA --download`")
    _fetched(tmp_path, samples, "COVID-QA", "covid-qa/covid-qa.json")
    xquad = _run(tmp_path, "cross_encoder_sweep.py", *out, "--settings", "base", "xquad-too")
    _one_line(xquad, "`dapr data build XQuAD --download`", "--data DIR")
    elsewhere = _run(tmp_path, "cross_encoder_sweep.py", *out, "--data", str(tmp_path / "x"))
    _one_line(elsewhere, "covid-qa/covid-qa.json")
    assert not (tmp_path / "work").exists(), "the check comes before any work"


def test_fetched_raw_files_are_found_by_name(
    tmp_path: Path, samples: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("DAPR_HOME", str(tmp_path))
    covid = _fetched(tmp_path, samples, "COVID-QA", "covid-qa/covid-qa.json")
    xquad = _fetched(tmp_path, samples, "XQuAD", "xquad/xquad.en.json")
    sweep = _module("cross_encoder_sweep", monkeypatch)
    assert sweep.sources(None, ["COVID-QA", "XQuAD"]) == {"COVID-QA": covid, "XQuAD": xquad}
    assert sweep.sources(samples, ["XQuAD"]) == {"XQuAD": samples / "xquad" / "xquad.en.json"}
    keyphrases = _module("keyphrases", monkeypatch)
    assert keyphrases.xquad_file(None) == xquad
    names = [name for name, _ in keyphrases.documents(0, 2)]
    assert len(names) == 2 and all(name.startswith("xquad: ") for name in names)


def test_msmarco_build_takes_its_sample_from_source(tmp_path: Path, samples: Path):
    _one_line(_run(tmp_path, "msmarco_build.py"), "--source is required", "dapr data build")
    _one_line(_run(tmp_path, "msmarco_build.py", "--source", str(tmp_path)), "msmarco-docs.tsv")
    sample = samples / "dapr-raw-sample" / "MSMARCO"
    done = _run(
        tmp_path, "msmarco_build.py", "--source", str(sample), "--scale", "2", "--pairs", "5"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "same dataset: yes" in done.stdout


def test_the_learning_curve_takes_its_sizes_and_names_a_missing_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    curve = _module("cross_encoder_curve", monkeypatch)
    script = BENCHMARKS / "cross_encoder_curve.py"
    assert curve.sizes_of(["300", "all", "100", "1000"], 748) == [100, 300, 748]
    env = {**os.environ, "DAPR_HOME": str(tmp_path)}
    work = tmp_path / "work"
    for size, words in (("ten", "--sizes: 'ten'"), ("100", "dapr data build XQuAD")):
        done = subprocess.run(
            [sys.executable, str(script), "--dataset", "XQuAD", "--sizes", size,
             "--work", str(work)],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        assert done.returncode == 1 and done.stderr.count("\n") == 1 and words in done.stderr
    assert not work.exists(), "the checks come before any work"


def test_the_learning_curve_keeps_every_row_and_measures_only_new_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    curve = _module("cross_encoder_curve", monkeypatch)
    args = argparse.Namespace(
        dataset="COVID-QA", negatives=3, depth=20, first_stage="dense", learning_rate=1e-4,
        epochs=None, batch_size=None, queries=300,
    )  # fmt: skip
    same = {
        "dataset": "COVID-QA", "negatives": 3, "depth": 20, "first_stage": "dense",
        "learning_rate": 1e-4, "test_questions": 300, "questions": 100,
    }  # fmt: skip
    rows = [
        {**same, "loss": "mnrl", "epochs": 1.0, "batch_size": 8},
        {**same, "loss": "bce", "epochs": 3.0, "batch_size": 16},
        {**same, "loss": "bce", "epochs": 1.0, "batch_size": 16},  # other epochs
        {**same, "loss": "mnrl", "epochs": 1.0, "batch_size": 8, "negatives": 7},
        {**same, "loss": "mnrl", "epochs": 1.0, "batch_size": 8, "dataset": "XQuAD"},
        {**same, "loss": "mnrl", "epochs": 1.0, "batch_size": 8, "test_questions": 50},
    ]
    file = tmp_path / "curve.json"
    assert curve.earlier_rows(file) == []
    file.write_text(json.dumps({"rows": rows}))
    assert curve.earlier_rows(file) == rows, "every row is kept, whatever its settings"
    assert [curve.same_settings(r, args, 300) for r in rows] == [1, 1, 0, 0, 0, 0]
    assert [curve.same_settings(r, args, 50) for r in rows] == [0, 0, 0, 0, 0, 1]
    args.epochs = 1.0
    assert [curve.same_settings(r, args, 300) for r in rows] == [1, 0, 1, 0, 0, 0]
    measured = [{**r, "mrr_ce": 0.1 * n, "mrr_first": 0.4} for n, r in enumerate(rows)]
    curve.plot(measured, tmp_path / "figures" / "curve.png")
    assert (tmp_path / "figures" / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in (tmp_path / "figures").iterdir()] == ["curve.png"]


def test_methods_take_turns_and_each_keeps_its_fastest(monkeypatch: pytest.MonkeyPatch):
    child = _module("child", monkeypatch)
    times = {("a", 0): 3.0, ("b", 0): 1.0, ("a", 1): 2.0, ("b", 1): 4.0}
    order: list[tuple[str, int]] = []

    def measure(name: str, turn: int) -> dict:
        order.append((name, turn))
        return {"seconds": times[name, turn], "turn": turn}

    best = child.fastest_in_turns(("a", "b"), 2, measure)
    assert order == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
    assert best == {"a": {"seconds": 2.0, "turn": 1}, "b": {"seconds": 1.0, "turn": 0}}
    assert child.fastest_in_turns(["a"], 2, measure, key="turn") == {
        "a": {"seconds": 3.0, "turn": 0}
    }
