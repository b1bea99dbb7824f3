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

    data = commands.add_parser("data", help="inspect and export datasets")
    data_commands = data.add_subparsers(required=True, metavar="ACTION")
    stats = data_commands.add_parser("stats", help="print dataset statistics")
    stats.add_argument("name", help="a registered dataset or a dataset directory")
    stats.add_argument("--json", action="store_true", help="print one JSON object")
    stats.set_defaults(handler=_stats)
    export = data_commands.add_parser("export", help="write a dataset in the hub layout")
    export.add_argument("name", help="a registered dataset or a dataset directory")
    export.add_argument("--out", type=Path, required=True)
    export.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    export.set_defaults(handler=_export)

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
    print(f"results written to {out}")
    return 0


def _stats(args: argparse.Namespace) -> int:
    from dapr.registry import load_dataset
    from dapr.stats import dataset_stats, format_stats

    stats = dataset_stats(load_dataset(args.name))
    print(json.dumps(stats, indent=1) if args.json else format_stats(stats))
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
        print(f"{reg.group:<22} {', '.join(reg.names()) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
