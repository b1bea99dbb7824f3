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
    (
        GOOD.replace("{alpha: 0.2}", "{}"),
        "fusion.fused.args: missing alpha (the weight of the document scores",
    ),
    (
        GOOD.replace("passage: dense", "passage: bm25-doc"),
        "fusion.fused.passage: 'bm25-doc' is not a passage-level retriever of this experiment; "
        "choose from: dense",
    ),
    (
        GOOD.replace("contextualizer: title", "contextualizer: tilte"),
        "unknown contextualizer 'tilte'; choose from: coref, keyphrases, neighbours, "
        "precomputed, title",
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
        "choose from: COVID-QA, ConditionalQA, DuReader-retrieval,",
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


SWEPT = (
    GOOD
    + """
sweep:
  parameter: fusion.fused.args.alpha
  values: {start: 0.0, stop: 1.0, step: 0.1}
  metric: ndcg_cut_10
"""
)


def test_sweep_block_expands_a_range_and_reads_trec_metric_names(tmp_path):
    sweep = load(_write(tmp_path, SWEPT)).sweep
    assert sweep.values == (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    assert (sweep.system, sweep.argument, sweep.metric) == ("fused", "alpha", "nDCG@10")
    assert (sweep.tune_on, sweep.subset, sweep.parameter) == (
        "dev",
        "hard",
        "fusion.fused.args.alpha",
    )
    listed = load(
        _write(tmp_path, GOOD + "sweep: {parameter: fusion.fused.args.alpha, values: [0.3, 0.1]}\n")
    )
    assert listed.sweep.values == (0.3, 0.1)
    exp = load(_write(tmp_path, GOOD + "metrics: [ndcg_cut_10, recall_100, recip_rank]\n"))
    assert exp.metrics == ("nDCG@10", "R@100", "MRR")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "sweep: {parameter: fusion.nope.args.alpha, values: [0.1]}",
            "not an argument of a fusion system",
        ),
        (
            "sweep: {parameter: retrievers.dense.args.model, values: [x]}",
            "fusion.<system>.args.<argument>",
        ),
        (
            "sweep: {parameter: fusion.fused.args.beta, values: [0.1]}",
            "unknown key 'sweep.parameter.beta'",
        ),
        (
            "sweep: {parameter: fusion.fused.args.alpha, values: [0.5, 1.5]}",
            "sweep.values: fusion.fused.args.alpha must be a number in [0, 1], got 1.5",
        ),
        ("sweep: {parameter: fusion.fused.args.alpha, values: []}", "at least one value"),
        (
            "sweep: {parameter: fusion.fused.args.alpha, values: {start: 0, stop: 1}}",
            "start, stop and step",
        ),
        (  # a traceback (TypeError) before: mypy saw the exponent of .inf is a letter
            "sweep: {parameter: fusion.fused.args.alpha, values: {start: 0, stop: 1, step: .inf}}",
            "sweep.values.step must be a finite number, got inf",
        ),
        (
            "sweep: {parameter: fusion.fused.args.alpha, values: {start: .nan, stop: 1, step: 1}}",
            "sweep.values.start must be a finite number, got nan",
        ),
        (
            "sweep: {parameter: fusion.fused.args.alpha, values: [0.1], tune_on: test}",
            "would overfit",
        ),
        (
            "sweep: {parameter: fusion.fused.args.alpha, values: [0.1], metric: F1}",
            "unknown metric",
        ),
        ("sweep: {values: [0.1]}", "sweep: missing key 'parameter'"),
        ("maxp: [bm25-doc]", "maxp: 'bm25-doc' is not a passage-level system"),
        ("categories: nowhere.tsv", "categories: 'nowhere.tsv' is neither"),
    ],
)
def test_bad_sweeps_maxp_and_categories(tmp_path, extra, message):
    path = _write(tmp_path, GOOD + extra + "\n")
    with pytest.raises(ConfigError) as error:
        load(path)
    assert str(error.value).startswith(str(path)) and message in str(error.value)
    assert "\n" not in str(error.value)


HYBRIDS = """
dataset: wiki-sample
retrievers:
  bm25-doc: {name: bm25, level: document}
  bm25: {name: bm25}
  dense: {name: dense, args: {model: all-MiniLM-L6-v2}}
  rerank: {name: rerank, first_stage: bm25}
fusion:
"""


@pytest.mark.parametrize(
    ("fusion", "message"),
    [
        ("h: {name: rrf, passages: [bm25]}", "name two different passage-level systems"),
        ("h: {name: rrf, passages: [bm25, bm25-doc]}", "'bm25-doc' is not a passage-level"),
        ("h: {name: rrf, passages: [bm25, dense], document: bm25-doc}", "not both"),
        ("h: {name: rrf, passage: dense}", "missing key 'document'"),
        (
            "h: {name: hierarchical, passages: [bm25, dense], args: {alpha: 0.2}}",
            "give document and passage",
        ),
        (
            "h: {name: hierarchical, document: bm25-doc, passage: rerank, args: {alpha: 0.2}}",
            "cannot score",
        ),
        (
            "h: {name: hierarchical, document: bm25-doc, passage: dense, "
            "args: {alpha: 0.2, documents: 0}}",
            "documents",
        ),
    ],
)
def test_bad_fusion_forms(tmp_path, fusion, message):
    with pytest.raises(ConfigError, match=message):
        load(_write(tmp_path, HYBRIDS + "  " + fusion + "\n"))


def test_fusion_forms_and_maxp(tmp_path):
    text = (
        HYBRIDS
        + """  hybrid: {name: convex, passages: [bm25, dense], args: {alpha: 0.3}}
  hier: {name: hierarchical, document: bm25-doc, passage: dense, args: {alpha: 0.1}}
maxp: true
"""
    )
    exp = load(_write(tmp_path, text))
    assert exp.fusion["hybrid"].inputs == ("bm25", "dense")
    assert exp.fusion["hier"].inputs == ("bm25-doc", "dense")
    assert exp.maxp == ("bm25", "dense", "rerank", "hybrid", "hier")


def test_a_list_of_datasets_is_a_grid(tmp_path):
    from dapr.experiment.config import load_grid

    text = GOOD.replace("dataset: wiki-sample", f"dataset: [wiki-sample, {tmp_path}]")
    grid = load_grid(_write(tmp_path, "name: g\n" + text))
    assert [(e.name, e.dataset) for e in grid] == [
        ("g/wiki-sample", "wiki-sample"),
        (f"g/{tmp_path.name}", str(tmp_path)),
    ]
    assert [e.name for e in load_grid(_write(tmp_path, GOOD))] == ["exp"]
    with pytest.raises(ConfigError, match="non-empty list"):
        load_grid(_write(tmp_path, GOOD.replace("dataset: wiki-sample", "dataset: []")))


PRESET_FUSIONS = """
name: tuned
dataset: wiki-sample
retrievers:
  bm25-document: {name: bm25, level: document}
  dragon: {name: dense, args: {preset: dragon_plus}}
  splade: {name: sparse, args: {preset: spladev2}}
  colbert: {name: late_interaction, args: {preset: colbertv2}}
  jina-document: {name: dense, level: document, args: {preset: jinav2}}
fusion:
  dragon-rf: {name: convex, document: bm25-document, passage: dragon}
  dragon-h: {name: hierarchical, document: bm25-document, passage: dragon}
  splade-rf: {name: convex, document: bm25-document, passage: splade}
  splade-h: {name: hierarchical, document: bm25-document, passage: splade}
  colbert-rf: {name: convex, document: bm25-document, passage: colbert}
  colbert-h: {name: hierarchical, document: bm25-document, passage: colbert}
  chosen: {name: convex, document: bm25-document, passage: dragon, args: {alpha: 0.5}}
  dragon-jina: {name: convex, document: jina-document, passage: dragon}
  colbert-jina: {name: convex, document: jina-document, passage: colbert}
"""


def test_presets_carry_the_papers_tuned_alphas_and_an_explicit_alpha_wins(tmp_path):
    file = tmp_path / "tuned.yaml"
    file.write_text(PRESET_FUSIONS)
    alphas = {name: spec.args["alpha"] for name, spec in load(file).fusion.items()}
    # the reference scripts' --report_passage_weight, as 1 - alpha
    assert alphas == {
        "dragon-rf": 0.3,
        "dragon-h": 0.2,
        "splade-rf": 0.3,
        "splade-h": 0.2,
        "colbert-rf": 0.3,
        "colbert-h": 0.1,
        "chosen": 0.5,
        "dragon-jina": 0.3,
        "colbert-jina": 0.2,
    }
    # a retriever without a preset has no tuned alpha: the file must give one
    file.write_text(PRESET_FUSIONS.replace("{preset: dragon_plus}", "{}"))
    with pytest.raises(ConfigError, match=r"fusion.dragon-rf.args: missing.*alpha.*preset"):
        load(file)
