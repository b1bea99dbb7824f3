"""A third-party retriever plugin: installed from its own package, listed, and run from YAML."""

import importlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dapr import registry
from dapr.cli import main
from dapr.datasets import read_dataset
from dapr.io import read_trec_run

PLUGIN = Path(__file__).parent / "plugin_package"


@pytest.fixture(scope="module")
def installed_plugin(tmp_path_factory):
    """pip-installs tests/plugin_package into a fresh site directory on sys.path (offline)."""
    source = tmp_path_factory.mktemp("plugin-source") / "plugin"
    shutil.copytree(PLUGIN, source)  # pip builds in place: keep the repository clean
    site = tmp_path_factory.mktemp("plugin-site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "--target",
            str(site),
            str(source),
        ],
        check=True,
    )
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    yield site
    sys.path.remove(str(site))
    for module in [m for m in sys.modules if m.startswith("dapr_example_plugin")]:
        del sys.modules[module]
    importlib.invalidate_caches()


def test_dapr_plugins_lists_where_each_component_comes_from(installed_plugin, capsys):
    assert main(["plugins"]) == 0
    lines = capsys.readouterr().out.splitlines()
    plugin = next(line for line in lines if line.split()[:1] == ["word-overlap"])
    assert plugin.split() == [
        "word-overlap",
        "dapr-example-plugin",
        "0.1.0",
        "dapr_example_plugin:WordOverlap",
    ]
    dense = next(line for line in lines if line.split()[:1] == ["dense"])
    assert "dapr.retrievers.dense:Dense" in dense and "presets: dragon_plus, jinav2" in dense
    assert "dapr.retrievers (" in "\n".join(lines)


def test_an_experiment_names_the_plugin_from_yaml(installed_plugin, wiki_slice, tmp_path, capsys):
    dataset, split = wiki_slice
    experiment = tmp_path / "plugin.yaml"
    experiment.write_text(
        f"name: plugin\ndataset: {dataset}\nmetrics: [nDCG@10]\n"
        "retrievers:\n  overlap: {name: word-overlap, args: {min_length: 4}}\n"
    )
    assert main(["run", str(experiment), "--out", str(tmp_path / "out")]) == 0
    assert "| overlap |" in capsys.readouterr().out
    run = read_trec_run(tmp_path / "out" / "runs" / "overlap.trec").to_dict()
    # the plugin's rule, recomputed here: distinct query words of 4+ letters in the passage
    plugin = registry.retrievers.get("word-overlap")
    assert plugin.__module__ == "dapr_example_plugin"
    texts = {p.id: p.text for d in read_dataset(dataset).corpus for p in d.passages}
    for qid, query in split.queries.items():
        words = {w for w in re.findall(r"\w+", query.lower()) if len(w) >= 4}
        for passage, score in list(run[qid].items())[:5]:
            assert score == len(words & set(re.findall(r"\w+", texts[passage].lower())))
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["systems"]["overlap"]["mean"]["nDCG@10"] > 0


def test_a_misspelled_plugin_name_lists_the_installed_ones(installed_plugin, tmp_path, capsys):
    experiment = tmp_path / "typo.yaml"
    experiment.write_text("dataset: wiki-sample\nretrievers:\n  x: {name: word-overlpa}\n")
    assert main(["run", str(experiment)]) == 2
    error = capsys.readouterr().err.strip()
    assert "unknown retriever 'word-overlpa'; choose from:" in error and "word-overlap" in error
    assert "\n" not in error
