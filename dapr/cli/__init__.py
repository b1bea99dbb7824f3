"""The ``dapr`` command: one module per command group, each adding its parsers."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

from dapr import settings
from dapr.cli import (
    cache,
    check,
    contextualize,
    data,
    evaluate,
    fetch,
    plugins,
    results,
    run,
    runs,
    train,
)
from dapr.errors import DaprError, os_error

GROUPS = (run, check, fetch, train, data, contextualize, results, runs, evaluate, cache, plugins)
"""In the order ``dapr --help`` lists them."""


RESUME = "finished steps are cached, rerun the same command to resume"


class Terminated(BaseException):
    """SIGTERM arrived (a scheduler preempting the job): unwinds like KeyboardInterrupt, so
    locks are released and temporaries removed on the way out."""


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:  # every DAPR_* variable, before any work (and the grace period before SIGTERM's handler)
        for warning in settings.check():
            print(warning, file=sys.stderr)
        grace = settings.grace_seconds()
    except DaprError as error:
        print(f"dapr: error: {error}", file=sys.stderr)
        return 2
    with _terminate_gracefully(grace):
        try:
            return args.handler(args)
        except DaprError as error:
            print(f"dapr: error: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(f"dapr: interrupted (SIGINT); {RESUME}", file=sys.stderr)
            return 130
        except Terminated:
            print(f"dapr: terminated (SIGTERM); {RESUME}", file=sys.stderr, flush=True)
            return 143
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


@contextlib.contextmanager
def _terminate_gracefully(grace: float | None = None) -> Iterator[None]:
    """Meanwhile SIGTERM raises :class:`Terminated` in the main thread, and a process that has
    not stopped ``grace`` seconds later (a long call in a C library) exits at once (None: as
    ``DAPR_GRACE_SECONDS`` says, read now: never in the handler)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seconds = settings.grace_seconds() if grace is None else grace

    def terminate(signum: int, frame: object) -> None:
        timer = threading.Timer(seconds, _exit_now)
        timer.daemon = True
        timer.start()
        raise Terminated

    before = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _exit_now() -> None:
    print(f"dapr: terminated (SIGTERM), past the grace period; {RESUME}", file=sys.stderr)
    sys.stderr.flush()
    os._exit(143)


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
