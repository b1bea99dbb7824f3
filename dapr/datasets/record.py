"""A corpus read once: the fingerprint and id arrays of a dataset directory's corpus, kept in a
record so that a later process (a Ray job of the same grid, on any machine that shares
``$DAPR_HOME``) takes them from there instead of reading the whole corpus again. A prepared
dataset (``$DAPR_HOME/datasets/<name>``) holds its record in ``.dapr-corpus-record/``; a dataset
directory elsewhere has it in ``$DAPR_HOME/datasets/.corpus-records/<hash of its path>/``, since
dapr writes nothing into the user's folders.

The record holds the stat signature of every file of the dataset directory (its path, size,
modification time in nanoseconds and inode) as it was before the corpus was read, the corpus
fingerprint, and the ids as arrays numpy memory-maps (``passage_ids.npy`` and ``doc_ids.npy``:
the UTF-8 ids joined by newlines; ``doc_of.npy``: int64). It is written, atomically and sealed
with checksums, after every full read that found no record to trust; it is trusted only while
the signature is unchanged and every file is older than the signature by :data:`RACY_NS` (a
file rewritten within its timestamp's resolution keeps its modification time). ``dapr cache
verify`` reads the corpus again and compares (:func:`audit`). The readers, the hub layout's
writers and the dataset's fingerprint never see it; where it cannot be written there is none.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dapr.data import Corpus
from dapr.errors import DaprError, DataError
from dapr.ids import CorpusIds, empty_strings
from dapr.io.files import atomic_directory, read_at_most, sibling_lock, writer, writer_gone
from dapr.paths import home
from dapr.store.checksums import CHECKSUMS, damage, seal

RECORD = ".dapr-corpus-record"
"""The record's folder in a prepared dataset."""
ELSEWHERE = ".corpus-records"
"""The folder of ``$DAPR_HOME/datasets`` with the records of dataset directories elsewhere."""
FORMAT = 1
RACY_NS = 2_000_000_000
"""How much older than the signature every file must be for the record to be trusted."""
_META = "record.json"
_ARRAYS = ("passage_ids", "doc_ids", "doc_of")
_FILES = {_META, CHECKSUMS, ".gitignore", *(f"{name}.npy" for name in _ARRAYS)}
"""Every file a record holds: a folder with any other is not one dapr wrote."""
_MAX_META = 1 << 26
_BLOCK = 1 << 22
"""Bytes of joined ids decoded at a time."""
_IDS = 1 << 16
"""Ids joined and encoded at a time."""

Signature = list[list[str | int]]
"""``[path, size, mtime_ns, inode]`` of every file, by path."""
_writing: ContextVar[bool] = ContextVar("dapr_corpus_records_written", default=True)


@contextmanager
def read_only() -> Iterator[None]:
    """Within the block records are used but none is written (``dapr check`` writes nothing)."""
    token = _writing.set(False)
    try:
        yield
    finally:
        _writing.reset(token)


def is_record(name: str) -> bool:
    """Whether a top-level name of a dataset directory is the record, or a temporary or lock of
    its writer (``..dapr-corpus-record.<pid>...tmp``)."""
    return name == RECORD or name.startswith(f".{RECORD}.")


def signature(root: Path) -> Signature:
    """The stat of every file under ``root`` but the record (symbolic links followed)."""
    found: Signature = []
    seen: set[tuple[int, int]] = set()
    for folder, directories, files in os.walk(root, followlinks=True):
        here = Path(folder)
        where = os.stat(here)
        if (where.st_dev, where.st_ino) in seen:  # a link back up: walked already
            directories.clear()
            continue
        seen.add((where.st_dev, where.st_ino))
        relative = here.relative_to(root).as_posix()
        if relative == ".":
            directories[:] = [d for d in directories if not is_record(d)]
            files = [f for f in files if not is_record(f)]
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                stat = os.stat(here / name)
                path = name if relative == "." else f"{relative}/{name}"
                found.append([path, stat.st_size, stat.st_mtime_ns, stat.st_ino])
    return sorted(found)


def record_folder(root: Path) -> Path:
    """Where the record of the dataset directory ``root`` lives."""
    datasets = Path(os.path.realpath(home() / "datasets"))
    real = Path(os.path.realpath(root))
    if real.parent == datasets:
        return root / RECORD
    return datasets / ELSEWHERE / _key(str(real))


def _key(real: str) -> str:
    """The name of the record of the dataset directory at the real path ``real``, elsewhere."""
    return hashlib.blake2b(os.fsencode(real), digest_size=10).hexdigest()


@dataclass
class CorpusRecord:
    """The record of the dataset directory ``root``, as :class:`~dapr.data.Corpus` uses it."""

    root: Path
    _before: tuple[Signature, int] | None = field(default=None, init=False, repr=False)

    @property
    def folder(self) -> Path:
        return record_folder(self.root)

    def recall(self) -> tuple[str, CorpusIds] | None:
        """The fingerprint and ids, if the record is there and may be trusted; the signature
        taken now is what :meth:`keep` writes."""
        try:
            self._before = (signature(self.root), time.time_ns())
            meta = _meta(self.folder)
            if meta is None or meta["files"] != self._before[0] or _racy(meta):
                return None
            if damage(self.folder, hashes=False) is not None:
                return None
            return meta["fingerprint"], _load_ids(self.folder, meta)
        except (OSError, ValueError, KeyError, TypeError, DaprError):
            return None

    def keep(self, fingerprint: str, ids: CorpusIds) -> None:
        """Write the record of a full read (the signature :meth:`recall` took, if the files are
        unchanged since); a directory that cannot be written to gets none."""
        if self._before is None or not _writing.get():
            return
        files, stamp = self._before
        with contextlib.suppress(OSError, DaprError):
            if signature(self.root) != files:  # changed while it was read
                return
            write(self.folder, self.root, files, stamp, fingerprint, ids)


def write(
    folder: Path, root: Path, files: Signature, stamp: int, fingerprint: str, ids: CorpusIds
) -> None:
    """Write the record of ``root`` at ``folder`` (replacing one there) in one step."""
    meta = {
        "format": FORMAT,
        "fingerprint": fingerprint,
        "passages": len(ids.passage_ids),
        "documents": len(ids.doc_ids),
        "stamp_ns": stamp,
        "root": os.path.realpath(root),
        "files": files,
    }
    _remove_stale(folder)
    # an id that holds a newline (not a hub corpus) leaves nothing to record
    with contextlib.suppress(_NewlineInId), atomic_directory(folder) as tmp:
        _write_joined(tmp / "passage_ids.npy", ids.passage_ids)
        _write_joined(tmp / "doc_ids.npy", ids.doc_ids)
        doc_of = np.asarray(ids.doc_of, dtype=np.int64)
        np.save(tmp / "doc_of.npy", doc_of, allow_pickle=False)
        (tmp / ".gitignore").write_text("*\n")  # dapr's own, even in a checkout
        (tmp / _META).write_text(json.dumps(meta))
        seal(tmp)


def audit(root: Path, read: Callable[[], Corpus]) -> tuple[str, str]:
    """Check the record of ``root`` against the corpus ``read`` gives (one that trusts no
    record), read in full: ``("none", ...)`` without a record, ``("outdated", ...)`` when its
    files changed since (the record is removed: the next read writes a new one), ``("ok", "")``,
    or ``("mismatch", why)`` when the files look unchanged but what they hold is not what the
    record says (the record is removed)."""
    folder = record_folder(root)
    if not folder.is_dir():
        return "none", "no corpus record"
    if not root.is_dir():
        return _removed(folder, "outdated", "the dataset directory is gone")
    try:
        meta = _meta(folder)
    except (OSError, ValueError):
        meta = None
    if meta is None:
        return _removed(folder, "mismatch", f"{_META} is unreadable")
    if meta.get("files") != signature(root):
        return _removed(folder, "outdated", "its files changed since the record was written")
    problem = damage(folder)
    if problem is None:
        try:
            corpus = read()
            fingerprint, ids = corpus.fingerprint, corpus.ids
        except DataError as e:
            return _removed(folder, "mismatch", f"the dataset no longer reads ({e})")
        problem = _differs(meta, fingerprint, ids, folder)
    return ("ok", "") if problem is None else _removed(folder, "mismatch", problem)


def records() -> list[Path]:
    """The dataset directories that have a record: the prepared ones, then those elsewhere."""
    datasets = home() / "datasets"
    if not datasets.is_dir():
        return []
    found = sorted(p for p in datasets.iterdir() if (p / RECORD).is_dir())
    for folder in sorted((datasets / ELSEWHERE).glob("*")):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            meta = _meta(folder)
            if meta is not None and record_folder(Path(meta["root"])) == folder:
                found.append(Path(meta["root"]))
    return found


@dataclass(frozen=True)
class Orphan:
    """A record whose dataset directory is gone: ``folder`` holds it, ``root`` is the directory
    it describes, ``bytes`` its size."""

    folder: Path
    root: Path
    bytes: int


def orphans() -> list[Orphan]:
    """The records whose dataset directory is gone, which ``dapr cache prune`` removes: one of a
    directory elsewhere that no longer exists, and one in a prepared dataset's folder that holds
    nothing else (``rm -r datasets/NAME/*`` leaves the hidden record). Only what dapr wrote is
    one: a folder of a record's files and nothing else, whose ``record.json`` names its root."""
    datasets = home() / "datasets"
    if not datasets.is_dir():
        return []
    folders = [p / RECORD for p in sorted(datasets.iterdir()) if not p.name.startswith(".")]
    folders += sorted((datasets / ELSEWHERE).glob("*"))
    found = []
    for folder in folders:
        root = _orphaned(folder)
        if root is not None:
            size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
            found.append(Orphan(folder, root, size))
    return found


def remove_orphan(orphan: Orphan) -> bool:
    """Remove an orphan's record, with what killed writers of it left, and then the prepared
    dataset's folder if that leaves it empty; checked again under the record writers' lock
    first. Whether it was removed (not when its dataset came back meanwhile)."""
    folder = orphan.folder
    with sibling_lock(folder):
        if _orphaned(folder) is None:
            return False
        _remove_stale(folder)
        shutil.rmtree(folder)
    if folder.name == RECORD:
        with contextlib.suppress(OSError):
            folder.parent.rmdir()  # only if empty: nothing of anyone else's goes with it
    return True


def _orphaned(folder: Path) -> Path | None:
    """The dataset directory of the record ``folder`` if it is a record dapr wrote and that
    directory is gone (see :func:`orphans`), else None."""
    try:
        if folder.is_symlink() or not folder.is_dir():
            return None
        children = list(folder.iterdir())
        if any(p.name not in _FILES or not p.is_file() or p.is_symlink() for p in children):
            return None
        meta = _meta(folder)
        if meta is None or not isinstance(meta.get("root"), str):
            return None
        if folder.name == RECORD:  # in a prepared dataset: gone when nothing else is left
            alone = all(is_record(p.name) for p in folder.parent.iterdir())
            return folder.parent if alone and not folder.parent.is_symlink() else None
        root = Path(meta["root"])
        if folder.name != _key(meta["root"]) or root.is_dir():
            return None
        return root
    except (OSError, ValueError):
        return None


def _differs(meta: dict, fingerprint: str, ids: CorpusIds, folder: Path) -> str | None:
    if meta.get("fingerprint") != fingerprint:
        return f"its fingerprint is {meta.get('fingerprint')!r}, the corpus's {fingerprint!r}"
    try:
        kept = _load_ids(folder, meta)
    except (OSError, ValueError, KeyError, TypeError):
        return "its id arrays are unreadable"
    for name in ("passage_ids", "doc_ids", "doc_of"):
        mine, theirs = getattr(kept, name), getattr(ids, name)
        if len(mine) != len(theirs) or not (np.asarray(mine) == np.asarray(theirs)).all():
            return f"its {name} differ from the corpus's"
    return None


def _removed(folder: Path, status: str, why: str) -> tuple[str, str]:
    shutil.rmtree(folder, ignore_errors=True)
    return status, why


def _meta(folder: Path) -> dict | None:
    """The record's ``record.json`` if it is of this format, else None."""
    path = folder / _META
    if not path.is_file():
        return None
    meta = json.loads(read_at_most(path, _MAX_META))
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return None
    return meta


def _racy(meta: dict) -> bool:
    """Whether a file was modified too shortly before the signature was taken to be trusted."""
    stamp = int(meta["stamp_ns"])
    return any(int(mtime) > stamp - RACY_NS for _, _, mtime, _ in meta["files"])


class _NewlineInId(Exception):
    """An id holds a newline, which the record's joined ids cannot."""


def _write_joined(path: Path, ids: np.ndarray) -> None:
    """Save the ids as one ``uint8`` array of their UTF-8 bytes joined by newlines, the file
    ``np.save`` would write, encoded and written a block of ids at a time (the whole blob in
    memory would be another 12 bytes or more an id); :class:`_NewlineInId` if an id holds a
    newline."""
    with open(path, "wb") as file:
        blank = _npy_header(0)
        file.write(blank)
        size = 0
        for start in range(0, len(ids), _IDS):
            values = ids[start : start + _IDS].tolist()
            text = "\n".join(values)
            if text.count("\n") != len(values) - 1:
                raise _NewlineInId
            data = text.encode() if not start else b"\n" + text.encode()
            file.write(data)
            size += len(data)
        header = _npy_header(size)
        if len(header) != len(blank):  # numpy reserves room for the length: never seen
            raise ValueError(f"{path}: the array header changed length")
        file.seek(0)
        file.write(header)


def _npy_header(size: int) -> bytes:
    """The ``.npy`` header ``np.save`` writes for ``size`` bytes (``uint8``, one axis)."""
    out = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.uint8)), "fortran_order": False}
    np.lib.format.write_array_header_1_0(out, {**header, "shape": (size,)})
    return out.getvalue()


def _split(blob: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` ids of a joined blob as a string array, decoded a block of bytes at a time
    (the whole corpus's ids as Python strings at once would be some 60 bytes an id)."""
    out = empty_strings(count)
    done, start, size, block = 0, 0, len(blob), _BLOCK
    while count:
        text = blob[start : start + block].tobytes()
        last = start + len(text) >= size
        cut = len(text) if last else text.rfind(b"\n")
        if cut < 0:  # an id longer than the block
            block *= 2
            continue
        values = text[:cut].decode().split("\n")
        if done + len(values) > count:
            raise ValueError(f"{count} ids recorded, more stored")
        out[done : done + len(values)] = values
        done += len(values)
        if last:
            break
        start, block = start + cut + 1, _BLOCK
    if done != count:
        raise ValueError(f"{count} ids recorded, {done} stored")
    return out


def _load_ids(folder: Path, meta: dict) -> CorpusIds:
    """The recorded ids; ``doc_of`` memory-mapped."""
    loaded = {
        name: np.load(folder / f"{name}.npy", mmap_mode="r", allow_pickle=False) for name in _ARRAYS
    }
    doc_of = loaded["doc_of"]
    if doc_of.dtype != np.int64 or len(doc_of) != meta["passages"]:
        raise ValueError("doc_of does not fit the record")
    return CorpusIds(
        passage_ids=_split(loaded["passage_ids"], int(meta["passages"])),
        doc_ids=_split(loaded["doc_ids"], int(meta["documents"])),
        doc_of=doc_of,
    )


def _remove_stale(folder: Path) -> None:
    """Remove what writers of the record that are gone left beside it."""
    prefix = f".{folder.name}."
    for path in folder.parent.glob(f"{prefix}*"):
        by = writer(path.name[len(prefix) :])
        if by is not None and writer_gone(*by):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
