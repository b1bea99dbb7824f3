"""``dapr train``: the models of an experiment file's ``train:`` block, trained (or found in the
cache) and named ``trained/<name>``, without running its retrievers (``dapr run`` trains them
too, before retrieval)."""

from __future__ import annotations

import argparse
import os

from dapr.cli import run
from dapr.errors import DaprError


def add(commands: argparse._SubParsersAction) -> None:
    train = commands.add_parser(
        "train",
        help="train the models of an experiment file's train: block",
        description="Each model is stored in the cache under a hash of its starting model, data, "
        "context, negatives and settings, and named trained/<name> for retrievers "
        "(model: trained/<name>). An interrupted training resumes from its last checkpoint.",
    )
    run.file_options(
        train, "--set train.wiki-title.args.epochs=2", "an experiment file with a train: block"
    )
    train.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="train models with workers: N on the Ray cluster at ADDR (auto, or "
        "ray://host:port) instead of a local Ray; $DAPR_HOME must be on a shared file system",
    )
    train.set_defaults(handler=_train)


def _train(args: argparse.Namespace) -> int:
    from dapr.experiment.config import load_grid
    from dapr.experiment.runner import Runner
    from dapr.experiment.train_checks import check_data
    from dapr.experiment.training import train_models

    if args.ray_address:
        os.environ["RAY_ADDRESS"] = args.ray_address
    experiments = load_grid(args.file, args.overrides, args.variant)
    if not any(e.train for e in experiments):
        raise DaprError(f"{args.file}: no train: block; name the models to train under train:")
    datasets = [run.dataset_of(e, args.file) for e in experiments]
    for experiment, dataset in zip(experiments, datasets):  # every one before the first trains
        check_data(experiment, dataset, args.file)
    for experiment, dataset in zip(experiments, datasets):
        runner = Runner(experiment)
        print(f"{experiment.name}: training on {dataset.name}")
        for done in train_models(experiment, runner, dataset):
            path, card = runner.cache.path("models", done["key"]), done["card"]
            print(
                f"  trained/{done['name']:<24} {done['status']:<8} {done['seconds']:7.1f}s  "
                f"{card['examples']:,} examples, {card['steps']} steps, "
                f"loss {card['training_loss']:.4f}  ({path / 'model'})"
            )
    return 0
