"""Never trust a corrupted cache: every entry is sealed with the size and checksum of each file;
a damaged entry is reported in one line, moved to quarantine and computed again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_outputs import _experiment

from dapr.cli import main
from dapr.store.cache import QUARANTINE, Cache
from dapr.store.checksums import CHECKSUMS, damage
from dapr.store.housekeeping import entries


@pytest.fixture
def done(tmp_path, monkeypatch, capsys):
    """A finished BM25 run (documents, passages, fusion) and its cache."""
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    experiment = _experiment(tmp_path)
    assert main(["run", str(experiment), "--out", str(tmp_path / "first")]) == 0
    capsys.readouterr()
    return experiment, Cache(tmp_path / "home" / "cache")


def _again(tmp_path: Path, experiment: Path, capsys) -> tuple[dict, str]:
    out = tmp_path / "again"
    assert main(["run", str(experiment), "--out", str(out), "--overwrite"]) == 0
    err = capsys.readouterr().err
    return json.loads((out / "metrics.json").read_text())["systems"], err


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _largest(entry: Path) -> Path:
    """The largest data file of an entry (not its record of checksums)."""
    files = [p for p in entry.rglob("*") if p.is_file() and p.name != CHECKSUMS]
    return max(files, key=lambda p: p.stat().st_size)


def _first(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "first" / "metrics.json").read_text())["systems"]


def test_every_entry_is_sealed(done):
    _, cache = done
    for kind in ("runs", "indexes"):
        for entry in (cache.root / kind).iterdir():
            if not entry.name.startswith("."):
                assert (entry / CHECKSUMS).is_file() and damage(entry, skip=("COMPLETE",)) is None


@pytest.mark.parametrize("harm", ["flip", "truncate", "unsealed"])
def test_a_damaged_run_is_quarantined_and_computed_again(done, tmp_path, capsys, harm):
    experiment, cache = done
    entries = [e for e in (cache.root / "runs").iterdir() if not e.name.startswith(".")]
    victim = entries[0]
    if harm == "flip":
        _flip(victim / "run.npz")
    elif harm == "truncate":
        data = (victim / "run.npz").read_bytes()
        (victim / "run.npz").write_bytes(data[: len(data) // 2])
    else:  # an entry of an older dapr, which recorded no checksums
        (victim / CHECKSUMS).unlink()
    systems, err = _again(tmp_path, experiment, capsys)
    assert systems == _first(tmp_path)
    reports = [line for line in err.splitlines() if "damaged" in line]
    assert len(reports) == 1 and f"runs/{victim.name}" in reports[0], err
    assert "Traceback" not in err
    assert (victim / CHECKSUMS).is_file()  # computed again and sealed
    assert len(list((cache.root / QUARANTINE).iterdir())) == 1


def test_a_damaged_index_is_built_again(done, tmp_path, capsys):
    experiment, cache = done
    for entry in (cache.root / "runs").iterdir():  # no cached run: the index must be read
        if not entry.name.startswith("."):
            cache.quarantine("runs", entry.name)
    index = next(e for e in (cache.root / "indexes").iterdir() if not e.name.startswith("."))
    _flip(_largest(index))
    systems, err = _again(tmp_path, experiment, capsys)
    assert systems == _first(tmp_path)
    assert f"indexes/{index.name}" in err and "checksum differs" in err


def test_cache_ls_and_verify(done, tmp_path, capsys):
    _, cache = done
    run = next(e for e in (cache.root / "runs").iterdir() if not e.name.startswith("."))
    (run / "run.npz").write_bytes((run / "run.npz").read_bytes()[:-10])
    index = next(e for e in (cache.root / "indexes").iterdir() if not e.name.startswith("."))
    _flip(_largest(index))
    assert main(["cache", "ls", "--all"]) == 0
    listed = capsys.readouterr().out
    assert f"{run.name}" in listed and "damaged" in listed  # a size differs: seen by ls
    assert main(["cache", "verify"]) == 1
    out = capsys.readouterr().out
    assert f"runs/{run.name}" in out and f"indexes/{index.name}" in out and "2 damaged" in out
    assert not run.exists() and not index.exists()
    assert main(["cache", "verify"]) == 0
    assert "0 damaged" in capsys.readouterr().out
    assert main(["cache", "prune", "--everything"]) == 0
    assert [e for e in entries(cache) if e.kind == QUARANTINE] == []
