"""Long work shows progress: one line per step as it starts and ends when the output goes to a
file, and a run waiting for another's lock says whose."""

from __future__ import annotations

import io
import os
import re
import socket
import threading
import time

from test_outputs import _experiment

from dapr.cli import main
from dapr.experiment.progress import Progress
from dapr.store.cache import Cache


def test_steps_are_logged_as_they_happen_when_output_is_a_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(_experiment(tmp_path)), "--out", "out"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if re.match(r"\d\d:\d\d:\d\d ", line)]
    assert "index bm25: started (passages)" in lines[0]
    assert re.search(r"index bm25: computed in \d+\.\d s, 7 items", lines[1])
    assert any(re.search(r"search bm25: computed in \d+\.\d s, 2 queries", x) for x in lines)
    assert any(re.search(r"fuse fused: computed in", x) for x in lines)
    assert main(["run", str(_experiment(tmp_path)), "--out", "out"]) == 0  # all cached
    assert not re.search(r"\d\d:\d\d:\d\d .*started", capsys.readouterr().out)


def test_progress_stays_quiet_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    progress = Progress(stream)
    progress.finished("index", "x", progress.started("index", "x"))
    assert stream.getvalue() == ""
    assert Progress(io.StringIO()).enabled


def test_a_run_waiting_for_a_lock_says_whose(tmp_path, capsys):
    cache = Cache(tmp_path / "cache")
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with cache.lock("runs", "abc"):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    threading.Timer(0.3, release.set).start()
    started = time.monotonic()
    with cache.lock("runs", "abc"):
        waited = time.monotonic() - started
    holder.join()
    err = capsys.readouterr().err
    assert waited >= 0.2
    assert f"waiting for runs/abc, which process {os.getpid()} on {socket.gethostname()}" in err
