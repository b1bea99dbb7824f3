"""`dapr cache ls` and `dapr cache prune` on the cache a real run filled."""

from dapr.cli import main

EXPERIMENT = """
dataset: {dataset}
retrievers:
  bm25: {{name: bm25}}
"""


def test_ls_then_prune_runs_then_the_run_searches_again(wiki_slice, tmp_path, monkeypatch, capsys):
    dataset, _ = wiki_slice
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(EXPERIMENT.format(dataset=dataset))
    assert main(["run", str(experiment), "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()

    assert main(["cache", "ls"]) == 0
    listing = capsys.readouterr().out
    assert "| indexes | 1 | 0 |" in listing and "| runs | 1 | 0 |" in listing

    assert main(["cache", "prune", "--older-than", "1", "--dry-run"]) == 0
    assert "would remove 0 entries" in capsys.readouterr().out  # both were used just now
    assert main(["cache", "prune", "--everything", "--kind", "runs", "--dry-run"]) == 0
    assert "would remove 1 entries" in capsys.readouterr().out
    assert main(["cache", "prune", "--everything", "--kind", "runs"]) == 0
    assert "removed 1 entries" in capsys.readouterr().out
    assert not list((tmp_path / "home" / "cache" / "runs").glob("*/COMPLETE"))

    assert main(["run", str(experiment), "--out", str(tmp_path / "out")]) == 0
    steps = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert steps[0][:3] == ["index", "bm25", "cached"]
    assert steps[1][:3] == ["search", "bm25", "computed"]

    assert main(["cache", "prune", "--older-than", "-1"]) == 2
    assert "--older-than must be" in capsys.readouterr().err
