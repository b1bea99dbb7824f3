"""Training reproduces: two `dapr train` runs of one file from empty homes on the CPU give the
same bytes for every model (weights, card, tokenizer...), for a dual encoder, a binary
cross-entropy and a multiple-negatives cross-encoder, on negatives mined by BM25 and by a dense
model. The second run lists the models in the opposite order, so each trains after other work
than in the first: a cross-encoder's fresh head once started from whatever the process had
drawn before (what moved DuReader's ce-bm25 on COVID-QA when its dual encoder was retrained
in the same process)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dapr.cli import main
from dapr.experiment.train_sources import untimed

ENTRIES = {
    "repro-de": "negatives: {mined: bm25, count: 1}\n    args: {max_steps: 3, batch_size: 8}",
    "repro-bce": "kind: cross\n    negatives: {mined: bm25, count: 2}\n"
    "    args: {max_steps: 3, batch_size: 8, learning_rate: 1.0e-4}",
    "repro-mnrl": "kind: cross\n    loss: mnrl\n    negatives: {mined: de, count: 2}\n"
    "    args: {max_steps: 3, batch_size: 4, learning_rate: 1.0e-4}",
}
"""Each model's lines below its name; repro-mnrl mines with the trained repro-de."""
FILE = """
name: reproducible_training
dataset: {data}
split: test
metrics: [MRR@10]
depth: 10
train:
{entries}
retrievers:
  bm25: {{name: bm25}}
  de: {{name: dense, args: {{model: trained/repro-de, pooling: mean}}}}
"""


def experiment(data: Path, model: Path, names: list[str]) -> str:
    """The file training ``names`` in that order from ``model`` on ``data``'s dev split."""
    entries = "".join(
        f"  {name}:\n    model: {model}\n    split: dev\n    {ENTRIES[name]}\n" for name in names
    )
    return FILE.format(data=data, entries=entries)


def trained(home: Path, name: str) -> Path:
    """The model directory that ``trained/<name>`` points to under ``home``."""
    return Path(json.loads((home / "trained" / f"{name}.json").read_text())["path"])


def contents(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its relative path."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


@pytest.fixture(scope="module")
def homes(tiny_encoder, wiki_splits, tmp_path_factory) -> list[Path]:
    """Two empty homes, each given the models of one `dapr train` in this process on one thread
    (a thread count decides the last bits; the card records it): the first in ENTRIES' order,
    the second in the opposite order."""
    import torch

    threads, previous = torch.get_num_threads(), os.environ["DAPR_HOME"]
    found = []
    torch.set_num_threads(1)
    try:
        for n, names in enumerate([list(ENTRIES), list(ENTRIES)[::-1]]):
            home = tmp_path_factory.mktemp(f"repro-home-{n}")
            file = tmp_path_factory.mktemp("repro-file") / "train.yaml"
            file.write_text(experiment(wiki_splits, tiny_encoder, names))
            os.environ["DAPR_HOME"] = str(home)
            assert main(["train", str(file)]) == 0
            found.append(home)
    finally:
        os.environ["DAPR_HOME"] = previous
        torch.set_num_threads(threads)
    return found


@pytest.mark.parametrize("name", list(ENTRIES))
def test_two_trainings_from_empty_homes_give_the_same_bytes(homes, name):
    first, second = (trained(home, name) for home in homes)
    assert first.parent.name == second.parent.name  # one cache key (for repro-mnrl: one DE run)
    assert first.parent.parent != second.parent.parent
    files, again = contents(first), contents(second)
    assert {"model.safetensors", "dapr_training.json"} <= set(files)
    assert sorted(files) == sorted(again)
    for path in sorted(files, key=lambda p: p != "model.safetensors"):  # the weights first
        assert files[path] == again[path], f"{name}: {path} differs between the two trainings"


def test_the_card_says_the_threads_and_leaves_the_time_to_the_entry(homes):
    model = trained(homes[0], "repro-bce")
    card = json.loads((model / "dapr_training.json").read_text())
    assert card["threads"] == 1 and card["steps"] == 3 and "seconds" not in card
    assert json.loads((model.parent / "training.json").read_text())["seconds"] > 0


def test_untimed_drops_the_seconds_of_a_record_and_of_its_distillation():
    record = {"steps": 2, "seconds": 1.5, "distilled": {"steps": 1, "seconds": 0.4}}
    assert untimed(record) == {"steps": 2, "distilled": {"steps": 1}}
    assert record["seconds"] == 1.5  # the record itself is left as it was
