"""`dapr cache ls|prune`: entries, sizes, stale temporaries, selection, locks, open stores."""

import multiprocessing
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from dapr.store.cache import Cache
from dapr.store.contexts import ContextStore, Done
from dapr.store.housekeeping import (
    entries,
    human_size,
    prune,
    stale_temporaries,
    summary,
)

DAY = 86400.0
ABC, ANCIENT, HALF, OLD, RECENT = (f"{n:020x}" for n in range(1, 6))
"""Keys as dapr names entries (20 hex digits), in the order of the names they stand for."""


def _entry(cache: Cache, kind: str, key: str, size: int, age_days: float) -> Path:
    with cache.writing(kind, key) as scratch:
        (scratch / "data.bin").write_bytes(b"x" * size)
    marker = cache.path(kind, key) / "COMPLETE"
    then = time.time() - age_days * DAY
    os.utime(marker, (then, then))
    return cache.path(kind, key)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture
def cache(tmp_path: Path) -> Cache:
    """runs: old (10 days, 1000 B), recent (1 day, 300 B), half (incomplete, 50 B);
    indexes: ancient (30 days, 2000 B); contexts: a store (20 days) and the cost log;
    temporaries: one of a dead writer (in runs), one of this live process (in indexes)."""
    cache = Cache(tmp_path / "cache")
    _entry(cache, "runs", OLD, 1000, 10)
    _entry(cache, "runs", RECENT, 300, 1)
    _entry(cache, "indexes", ANCIENT, 2000, 30)
    half = cache.path("runs", HALF)
    half.mkdir()
    (half / "part.bin").write_bytes(b"y" * 50)
    store = ContextStore(cache.root / "contexts" / f"{ABC}.sqlite")
    store.put({"doc": Done(["a passage"], 2, 0.1)})
    store.close()
    then = time.time() - 20 * DAY
    os.utime(store.path, (then, then))
    (cache.root / "contexts" / "costs.sqlite").write_bytes(b"")
    dead = cache.root / "runs" / f".gone.{_dead_pid()}.0123abcd.tmp"
    dead.mkdir()
    (dead / "x").write_bytes(b"z" * 70)
    (cache.root / "indexes" / f".busy.{os.getpid()}.89abcdef.tmp").mkdir()
    with cache.lock("runs", OLD):  # lock files are not entries
        pass
    return cache


def test_entries_list_kinds_sizes_and_states(cache):
    listed = entries(cache)
    found = {(e.kind, e.key): e for e in listed}
    assert set(found) == {
        ("contexts", ABC),
        ("contexts", "costs"),
        ("indexes", ANCIENT),
        ("runs", HALF),
        ("runs", OLD),
        ("runs", RECENT),
    }
    assert found["runs", OLD].bytes == 1000 and found["runs", RECENT].bytes == 300
    assert found["indexes", ANCIENT].bytes == 2000 and found["runs", HALF].bytes == 50
    store = cache.root / "contexts" / f"{ABC}.sqlite"
    on_disk = sum(p.stat().st_size for p in store.parent.glob(f"{ABC}.sqlite*"))
    assert found["contexts", ABC].bytes == on_disk > 0
    assert [e.state for e in listed if not e.complete] == ["incomplete"]
    assert found["runs", OLD].used == pytest.approx(time.time() - 10 * DAY, abs=5)
    # sorted by kind, then by time of last use
    assert [(e.kind, e.key) for e in listed if e.kind == "runs"] == [
        ("runs", OLD),
        ("runs", RECENT),
        ("runs", HALF),
    ]
    assert [e.kind for e in listed] == sorted(e.kind for e in listed)


def test_summary_totals_per_kind(cache):
    table = summary(entries(cache))
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in table.splitlines()}
    assert rows["runs"][1:4] == ["3", "1", "1.3 KiB"]  # 1350 B
    assert rows["indexes"][1:4] == ["1", "0", "2.0 KiB"]
    assert rows["total"][1] == "6"
    assert (human_size(0), human_size(1023), human_size(1536)) == ("0 B", "1023 B", "1.5 KiB")
    assert human_size(5 * 1024**3) == "5.0 GiB"


def test_stale_temporaries_spare_live_writers(cache):
    stale = stale_temporaries(cache)
    assert [p.name.split(".")[1] for p in stale] == ["gone"]
    assert all(str(os.getpid()) not in p.name for p in stale)


def test_dry_run_removes_nothing(cache):
    before = sorted(p for p in cache.root.rglob("*"))
    chosen = prune(cache, older_than=timedelta(days=5), dry_run=True)
    assert sorted((e.kind, e.key) for e in chosen if not e.temporary) == [
        ("contexts", ABC),
        ("indexes", ANCIENT),
        ("runs", HALF),
        ("runs", OLD),
    ]
    assert [e.path for e in chosen if e.temporary] == stale_temporaries(cache)
    assert sorted(p for p in cache.root.rglob("*")) == before


def test_prune_by_age_kind_and_keep(cache):
    removed = prune(cache, older_than=timedelta(days=5), kinds=["runs"], keep={"nothing"})
    assert sorted(e.key for e in removed if not e.temporary) == [HALF, OLD]
    assert [e.path.name.split(".")[1] for e in removed if e.temporary] == ["gone"]
    left = {(e.kind, e.key) for e in entries(cache)}
    assert left == {
        ("contexts", ABC),
        ("contexts", "costs"),
        ("indexes", ANCIENT),
        ("runs", RECENT),
    }
    assert stale_temporaries(cache) == []
    assert (cache.root / "indexes" / f".busy.{os.getpid()}.89abcdef.tmp").is_dir()
    assert not cache.has("runs", OLD) and cache.has("runs", RECENT)

    removed = prune(cache, keep={RECENT})
    assert sorted(e.key for e in removed) == [ABC, ANCIENT]
    assert {(e.kind, e.key) for e in entries(cache)} == {("contexts", "costs"), ("runs", RECENT)}
    assert list((cache.root / "contexts").glob(f"{ABC}.sqlite*")) == []
    assert [e.key for e in prune(cache)] == [RECENT]  # the cost log stays
    assert [e.key for e in entries(cache)] == ["costs"]


def test_touch_keeps_an_entry_in_use(cache):
    cache.touch("runs", OLD)
    cache.touch("runs", "missing")  # nothing there: no error, nothing created
    assert not cache.path("runs", "missing").exists()
    removed = prune(cache, older_than=timedelta(days=5), kinds=["runs"])
    assert OLD not in {e.key for e in removed} and cache.has("runs", OLD)


def test_an_open_store_is_left_until_closed(cache):
    store = ContextStore(cache.root / "contexts" / f"{ABC}.sqlite")
    try:
        assert ABC not in {e.key for e in prune(cache, kinds=["contexts"])}
        assert store.get(["doc"])["doc"].texts == ["a passage"]
    finally:
        store.close()
    assert ABC in {e.key for e in prune(cache, kinds=["contexts"])}


def _prune(root: str) -> None:
    prune(Cache(Path(root)), older_than=timedelta(days=5))


def test_prune_waits_for_the_lock_of_an_entry_in_use_and_checks_it_again(cache):
    """A run reads runs/old under its lock (and touches it) while prune wants it gone."""
    spawn = multiprocessing.get_context("spawn")
    with cache.lock("runs", OLD):
        pruner = spawn.Process(target=_prune, args=(str(cache.root),))
        pruner.start()
        deadline = time.monotonic() + 30
        while cache.path("indexes", ANCIENT).exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # prune goes kind by kind: indexes before runs
        assert not cache.path("indexes", ANCIENT).exists(), "prune did not start"
        pruner.join(timeout=1)
        assert pruner.is_alive(), "prune did not wait for the entry's lock"
        assert cache.has("runs", OLD)
        cache.touch("runs", OLD)
    pruner.join(timeout=30)
    assert pruner.exitcode == 0
    assert cache.has("runs", OLD), "prune removed an entry used while it waited"
    assert {(e.kind, e.key) for e in entries(cache)} == {
        ("contexts", "costs"),
        ("runs", OLD),
        ("runs", RECENT),
    }


def test_prune_leaves_no_lock_file_of_what_it_removed(cache, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    os.symlink(outside, cache.root / "runs" / "planted")  # not dapr's: left, never followed
    with cache.lock("indexes", "never-written"):  # a lock file whose entry never came
        pass
    prune(cache, older_than=timedelta(days=5))
    assert (outside / "keep.txt").read_text() == "mine"
    assert (cache.root / "runs" / "planted").is_symlink()
    locks = sorted(p.name for p in cache.root.glob("*/.*.lock"))
    # only entries still there keep a lock file (prune took theirs while checking them)
    assert all(
        (p.parent / p.name[1 : -len(".lock")]).exists() for p in cache.root.glob("*/.*.lock")
    ), locks
    assert ".planted.lock" not in locks and ".never-written.lock" not in locks


def test_a_lock_held_elsewhere_is_not_taken_without_waiting(cache):
    with cache.lock("runs", OLD) as held:
        assert held
        with cache.lock("runs", OLD, wait=False) as again:
            assert again is False


def test_a_waiter_whose_lock_file_was_removed_locks_the_path_anew(cache):
    """The holder deletes the lock file before releasing (as prune does): the waiter must not
    keep a lock on the deleted file while a newcomer locks the path."""
    import threading

    got = threading.Event()
    release = threading.Event()

    def waiter() -> None:
        with cache.lock("runs", OLD):
            got.set()
            release.wait(10)

    with cache.lock("runs", OLD):
        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.3)  # the waiter has opened the lock file and waits on it
        assert not got.is_set()
        os.unlink(cache.lock_path("runs", OLD))
    assert got.wait(10)
    # the waiter holds the lock of the path as it is now: a newcomer cannot take it
    with cache.lock("runs", OLD, wait=False) as newcomer:
        assert newcomer is False
    release.set()
    thread.join(10)


def test_a_lock_is_never_taken_from_a_living_holder_and_freed_by_its_death(cache):
    """Another process holds runs/old's lock: it is not taken while that process lives (however
    long), and is free the moment the process is SIGKILLed, which could not release it."""
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from dapr.store.cache import Cache\n"
        f"with Cache(Path(sys.argv[1])).lock('runs', '{OLD}'):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(600)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(cache.root)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        for _ in range(3):  # a living holder keeps it, also when it does nothing for a while
            with cache.lock("runs", OLD, wait=False) as taken:
                assert taken is False
            time.sleep(0.2)
        holder.kill()  # SIGKILL
        holder.wait(10)
        with cache.lock("runs", OLD, wait=False) as taken:
            assert taken is True
    finally:
        holder.kill()
