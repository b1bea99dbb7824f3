"""``dapr data``: list, build, fetch, inspect and export datasets."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import yaml

from dapr.errors import DaprError


def add(commands: argparse._SubParsersAction) -> None:
    data = commands.add_parser("data", help="list, build, fetch, inspect and export datasets")
    actions = data.add_subparsers(required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="every registered dataset and its source")
    listing.set_defaults(handler=_list)

    build = actions.add_parser("build", help="build a dataset from its raw files")
    build.add_argument("name", help="a registered dataset, e.g. NaturalQuestions")
    build.add_argument(
        "--source",
        type=Path,
        help="the raw files (a directory, or the file of a one-file dataset); with --download, "
        "default: $DAPR_HOME/raw/NAME",
    )
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

    fetch = actions.add_parser("fetch", help="fetch a prebuilt dataset from the hub")
    fetch.add_argument("name", help="a dataset of the DAPR benchmark, e.g. ConditionalQA")
    fetch.add_argument(
        "--from",
        dest="snapshot",
        type=Path,
        help="a local copy of the hub repository (huggingface-cli download ... --local-dir)",
    )
    fetch.set_defaults(handler=_fetch)

    stats = actions.add_parser("stats", help="print dataset statistics")
    stats.add_argument("name", help="a registered dataset or a dataset directory")
    stats.add_argument("--json", action="store_true", help="print one JSON object")
    stats.set_defaults(handler=_stats)

    export = actions.add_parser(
        "export",
        help="write a dataset in the hub layout (jsonl, parquet) or BEIR's, context applied",
        description="With --contextualized, every passage's text is written as the steps give "
        "it (title, keyphrases, coref, ...), so other tools can use dapr's document context; "
        "the steps' results are cached and shared with dapr run.",
    )
    export.add_argument("name", help="a registered dataset or a dataset directory")
    export.add_argument("--out", type=Path, required=True)
    export.add_argument("--format", choices=("jsonl", "parquet", "beir"), default="jsonl")
    export.add_argument(
        "--contextualized",
        dest="steps",
        action="append",
        default=[],
        metavar="STEP",
        help="a contextualizer name or YAML mapping, e.g. title or '{name: keyphrases, args: "
        "{top_n: 10}}'; repeat to chain steps in order",
    )
    export.add_argument("--workers", type=int, help="worker processes (default: every core)")
    export.set_defaults(handler=_export)


def _list(args: argparse.Namespace) -> int:
    from dapr.datasets.adapter import Adapter
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
    from dapr.datasets import write_dataset
    from dapr.datasets.adapter import adapter_of, keep_raw

    adapter = adapter_of(args.name)
    options = adapter.check_options(_options(args.options))
    source = args.source
    if source is None and not args.download:
        raise DaprError(
            f"dapr data build {args.name}: no --source; give --source the raw files, or "
            "--download to fetch them"
        )
    if source is None:
        if not any(raw.url for raw in adapter.raw_files):
            raise DaprError(
                f"dataset {args.name!r} has no file to download; give --source ({adapter.origin})"
            )
        source = adapter.raw
    elif not source.exists():
        raise DaprError(f"{source}: no such file or directory; give --source the raw files")
    adapter.require(source, download=args.download)
    dataset = adapter.build(source, **options)
    # a variant (e.g. a subset) gets its own copy beside the adapter's, under its own name
    out = args.out or adapter.prepared.with_name(dataset.name)
    write_dataset(dataset, out, format=args.format)
    print(f"built {args.name} from {source} into {out}")
    kept = keep_raw(adapter, source)
    if kept:
        print(kept)
    return 0


def _options(assignments: list[str]) -> dict[str, object]:
    """``key=value`` pairs, values parsed as YAML scalars."""
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
    from dapr.datasets.adapter import adapter_of
    from dapr.datasets.published import fetch_published

    adapter = adapter_of(args.name)
    if adapter.hub_repo is None:
        raise DaprError(f"dataset {args.name!r} is not published on the hub; build it instead")
    fetch_published(args.name, adapter.prepared, adapter.hub_repo, args.snapshot)
    print(f"fetched {args.name} into {adapter.prepared}")
    return 0


def _stats(args: argparse.Namespace) -> int:
    from dapr.datasets import load_dataset
    from dapr.datasets.stats import dataset_stats, format_stats

    stats = dataset_stats(load_dataset(args.name))
    print(json.dumps(stats, indent=1) if args.json else format_stats(stats))
    return 0


def _export(args: argparse.Namespace) -> int:
    from dapr.datasets import load_dataset, write_dataset
    from dapr.datasets.beir_format import write_beir

    dataset = load_dataset(args.name)
    if args.steps:
        from dapr.cli.contextualize import parse_steps
        from dapr.experiment.contextualize import contextualized

        if args.workers is not None and args.workers < 1:
            raise DaprError(f"--workers must be a positive integer, got {args.workers}")
        steps = parse_steps(args.steps, "--contextualized")
        dataset = contextualized(dataset, steps, args.workers or os.cpu_count() or 1)
    if args.format == "beir":
        write_beir(dataset, args.out, titles=not args.steps)
    else:
        write_dataset(dataset, args.out, format=args.format)
    context = f", passages contextualized by {' + '.join(args.steps)}" if args.steps else ""
    print(f"wrote {args.name} to {args.out} ({args.format}{context})")
    return 0
