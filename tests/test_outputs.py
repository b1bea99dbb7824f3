"""Never lose a user's data: outputs replace only what dapr wrote, follow a symlinked --out,
stay under results/, and do not overwrite another configuration's results unasked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_bad_inputs import BASE, good_dataset

from dapr.cli import main


def _experiment(tmp: Path, **changes) -> Path:
    raw = {**BASE, "dataset": str(good_dataset(tmp / "data")), **changes}
    path = tmp / "exp.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_export_keeps_files_it_did_not_write(workspace, capsys):
    data = good_dataset(workspace / "data")
    out = workspace / "exported"
    (out / "queries").mkdir(parents=True)
    (out / "README.md").write_text("my notes")
    (out / "queries" / "notes.txt").write_text("mine too")
    (out / "queries" / "old.jsonl").write_text("{}\n")  # a table of the layout: replaced
    assert main(["data", "export", str(data), "--out", str(out)]) == 0
    assert (out / "README.md").read_text() == "my notes"
    assert (out / "queries" / "notes.txt").read_text() == "mine too"
    assert not (out / "queries" / "old.jsonl").exists()
    assert (out / "corpus.jsonl").is_file() and (out / "queries" / "test.jsonl").is_file()
    assert main(["data", "export", str(data), "--out", str(out), "--format", "parquet"]) == 0
    assert (out / "README.md").read_text() == "my notes" and not (out / "corpus.jsonl").exists()
    assert [p.name for p in workspace.iterdir() if p.name.startswith(".")] == []


def test_a_rerun_keeps_the_users_files_in_the_results(workspace, capsys):
    experiment = _experiment(workspace)
    out = workspace / "out"
    assert main(["run", str(experiment), "--out", str(out)]) == 0
    (out / "notes.md").write_text("what I saw")
    (out / "runs" / "README").write_text("runs of the paper")
    (out / "runs" / "gone.trec").write_text("q1 Q0 d1-0 1 1.0 gone\n")  # a run file: dapr's
    assert main(["run", str(experiment), "--out", str(out)]) == 0
    assert (out / "notes.md").read_text() == "what I saw"
    assert (out / "runs" / "README").read_text() == "runs of the paper"
    assert sorted(p.name for p in (out / "runs").glob("*.trec")) == [
        "bm25-doc.trec",
        "bm25.trec",
        "fused.trec",
    ]


def test_a_symlinked_out_stays_a_link(workspace, capsys):
    experiment = _experiment(workspace)
    target = workspace / "elsewhere" / "results"
    target.mkdir(parents=True)
    link = workspace / "out"
    link.symlink_to(target, target_is_directory=True)
    for _ in range(2):
        assert main(["run", str(experiment), "--out", str(link)]) == 0
        assert link.is_symlink() and (target / "metrics.json").is_file()


@pytest.mark.parametrize("name", ["../../escaped", "/tmp/absolute", "a/../../b", ".hidden", "a b"])
def test_a_name_cannot_leave_results(workspace, capsys, name):
    experiment = _experiment(workspace, name=name)
    assert main(["run", str(experiment)]) == 2
    err = capsys.readouterr().err
    assert "cannot name a folder under results/" in err and err.count("\n") == 1
    assert not (workspace / "results").exists()
    assert not (workspace.parent / "escaped").exists()


def test_overrides_get_their_own_default_folder(workspace, capsys):
    experiment = _experiment(workspace)
    assert main(["run", str(experiment)]) == 0
    first = (workspace / "results" / "bad" / "metrics.json").read_bytes()
    assert main(["run", str(experiment), "--set", "split=dev", "--set", "depth=5"]) == 0
    other = workspace / "results" / "bad@split=dev,depth=5"
    assert json.loads((other / "metrics.json").read_text())["split"] == "dev"
    assert (workspace / "results" / "bad" / "metrics.json").read_bytes() == first


def test_another_configuration_is_not_overwritten_unasked(workspace, capsys):
    experiment = _experiment(workspace)
    out = workspace / "out"
    assert main(["run", str(experiment), "--out", str(out)]) == 0
    before = (out / "metrics.json").read_bytes()
    capsys.readouterr()
    assert main(["run", str(experiment), "--out", str(out), "--set", "split=dev"]) == 2
    err = capsys.readouterr().err
    assert "another configuration" in err and "split" in err and "--overwrite" in err
    assert (out / "metrics.json").read_bytes() == before
    assert (
        main(["run", str(experiment), "--out", str(out), "--set", "split=dev", "--overwrite"]) == 0
    )
    assert json.loads((out / "metrics.json").read_text())["split"] == "dev"


class _Spaced:
    """A retriever plugin that makes up an item id with a space."""

    def index(self, items, store):
        list(items)

    def load(self, store):
        pass

    def search(self, queries, k):
        from dapr.data import Run

        return Run.from_dict({qid: {"made up": 1.0} for qid in queries})


def test_a_bad_item_id_is_named_with_the_file_it_was_bound_for(workspace, capsys):
    from dapr import registry

    registry.retrievers.add("spaced", _Spaced)
    try:
        experiment = _experiment(workspace, retrievers={"odd": {"name": "spaced"}})
        raw = yaml.safe_load(experiment.read_text())
        del raw["fusion"]  # it fuses systems this experiment does not have
        experiment.write_text(yaml.safe_dump(raw))
        assert main(["run", str(experiment), "--out", str(workspace / "out")]) == 2
    finally:
        registry.retrievers.remove("spaced")
    err = capsys.readouterr().err.strip()
    assert f"{workspace / 'out' / 'runs' / 'odd.trec'}: item id 'made up'" in err
    assert ".tmp" not in err and not (workspace / "out").exists()
