"""``dapr run``: an experiment file, locally or with its retrieval jobs on Ray."""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dapr.data import Dataset
    from dapr.experiment.schedule import Done
    from dapr.experiment.spec import Experiment


def add(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser("run", help="run an experiment file")
    plan_options(run)
    run.add_argument(
        "--profile",
        action="store_true",
        help="profile the run (cProfile): print the functions that took longest, cumulative, "
        "and write the whole profile to OUT/profile.txt",
    )
    run.add_argument(
        "--ray",
        action="store_true",
        help="run the retrieval jobs as Ray tasks on a local Ray sized to this machine",
    )
    run.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="run the retrieval jobs on the Ray cluster at ADDR (auto, or ray://host:port); "
        "$DAPR_HOME must be on a file system every node shares",
    )
    run.set_defaults(handler=_run)


def file_options(
    parser: argparse.ArgumentParser,
    example: str = "--set split=dev or --set fusion.f.args.alpha=0.3",
    file_help: str | None = None,
) -> None:
    """FILE, ``--set`` and ``--variant``: which experiments a file gives, for every command that
    reads one (``example``: the ``--set`` shown in the help)."""
    parser.add_argument("file", type=Path, help=file_help)
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a setting, e.g. {example}",
    )
    parser.add_argument(
        "--variant",
        metavar="NAME",
        help="apply the overrides the file's variants: gives NAME (e.g. full), before any --set",
    )


def plan_options(parser: argparse.ArgumentParser) -> None:
    """The arguments that decide what a run does and where its results go, shared by ``dapr
    run`` and ``dapr check``."""
    file_options(parser)
    parser.add_argument(
        "--out",
        type=Path,
        help="output directory (default results/<experiment>, and results/<experiment>@<the "
        "variant and --set overrides> when there are any)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace results of another configuration of the experiment in the output directory",
    )


def output_dir(args: argparse.Namespace, experiment: Experiment) -> Path:
    """Where the results of ``experiment`` go: ``--out``, else ``results/<experiment>`` (with
    the variant and ``--set`` overrides); one directory per dataset of a grid."""
    name, _, dataset = experiment.name.partition("/")  # a grid's experiments: <name>/<dataset>
    out = args.out or Path("results") / (name + overridden(args.overrides, args.variant))
    return out / dataset if dataset else out


def dataset_of(experiment: Experiment, file: Path) -> Dataset:
    """The experiment's dataset; where it cannot be loaded, a DaprError ``<file>: dataset:
    <why>``, as ``dapr check`` prints it."""
    from dapr.datasets import load_dataset
    from dapr.errors import DaprError

    try:
        return load_dataset(experiment.dataset, **experiment.dataset_args)
    except DaprError as error:
        raise DaprError(f"{file}: dataset: {error}") from None


def _run(args: argparse.Namespace) -> int:
    from dapr.experiment.config import load_grid
    from dapr.experiment.results import check_output
    from dapr.experiment.train_checks import check_data

    if args.ray_address:  # as dapr train does; the file's devices are then the workers'
        os.environ["RAY_ADDRESS"] = args.ray_address
    experiments = load_grid(args.file, args.overrides, args.variant)
    outs = []
    for experiment in experiments:
        outs.append(output_dir(args, experiment))
        check_output(outs[-1], experiment, args.overwrite)  # before any work
    loaded: dict[int, Dataset] = {}
    for n, experiment in enumerate(experiments):  # a train: block's data too (as dapr check)
        if experiment.train:
            loaded[n] = dataset_of(experiment, args.file)
            check_data(experiment, loaded[n], args.file)
    ran: Sequence[Sequence[Done]] = [()] * len(experiments)
    if args.ray or args.ray_address:
        ran = _run_jobs(experiments, args.ray_address)
    for n, (experiment, out, jobs) in enumerate(zip(experiments, outs, ran)):
        one = _profiled if args.profile else _run_one
        one(experiment, out, jobs, args.file, loaded.pop(n, None))
    return 0


PROFILE_LINES = 30
"""Functions the printed profile lists (the file holds them all)."""


def _profiled(
    experiment: Experiment,
    out: Path,
    jobs: Sequence[Done],
    file: Path,
    dataset: Dataset | None = None,
) -> None:
    """:func:`_run_one` under cProfile; the functions by cumulative time to stdout (the first
    :data:`PROFILE_LINES`) and to ``out/profile.txt`` (all)."""
    import cProfile
    import io
    import pstats

    from dapr.io.files import write_bytes_atomic

    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.runcall(_run_one, experiment, out, jobs, file, dataset)
    wall = time.perf_counter() - started

    def table(lines: int | None) -> str:
        text = io.StringIO()
        stats = pstats.Stats(profile, stream=text).strip_dirs().sort_stats("cumulative")
        stats.print_stats(*([lines] if lines else []))
        return f"profile of {experiment.name}: {wall:.1f} s wall\n" + text.getvalue()

    write_bytes_atomic(out / "profile.txt", [table(None).encode()])
    print(table(PROFILE_LINES))


def overridden(overrides: list[str], variant: str | None = None) -> str:
    """``@variant,key=value,...`` naming the variant and ``--set`` overrides of a run ('' without
    any), so that results of another configuration go to a folder of their own; a long list is
    cut and completed by a hash of all of it."""
    if not overrides and not variant:
        return ""
    text = ",".join(([variant] if variant else []) + list(overrides))
    safe = "".join(c if c.isalnum() or c in "-_.=,+" else "_" for c in text)
    if len(safe) > 80:
        safe = safe[:60] + "-" + hashlib.sha256(text.encode()).hexdigest()[:12]
    return "@" + safe


def _run_jobs(experiments: list[Experiment], ray_address: str | None) -> list[list[Done]]:
    """Compute every retrieval run of the experiments (and of their sweeps' tuning splits) as
    parallel Ray jobs; the experiments then find them in the cache. Returns the finished jobs
    (:class:`dapr.experiment.schedule.Done`) of each experiment."""
    from dapr.experiment.schedule import plan, run_jobs
    from dapr.store.cache import Cache

    tuning = [replace(e, split=e.sweep.tune_on) for e in experiments if e.sweep is not None]
    jobs = plan([*experiments, *tuning])
    print(f"{len(jobs)} retrieval jobs on Ray")
    finished = run_jobs(jobs, Cache(), ray_address, use_ray=True)
    started = min((done.started for done in finished), default=0.0)
    for done in finished:
        what = ", ".join(done.computed) or "all cached"
        where = done.placement
        if where is not None and where.gpus:
            what = f"gpu {','.join(where.gpus)} ({where.device})  {what}"
        if done.retried:
            what += f"  (attempt {len(done.retried) + 1}: {done.retried[-1].split(':')[0]})"
        print(
            f"  job {done.system:<20} {done.host}:{done.pid:<7} "
            f"{done.started - started:6.1f}s .. {done.finished - started:6.1f}s  {what}"
        )
    by_key = {done.key: done for done in finished}
    return [[by_key[j.key] for j in plan(_with_tuning(e))] for e in experiments]


def _with_tuning(experiment: Experiment) -> list[Experiment]:
    """``experiment``, and for a sweep the same experiment on its tuning split."""
    if experiment.sweep is None:
        return [experiment]
    return [experiment, replace(experiment, split=experiment.sweep.tune_on)]


def _run_one(
    experiment: Experiment,
    out: Path,
    jobs: Sequence[Done],
    file: Path,
    dataset: Dataset | None = None,
) -> None:
    """Run ``experiment`` of ``file`` (its retrieval ``jobs``, if they ran on Ray, in its
    manifest) on ``dataset``, loaded here unless given."""
    from dapr.experiment import results, summary, sweep
    from dapr.experiment.manifest import manifest
    from dapr.experiment.runner import Runner

    started = time.time()
    dataset = dataset or dataset_of(experiment, file)
    swept = None
    if experiment.sweep is None:
        outcome = Runner(experiment).run(dataset)
    else:
        swept = sweep.run_sweep(experiment, dataset=dataset)
        assert swept.outcome is not None  # a sweep ends by running its chosen value
        outcome = swept.outcome
    results.write(outcome, out, manifest(outcome, started, time.time(), jobs), swept)
    width = max((len(step.system) for step in outcome.steps), default=0)
    for step in outcome.steps:
        print(f"  {step.kind:<6} {step.system:<{width}}  {step.status:<8} {step.seconds:7.1f}s")
    print(f"\n{experiment.name}: {outcome.dataset.name}, split {experiment.split}\n")
    if swept is not None:
        print(sweep.markdown(swept))
    print(summary.markdown(outcome))
    if outcome.trained:
        print(summary.training_markdown(outcome.trained))
    if outcome.costs:
        print(summary.cost_markdown(summary.cost_rows(outcome.costs, outcome)))
    print(f"results written to {out}")
