"""Peak memory of this process, measured while a benchmark step runs."""

from __future__ import annotations

import resource
import threading
from pathlib import Path

_STATUS = Path("/proc/self/status")


def _status_kib(field: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def resident() -> float:
    """This process's resident set now, in GiB (mapped file pages included)."""
    return _status_kib("VmRSS") / 2**20


class PeakMemory:
    """Samples resident memory every ``interval`` seconds inside a ``with`` block.

    ``rss`` is the peak resident set (memory-mapped file pages included, which the kernel may
    drop at will); ``anonymous`` the peak of memory the process itself allocated (RssAnon), the
    part that must fit in RAM. Both in GiB; ``max_rss`` is the kernel's lifetime peak.
    """

    def __init__(self, interval: float = 0.05):
        self.interval = interval
        self.rss = self.anonymous = 0.0
        self._stop = threading.Event()

    def _sample(self) -> None:
        self.rss = max(self.rss, _status_kib("VmRSS") / 2**20)
        self.anonymous = max(self.anonymous, _status_kib("RssAnon") / 2**20)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self) -> PeakMemory:
        self._sample()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def max_rss(self) -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
