"""Run one measurement of a benchmark script in a fresh Python, optionally pinned to some cores,
and take several methods' measurements in turns.

The script is called again with ``--child '<spec as JSON>'`` and must print its result as JSON on
its last line of output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from typing import Any


def run_child(script: str, spec: dict[str, Any], cpus: set[int] | None = None) -> dict[str, Any]:
    """``script --child spec`` in a fresh Python, on ``cpus`` only when given; its JSON result."""
    command = [sys.executable, script, "--child", json.dumps(spec)]
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    done = subprocess.run(command, capture_output=True, text=True, preexec_fn=pin, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{os.path.basename(script)} {json.dumps(spec)} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def fastest_in_turns(
    names: Iterable[str],
    repeats: int,
    measure: Callable[[str, int], dict[str, Any]],
    key: str = "seconds",
) -> dict[str, dict[str, Any]]:
    """Each of ``names`` measured ``repeats`` times by ``measure(name, turn)``, the names taking
    turns so that a busy spell of a shared machine slows them alike; each name's measurement
    with the smallest ``key``."""
    names = list(names)
    best: dict[str, dict[str, Any]] = {}
    for turn in range(repeats):
        for name in names:
            found = measure(name, turn)
            if name not in best or found[key] < best[name][key]:
                best[name] = found
    return best
