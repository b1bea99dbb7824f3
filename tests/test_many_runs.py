"""Many runs, one cache: eight sweeps started together into one DAPR_HOME compute each shared
step once (the others wait, saying for whom) and all give the sequential results. A cache lock
records its holder (pid, host) and a heartbeat: a holder that was SIGKILLed is taken over at
once, a holder on another host is respected while its heartbeat is fresh, and temporaries of
another host's writers are never judged by their pid."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dapr.io.files import HOST, temp_sibling, writer, writer_gone
from dapr.store import cache as cache_module
from dapr.store.cache import Cache
from dapr.store.housekeeping import prune, stale_temporaries

EXPERIMENT = """
name: many
dataset: {dataset}
split: test
retrievers:
  bm25-doc: {{name: bm25, level: document}}
  bm25: {{name: bm25}}
fusion:
  fused: {{name: convex, document: bm25-doc, passage: bm25, args: {{alpha: 0.3}}}}
sweep:
  parameter: fusion.fused.args.alpha
  values: [0.1, 0.5, 0.9]
  tune_on: dev
  metric: ndcg_cut_10
"""
RUNS = 8


def _start(experiment: Path, out: Path, home: Path) -> subprocess.Popen:
    env = {**os.environ, "DAPR_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, "-m", "dapr.cli", "run", str(experiment), "--out", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _results(out: Path) -> dict[str, bytes]:
    """Every results file but the manifest (it holds timings) and plots (matplotlib dates a
    PDF)."""
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != "manifest.json" and p.suffix != ".pdf"
    }


@pytest.mark.cluster
def test_eight_sweeps_into_one_cache_compute_each_step_once(wiki_splits, tmp_path):
    experiment = tmp_path / "many.yaml"
    experiment.write_text(EXPERIMENT.format(dataset=wiki_splits))
    alone = _start(experiment, tmp_path / "alone", tmp_path / "home-alone")
    steps = sum(" computed in " in line for line in alone.communicate(timeout=300)[0].splitlines())
    assert alone.returncode == 0 and steps > 10  # indexes, searches of dev and test, fusions
    home = tmp_path / "home"
    runs = [_start(experiment, tmp_path / f"out-{n}", home) for n in range(RUNS)]
    logs = [run.communicate(timeout=600) for run in runs]
    assert [run.returncode for run in runs] == [0] * RUNS, [err[-2000:] for _, err in logs]
    computed = [line for out, _ in logs for line in out.splitlines() if " computed in " in line]
    # each step (each index, search and fusion: an entry of the cache) computed by one run only
    assert len(computed) == steps == len(list((home / "cache").glob("*/*/COMPLETE")))
    waited = [line for _, err in logs for line in err.splitlines() if "dapr: waiting for" in line]
    unnamed = [w for w in waited if not re.search(r"which process \d+ on \S+ is computing", w)]
    # whether any run waited depends on how the eight happened to overlap (a lock freed within
    # the grace period is not reported); every wait that is reported names its holder, and the
    # line itself is checked with a holder that surely holds, below
    assert unnamed == []
    reference = _results(tmp_path / "alone")
    for n in range(RUNS):
        assert _results(tmp_path / f"out-{n}") == reference
    verify = subprocess.run(
        [sys.executable, "-m", "dapr.cli", "cache", "verify"],
        env={**os.environ, "DAPR_HOME": str(home)},
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert list(home.rglob("*.tmp")) == []


HOLD = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from dapr.store.cache import Cache\n"
    "with Cache(Path(sys.argv[1])).lock('indexes', 'shared'):\n"
    "    print('held', flush=True)\n"
    "    time.sleep(600)\n"
)


def test_the_lock_of_a_sigkilled_holder_is_taken_over_saying_whose(tmp_path, capfd):
    cache = Cache(tmp_path / "cache")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(cache.root)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        record = cache.lock_path("indexes", "shared").read_text()
        assert record == f"process {holder.pid} on {os.uname().nodename}"
        with cache.lock("indexes", "shared", wait=False) as taken:
            assert taken is False  # never taken from its living holder
    finally:
        holder.kill()
        holder.wait(10)
    with cache.lock("indexes", "shared", wait=False) as taken:
        assert taken is True
    assert f"taking over the lock of indexes/shared from {record} (gone)" in capfd.readouterr().err
    # released: no holder recorded, and the next one takes it silently
    assert cache.lock_path("indexes", "shared").read_text() == ""
    with cache.lock("indexes", "shared", wait=False) as taken:
        assert taken is True
    assert "taking over" not in capfd.readouterr().err


def test_a_holder_renews_its_heartbeat(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_module, "HEARTBEAT", 0.05)
    cache = Cache(tmp_path / "cache")
    with cache.lock("runs", "beating"):
        path = cache.lock_path("runs", "beating")
        os.utime(path, (0, 0))
        time.sleep(0.3)
        assert time.time() - path.stat().st_mtime < 1


def test_a_holder_on_another_host_is_respected_until_its_heartbeat_stops(
    tmp_path, monkeypatch, capfd
):
    """Where a shared file system keeps locks per host, the flock is free here while a process
    on another host holds the lock: its record and fresh heartbeat keep it; once silent for
    DAPR_LOCK_STALE seconds it is taken over, with a line saying so."""
    monkeypatch.setenv("DAPR_LOCK_STALE", "0.6")
    monkeypatch.setattr(cache_module, "HEARTBEAT", 0.05)
    cache = Cache(tmp_path / "cache")
    path = cache.lock_path("runs", "remote")
    path.parent.mkdir(parents=True)
    path.write_text("process 4242 on node-b")
    with cache.lock("runs", "remote", wait=False) as taken:
        assert taken is False
    started = time.monotonic()
    with cache.lock("runs", "remote") as taken:
        assert taken is True and time.monotonic() - started >= 0.5
    err = capfd.readouterr().err
    assert "waiting for runs/remote, which process 4242 on node-b is computing" in err
    assert re.search(
        r"taking over the lock of runs/remote from process 4242 on node-b \(silent", err
    )
    # a holder on another host that releases it in time is waited for, not taken over
    path.write_text("process 4242 on node-b")
    monkeypatch.setenv("DAPR_LOCK_STALE", "30")
    releasing = subprocess.Popen(
        [sys.executable, "-c", f"import time; time.sleep(0.5); open({str(path)!r}, 'w').close()"]
    )
    with cache.lock("runs", "remote") as taken:
        assert taken is True
    releasing.wait(10)
    assert "taking over" not in capfd.readouterr().err


def test_temporaries_name_their_host_and_another_hosts_are_not_judged_by_pid(tmp_path):
    cache = Cache(tmp_path / "cache")
    folder = cache.root / "indexes"
    folder.mkdir(parents=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    mine = temp_sibling(folder / "a")
    assert writer(mine.name[len(".a.") :]) == (os.getpid(), HOST)
    dead_here = folder / f".b.{gone.pid}.{HOST}0123abcd.tmp"
    dead_there = folder / f".c.{gone.pid}.ffffffff0123abcd.tmp"  # pid of another host
    old_style = folder / f".d.{gone.pid}.0123abcd.tmp"  # before host tags: this host's
    for path in (mine, dead_here, dead_there, old_style):
        path.mkdir()
    assert writer_gone(gone.pid, HOST) and not writer_gone(gone.pid, "ffffffff")
    assert sorted(stale_temporaries(cache)) == sorted([dead_here, old_style])
    # another host's temporary goes once unchanged for FOREIGN_HOURS, its lock free
    os.utime(dead_there, (0, 0))
    assert dead_there in stale_temporaries(cache)
    with cache.lock("indexes", "c"):
        subprocess.run(  # another process prunes while this one holds the entry's lock
            [sys.executable, "-c", PRUNE, str(cache.root)], check=True, timeout=60
        )
    assert dead_there.exists() and mine.exists()
    assert not dead_here.exists() and not old_style.exists()
    prune(cache)
    assert not dead_there.exists() and mine.exists()


PRUNE = (
    "import sys\n"
    "from pathlib import Path\n"
    "from dapr.store.cache import Cache\n"
    "from dapr.store.housekeeping import prune\n"
    "prune(Cache(Path(sys.argv[1])))\n"
)
