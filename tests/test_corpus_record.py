"""A corpus read once: a prepared dataset's fingerprint and ids come from the record beside it
while its files are unchanged, and `dapr cache verify` checks the record against the corpus."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dapr.cli import main
from dapr.data import Corpus, Dataset, Document, Passage, Split
from dapr.datasets import hub, read_dataset, write_dataset
from dapr.datasets import record as record_module
from dapr.datasets.record import RECORD
from dapr.ids import string_array

HOUR = 3600


def _documents() -> list[Document]:
    return [
        Document(
            f"d{d}",
            f"Title {d}",
            tuple(Passage(f"d{d}-{i}", f"d{d}", i, f"text {d} {i} é") for i in range(3)),
        )
        for d in range(6)
    ]


def _age(root: Path, seconds: float = HOUR) -> None:
    """Set every file of ``root`` back, as files written a while ago are."""
    when = time.time() - seconds
    for path in root.rglob("*"):
        os.utime(path, (when, when))


@pytest.fixture
def prepared(tmp_path, monkeypatch) -> Path:
    """A small dataset prepared under a fresh $DAPR_HOME, written an hour ago, in JSON lines
    (so that a passage can be changed in place)."""
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    out = tmp_path / "home" / "datasets" / "toy"
    split = Split({"q1": "text 1"}, {"q1": {"d1-1": 1}})
    write_dataset(Dataset("toy", Corpus(_documents()), {"test": split}), out)
    _age(out)
    return out


class Reads:
    """Counts the full reads of hub corpora; with ``fail``, refuses them."""

    def __init__(self, monkeypatch, fail: bool = False):
        self.count, self.fail, real = 0, fail, hub._hub_documents

        def counted(*args, **kwargs):
            self.count += 1
            if self.fail:
                raise AssertionError("the corpus was read")
            yield from real(*args, **kwargs)

        monkeypatch.setattr(hub, "_hub_documents", counted)


def _read(path: Path) -> tuple[str, list, list, list]:
    corpus = read_dataset(path).corpus
    ids = corpus.ids
    return corpus.fingerprint, ids.passage_ids.tolist(), ids.doc_ids.tolist(), ids.doc_of.tolist()


def test_a_second_load_takes_fingerprint_and_ids_from_the_record(prepared, monkeypatch):
    first = _read(prepared)
    assert (prepared / RECORD / "record.json").is_file()
    Reads(monkeypatch, fail=True)
    assert _read(prepared) == first
    corpus = read_dataset(prepared).corpus
    assert corpus.ids.document_of(["d4-2", "nope"]).tolist() == [4, -1]
    assert isinstance(corpus.ids.doc_of, np.memmap)  # the ids are memory-mapped
    # a new process (another string-hash seed) reads nothing either
    script = (
        "import sys; from pathlib import Path; from dapr.datasets import hub, read_dataset\n"
        "def refused(*args): raise SystemExit('the corpus was read')\n"
        "hub._hub_documents = refused\n"
        "c = read_dataset(Path(sys.argv[1])).corpus\n"
        "print(c.fingerprint, c.ids.passage_codes(['d5-0', 'd0-1']).tolist())"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(prepared)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    ).stdout.split(maxsplit=1)
    assert out == [first[0], "[15, 1]\n"]


@pytest.mark.parametrize("block", [1, 5, 64])
def test_recorded_ids_are_written_and_read_a_block_at_a_time(
    prepared, monkeypatch, tmp_path, block
):
    # a block smaller than an id, one that cuts ids in two (and the é in two), a whole one
    first = _read(prepared)
    monkeypatch.setattr(record_module, "_BLOCK", block)
    Reads(monkeypatch, fail=True)
    assert _read(prepared) == first
    monkeypatch.setattr(record_module, "_IDS", 2)
    written, saved = tmp_path / "written.npy", tmp_path / "saved.npy"
    for ids in ([], [""], ["", "a", ""], ["é", "ab", "x" * 40], ["a", "b", "c", "d"], ["z"] * 9):
        record_module._write_joined(written, string_array(ids))
        # the file np.save writes for the joined bytes, though they were never joined in memory
        np.save(saved, np.frombuffer("\n".join(ids).encode(), dtype=np.uint8))
        assert written.read_bytes() == saved.read_bytes()
        joined = np.load(written, mmap_mode="r")
        assert record_module._split(joined, len(ids)).tolist() == ids
    with pytest.raises(record_module._NewlineInId):
        record_module._write_joined(written, string_array(["a", "b", "c\nd"]))
    with pytest.raises(ValueError, match="3 ids recorded, 2 stored"):
        record_module._split(np.frombuffer(b"a\nb", dtype=np.uint8), 3)
    with pytest.raises(ValueError, match="1 ids recorded, more stored"):
        record_module._split(np.frombuffer(b"a\nb", dtype=np.uint8), 1)


def test_a_changed_stat_means_a_full_read_and_a_new_record(prepared, monkeypatch):
    expected = _read(prepared)
    reads = Reads(monkeypatch)
    for change in (
        lambda: os.utime(prepared / "corpus.jsonl", (time.time() - 60, time.time() - 60)),
        lambda: (prepared / "notes.txt").write_text("a file added"),
        lambda: (prepared / "notes.txt").unlink(),
    ):
        change()
        _age(prepared, HOUR / 2)  # not racy: see the next test
        before = reads.count
        assert _read(prepared) == expected
        assert reads.count == before + 1  # read again, and recorded anew ...
        assert _read(prepared) == expected
        assert reads.count == before + 1  # ... so the next load reads nothing


def test_files_written_just_before_the_record_are_read_again(prepared, monkeypatch):
    _age(prepared, 0)  # modified now: a rewrite within the timestamp's resolution goes unseen
    reads = Reads(monkeypatch)
    _read(prepared)
    assert (prepared / RECORD).is_dir() and reads.count == 1
    _read(prepared)
    assert reads.count == 2  # the record is not trusted yet


def test_a_tampered_record_is_never_trusted_for_a_changed_stat(prepared, monkeypatch):
    fingerprint = _read(prepared)[0]
    meta_file = prepared / RECORD / "record.json"
    meta = json.loads(meta_file.read_text())
    meta["fingerprint"] = "0" * 16
    meta_file.write_text(json.dumps(meta))
    (prepared / "qrels" / "test.jsonl").touch()
    reads = Reads(monkeypatch)
    assert _read(prepared)[0] == fingerprint and reads.count == 1


def _change_in_place(path: Path, old: str, new: str) -> None:
    """Change ``path`` keeping its size, inode and modification time."""
    stat = path.stat()
    data = path.read_bytes()
    assert len(old) == len(new) and data.count(old.encode()) == 1
    with path.open("r+b") as handle:
        handle.write(data.replace(old.encode(), new.encode()))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (path.stat().st_ino, path.stat().st_size) == (stat.st_ino, stat.st_size)


def test_verify_catches_a_corpus_changed_under_the_same_stat(prepared, monkeypatch, capsys):
    original = _read(prepared)[0]
    assert main(["cache", "verify"]) == 0
    assert "1 corpus records verified, 0 disagreed" in capsys.readouterr().out
    _change_in_place(prepared / "corpus.jsonl", "text 3 2", "text 3 X")
    assert _read(prepared)[0] == original  # the stat says unchanged: the record is trusted
    assert main(["cache", "verify", "--dataset", str(prepared)]) == 2
    out = capsys.readouterr().out
    assert f"mismatch {prepared}: its fingerprint is {original!r}" in out
    assert "entries verified" not in out  # --dataset alone: no cache entries
    assert not (prepared / RECORD).exists()
    reads = Reads(monkeypatch)
    assert _read(prepared)[0] != original and reads.count == 1  # computed again


def test_verify_catches_a_tampered_record(prepared, capsys, tmp_path):
    _read(prepared)
    ids_file = prepared / RECORD / "passage_ids.npy"
    ids_file.write_bytes(ids_file.read_bytes().replace(b"d5-2", b"d5-9"))
    assert main(["cache", "verify", "--dataset", str(prepared)]) == 2
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        f"  mismatch {prepared}: passage_ids.npy is not what was written (its checksum "
        "differs); record removed (the next read writes it)"
    )
    assert not (prepared / RECORD).exists()
    _read(prepared)
    os.utime(prepared / "corpus.jsonl")  # a record outdated by its files is no mismatch
    assert main(["cache", "verify", "--dataset", str(prepared)]) == 0
    assert "outdated" in capsys.readouterr().out and not (prepared / RECORD).exists()
    assert main(["cache", "verify", "--dataset", str(tmp_path / "nowhere")]) == 2
    assert "not a registered dataset nor a dataset directory" in capsys.readouterr().err


def test_readers_writers_and_fingerprints_do_not_see_the_record(prepared, tmp_path):
    before = read_dataset(prepared, remember=False)
    _read(prepared)
    again = read_dataset(prepared)
    assert again.fingerprint == before.fingerprint
    assert list(again.corpus) == list(before.corpus) and again.splits == before.splits
    out = tmp_path / "exported"
    assert main(["data", "export", str(prepared), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["corpus.jsonl", "qrels", "queries"]
    (prepared / "keep.txt").write_text("the user's")
    write_dataset(before, prepared)  # rewritten in place: the record describes old files
    assert sorted(p.name for p in prepared.iterdir()) == [
        "corpus.jsonl",
        "keep.txt",
        "qrels",
        "queries",
    ]


def test_a_dataset_elsewhere_has_its_record_in_dapr_home(prepared, tmp_path, monkeypatch, capsys):
    elsewhere = tmp_path / "mine" / "toy"
    write_dataset(read_dataset(prepared, remember=False), elsewhere)
    _age(elsewhere)
    before = sorted(elsewhere.rglob("*"))
    expected = _read(elsewhere)
    assert sorted(elsewhere.rglob("*")) == before  # dapr writes nothing into the user's folder
    [folder] = (tmp_path / "home" / "datasets" / ".corpus-records").iterdir()
    assert json.loads((folder / "record.json").read_text())["root"] == str(elsewhere.resolve())
    Reads(monkeypatch, fail=True)
    assert _read(elsewhere) == expected
    monkeypatch.undo()
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    assert main(["cache", "verify"]) == 0  # found from $DAPR_HOME, and still right
    assert "1 corpus records verified, 0 disagreed" in capsys.readouterr().out


def _crash_while_writing(path: str) -> None:
    def killed(folder: Path) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    record_module.seal = killed  # the arrays are written, the checksums never are
    assert read_dataset(Path(path)).corpus.ids is None  # never reached: killed while writing
    os._exit(0)


def test_a_crash_while_writing_leaves_no_record_to_trust(prepared, monkeypatch):
    child = multiprocessing.get_context("fork").Process(
        target=_crash_while_writing, args=(str(prepared),)
    )
    child.start()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL
    [left] = [p.name for p in prepared.iterdir() if p.name.startswith(f".{RECORD}.")]
    assert not (prepared / RECORD).exists()
    reads = Reads(monkeypatch)
    expected = _read(prepared)
    assert reads.count == 1 and (prepared / RECORD).is_dir()
    assert not (prepared / left).exists()  # what the dead writer left is cleaned up
    assert _read(prepared) == expected and reads.count == 1


def test_a_job_of_a_grid_reads_no_corpus_once_its_steps_are_cached(prepared, monkeypatch):
    from dapr.experiment.config import load
    from dapr.experiment.runner import Runner
    from dapr.experiment.schedule import plan, run_job
    from dapr.store.cache import Cache

    spec = prepared.parent.parent / "grid.yaml"
    spec.write_text(
        json.dumps(
            {
                "name": "grid",
                "dataset": "toy-dir",
                "split": "test",
                "retrievers": {"bm25": {"name": "bm25", "level": "document"}},
            }
        ).replace("toy-dir", str(prepared))
    )
    experiment = load(spec)
    Runner(experiment).run()  # the first job computes the run and writes the record
    Reads(monkeypatch, fail=True)
    [job] = plan([experiment])
    done = run_job(job, str(Cache().root))
    assert done.computed == ()


def test_prune_removes_the_records_of_datasets_that_are_gone(prepared, tmp_path, capsys):
    """`dapr cache prune` removes a record whose dataset directory was deleted (elsewhere), and
    one left alone in a prepared dataset's folder (`rm -r toy/*` keeps hidden files); never a
    record whose dataset is still there, nor a folder holding anything dapr did not write."""
    gone, kept = tmp_path / "mine" / "gone", tmp_path / "mine" / "kept"
    for root in (gone, kept):
        write_dataset(read_dataset(prepared, remember=False), root)
        _age(root)
        _read(root)
    _read(prepared)
    records = tmp_path / "home" / "datasets" / ".corpus-records"
    assert len(list(records.iterdir())) == 2 and (prepared / RECORD).is_dir()
    strange = records / "notes"  # a user's folder, with a record's file name in it
    strange.mkdir()
    (strange / "record.json").write_text(json.dumps({"format": 1, "root": str(gone)}))
    for path in prepared.iterdir():
        if path.is_dir() and path.name != RECORD:
            shutil.rmtree(path)
        elif path.is_file():
            path.unlink()
    shutil.rmtree(gone)
    assert main(["cache", "prune", "--everything", "--dry-run"]) == 0
    assert "would remove 2 corpus records of datasets that are gone" in capsys.readouterr().out
    assert len(list(records.iterdir())) == 3 and (prepared / RECORD).is_dir()
    assert main(["cache", "prune", "--everything"]) == 0
    out = capsys.readouterr().out
    assert f"  record    {gone}  " in out and f"  record    {prepared}  " in out
    assert "removed 2 corpus records of datasets that are gone" in out
    assert not prepared.exists()  # the prepared folder dapr made, left empty
    assert sorted(p.name for p in records.iterdir()) == sorted(
        [record_module.record_folder(kept).name, "notes"]
    )
    assert main(["cache", "prune", "--everything"]) == 0
    assert "corpus records" not in capsys.readouterr().out


def test_an_id_with_a_newline_leaves_no_record_and_nothing_beside_it(prepared):
    # hub readers refuse such ids; the record's writer refuses them on its own too
    corpus = read_dataset(prepared, remember=False).corpus
    ids = corpus.ids
    odd = replace(ids, passage_ids=string_array([*ids.passage_ids.tolist()[:-1], "d5-\n2"]))
    folder = prepared / RECORD
    record_module.write(folder, prepared, record_module.signature(prepared), 0, "f", odd)
    assert sorted(p.name for p in prepared.iterdir()) == ["corpus.jsonl", "qrels", "queries"]


def test_recorded_ids_are_written_without_joining_them_in_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(record_module, "_IDS", 1000)
    ids = string_array([f"document-{i:08d}-passage" for i in range(100_000)])  # 2.6 MB joined
    tracemalloc.start()
    try:
        record_module._write_joined(tmp_path / "ids.npy", ids)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.load(tmp_path / "ids.npy").tobytes() == "\n".join(ids.tolist()).encode()
    assert peak < 400_000, peak  # a block of 1,000 ids at a time, not the 2.6 MB
