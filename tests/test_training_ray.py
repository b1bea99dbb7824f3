"""Cross-batch negatives on Ray Train: two gloo workers, each scoring its queries against the
passages of both workers' batches, give the loss of one process over the whole batch (what the
gradient-cached loss computes on a single device); a whole training runs on the workers, and goes
on from its last checkpoint when one of them is killed mid-epoch."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from dapr.training.examples import Example

pytest.importorskip("ray")
B = 4  # examples per worker
ROWS = [
    Example(f"question {i} on topic {i % 3}", f"passage {i} on topic {i % 3}") for i in range(2 * B)
]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from sentence_transformers import SentenceTransformer, models
    from tiny_models import tiny_bert

    root = tmp_path_factory.mktemp("tiny-ray")
    bert = tiny_bert(root / "bert", [r.query + " " + r.positive for r in ROWS], hidden=32)
    transformer = models.Transformer(str(bert), max_seq_length=32)
    pooling = models.Pooling(transformer.get_word_embedding_dimension(), "mean")
    SentenceTransformer(modules=[transformer, pooling], device="cpu").save(str(root / "model"))
    return root / "model"


def _loss_worker(config: dict) -> None:
    """Each worker: the loss of its half of the batch, with embeddings gathered across workers."""
    import torch
    from ray import train

    from dapr.checkpoints import sentence_transformer
    from dapr.training.dual import Settings, make_loss

    rank = train.get_context().get_world_rank()
    model = sentence_transformer(config["model"], None, None, "cpu")
    loss = make_loss("mnrl", model, Settings(), gather=True)
    seen = []
    similarity = loss.similarity_fct
    loss.similarity_fct = lambda a, b: seen.append(list(b.shape)) or similarity(a, b)
    mine = config["rows"][rank * B : (rank + 1) * B]
    features = [model.tokenize([r.query for r in mine]), model.tokenize([r.positive for r in mine])]
    with torch.no_grad():
        value = loss(features, torch.zeros(len(mine))).item()
    Path(config["out"], f"rank-{rank}.json").write_text(json.dumps({"loss": value, "seen": seen}))


def test_each_worker_scores_the_passages_of_both_and_matches_the_cached_loss(
    local_ray, tiny_model, tmp_path
):
    import torch
    from ray import cloudpickle
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from dapr.checkpoints import sentence_transformer
    from dapr.training.dual import Settings, make_loss

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests
    TorchTrainer(
        _loss_worker,
        train_loop_config={"model": str(tiny_model), "rows": ROWS, "out": str(tmp_path)},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
        run_config=RunConfig(storage_path=str(tmp_path / "ray"), name="loss"),
    ).fit()
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(2)]
    # each worker's queries met 2 x B candidates: its own passages and the other worker's
    assert all(r["seen"] == [[2 * B, 32]] for r in ranks)
    # one process, the whole batch, encoded in mini-batches of 2 (gradient caching)
    model = sentence_transformer(str(tiny_model), None, None, "cpu")
    cached = make_loss("cached_mnrl", model, Settings(mini_batch_size=2))
    features = [model.tokenize([r.query for r in ROWS]), model.tokenize([r.positive for r in ROWS])]
    whole = cached(features, torch.zeros(len(ROWS))).item()
    assert sum(r["loss"] for r in ranks) / 2 == pytest.approx(whole, rel=1e-5)
    # and it is not the loss of each half alone (in-batch negatives of B only)
    alone = make_loss("mnrl", model, Settings())
    half = alone(
        [
            model.tokenize([r.query for r in ROWS[:B]]),
            model.tokenize([r.positive for r in ROWS[:B]]),
        ],
        torch.zeros(B),
    ).item()
    assert half != pytest.approx(ranks[0]["loss"], rel=1e-3)


def test_a_training_runs_on_two_workers_and_the_first_writes_the_model(
    local_ray, tiny_model, tmp_path
):
    from dapr.training.distributed import train_on_ray
    from dapr.training.dual import Settings

    record = train_on_ray(
        str(tiny_model), ROWS * 2, tmp_path, "mnrl", Settings(batch_size=B, max_steps=2), workers=2
    )
    assert record["steps"] == 2 and record["examples"] == 2 * len(ROWS)
    assert (tmp_path / "model" / "config.json").is_file()


RAY_EXPERIMENT = """
name: ray_training
dataset: wiki-sample
dataset_args: {{train_articles: 0.3}}
train:
  on-workers:
    model: {model}
    workers: 2
    negatives: {{mined: dense, count: 1}}
    args: {{max_steps: 2, batch_size: 4}}
retrievers:
  dense: {{name: dense, args: {{model: {model}, pooling: mean}}}}
"""


def test_dapr_train_runs_a_train_block_on_ray_workers_with_dense_mined_negatives(
    local_ray, tiny_model, tmp_path, capsys
):
    from tiny_models import trained_card

    from dapr.cli import main

    file = tmp_path / "ray.yaml"
    file.write_text(RAY_EXPERIMENT.format(model=tiny_model))
    assert main(["train", str(file)]) == 0
    assert "trained/on-workers" in capsys.readouterr().out
    card = trained_card("on-workers")
    # two workers of 4 examples a step; each example with one dense-mined negative
    assert card["steps"] == 2 and card["negatives_per_example"] == 1
    assert card["negatives"] == {"mined": "dense", "count": 1}


RESTARTED = """
name: ray_restart
dataset: wiki-sample
dataset_args: {{train_articles: 0.3}}
train:
  restarted:
    model: {model}
    workers: 2
    args: {{max_steps: {steps}, batch_size: 4, save_steps: 2}}
retrievers:
  dense: {{name: dense, args: {{model: {model}, pooling: mean}}}}
"""


def _kill_a_worker(models: Path, after: int, killed: list, done: threading.Event) -> None:
    """Once the training under ``models`` has a complete checkpoint ``after``, SIGKILL the
    process of its second worker (as its start noted it); its pid goes to ``killed``."""
    checkpoint = f".*.partial/checkpoints/checkpoint-{after}/trainer_state.json"
    while not done.wait(0.02):
        for state in models.glob(checkpoint):
            starts = state.parents[2] / "workers" / "rank-1.jsonl"
            pid = json.loads(starts.read_text().splitlines()[-1])["pid"]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return


def test_a_killed_training_worker_is_restarted_from_the_last_checkpoint(
    local_ray, tiny_model, dapr_home, tmp_path
):
    from tiny_models import trained_card

    from dapr.cli import main

    steps = 40
    file = tmp_path / "restart.yaml"
    file.write_text(RESTARTED.format(model=tiny_model, steps=steps))
    killed: list[int] = []
    done = threading.Event()
    models = dapr_home / "cache" / "models"
    killer = threading.Thread(target=_kill_a_worker, args=(models, 4, killed, done))
    killer.start()
    try:
        assert main(["train", str(file)]) == 0
    finally:
        done.set()
        killer.join(timeout=10)
    assert killed, "the training finished before a worker could be killed"
    card = trained_card("restarted")
    # one restart, from a complete checkpoint at or after the one the kill waited for
    assert card["workers"] == 2 and card["restarts"] == 1
    assert card["resumed"] and 4 <= card["resumed_from"] < steps
    assert card["steps"] == steps  # a complete model
    entry = Path(json.loads((dapr_home / "trained" / "restarted.json").read_text())["path"])
    starts = (entry.parent / "workers" / "rank-1.jsonl").read_text().splitlines()
    pids = [json.loads(line)["pid"] for line in starts]
    assert len(pids) == 2 and pids[0] == killed[0] != pids[1]


def test_a_worker_lost_past_the_restarts_ends_training_in_one_line(
    local_ray, tiny_model, dapr_home, tmp_path, monkeypatch, capsys
):
    from dapr.cli import main
    from dapr.training import distributed

    monkeypatch.setattr(distributed, "MAX_RESTARTS", 0)
    file = tmp_path / "no-restart.yaml"
    # 42 steps: another model than the restarted test's, so nothing is found cached
    file.write_text(RESTARTED.format(model=tiny_model, steps=42).replace("restarted", "lost"))
    killed: list[int] = []
    done = threading.Event()
    killer = threading.Thread(
        target=_kill_a_worker, args=(dapr_home / "cache" / "models", 4, killed, done)
    )
    killer.start()
    try:
        assert main(["train", str(file)]) == 2
    finally:
        done.set()
        killer.join(timeout=10)
    assert killed
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("dapr: error: training on 2 Ray workers failed, restarts used up")
    assert lines[-1].endswith("rerun to resume from the last checkpoint")
