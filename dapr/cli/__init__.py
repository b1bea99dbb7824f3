"""The ``dapr`` command: one module per command group, each adding its parsers."""

from __future__ import annotations

import argparse
import os
import sys

from dapr.cli import cache, contextualize, data, evaluate, plugins, results, run, runs, train
from dapr.errors import DaprError, os_error

GROUPS = (run, train, data, contextualize, results, runs, evaluate, cache, plugins)
"""In the order ``dapr --help`` lists them."""


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.handler(args)
    except DaprError as error:
        print(f"dapr: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dapr: interrupted; finished steps are cached, rerun to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. dapr plugins | head: the reader left
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(
            "dapr: error: standard output was closed before dapr finished writing (e.g. by "
            "| head); files it writes are complete, rerun without the pipe to see all output",
            file=sys.stderr,
        )
        return 2
    except OSError as error:  # the file system refused: permissions, a full disk, a file
        print(f"dapr: error: {os_error(error)}", file=sys.stderr)
        return 2


def parser() -> argparse.ArgumentParser:
    import dapr

    top = argparse.ArgumentParser(prog="dapr", description="Document-aware passage retrieval")
    top.add_argument(
        "--version",
        action="version",
        version=f"dapr {dapr.version()} (distribution {dapr.DISTRIBUTION})",
    )
    commands = top.add_subparsers(required=True, metavar="COMMAND")
    for group in GROUPS:
        group.add(commands)
    return top
