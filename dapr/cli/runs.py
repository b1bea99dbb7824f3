"""``dapr runs export``: a results directory's runs as TREC files that say what made them."""

from __future__ import annotations

import argparse
from pathlib import Path


def add(commands: argparse._SubParsersAction) -> None:
    runs = commands.add_parser("runs", help="export the runs of a results directory")
    actions = runs.add_subparsers(required=True, metavar="ACTION")
    export = actions.add_parser(
        "export",
        help="write TREC runs opened by a '# key: value' header (settings, dataset, cache key)",
        description="Each run is written as OUT/<system>.trec. The header names the experiment, "
        "the system's settings, the dataset and its fingerprint, the split, the cache key, the "
        "metric means, dapr's version and git revision; dapr reads it back (read_run_header) and "
        "skips it when reading the run. trec_eval does not: pass --no-header for it.",
    )
    export.add_argument("results", type=Path, help="a results directory of dapr run")
    export.add_argument("--out", type=Path, required=True, help="the directory to write")
    export.add_argument("--systems", nargs="+", default=[], help="default: every system")
    export.add_argument("--no-header", action="store_true", help="plain TREC lines only")
    export.set_defaults(handler=_export)


def _export(args: argparse.Namespace) -> int:
    from dapr.experiment.results import export_runs

    written = export_runs(args.results, args.out, args.systems, header=not args.no_header)
    print(f"wrote {len(written)} runs to {args.out}")
    return 0
