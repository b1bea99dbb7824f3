"""What stops a training is found before any work, by `dapr check`, `dapr train` and `dapr run`
alike (issue 38, class 8): no model loads, no retriever mines or teaches, nothing is cached; a
model whose training needs itself is refused even where an older copy of it is in the home; and
what was refused late but can work (a reranker that mines or teaches) now works."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from bad_input_kit import BASE, DOCUMENTS, SPLITS, Kit, good_dataset
from hostile_training import TRAINING

from dapr.cli import main

REPOSITORY = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading any sentence-transformers model fails the test."""
    import sentence_transformers

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model loaded before the training was refused")

    for name in ("SentenceTransformer", "CrossEncoder"):
        monkeypatch.setattr(getattr(sentence_transformers, name), "__init__", forbidden)


def _cached(home: Path) -> list[str]:
    """Every file under ``home``'s cache: what a mining run or a training would leave."""
    cache = home / "cache"
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file())


@pytest.mark.parametrize("command", ["train", "run"])
@pytest.mark.parametrize("name", sorted(TRAINING))
def test_a_refused_training_loads_no_model_and_computes_nothing(
    name, command, no_models, tmp_path, monkeypatch, capsys
):
    home = tmp_path / "home"
    monkeypatch.setenv("DAPR_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    kit = Kit(tmp_path, tmp_path / "none")
    path = TRAINING[name](kit)
    argv = kit.run(path) if command == "run" else ["train", str(path)]
    capsys.readouterr()

    assert main(argv) == 2

    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"dapr: error: {path}: train."), err
    assert _cached(home) == []
    assert not (tmp_path / "out").exists()


def _stale_model(path: Path) -> Path:
    """A small sentence-transformers model, saved: what an older `dapr train` left."""
    from sentence_transformers import SentenceTransformer, models
    from tiny_models import tiny_bert

    texts = [p for _, passages in DOCUMENTS.values() for p in passages]
    texts += [text for queries in SPLITS.values() for text, _ in queries.values()]
    transformer = models.Transformer(str(tiny_bert(path / "bert", texts)), max_seq_length=32)
    pooling = models.Pooling(transformer.get_word_embedding_dimension(), "mean")
    SentenceTransformer(modules=[transformer, pooling], device="cpu").save(str(path / "model"))
    return path / "model"


def test_an_older_model_in_the_home_does_not_let_a_model_mine_with_itself(
    tmp_path, monkeypatch, capsys
):
    """trained/de exists from before; a file whose de is mined by a retriever that uses
    trained/de would mine with that stale copy: check, train and run refuse it, naming the loop,
    before anything is mined."""
    home = tmp_path / "home"
    monkeypatch.setenv("DAPR_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    stale = _stale_model(tmp_path / "older")
    (home / "trained").mkdir(parents=True)
    (home / "trained" / "de.json").write_text(json.dumps({"path": str(stale)}))
    kit = Kit(tmp_path, tmp_path / "none")
    mine = {"mine": {"name": "dense", "args": {"model": "trained/de"}}}
    train = {"de": {"model": str(stale), "split": "test", "negatives": {"mined": "mine"}}}
    path = kit.experiment(retrievers={**BASE["retrievers"], **mine}, train=train)
    loop = "train.de -> retrievers.mine (model: trained/de) -> train.de"

    for argv in (["check", str(path)], ["train", str(path)], kit.run(path)):
        capsys.readouterr()
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and loop in err[0], (argv, err)
    assert _cached(home) == []
    assert json.loads((home / "trained" / "de.json").read_text()) == {"path": str(stale)}


def test_models_train_after_the_models_their_training_uses(tmp_path):
    """a is mined by a retriever of trained/b, defined after it: b trains first (a would else
    mine with a missing or older b); the rest keep the file's order."""
    from dapr.experiment.config import load
    from dapr.experiment.train_checks import training_order

    systems = {**BASE["retrievers"], "rb": {"name": "dense", "args": {"model": "trained/b"}}}
    negatives = {"same_document": 1}
    raw = {
        **BASE,
        "dataset": str(good_dataset(tmp_path / "data")),
        "retrievers": systems,
        "train": {
            "first": {"split": "test"},
            "a": {"split": "test", "negatives": {"mined": "rb"}},
            "c": {"kind": "cross", "split": "test", "negatives": negatives},
            "b": {
                "split": "test",
                "negatives": {"denoise": {"model": "trained/c"}, "mined": "bm25"},
            },
        },
    }
    path = tmp_path / "order.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    experiment = load(path)
    assert training_order(experiment.train, experiment.retrievers) == ["first", "c", "b", "a"]


def test_a_reranker_mines_negatives_and_teaches_a_cross_encoder(tmp_path, monkeypatch, capsys):
    """A reranker's run needs its first stage's: mining or distilling from one once stopped with
    a KeyError traceback after the first stage ran."""
    from tiny_models import tiny_bert, trained_card

    home = tmp_path / "home"
    monkeypatch.setenv("DAPR_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    encoder = _stale_model(tmp_path / "encoder")
    texts = [p for _, passages in DOCUMENTS.values() for p in passages]
    texts += [text for queries in SPLITS.values() for text, _ in queries.values()]
    cross = tiny_bert(tmp_path / "cross", texts, head="classifier")
    kit = Kit(tmp_path, tmp_path / "none")
    rr = {"rr": {"name": "rerank", "first_stage": "bm25", "args": {"model": str(cross)}}}
    quick = {"max_steps": 1, "batch_size": 2}
    train = {
        "de": {"model": str(encoder), "split": "test", "negatives": {"mined": "rr"}, "args": quick},
        "ce": {
            "model": str(cross),
            "kind": "cross",
            "split": "test",
            "negatives": {"same_document": 1},
            "distill": {"teacher": "rr", "depth": 5, "count": 1},  # BM25 finds two a query
            "args": quick,
        },
    }
    path = kit.experiment(retrievers={**BASE["retrievers"], **rr}, train=train)
    assert main(["check", str(path)]) == 0
    capsys.readouterr()

    assert main(["train", str(path)]) == 0, capsys.readouterr().err

    assert trained_card("de")["negatives"] == {"mined": "rr"}
    assert trained_card("ce")["distilled"]["teacher_rows"] == len(SPLITS["test"])


TRAINING_FILES = sorted(
    p for p in (REPOSITORY / "experiments").glob("*.yaml") if "train:" in p.read_text()
)


@pytest.mark.parametrize("path", TRAINING_FILES, ids=lambda p: p.stem)
def test_the_training_recipes_pass_check_with_their_real_data(
    path, samples, tmp_path, monkeypatch, capsys
):
    """Each file with a train: block, on real questions where it has a variant for them (its
    sources read: COVID-QA's train split and XQuAD's, by name), passes `dapr check`."""
    import shutil

    home = tmp_path / "home"
    monkeypatch.setenv("DAPR_HOME", str(home))
    for name, sample in (("COVID-QA", "covid-qa/covid-qa.json"), ("XQuAD", "xquad/xquad.en.json")):
        (home / "raw" / name).mkdir(parents=True)  # as `dapr data build NAME --download` leaves
        shutil.copy(samples / sample, home / "raw" / name)
    monkeypatch.chdir(tmp_path)  # nothing read relative to the repository
    variants = yaml.safe_load(path.read_text()).get("variants", {})
    argv = ["check", str(path), *(["--variant", "covid-qa"] if "covid-qa" in variants else [])]
    assert main(argv) == 0, capsys.readouterr().err
    assert not (tmp_path / "home").exists() or _cached(tmp_path / "home") == []
