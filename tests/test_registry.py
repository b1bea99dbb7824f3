"""A third-party retriever, installed as a distribution with an entry point, is found and run."""

import json
import textwrap
from pathlib import Path

import pytest

from dapr import registry
from dapr.cli import main
from dapr.errors import DaprError
from dapr.interfaces import Retriever

PLUGIN = textwrap.dedent(
    '''
    import json
    from dapr.data import Run

    class Overlap:
        """Scores an item by how many distinct query words it contains."""

        version = "1"

        def __init__(self, lowercase: bool = True):
            self.lowercase = lowercase

        def _words(self, text):
            return set((text.lower() if self.lowercase else text).split())

        def index(self, items, store):
            store.joinpath("items.json").write_text(json.dumps(list(items)))

        def load(self, store):
            self.items = json.loads(store.joinpath("items.json").read_text())

        def search(self, queries, k):
            out = {}
            for qid, text in queries.items():
                words = self._words(text)
                scored = {i: len(words & self._words(t)) for i, t in self.items}
                top = sorted(scored.items(), key=lambda kv: -kv[1])[:k]
                out[qid] = {i: float(s) for i, s in top if s > 0}
            return Run.from_dict(out)
    '''
)


@pytest.fixture
def installed_plugin(tmp_path, monkeypatch):
    """What `pip install` of a package declaring the entry point leaves on sys.path."""
    (tmp_path / "overlap_plugin.py").write_text(PLUGIN)
    info = tmp_path / "overlap_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: overlap-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[dapr.retrievers]\noverlap = overlap_plugin:Overlap\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_entry_point_plugin_is_listed_and_runs_in_an_experiment(
    installed_plugin, samples, tmp_path, capsys
):
    assert "overlap" in registry.retrievers.names()
    assert isinstance(registry.retrievers.get("overlap")(), Retriever)
    experiment = tmp_path / "plugin.yaml"
    experiment.write_text(
        f"dataset: {samples / 'dapr-dump-sample' / 'NaturalQuestions'}\n"
        "split: test\n"
        "retrievers:\n"
        "  overlap: {name: overlap, args: {lowercase: true}}\n"
    )
    assert main(["run", str(experiment), "--out", str(tmp_path / "out")]) == 0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert 0 < metrics["systems"]["overlap"]["mean"]["R@100"] <= 1
    assert (tmp_path / "out" / "runs" / "overlap.trec").read_text().startswith("dev-")
    capsys.readouterr()
    experiment.write_text(experiment.read_text().replace("lowercase: true", "lowercas: true"))
    assert main(["run", str(experiment)]) == 2
    assert "unknown key 'retrievers.overlap.args.lowercas'" in capsys.readouterr().err


def test_runtime_registration_and_unknown_names():
    registry.fusers.add("mine", object)
    try:
        assert registry.fusers.get("mine") is object
        assert "mine" in registry.fusers.names()
    finally:
        registry.fusers._extra.pop("mine")
    with pytest.raises(DaprError, match="unknown fuser 'nope'; choose from: convex"):
        registry.fusers.get("nope")


def _fake_distribution(root: Path, name: str, entry_points: str, module: str = "") -> None:
    """An installed distribution on ``root`` (a folder put on sys.path): its metadata, its
    entry points and, if given, the source of its module ``<name>_module``."""
    info = root / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    if module:
        (root / f"{name}_module.py").write_text(module)


def test_a_plugin_claiming_a_built_in_name_is_refused_not_used(tmp_path, monkeypatch):
    _fake_distribution(
        tmp_path,
        "shadow",
        "[dapr.retrievers]\nbm25 = shadow_module:Fake\n",
        "class Fake:\n    pass\n",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(DaprError) as error:
        registry.retrievers.get("bm25")
    message = str(error.value)
    assert "registered twice" in message and "dapr-ir 0.1.0" in message and "shadow 1.0" in message
    assert "another name" in message
    listed = [dist for name, dist, _ in registry.retrievers.sources() if name == "bm25"]
    assert sorted(listed) == ["dapr-ir 0.1.0", "shadow 1.0"]


def test_a_plugin_that_fails_to_import_is_one_line(tmp_path, monkeypatch, capsys):
    _fake_distribution(
        tmp_path,
        "broken",
        "[dapr.retrievers]\nbroken = broken_module:Thing\n",
        "raise RuntimeError('this plugin is broken')\n",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        DaprError,
        match=r"retriever 'broken' \(broken_module:Thing, from broken "
        r"1.0\) cannot be imported: RuntimeError: this plugin is broken",
    ):
        registry.retrievers.get("broken")
    assert main(["plugins"]) == 0  # the other components are still listed
    out = capsys.readouterr().out
    assert "broken" in out and "cannot load: DaprError" in out and "bm25" in out


def test_a_closed_pipe_is_one_line(tmp_path):
    import subprocess
    import sys

    done = subprocess.run(
        f"{sys.executable} -m dapr.cli plugins | head -1",
        shell=True,
        capture_output=True,
        text=True,
        executable="/bin/bash",
    )
    assert done.stdout.count("\n") == 1
    assert "Traceback" not in done.stderr and done.stderr.count("\n") <= 1


def test_installed_entry_points_are_read_again_only_after_a_change(tmp_path, monkeypatch):
    scans = []
    real = registry.entry_points
    monkeypatch.setattr(registry, "entry_points", lambda: scans.append(1) or real())
    monkeypatch.setattr(registry, "_scanned", None)
    for _ in range(3):
        assert "bm25" in registry.retrievers.names() and "convex" in registry.fusers.names()
    assert len(scans) == 1
    monkeypatch.syspath_prepend(str(tmp_path))  # a folder more on sys.path
    assert "later" not in registry.fusers.names() and len(scans) == 2
    _fake_distribution(tmp_path, "later", "[dapr.fusers]\nlater = later_module:Later\n")
    assert "later" in registry.fusers.names() and len(scans) == 3  # installed into it
