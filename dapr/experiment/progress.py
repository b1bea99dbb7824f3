"""Progress of an experiment's steps as it happens: on a terminal the steps' own bars show it;
when the output goes to a file, one line per step as it starts and as it ends, with what it
did and how long it took."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from dapr.io import faults


class Progress:
    """Writes ``HH:MM:SS <step> <system>: started`` and ``... computed in 1.2 s (detail)``
    lines to ``stream`` (standard output) unless it is a terminal, or ``enabled`` says."""

    def __init__(self, stream: TextIO | None = None, enabled: bool | None = None):
        self.stream = stream or sys.stdout
        self.enabled = not self.stream.isatty() if enabled is None else enabled

    def started(self, kind: str, system: str, detail: str = "") -> float:
        """Say a step starts; returns the time it started."""
        faults.checkpoint(kind)
        self.line(f"{kind} {system}: started" + (f" ({detail})" if detail else ""))
        return time.perf_counter()

    def finished(self, kind: str, system: str, since: float, detail: str = "") -> None:
        seconds = time.perf_counter() - since
        extra = f", {detail}" if detail else ""
        self.line(f"{kind} {system}: computed in {seconds:.1f} s{extra}")

    def line(self, text: str) -> None:
        """One timestamped line (when enabled)."""
        if self.enabled:
            print(f"{time.strftime('%H:%M:%S')} {text}", file=self.stream, flush=True)
