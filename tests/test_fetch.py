"""``dapr fetch``: everything an experiment file needs, downloaded ahead for offline compute nodes.

No network: the hub (``huggingface_hub.snapshot_download``), the DAPR dataset fetch and the raw
file download are fakes that record their calls and write files where the real ones would, so
that ``dapr check`` afterwards finds what was "downloaded" as the real ones leave it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dapr.cli import main

FILE = """
name: fetch-test
dataset: ConditionalQA
split: test
retrievers:
  missing: {name: dense, args: {model: org/missing}}
  minilm: {name: dense}
  encoder: {name: dense, args: {model: org/encoder}}
  encoder-again: {name: dense, args: {model: org/encoder, max_length: 64}}
  pinned: {name: dense, args: {model: org/pinned, revision: v2}}
  mine: {name: dense, args: {model: trained/mine}}
  placed: {name: dense, args: {model: org/placed}}
train:
  mine:
    model: org/start
    sources: [{split: train}, {dataset: XQuAD, split: test}]
"""


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xquad_en: Path) -> dict[str, list]:
    """A home of its own, and fakes of the hub, the DAPR dataset fetch and the raw download,
    recording their calls under ``hub``, ``published`` and ``raw``."""
    import huggingface_hub

    from dapr.data import Corpus, Dataset, Document, Passage, Split
    from dapr.datasets import download, published, write_dataset

    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    calls: dict[str, list] = {"hub": [], "published": [], "raw": []}
    hub = tmp_path / "hub"

    def snapshot_download(repo_id: str, revision: str | None = None, **kwargs) -> str:
        path = hub / repo_id.replace("/", "--") / (revision or "main")
        if kwargs.get("local_files_only"):
            if not path.is_dir():
                raise huggingface_hub.errors.LocalEntryNotFoundError("not in the cache")
            return str(path)
        calls["hub"].append((repo_id, revision))
        if repo_id == "org/missing":
            raise huggingface_hub.errors.RepositoryNotFoundError(
                "401 Client Error. Repository Not Found for url: https://huggingface.co/org/missing"
                "\nPlease make sure you specified the correct `repo_id`."
            )
        path.mkdir(parents=True)
        (path / "model.safetensors").write_bytes(b"\0" * 3_000_000)
        return str(path)

    def fetch_published(name: str, out: Path, repo: str = "", snapshot=None) -> Path:
        calls["published"].append((name, repo))
        passages = [Passage(f"d-{n}", "d", n, f"text {n}") for n in range(3)]
        split = Split({"q": "text"}, {"q": {"d-1": 1}})
        write_dataset(Dataset(name, Corpus([Document("d", "D", passages)]), {"test": split}), out)
        return out

    def fetch(url: str, target: Path, sha256: str | None = None, quiet: bool = False) -> Path:
        calls["raw"].append(url)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(xquad_en, target)
        return target

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr(published, "fetch_published", fetch_published)
    monkeypatch.setattr(download, "fetch", fetch)
    placed = tmp_path / "home" / "models" / "org__placed"  # a copy the user put there
    placed.mkdir(parents=True)
    (placed / "config.json").write_text("{}")
    return calls


@pytest.fixture
def experiment(tmp_path: Path) -> Path:
    path = tmp_path / "fetch-test.yaml"
    path.write_text(FILE)
    return path


def test_list_downloads_nothing(fake, experiment: Path, capsys):
    assert main(["fetch", str(experiment), "--list"]) == 0
    out = capsys.readouterr().out
    assert fake == {"hub": [], "published": [], "raw": []}
    assert "dataset ConditionalQA: to download from the hub dataset UKPLab/dapr" in out
    assert "model org/encoder: to download from the hub" in out
    assert "model trained/mine: trained by the file's train: block" in out
    assert "9 items: 2 already here, 1 trained by the file, 6 to download" in out


def test_fetch_skips_what_is_here_or_trained_fetches_each_once_and_reports_a_failure(
    fake, experiment: Path, capsys
):
    assert main(["fetch", str(experiment)]) == 2
    out, err = capsys.readouterr()
    # every other item still fetched, each once (org/encoder is named by two retrievers)
    assert sorted(fake["hub"]) == [
        ("org/encoder", None),
        ("org/missing", None),
        ("org/pinned", "v2"),
        ("org/start", None),
    ]
    assert fake["published"] == [("ConditionalQA", "UKPLab/dapr")]
    assert len(fake["raw"]) == 1 and fake["raw"][0].endswith("xquad.en.json")
    # the failure: one line naming the item and the hub's first line, no traceback
    assert err.splitlines() == [
        "dapr: error: model org/missing: not downloaded (401 Client Error. Repository Not "
        "Found for url: https://huggingface.co/org/missing)"
    ]
    assert "model org/encoder: downloaded (2.9 MiB)" in out
    assert "model org/placed: already here" in out and "org__placed" in out
    assert "model sentence-transformers/all-MiniLM-L6-v2: already here" in out
    assert "dataset XQuAD: downloaded into" in out and "built into" in out
    assert "5 downloaded, 1 failed" in out and "HF_HUB_OFFLINE=1 set" not in out

    # a rerun fetches only what failed, and says nothing is left once it is there
    fake["hub"].clear()
    assert (
        main(["fetch", str(experiment), "--set", "retrievers.missing.args.model=org/encoder"]) == 0
    )
    out = capsys.readouterr().out
    assert fake["hub"] == [] and fake["published"] == [("ConditionalQA", "UKPLab/dapr")]
    assert "model org/encoder: already here" in out
    assert "compute nodes can now run this file with HF_HUB_OFFLINE=1 set" in out


def test_after_fetch_check_reports_the_dataset_and_models_offline(fake, experiment, capsys):
    main(["fetch", str(experiment)])
    capsys.readouterr()
    main(["check", str(experiment)])
    out = capsys.readouterr().out
    assert "dataset  ConditionalQA: prepared in" in out and "(offline)" in out
    for model in ("org/encoder", "org/start", "org/placed", "org/pinned"):  # v2 where pinned
        line = next(line for line in out.splitlines() if f"model    {model} " in line)
        assert ": offline, " in line
    assert "org/missing (retrievers.missing): not on this machine" in out


def test_what_dapr_cannot_download_gets_its_line(fake, tmp_path: Path, capsys):
    path = tmp_path / "other.yaml"
    path.write_text(
        "dataset: irds:beir/scifact\n"
        "retrievers:\n"
        "  kp: {name: dense, contextualizer: {name: keyphrases, args: {spacy_model: xx_sm}}}\n"
        "  elsewhere: {name: dense, args: {model: trained/elsewhere}}\n"
    )
    assert main(["fetch", str(path)]) == 0
    out = capsys.readouterr().out
    assert fake["hub"] == []
    assert "`dapr data stats irds:beir/scifact`" in out
    assert "model xx_sm: a pip package, not on the hub: run `python -m spacy download xx_sm`" in out
    assert "model trained/elsewhere: not trained yet" in out
    assert "once the 3 items to do by hand are done" in out


def test_fetch_refuses_to_start_with_the_hub_offline(fake, experiment, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["fetch", str(experiment)]) == 2
    assert "HF_HUB_OFFLINE is set here" in capsys.readouterr().err
    assert fake == {"hub": [], "published": [], "raw": []}


def test_coref_names_its_checkpoint_and_spacy_pipeline(fake, tmp_path: Path, capsys):
    """coref's signature hides its models behind ``__new__``: it says them itself, per backend."""
    path = tmp_path / "coref.yaml"
    path.write_text(
        "dataset: ConditionalQA\nretrievers:\n"
        "  neural: {name: bm25, contextualizer: {name: coref}}\n"
        "  rules: {name: bm25, contextualizer: {name: coref, args: {backend: rules}}}\n"
    )
    assert main(["fetch", str(path), "--list"]) == 0
    out = capsys.readouterr().out
    assert "model biu-nlp/f-coref: to download from the hub" in out
    spacy = next(line for line in out.splitlines() if line.startswith("model en_core_web_sm: "))
    assert "pip package" in spacy or "installed package" in spacy  # never the hub
    main(["check", str(path)])
    out = capsys.readouterr().out
    assert "model    biu-nlp/f-coref (retrievers.neural)" in out
    assert "model    en_core_web_sm (retrievers.neural, retrievers.rules)" in out


def test_check_and_fetch_tell_spacy_pipelines_from_hub_models_by_one_rule(
    fake, tmp_path: Path, capsys
):
    """`spacy_pipelines` decides for both: what a `spacy_model` argument names (any name) and
    what coref names in spaCy's package form are pip packages, never hub downloads; a hub id,
    even one that is a Python identifier, is the hub's; the stand-ins are pipelines."""
    from dapr.contextualizers.spacy_models import STAND_INS, is_pipeline_name
    from dapr.experiment.config import load_grid
    from dapr.experiment.plan import spacy_pipelines

    pipelines = ["en_core_web_sm", "xx_ent_wiki_sm", "de_core_news_lg", *STAND_INS.values()]
    assert all(is_pipeline_name(name) for name in pipelines) and "en_core_web_sm" in STAND_INS
    hub_ids = ["gpt2", "bert-base-uncased", "biu-nlp/f-coref", "all-MiniLM-L6-v2", "org/en_x_sm"]
    assert not any(is_pipeline_name(name) for name in hub_ids)
    path = tmp_path / "spacy.yaml"
    path.write_text(
        "dataset: ConditionalQA\nretrievers:\n"
        "  kp: {name: bm25, contextualizer: {name: keyphrases, args: {spacy_model: Mine}}}\n"
        "  cr: {name: bm25, contextualizer: {name: coref, args: {backend: rules}}}\n"
        "  hub: {name: dense, args: {model: gpt2}}\n"
    )
    [experiment] = load_grid(path, (), None)
    assert spacy_pipelines(experiment) == {"Mine", "en_core_web_sm"}
    assert main(["check", str(path)]) == 0
    check = capsys.readouterr().out
    assert main(["fetch", str(path), "--list"]) == 0
    fetch = capsys.readouterr().out
    assert "model    Mine (retrievers.kp): not installed; a pip package, not on the hub" in check
    assert "model Mine: a pip package, not on the hub" in fetch
    assert "gpt2 (retrievers.hub): not on this machine; the run downloads it from the hub" in check
    assert "model gpt2: to download from the hub" in fetch
    spacy = [line for line in (check + fetch).splitlines() if "en_core_web_sm" in line]
    assert len(spacy) == 2 and all("package" in line for line in spacy), spacy
