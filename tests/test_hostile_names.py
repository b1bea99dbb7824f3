"""Names that become paths (issue 38, classes 1-3): fuzzed names through :mod:`dapr.io.names`
and through real runs never write outside ``--out``; results kept under the cache survive
``dapr cache prune``; ``--out`` reaching ``$DAPR_HOME`` through a link is refused."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import unicodedata
from pathlib import Path

import pytest
import yaml
from bad_input_kit import good_dataset
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dapr.cli import main
from dapr.errors import ConfigError, DaprError
from dapr.io import names

PIECES = ["a", "B", "é", "e\u0301", "ß", "ﬀ", ".", "..", "/", "\\", " ", "\t", "\n", "\x00"]
PIECES += ["\x07", "\u202e", "\ud800", ":", "@", "CON", "nul", "-", "x" * 60, "字" * 20]
NAMES = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=8).map("".join),
    st.text(max_size=40),
    st.text(alphabet="./\\ab", max_size=10),
)
"""Names with separators, dots, Unicode forms, control characters and long runs."""


@settings(max_examples=400, deadline=None)
@given(NAMES)
def test_a_name_is_refused_in_one_line_or_is_one_file_name(name):
    wrong = names.problem(name)
    if wrong is not None:
        with pytest.raises(ConfigError) as refused:
            names.component(name, Path("x.yaml"), "retrievers", "system name")
        assert "\n" not in str(refused.value) and str(refused.value).startswith("x.yaml: ")
        return
    assert name == names.component(name, Path("x.yaml"), "retrievers")
    assert Path(name).name == name and name not in (".", "..") and not name.startswith(".")
    assert not any(unicodedata.category(c) in ("Cc", "Cf", "Cs") or c.isspace() for c in name)
    assert len(f"{name}@maxp.trec".encode()) + 34 <= 255
    with tempfile.TemporaryDirectory() as base:  # the file system takes it as it is
        made = Path(base) / f"{name}.trec"
        made.write_text("x")
        assert [p.name for p in Path(base).iterdir()] == [made.name]


def test_names_that_one_file_system_takes_for_one_collide():
    assert names.collide([("a", "Bm25"), ("b", "bm25")]) == (("a", "Bm25"), ("b", "bm25"))
    assert names.collide([("a", "caf\u00e9"), ("b", "cafe\u0301")]) is not None  # NFC / NFD
    assert names.collide([("a", "STRASSE"), ("b", "straße")]) is not None
    assert names.collide([("a", "bm25"), ("b", "bm25-doc")]) is None


def test_a_trained_pointer_never_leaves_dapr_home():
    from dapr.checkpoints import resolve, trained_pointer

    for name in ("../../x", "/etc/passwd", ".."):
        with pytest.raises(DaprError, match="names become file names"):
            trained_pointer(name)
    with pytest.raises(DaprError, match="names become file names"):
        resolve("trained/../../x")


@pytest.fixture(scope="module")
def playground(tmp_path_factory) -> Path:
    """A good dataset and a DAPR_HOME whose cache already holds its BM25 index."""
    base = tmp_path_factory.mktemp("names")
    good_dataset(base / "data")
    return base


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() or p.is_symlink()}


def _fuzzed_run(playground: Path, system: object, name: object, out: bool, capsys) -> None:
    """Run BM25 with ``system`` / ``name`` in a fresh folder: refused in one line, or every
    new file lies in its output folder (``--out``, else ``results/``) or dapr's home."""
    work = Path(tempfile.mkdtemp(dir=playground))
    experiment = work / "exp.yaml"
    text = {"name": name, "dataset": str(playground / "data"), "split": "test", "depth": 5}
    text["retrievers"] = {system: {"name": "bm25"}}
    experiment.write_text(yaml.safe_dump(text), encoding="utf-8")
    before = _files(playground)
    argv = ["run", str(experiment)] + (["--out", str(work / "out")] if out else [])
    cwd = os.getcwd()
    os.chdir(work)
    try:
        code = main(argv)
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err
    new = _files(playground) - before
    allowed = work / "out" if out else work / "results"
    home = Path(os.environ["DAPR_HOME"])
    assert [p for p in new if allowed not in p.parents and home not in p.parents] == []
    if code == 2:
        assert len(err.splitlines()) == 1 and err.startswith("dapr: error: "), err
        assert [p for p in new if home not in p.parents] == []
    else:
        assert code == 0, err
        results = allowed if out else allowed.joinpath(*str(name).split("/"))
        assert json.loads((results / "metrics.json").read_text())["systems"].keys() == {system}
        assert (results / "runs" / f"{system}.trec").is_file()
    shutil.rmtree(work)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(NAMES)
@example("../../../x")
@example("/tmp/absolute")
@example("Ça/va")
@example("bm25+title")
def test_a_fuzzed_system_name_never_writes_outside_out(playground, monkeypatch, capsys, system):
    monkeypatch.setenv("DAPR_HOME", str(playground / "home"))
    _fuzzed_run(playground, system, "fuzz", True, capsys)


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.lists(NAMES, min_size=1, max_size=3).map("/".join))
@example("../../escaped")
@example("paper/table3")
def test_a_fuzzed_experiment_name_never_writes_outside_results(
    playground, monkeypatch, capsys, name
):
    monkeypatch.setenv("DAPR_HOME", str(playground / "home"))
    _fuzzed_run(playground, "bm25", name, False, capsys)


def test_prune_keeps_results_put_in_the_cache_and_prunes_dapr_entries(
    playground, monkeypatch, capsys
):
    home = playground / "prune-home"
    monkeypatch.setenv("DAPR_HOME", str(home))
    monkeypatch.chdir(playground)
    experiment = playground / "prune.yaml"
    text = {"dataset": str(playground / "data"), "split": "test", "depth": 5}
    experiment.write_text(yaml.safe_dump({**text, "retrievers": {"bm25": {"name": "bm25"}}}))
    assert main(["run", str(experiment), "--out", str(playground / "kept")]) == 0
    cache = home / "cache"
    mine = [cache / "runs" / "x", cache / "mine", cache / "runs" / "0123456789abcdef0123.txt"]
    shutil.copytree(playground / "kept", mine[0])  # results a user put in the cache
    (mine[1] / "notes").mkdir(parents=True)
    mine[2].write_text("a user's file named almost like an entry")
    [run] = [p for p in (cache / "runs").iterdir() if len(p.name) == 20]
    (run / "COMPLETE").unlink()  # a real entry of dapr's, incomplete: pruned
    capsys.readouterr()

    assert main(["cache", "prune", "--older-than", "30"]) == 0
    out = capsys.readouterr().out
    assert not run.exists() and f"runs      {run.name}" in out and "incomplete" in out
    assert (mine[0] / "metrics.json").read_bytes() == (
        playground / "kept/metrics.json"
    ).read_bytes()
    assert mine[1].is_dir() and mine[2].is_file()
    assert "left 3 paths" in out and "runs/x  (not an entry dapr wrote)" in out

    assert main(["cache", "prune", "--everything"]) == 0
    assert all(p.exists() for p in mine) and not any((cache / "indexes").iterdir())


def test_out_reaching_dapr_home_through_a_link_is_refused(playground, monkeypatch, capsys):
    home = playground / "link-home"
    monkeypatch.setenv("DAPR_HOME", str(home))
    (home / "cache").mkdir(parents=True)
    link = playground / "looks-outside"
    link.symlink_to(home / "cache", target_is_directory=True)
    experiment = playground / "link.yaml"
    text = {"dataset": str(playground / "data"), "retrievers": {"bm25": {"name": "bm25"}}}
    experiment.write_text(yaml.safe_dump(text))
    capsys.readouterr()
    for command in ("run", "check"):
        assert main([command, str(experiment), "--out", str(link / "runs" / "x")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "lies inside $DAPR_HOME" in err
    assert list((home / "cache").iterdir()) == []


def test_results_beside_the_folders_dapr_manages_in_a_shared_home_are_allowed(
    playground, monkeypatch, capsys
):
    """A home that is also a scratch folder: results in it, outside cache/, datasets/ ... are
    the user's to put there, and a prune leaves them."""
    home = playground / "scratch"
    monkeypatch.setenv("DAPR_HOME", str(home))
    experiment = playground / "scratch.yaml"
    text = {"dataset": str(playground / "data"), "retrievers": {"bm25": {"name": "bm25"}}}
    experiment.write_text(yaml.safe_dump(text))
    out = home / "results" / "mine"
    assert main(["run", str(experiment), "--out", str(out)]) == 0
    assert main(["cache", "prune", "--everything"]) == 0
    capsys.readouterr()
    assert (out / "metrics.json").is_file()


def test_every_folder_dapr_makes_in_its_home_is_one_it_refuses_results_in():
    """``home() / "<folder>"`` anywhere in dapr names a folder of :data:`dapr.paths.OWNED`."""
    import re

    from dapr.paths import OWNED

    root = Path(__file__).resolve().parents[1]
    sources = [*(root / "dapr").rglob("*.py"), *(root / "data_loaders").rglob("*.py")]
    named = {
        match
        for source in sources
        for match in re.findall(r"home\(\) / [\"'](\w+)[\"']", source.read_text(encoding="utf-8"))
    }
    assert named and named <= set(OWNED), named - set(OWNED)
