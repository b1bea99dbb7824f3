"""The ``dapr`` command."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dapr.errors import DaprError


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except DaprError as error:
        print(f"dapr: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dapr: interrupted; finished steps are cached, rerun to resume", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dapr", description="Document-aware passage retrieval")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run an experiment file")
    run.add_argument("file", type=Path)
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting, e.g. --set split=dev or --set fusion.f.args.alpha=0.3",
    )
    run.add_argument("--out", type=Path, help="output directory (default results/<experiment>)")
    run.set_defaults(handler=_run)

    data = commands.add_parser("data", help="list, build, fetch, inspect and export datasets")
    data_commands = data.add_subparsers(required=True, metavar="ACTION")
    listing = data_commands.add_parser("list", help="every registered dataset and its source")
    listing.set_defaults(handler=_list)
    build = data_commands.add_parser("build", help="build a dataset from its raw files")
    build.add_argument("name", help="a registered dataset, e.g. NaturalQuestions")
    build.add_argument("--source", type=Path, required=True, help="directory of the raw files")
    build.add_argument("--out", type=Path, help="default: the dataset's prepared copy")
    build.add_argument("--format", choices=("jsonl", "parquet"), default="parquet")
    build.add_argument(
        "--set",
        dest="options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a build option, e.g. --set tagged=true for ConditionalQA",
    )
    build.add_argument(
        "--download", action="store_true", help="download missing raw files into --source"
    )
    build.set_defaults(handler=_build)
    fetch = data_commands.add_parser("fetch", help="fetch a prebuilt dataset from the hub")
    fetch.add_argument("name", help="a dataset of the DAPR benchmark, e.g. ConditionalQA")
    fetch.add_argument(
        "--from",
        dest="snapshot",
        type=Path,
        help="a local copy of the hub repository (huggingface-cli download ... --local-dir)",
    )
    fetch.set_defaults(handler=_fetch)
    stats = data_commands.add_parser("stats", help="print dataset statistics")
    stats.add_argument("name", help="a registered dataset or a dataset directory")
    stats.add_argument("--json", action="store_true", help="print one JSON object")
    stats.set_defaults(handler=_stats)
    export = data_commands.add_parser("export", help="write a dataset in the hub layout")
    export.add_argument("name", help="a registered dataset or a dataset directory")
    export.add_argument("--out", type=Path, required=True)
    export.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    export.set_defaults(handler=_export)

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

    plugins = commands.add_parser("plugins", help="list the installed components")
    plugins.set_defaults(handler=_plugins)
    return parser


def _run(args: argparse.Namespace) -> int:
    from dapr import report
    from dapr.experiment.config import load
    from dapr.experiment.runner import Runner

    experiment = load(args.file, args.overrides)
    outcome = Runner(experiment).run()
    out = args.out or Path("results") / experiment.name
    report.write(outcome, out)
    width = max((len(step.system) for step in outcome.steps), default=0)
    for step in outcome.steps:
        print(f"  {step.kind:<6} {step.system:<{width}}  {step.status:<8} {step.seconds:7.1f}s")
    print(f"\n{experiment.name}: {outcome.dataset.name}, split {experiment.split}\n")
    print(report.markdown(outcome))
    if outcome.costs:
        print(report.cost_markdown(report.cost_rows(outcome.costs, outcome)))
    print(f"results written to {out}")
    return 0


def _contextualize(args: argparse.Namespace) -> int:
    import os

    import yaml

    from dapr import report
    from dapr.contextualizers.pipeline import sample_cost
    from dapr.experiment.config import context_steps
    from dapr.registry import load_dataset

    try:
        raw = [yaml.safe_load(step) for step in args.steps]
    except yaml.YAMLError:
        raise DaprError("--contextualizer: not a name or a YAML mapping {name, args}") from None
    steps = context_steps(raw, Path("--contextualizer"), "steps")
    for flag, value in (("--sample", args.sample), ("--workers", args.workers)):
        if value is not None and value < 1:
            raise DaprError(f"{flag} must be a positive integer, got {value}")
    dataset = load_dataset(args.dataset)
    workers = args.workers or os.cpu_count() or 1
    cost = sample_cost(dataset, steps, args.sample, workers)
    print(report.cost_markdown(report.cost_rows({dataset.name: cost}, of="dataset")), end="")
    return 0


def _stats(args: argparse.Namespace) -> int:
    from dapr.registry import load_dataset
    from dapr.stats import dataset_stats, format_stats

    stats = dataset_stats(load_dataset(args.name))
    print(json.dumps(stats, indent=1) if args.json else format_stats(stats))
    return 0


def _list(args: argparse.Namespace) -> int:
    from dapr.adapters import Adapter
    from dapr.registry import datasets

    rows = []
    for name in datasets.names():
        try:
            found = datasets.get(name)
        except Exception as e:  # a broken plugin must not hide the others
            rows.append((name, "error", f"cannot be imported: {e}"))
            continue
        if isinstance(found, Adapter):
            state = "cached" if found.cached() else "-"
            rows.append((name, state, found.origin))
        else:
            rows.append((name, "?", "a loader function"))
    width = max(len(name) for name, _, _ in rows)
    for name, state, origin in [("dataset", "cached", "source"), *rows]:
        print(f"{name:<{width}}  {state:<6}  {origin}")
    return 0


def _build(args: argparse.Namespace) -> int:
    from dapr.adapters import adapter_of
    from dapr.io import write_dataset

    adapter = adapter_of(args.name)
    options = adapter.check_options(_options(args.options))
    if not args.source.exists():
        raise DaprError(f"{args.source}: no such file or directory; give --source the raw files")
    adapter.require(args.source, download=args.download)
    dataset = adapter.build(args.source, **options)
    # a variant (e.g. a subset) gets its own copy beside the adapter's, under its own name
    out = args.out or adapter.prepared.with_name(dataset.name)
    write_dataset(dataset, out, format=args.format)
    print(f"built {args.name} from {args.source} into {out}")
    return 0


def _options(assignments: list[str]) -> dict[str, object]:
    """``key=value`` pairs, values parsed as YAML scalars."""
    import yaml

    options = {}
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        if not sep or not key:
            raise DaprError(f"--set {assignment!r}: write it as key=value, e.g. --set tagged=true")
        try:
            options[key] = yaml.safe_load(value) if value else ""
        except yaml.YAMLError:
            raise DaprError(f"--set {assignment!r}: the value is not valid YAML") from None
    return options


def _fetch(args: argparse.Namespace) -> int:
    from dapr.adapters import adapter_of
    from dapr.published import fetch_published

    adapter = adapter_of(args.name)
    if adapter.hub_repo is None:
        raise DaprError(f"dataset {args.name!r} is not published on the hub; build it instead")
    fetch_published(args.name, adapter.prepared, adapter.hub_repo, args.snapshot)
    print(f"fetched {args.name} into {adapter.prepared}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from dapr.io import write_dataset
    from dapr.registry import load_dataset

    write_dataset(load_dataset(args.name), args.out, format=args.format)
    print(f"wrote {args.name} to {args.out} ({args.format})")
    return 0


def _plugins(args: argparse.Namespace) -> int:
    from dapr import registry

    for reg in (registry.datasets, registry.retrievers, registry.contextualizers, registry.fusers):
        rows = reg.sources()
        print(f"{reg.group} ({len(rows)})")
        name_width = max((len(r[0]) for r in rows), default=0)
        dist_width = max((len(r[1]) for r in rows), default=0)
        target_width = max((len(r[2]) for r in rows), default=0)
        for name, dist, target in rows:
            line = f"  {name:<{name_width}}  {dist:<{dist_width}}  {target:<{target_width}}"
            print((line + _presets(reg, name)).rstrip())
    return 0


def _presets(reg, name: str) -> str:
    """``  presets: a, b`` for a component that has presets ('' if it has none or cannot load)."""
    if reg.group != "dapr.retrievers":
        return ""
    try:
        presets = getattr(reg.get(name), "presets", {})
    except Exception as error:  # noqa: BLE001 - a broken plugin is reported, not fatal
        return f"  (cannot load: {type(error).__name__}: {str(error).splitlines()[0][:80]})"
    return f"  presets: {', '.join(sorted(presets))}" if presets else ""


if __name__ == "__main__":
    sys.exit(main())
