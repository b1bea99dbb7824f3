"""Training on a Ray cluster: one Ray Train worker per GPU (gloo workers on CPUs), each running
sentence-transformers' trainer on its share of every batch while the loss all-gathers the
embeddings of all workers, so that a query is scored against the passages of every worker's
batch (RocketQA's cross-batch negatives: ``workers x batch_size`` candidates per query).

The workers write checkpoints and the model into the same directory (the first worker writes),
so on several machines it must be on a file system they share, as ``$DAPR_HOME`` is for
``dapr run --ray-address``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dapr.errors import DaprError
from dapr.training.dual import Settings
from dapr.training.examples import Example


def train_on_ray(
    model: str,
    rows: Sequence[Example],
    out: Path,
    loss: str,
    settings: Settings,
    workers: int,
    gpus: bool = False,
) -> dict[str, Any]:
    """:func:`dapr.training.dual.train_dual_encoder` of the model named ``model`` on
    ``workers`` Ray Train workers (Ray must be initialised); the record the first one wrote."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    if workers < 1:
        raise DaprError(f"training: workers must be a positive integer, got {workers}")
    trainer = TorchTrainer(
        _worker,
        train_loop_config={
            "model": model,
            "rows": list(rows),
            "out": str(out),
            "loss": loss,
            "settings": settings,
        },
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=gpus),
        run_config=RunConfig(storage_path=str(out / "ray"), name="train"),
    )
    trainer.fit()
    return json.loads((out / "training.json").read_text())


def _worker(config: dict[str, Any]) -> None:
    """One Ray Train worker: the process group is set up; the trainer shards the batches."""
    from dapr.checkpoints import sentence_transformer
    from dapr.training.dual import train_dual_encoder

    model = sentence_transformer(config["model"], None, None, None)
    train_dual_encoder(
        model, config["rows"], Path(config["out"]), config["loss"], config["settings"], gather=True
    )
