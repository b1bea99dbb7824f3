import json

import pytest

from dapr.cli import main
from dapr.datasets import read_dataset


@pytest.fixture
def nq(samples):
    return samples / "dapr-dump-sample" / "NaturalQuestions"


def test_stats_json_matches_the_dataset(nq, capsys):
    assert main(["data", "stats", str(nq), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    dataset = read_dataset(nq)
    documents = list(dataset.corpus)
    passages = [p for d in documents for p in d.passages]
    assert stats["documents"] == len(documents)
    assert stats["passages"] == len(passages)
    words = sum(len(p.text.split()) for p in passages) / len(passages)
    assert stats["passage_length"]["mean"] == pytest.approx(words, abs=0.01)
    for name, split in dataset.splits.items():
        assert stats["splits"][name]["queries"] == len(split.queries)
        assert stats["splits"][name]["judgements"] == sum(map(len, split.qrels.values()))


def test_stats_text(nq, capsys):
    assert main(["data", "stats", str(nq)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dataset            NaturalQuestions (en)\n")
    assert "passages/document" in out and "test " in out


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_export_round_trips(nq, tmp_path, capsys, fmt):
    out = tmp_path / "export"
    assert main(["data", "export", str(nq), "--out", str(out), "--format", fmt]) == 0
    assert (out / f"corpus.{fmt}").is_file()
    assert read_dataset(out).fingerprint == read_dataset(nq).fingerprint


def test_unknown_dataset_is_one_line_exit_2(capsys):
    assert main(["data", "stats", "no-such-dataset"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dapr: error: unknown dataset 'no-such-dataset'; choose from: ")
    assert "wiki-sample" in err and err.count("\n") == 1


def test_plugins_lists_builtins(capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    lines = [line.split() for line in out.splitlines()]
    assert ["dapr.retrievers", "(5)"] in lines
    assert ["bm25", "dapr-ir", "0.1.0", "dapr.retrievers.bm25:BM25"] in lines
    assert ["convex", "dapr-ir", "0.1.0", "dapr.fusion:Convex"] in lines


def test_version_names_the_distribution(capsys):
    import importlib.metadata

    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    version = importlib.metadata.version("dapr-ir")
    assert capsys.readouterr().out == f"dapr {version} (distribution dapr-ir)\n"
