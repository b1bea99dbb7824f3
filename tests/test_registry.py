"""A third-party retriever, installed as a distribution with an entry point, is found and run."""

import json
import textwrap

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
    installed_plugin, shared_data, tmp_path, capsys
):
    assert "overlap" in registry.retrievers.names()
    assert isinstance(registry.retrievers.get("overlap")(), Retriever)
    experiment = tmp_path / "plugin.yaml"
    experiment.write_text(
        f"dataset: {shared_data / 'dapr-dump-sample' / 'NaturalQuestions'}\n"
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
