"""``dapr check``: validate an experiment file and print its plan, without running anything.

The plan is what ``dapr run`` with the same options would do: its steps, each ``cached`` (in
``$DAPR_HOME``'s cache) or to be ``computed``, the dataset and models it needs and whether they
are on this machine, and the output directory. The cache keys come from the runner's own key
functions (:mod:`dapr.experiment.plan`). Problems that would stop the run are one line each on
stderr, and the exit status is then 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from dapr.cli import run

if TYPE_CHECKING:
    from dapr.data import Dataset
    from dapr.experiment.estimate import Estimate
    from dapr.experiment.plan import Planned
    from dapr.experiment.spec import Experiment


def add(commands: argparse._SubParsersAction) -> None:
    check = commands.add_parser(
        "check",
        help="validate an experiment file and print its plan (cached and computed steps, "
        "models, dataset, output) without running it",
    )
    run.plan_options(check)
    check.add_argument(
        "--cost",
        action="store_true",
        help="also estimate each step's time, peak memory and disk on --device, and the sum",
    )
    check.add_argument(
        "--device",
        default="cpu:2",
        metavar="DEVICE",
        help="the machine --cost prices for: cpu:N (N cores), h100, h200 or v100 (default cpu:2)",
    )
    check.add_argument(
        "--devices",
        type=int,
        default=1,
        metavar="N",
        help="how many such devices share the jobs of the file (--cost; default 1)",
    )
    check.set_defaults(handler=_check)


def _check(args: argparse.Namespace) -> int:
    from dapr.errors import ConfigError
    from dapr.experiment.config import raw_grid
    from dapr.experiment.validate import validate

    problems: list[str] = []
    experiments: list[Experiment] = []
    if args.cost:  # the machine is checked before any work
        from dapr.errors import DaprError
        from dapr.experiment.pricing import device_rates

        try:
            device_rates(args.device)
            if args.devices < 1:
                raise DaprError(f"--devices {args.devices}: give at least 1")
        except DaprError as error:
            print(f"dapr: error: {args.file}: {error}", file=sys.stderr)
            return 2
    for raw in raw_grid(args.file, args.overrides, args.variant):
        try:
            experiments.append(validate(raw, args.file))
        except ConfigError as error:  # each experiment of a grid on its own line
            problems.append(str(error))
    costs: list[Estimate] = []
    from dapr.datasets.record import read_only

    with read_only():  # a corpus record is used, never written: check writes nothing
        for n, experiment in enumerate(experiments):
            if n:
                print()
            problems += _show(experiment, args, costs)
    if args.cost and len(costs) > 1:
        from dapr.experiment.estimate import FileEstimate, render_file

        print()
        print(render_file(FileEstimate(str(args.file), args.device, args.devices, costs)))
    for problem in dict.fromkeys(problems):
        print(f"dapr: error: {problem}", file=sys.stderr)
    return 2 if problems else 0


def _show(experiment: Experiment, args: argparse.Namespace, costs: list[Estimate]) -> list[str]:
    """Print the plan of one experiment (with ``--cost``, its cost, added to ``costs``); its
    problems, one line each."""
    from dapr.errors import DaprError
    from dapr.experiment import plan
    from dapr.experiment.results import METRICS, check_output
    from dapr.experiment.train_checks import readable_now, training_problems
    from dapr.store.cache import Cache

    path, problems = args.file, []
    out = run.output_dir(args, experiment)
    try:
        check_output(out, experiment, args.overwrite)
        state = "replaces the results there" if (out / METRICS).is_file() else "new"
    except DaprError as error:
        problems.append(str(error))
        state = "cannot be written, see below"
    source = plan.dataset_source(experiment)
    offline = {True: "offline", False: "needs the hub", None: "offline if already downloaded"}
    dataset = None
    if source.readable:
        try:
            dataset = run.dataset_of(experiment, path)
        except DaprError as error:
            problems.append(str(error))
    if dataset is None:
        steps = _unknown(experiment, "known once the dataset is read")
    else:
        found = plan.plan_steps(experiment, dataset, Cache().has)
        steps = found.steps
        problems += [f"{path}: {problem}" for problem in found.problems]
        readable = readable_now(experiment)  # a source dapr would build or download: unread
        problems += [f"{path}: {p}" for p in training_problems(experiment, dataset, readable)]

    print(f"{experiment.name} ({path}), split {experiment.split}")
    print(f"  dataset  {experiment.dataset}: {source.what} ({offline[source.offline]})")
    print(f"  output   {out} ({state})")
    for model, users in plan.models_needed(experiment).items():
        named = ", ".join(users[:2]) + (f" and {len(users) - 2} more" if len(users) > 2 else "")
        print(f"  model    {model} ({named}): {_where(model, experiment)}")
    width = max((len(step.system) for step in steps), default=0)
    print("  steps")
    for step in steps:
        line = f"    {step.kind:<6} {step.system:<{width}}  {step.status:<8}"
        extra = "  ".join(part for part in (step.entry, step.note) if part)
        print(f"{line}  {extra}".rstrip())
    counts = {status: sum(s.status == status for s in steps) for status in STATUSES}
    print("  " + ", ".join(f"{n} {s}" for s, n in counts.items() if n or s != "unknown"))
    if args.cost:
        problems += _cost(experiment, dataset, steps, args, costs)
    return problems


def _cost(
    experiment: Experiment,
    dataset: Dataset | None,
    steps: list[Planned],
    args: argparse.Namespace,
    costs: list[Estimate],
) -> list[str]:
    """Print what the steps cost on ``args.device``: priced from the dataset's statistics when
    it was read, else cold from the paper's Table 1."""
    from dapr.datasets.stats import dataset_stats
    from dapr.errors import DaprError
    from dapr.experiment import estimate
    from dapr.experiment.sizes import stats_sizes, table1_sizes

    try:
        if dataset is not None:
            sizes = stats_sizes(dataset_stats(dataset), experiment.split)
        else:
            sizes = table1_sizes(experiment.dataset, experiment.split)
            steps = estimate.cold_steps(experiment)
    except DaprError as error:  # not a problem of the run: it builds or fetches the dataset
        print(f"  cost     not known until the dataset is here: {error}")
        return []
    found = estimate.estimate(experiment, steps, sizes, args.device)
    costs.append(found)
    print("\n".join(estimate.render(found)))
    return []


STATUSES = ("computed", "cached", "unknown")


def _unknown(exp: Experiment, why: str) -> list[Planned]:
    """The steps of a plan whose keys cannot be known yet: one per system."""
    from dapr.experiment.plan import Planned

    steps: list[Planned] = [
        Planned("train", name, "unknown", note="decided when run") for name in exp.train
    ]
    steps += [
        Planned("rerank" if spec.first_stage else "search", system, "unknown", note=why)
        for system, spec in exp.retrievers.items()
    ]
    return steps + [Planned("fuse", system, "unknown", note=why) for system in exp.fusion]


def _where(model: str, experiment: Experiment) -> str:
    """Whether ``model`` is on this machine, and where."""
    import importlib.util

    from dapr.checkpoints import offline_copy
    from dapr.experiment.plan import pinned_revisions, spacy_pipelines, trained_here

    if trained_here(model, experiment):
        return "trained first by this file's train: block"
    if model in spacy_pipelines(experiment):  # a pip package, never a hub download
        from dapr.contextualizers.spacy_models import installed_name

        package = installed_name(model)
        if importlib.util.find_spec(package) is not None:
            return f"offline, the installed package {package}"
        return f"not installed; a pip package, not on the hub (`python -m spacy download {model}`)"
    found = offline_copy(model, pinned_revisions(experiment).get(model))
    if found is not None:
        return f"offline, {Path(found)}"
    return "not on this machine; the run downloads it from the hub (offline it fails)"
