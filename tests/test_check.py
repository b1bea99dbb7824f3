"""`dapr check FILE`: the plan of a run without running it. Its steps agree with the step log of
the run that follows (computed before, cached after), it writes nothing into $DAPR_HOME, and each
problem that would stop the run is one line on stderr with exit status 2."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from test_bad_inputs import BASE, good_dataset
from test_fuzz import FUZZ, _drop, _paths, _set, values
from test_sweep import HIERARCHICAL

from dapr.cli import main

EXPERIMENT = "\nname: planned" + HIERARCHICAL  # the sweep tests' hierarchical experiment
SWEEP = "sweep={parameter: fusion.hierarchical.args.alpha, values: [0.2, 0.6], tune_on: dev}"
CHECKED = re.compile(r"^    (\w+)\s+(\S+)\s+(cached|computed|unknown)\b")
RAN = re.compile(r"^  (\w+)\s+(\S+)\s+(cached|computed)\s+[\d.]+s$")


@pytest.fixture
def experiment(wiki_splits, tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "planned.yaml"
    path.write_text(EXPERIMENT.format(dataset=wiki_splits))
    return path


def check(capsys, *argv: str) -> tuple[int, list[tuple[str, ...]], str, str]:
    """Exit status, the planned steps (kind, system, status), stdout and stderr."""
    capsys.readouterr()
    code = main(["check", *argv])
    out, err = capsys.readouterr()
    steps = [m.groups() for line in out.splitlines() if (m := CHECKED.match(line))]
    return code, steps, out, err


def run(capsys, *argv: str) -> list[tuple[str, ...]]:
    """The step log of ``dapr run`` (kind, system, status)."""
    capsys.readouterr()
    assert main(["run", *argv]) == 0
    return [m.groups() for line in capsys.readouterr().out.splitlines() if (m := RAN.match(line))]


def listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and modification time."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


def test_check_plans_what_run_then_does(experiment, tmp_path, capsys):
    out = str(tmp_path / "out")
    code, before, text, err = check(capsys, str(experiment), "--out", out)
    assert code == 0 and err == ""
    assert f"output   {out} (new)" in text
    assert "dataset  " in text and "(offline)" in text
    assert {status for *_, status in before} == {"computed"}
    # the runner's own order: an index before its search, the scoped scoring before its fusion
    assert [kind for kind, system, _ in before if system == "hierarchical"] == ["score", "fuse"]
    assert ("index", "bm25+title", "computed") in before
    assert run(capsys, str(experiment), "--out", out) == before

    code, after, text, _ = check(capsys, str(experiment), "--out", out)
    assert code == 0 and f"output   {out} (replaces the results there)" in text
    assert {status for *_, status in after} == {"cached"}
    assert {kind for kind, *_ in after} == {"search", "score", "fuse"}  # no index is opened
    assert run(capsys, str(experiment), "--out", out) == after
    for entry in re.findall(r"cached\s+(\S+/\S+)", text):  # the entries it names are the run's
        assert (tmp_path / "home" / "cache" / entry / "COMPLETE").is_file()

    # a deeper search reuses every index; run and check agree on which steps that recomputes
    deeper = ["--set", "depth=80", "--out", str(tmp_path / "deeper")]
    code, planned, _, _ = check(capsys, str(experiment), *deeper)
    assert ("index", "bm25", "cached") in planned and ("search", "bm25", "computed") in planned
    assert run(capsys, str(experiment), *deeper) == planned


def test_check_plans_every_value_of_a_sweep(experiment, tmp_path, capsys):
    code, before, text, _ = check(capsys, str(experiment), "--set", SWEEP)
    assert code == 0, text
    fused = [s for s in before if s[:2] == ("fuse", "hierarchical")]
    assert len(fused) == 6  # the file's alpha and both values, on dev and on test
    assert run(capsys, str(experiment), "--set", SWEEP)
    code, after, _, _ = check(capsys, str(experiment), "--set", SWEEP)
    assert [s[:2] for s in after] == [s[:2] for s in before if s[0] != "index"]
    assert {status for *_, status in after} == {"cached"}


def test_check_writes_nothing_into_the_cache(experiment, wiki_splits, tmp_path, capsys):
    home = tmp_path / "home"
    fresh = tmp_path / "fresh.yaml"  # wiki-sample is built at first use: check builds nothing
    fresh.write_text(EXPERIMENT.format(dataset="wiki-sample"))
    code, steps, text, _ = check(capsys, str(fresh))
    assert code == 0 and not home.exists()
    assert "built at first use" in text and {s[2] for s in steps} == {"unknown"}

    run(capsys, str(experiment), "--out", str(tmp_path / "out"))
    before = listing(home)
    assert any("COMPLETE" in path for path in before)
    for argv in ([], ["--set", "depth=80"], ["--set", SWEEP]):
        assert check(capsys, str(experiment), *argv)[0] == 0
    assert listing(home) == before  # no entry, lock or marker made, none touched
    assert sorted(os.listdir(tmp_path)) == ["fresh.yaml", "home", "out", "planned.yaml"]


def test_check_reports_each_problem_on_a_line(experiment, wiki_splits, tmp_path, capsys):
    # an unknown key: the same line as dapr run's
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXPERIMENT.format(dataset=wiki_splits) + "colour: red\n")
    code, _, _, err = check(capsys, str(bad))
    assert code == 2 and "Traceback" not in err
    assert main(["run", str(bad)]) == 2
    assert err == capsys.readouterr().err and len(err.splitlines()) == 1

    # two experiments of a grid with a problem each, a model not here, an output that is a file
    raw = yaml.safe_load(EXPERIMENT.format(dataset=wiki_splits))
    raw["dataset"] = [str(wiki_splits), "nowhere-a", "nowhere-b"]
    raw["retrievers"]["dense"] = {"name": "dense", "args": {"model": "nobody/no-such-model"}}
    bad.write_text(yaml.safe_dump(raw))
    (tmp_path / "taken").write_text("a file\n")
    code, steps, out, err = check(capsys, str(bad), "--out", str(tmp_path / "taken"))
    lines = err.splitlines()
    assert code == 2 and "Traceback" not in out + err
    assert len(lines) == 4 and all(line.startswith("dapr: error: ") for line in lines)
    assert sum("nowhere-a" in line for line in lines) == 1
    assert sum("nowhere-b" in line for line in lines) == 1
    assert any("taken" in line and "choose another --out" in line for line in lines)
    [model] = [line for line in lines if "no-such-model" in line]
    assert f"{bad}: retrievers.dense: cannot load model" in model
    assert "download it on a connected machine" in model
    # the plan of the good experiment is still printed; the unknown model's run is unknown
    assert ("search", "dense", "unknown") in steps and ("search", "bm25", "computed") in steps
    assert "nobody/no-such-model (retrievers.dense): not on this machine" in out

    # a split the dataset lacks does not hide the other problem
    raw["dataset"] = str(wiki_splits)
    bad.write_text(yaml.safe_dump(raw))
    code, steps, _, err = check(capsys, str(bad), "--set", "split=train")
    assert code == 2 and len(err.splitlines()) == 2
    assert f"{bad}: split: " in err and "choose from: dev, test" in err and "no-such-model" in err
    assert {status for *_, status in steps} == {"unknown"}


def test_check_takes_the_options_of_run_that_shape_the_plan(experiment, tmp_path, capsys):
    raw = yaml.safe_load(experiment.read_text())
    raw["variants"] = {"shallow": {"depth": 10}}
    experiment.write_text(yaml.safe_dump(raw))
    code, _, text, _ = check(capsys, str(experiment), "--variant", "shallow", "--set", "split=dev")
    assert code == 0 and "split dev" in text
    assert "output   results/planned@shallow,split=dev (new)" in text
    code, _, _, err = check(capsys, str(experiment), "--variant", "deep")
    assert code == 2 and "--variant deep: no such variant" in err


@FUZZ
@given(data=st.data())
def test_mutated_experiment_files_check_or_say_why(tmp_path_factory, data):
    """Through `dapr check`, a mutated file gets a plan (exit 0) or lines of problems (exit 2),
    never a traceback: each component it names is built and asked for its identity."""
    root = tmp_path_factory.mktemp("fuzz-check")
    raw = json.loads(json.dumps({**BASE, "dataset": str(good_dataset(root / "data"))}))
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(raw)))
        with contextlib.suppress(KeyError, TypeError):
            if data.draw(st.booleans()):
                _set(raw, path, data.draw(values))
            else:
                _drop(raw, path)
    file = root / "exp.yaml"
    file.write_text(yaml.safe_dump(raw, allow_unicode=True))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["check", str(file), "--out", str(root / "out")])
    assert code in (0, 2) and "Traceback" not in out.getvalue() + err.getvalue()
    assert (code == 2) == bool(err.getvalue())
    assert all(line.startswith("dapr: error: ") for line in err.getvalue().splitlines())
