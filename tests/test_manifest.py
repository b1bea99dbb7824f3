"""manifest.json: config, data, steps, keys, code version and machine of a real (tiny) run."""

import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from dapr.experiment.config import load
from dapr.experiment.manifest import git_revision, manifest, plain
from dapr.experiment.runner import Runner
from dapr.store.cache import Cache

REPO = Path(__file__).resolve().parents[1]
BODY = """
metrics: [nDCG@10]
depth: 20
retrievers:
  bm25-passage: {name: bm25}
  bm25-title: {name: bm25, contextualizer: title}
"""


@pytest.fixture(scope="module")
def run(wiki_slice, tmp_path_factory):
    dataset, _ = wiki_slice
    folder = tmp_path_factory.mktemp("manifest")
    path = folder / "tiny.yaml"
    path.write_text(f"dataset: {dataset}\n{BODY}")
    experiment = load(path)
    started = time.time()
    outcome = Runner(experiment, Cache(folder / "cache")).run()
    finished = time.time()
    return outcome, started, finished, manifest(outcome, started, finished)


def test_manifest_names_config_data_steps_and_keys(run):
    outcome, started, finished, m = run
    assert json.loads(json.dumps(m, allow_nan=False)) == m
    config = m["experiment"]
    assert config["name"] == "tiny" and config["depth"] == 20
    assert config["metrics"] == ["nDCG@10"]
    assert config["retrievers"]["bm25-title"]["contextualizer"] == [{"name": "title", "args": {}}]
    assert config["retrievers"]["bm25-passage"]["level"] == "passage"
    assert m["dataset"] == "wiki-slice" == outcome.dataset.name
    assert m["dataset_fingerprint"] == outcome.dataset.fingerprint
    assert m["split"] == "test"
    assert [(s["kind"], s["system"], s["status"]) for s in m["steps"]] == [
        (s.kind, s.system, s.status) for s in outcome.steps
    ]
    assert {s["kind"] for s in m["steps"]} == {"index", "search"}
    assert all(s["status"] == "computed" and s["seconds"] > 0 for s in m["steps"])
    assert m["keys"] == outcome.keys and set(m["keys"]) == {"bm25-passage", "bm25-title"}
    assert m["wall_seconds"] == pytest.approx(finished - started)
    assert sum(s["seconds"] for s in m["steps"]) <= m["wall_seconds"]
    begun = datetime.fromisoformat(m["started"])
    assert begun.utcoffset().total_seconds() == 0
    assert abs(begun.timestamp() - started) < 0.001
    assert datetime.fromisoformat(m["finished"]) >= begun


def test_manifest_names_packages_code_and_machine(run):
    *_, m = run
    packages = m["packages"]
    assert packages["dapr"] == importlib.metadata.version("dapr-ir")
    assert packages["numpy"] == importlib.metadata.version("numpy")  # the run used numpy
    assert packages["pytrec-eval-terrier"] == importlib.metadata.version("pytrec-eval-terrier")
    assert ("torch" in packages) == ("torch" in sys.modules)
    assert "ray" not in packages or "ray" in sys.modules
    assert m["python"] == platform.python_version()
    assert m["hardware"]["cpus"] == os.cpu_count()
    with open("/proc/meminfo") as meminfo:  # MemTotal is in kiB and a little below physical
        total = int(meminfo.readline().split()[1]) * 1024
    assert 0.9 < total / m["hardware"]["memory_bytes"] <= 1
    assert isinstance(m["hardware"]["gpus"], list)
    assert m["hostname"] and m["platform"]


def test_git_revision_is_the_checkouts_head(run):
    *_, m = run
    if shutil.which("git") is None:
        assert m["git"] is None
        return
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}

    def git(*args):
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, env=env)

    head = git("rev-parse", "HEAD")
    if head.returncode:
        assert m["git"] is None
        return
    assert m["git"]["revision"] == head.stdout.strip()
    assert len(m["git"]["revision"]) == 40
    changed = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    assert m["git"]["dirty"] == bool(changed)


def test_no_checkout_or_no_git_gives_none(tmp_path, monkeypatch):
    (tmp_path / "__init__.py").write_text("")
    assert git_revision(tmp_path) is None
    monkeypatch.setenv("PATH", str(tmp_path))  # no git executable on the path
    assert git_revision(REPO / "dapr") is None


def test_plain_makes_anything_json():
    value = {"p": Path("/x"), "t": (1, {2}), "n": float("nan"), 3: None}
    assert plain(value) == {"p": "/x", "t": [1, [2]], "n": "nan", "3": None}
