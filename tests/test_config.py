from pathlib import Path

import pytest

from dapr.cli import main
from dapr.errors import ConfigError
from dapr.experiment.config import load

GOOD = """
dataset: wiki-sample
retrievers:
  bm25-doc: {name: bm25, level: document}
  dense: {name: dense, args: {model: all-MiniLM-L6-v2}, contextualizer: title}
fusion:
  fused: {name: convex, document: bm25-doc, passage: dense, args: {alpha: 0.2}}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return path


def test_valid_file_and_overrides(tmp_path):
    exp = load(_write(tmp_path, GOOD), ["split=dev", "fusion.fused.args.alpha=0.3", "depth=50"])
    assert exp.name == "exp" and exp.split == "dev" and exp.depth == 50
    assert exp.fusion["fused"].args == {"alpha": 0.3}
    assert [s.name for s in exp.retrievers["dense"].contextualizer] == ["title"]
    assert exp.retrievers["bm25-doc"].level == "document"


BAD = [
    (GOOD + "splt: dev\n", "unknown key 'splt'; valid keys: name, dataset"),
    (
        GOOD.replace("name: bm25,", "name: bm52,"),
        "retrievers.bm25-doc.name: unknown retriever 'bm52'; choose from: bm25, dense",
    ),
    (
        GOOD.replace("level: document", "level: section"),
        "retrievers.bm25-doc.level: 'section' is not one of: passage, document",
    ),
    (GOOD + "depth: many\n", "depth must be an integer, got 'many'"),
    (
        GOOD.replace("{alpha: 0.2}", "{alpha: 0.2, beta: 1}"),
        "unknown key 'fusion.fused.args.beta'; valid keys: alpha, normalize",
    ),
    (GOOD.replace("{alpha: 0.2}", "{}"), "fusion.fused.args: missing required argument 'alpha'"),
    (
        GOOD.replace("passage: dense", "passage: bm25-doc"),
        "fusion.fused.passage: 'bm25-doc' is not a passage-level retriever of this experiment; "
        "choose from: dense",
    ),
    (
        GOOD.replace("contextualizer: title", "contextualizer: tilte"),
        "unknown contextualizer 'tilte'; choose from: coref, keyphrases, precomputed, title",
    ),
    (GOOD + "metrics: [nDCG@10, ndcg]\n", "metrics: unknown metric 'ndcg'"),
    (
        GOOD.replace("{model: all-MiniLM-L6-v2}", "{modle: x}"),
        "unknown key 'retrievers.dense.args.modle'",
    ),
    ("dataset: [unclosed\n", "not valid YAML"),
    (
        GOOD.replace("dataset: wiki-sample", "dataset: wiki-smaple"),
        "dataset: 'wiki-smaple' is neither a registered dataset nor a directory; "
        "choose from: ConditionalQA, DuReader-retrieval,",
    ),
    ("retrievers: {}\n", "missing key 'dataset'"),
    (
        GOOD.replace("contextualizer: title", "contextualizer: [title, {name: keyphrase}]"),
        "retrievers.dense.contextualizer[1].name: unknown contextualizer 'keyphrase'",
    ),
    (
        GOOD.replace("contextualizer: title", "contextualizer: {name: title, argz: {}}"),
        "unknown key 'retrievers.dense.contextualizer.argz'; valid keys: name, args",
    ),
    (
        GOOD.replace("contextualizer: title", "contextualizer: [title, 3]"),
        "retrievers.dense.contextualizer[1] must be a contextualizer name or a mapping",
    ),
    (
        GOOD.replace("contextualizer: title", "contextualizer: {name: title, args: {n: 3}}"),
        "unknown key 'retrievers.dense.contextualizer.args.n'; valid keys: none",
    ),
    (GOOD + "workers: 0\n", "workers must be a positive integer, got 0"),
]


def test_contextualizer_chains_in_every_form(tmp_path):
    text = GOOD.replace(
        "contextualizer: title",
        "contextualizer: [{name: precomputed, args: {kind: coref}}, title]",
    )
    exp = load(_write(tmp_path, text + "workers: 3\n"))
    steps = exp.retrievers["dense"].contextualizer
    assert [(s.name, dict(s.args)) for s in steps] == [
        ("precomputed", {"kind": "coref"}),
        ("title", {}),
    ]
    assert exp.workers == 3 and exp.retrievers["bm25-doc"].contextualizer == ()


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_files_name_file_key_and_choices(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as error:
        load(path)
    assert str(error.value).startswith(str(path))
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_cli_exits_2_with_one_line_and_no_traceback(tmp_path, capsys):
    path = _write(tmp_path, GOOD + "splt: dev\n")
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"dapr: error: {path}: unknown key 'splt'")


def test_bad_override_syntax(tmp_path):
    with pytest.raises(ConfigError, match="write it as key=value"):
        load(_write(tmp_path, GOOD), ["split"])
