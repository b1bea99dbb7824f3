"""``dapr contextualize``: fill the contextualization cache and report the cost (Table 6)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import yaml

from dapr.errors import DaprError


def add(commands: argparse._SubParsersAction) -> None:
    context = commands.add_parser(
        "contextualize",
        help="contextualize a corpus (or a sample of it) and report the cost",
        description="Fills the contextualization cache that `dapr run` reuses, and prints the "
        "speed and the time the whole corpus takes (the DAPR paper's Table 6).",
    )
    context.add_argument("dataset", help="a registered dataset or a dataset directory")
    context.add_argument(
        "-c",
        "--contextualizer",
        dest="steps",
        action="append",
        required=True,
        metavar="STEP",
        help="a contextualizer name or a YAML mapping, e.g. -c title or "
        "-c '{name: keyphrases, args: {backend: pke}}'; repeat to chain steps in order",
    )
    context.add_argument(
        "--sample", type=int, help="only this many documents, spread evenly over the corpus"
    )
    context.add_argument("--workers", type=int, help="worker processes (default: every core)")
    context.set_defaults(handler=_contextualize)


def parse_steps(texts: list[str], flag: str) -> tuple:
    """Contextualizer steps given on the command line: names or YAML mappings."""
    from dapr.experiment.validate import context_steps

    try:
        raw = [yaml.safe_load(step) for step in texts]
    except yaml.YAMLError:
        raise DaprError(f"{flag}: not a name or a YAML mapping {{name, args}}") from None
    return context_steps(raw, Path(flag), "steps")


def _contextualize(args: argparse.Namespace) -> int:
    from dapr.datasets import load_dataset
    from dapr.experiment import summary
    from dapr.experiment.contextualize import sample_cost

    steps = parse_steps(args.steps, "--contextualizer")
    for flag, value in (("--sample", args.sample), ("--workers", args.workers)):
        if value is not None and value < 1:
            raise DaprError(f"{flag} must be a positive integer, got {value}")
    dataset = load_dataset(args.dataset)
    workers = args.workers or os.cpu_count() or 1
    cost = sample_cost(dataset, steps, args.sample, workers)
    print(summary.cost_markdown(summary.cost_rows({dataset.name: cost}, of="dataset")), end="")
    return 0
