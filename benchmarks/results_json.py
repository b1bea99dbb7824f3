"""A benchmark's table as a results file under docs/results/ (``--json PATH`` of a benchmark):
the table, and the command, date, commit and hardware that produced it, which
docs/_hooks/results_tables.py renders into README.md and the site."""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def hardware() -> str:
    """This machine's cores and processor, and its load when the benchmark ended."""
    cpuinfo = Path("/proc/cpuinfo")
    text = cpuinfo.read_text() if cpuinfo.is_file() else ""
    found = re.search(r"model name\s*:\s*(.+)", text)
    name = found.group(1).strip() if found else platform.machine()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{os.cpu_count()}-core {name}, load average {load:.1f} (other work shares the cores)"


def commit() -> str:
    """The commit checked out, ``+changes`` when the working tree differs from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    head = git("rev-parse", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def table(lines: list[str]) -> dict[str, Any]:
    """A markdown table (its printed lines) as columns, alignment and rows of cells."""

    def cells(line: str) -> list[str]:
        return [c.strip() for c in line.strip().strip("|").split("|")]

    rule = cells(lines[1])
    align = "".join("r" if c.endswith(":") and not c.startswith(":") else "l" for c in rule)
    return {"columns": cells(lines[0]), "align": align, "rows": [cells(r) for r in lines[2:]]}


def write(path: str | Path, tables: dict[str, list[str]], notes: str = "", **extra: Any) -> None:
    """Write ``tables`` (name -> markdown lines) to ``path``, stamped with the command that ran
    (this process's), today's date, the commit and the hardware; ``extra`` keys go in as they
    are (a benchmark's raw data, read by benchmarks/calibration.py)."""
    script = Path(sys.argv[0]).resolve()
    where = script.relative_to(ROOT) if script.is_relative_to(ROOT) else script
    result = {
        "command": " ".join(["python", str(where), *sys.argv[1:]]),
        "date": datetime.date.today().isoformat(),
        "commit": commit(),
        "hardware": hardware(),
        "source": "measured",
        "notes": notes,
        "tables": {name: table(lines) for name, lines in tables.items()},
        **extra,
    }
    target = Path(path)
    partial = target.with_name(target.name + ".partial")  # replaced whole: never half a file
    partial.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    partial.replace(target)
