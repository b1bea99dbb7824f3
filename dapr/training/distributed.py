"""Training on a Ray cluster: one Ray Train worker per GPU (gloo workers on CPUs), each running
sentence-transformers' trainer on its share of every batch while the loss all-gathers the
embeddings of all workers, so that a query is scored against the passages of every worker's
batch (RocketQA's cross-batch negatives: ``workers x batch_size`` candidates per query).

The workers write checkpoints and the model into the same directory (the first worker writes),
so on several machines it must be on a file system they share, as ``$DAPR_HOME`` is for
``dapr run --ray-address``. A worker that dies (its process killed, its node lost) takes the
worker group down; Ray Train starts a new one (up to :data:`MAX_RESTARTS` times), which resumes
from the last complete checkpoint there, and the training record counts the restarts. Each
worker notes its every start (process id, host) in ``workers/rank-<rank>.jsonl`` there.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dapr.errors import DaprError
from dapr.training.dual import Settings
from dapr.training.examples import Example

MAX_RESTARTS = 3
"""How many times a training whose worker died is started again from its last checkpoint."""
STARTS = "workers"
"""The folder, in the output directory, of each worker's starts (``rank-<rank>.jsonl``)."""


def train_on_ray(
    model: str,
    rows: Sequence[Example],
    out: Path,
    loss: str,
    settings: Settings,
    workers: int,
    gpus: bool = False,
    max_restarts: int | None = None,
) -> dict[str, Any]:
    """:func:`dapr.training.dual.train_dual_encoder` of the model named ``model`` on
    ``workers`` Ray Train workers (Ray must be initialised), started again from the last
    checkpoint up to ``max_restarts`` times when one dies; the record the first one wrote, with
    the number of workers and of restarts (also written to ``out/training.json``). ``None``:
    :data:`MAX_RESTARTS`. Past them, a one-line DaprError (the checkpoints stay to resume from)."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig, TrainingFailedError
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
        run_config=RunConfig(
            storage_path=str(out / "ray"),
            name="train",
            failure_config=FailureConfig(
                max_failures=MAX_RESTARTS if max_restarts is None else max_restarts
            ),
        ),
    )
    shutil.rmtree(out / STARTS, ignore_errors=True)  # the starts of this call only
    try:
        trainer.fit()
    except TrainingFailedError as error:
        reason = " ".join(str(error).split())[:300]
        raise DaprError(
            f"training on {workers} Ray workers failed, restarts used up ({reason}); rerun to "
            "resume from the last checkpoint"
        ) from None
    record = json.loads((out / "training.json").read_text())
    starts = (out / STARTS / "rank-0.jsonl").read_text().splitlines()
    record |= {"workers": workers, "restarts": len(starts) - 1}
    (out / "training.json").write_text(json.dumps(record, indent=2))
    return record


def _worker(config: dict[str, Any]) -> None:
    """One Ray Train worker: the process group is set up; the trainer shards the batches."""
    from ray import train

    from dapr.checkpoints import sentence_transformer
    from dapr.training.dual import seeded, train_dual_encoder

    note_start(Path(config["out"]) / STARTS, train.get_context().get_world_rank())
    seeded(config["settings"].seed)  # every worker's copy starts from the same weights
    model = sentence_transformer(config["model"], None, None, None)
    train_dual_encoder(
        model, config["rows"], Path(config["out"]), config["loss"], config["settings"], gather=True
    )


def note_start(folder: Path, rank: int) -> None:
    """Append this process's start as worker ``rank`` (process id, host, time) to
    ``folder/rank-<rank>.jsonl``: one line per start of the worker group."""
    folder.mkdir(parents=True, exist_ok=True)
    line = {"pid": os.getpid(), "host": socket.gethostname(), "time": time.time()}
    with (folder / f"rank-{rank}.jsonl").open("a") as file:
        file.write(json.dumps(line) + "\n")
