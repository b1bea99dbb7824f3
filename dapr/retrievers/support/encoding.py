"""What the neural retrievers share: items in chunks stored as shards that an interrupted
index resumes from, and encoding on several devices: a sentence-transformers pool over this
machine's GPUs, or Ray Data actors over a cluster's (:mod:`dapr.ray_actors`)."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import socket
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import islice
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np
from tqdm.auto import tqdm

from dapr import ray_actors
from dapr.io.files import write_bytes_atomic

T = TypeVar("T")
Chunk = list[tuple[str, str]]


class ShardWriter(Protocol):
    """What Ray encoding workers receive (pickled, without loaded models): an object that
    encodes a chunk of ``(id, text)`` items into the shard file ``path``, atomically."""

    def write_shard(self, chunk: Chunk, path: Path) -> None: ...


def chunks(
    items: Iterable[T], size: int, group: Callable[[T], str] | None = None
) -> Iterator[list[T]]:
    """``items`` in consecutive lists of ``size`` (the last one shorter); with ``group``, a
    list goes on past ``size`` until ``group`` of the next item differs (a group is never
    split: late chunking's documents)."""
    iterator = iter(items)
    if group is None:
        while chunk := list(islice(iterator, size)):
            yield chunk
        return
    held: list[T] = []
    for item in iterator:
        if len(held) >= size and group(item) != group(held[-1]):
            yield held
            held = []
        held.append(item)
    if held:
        yield held


def shards(
    items: Iterable[tuple[str, str]],
    store: Path,
    size: int,
    suffix: str,
    encode: Callable[[Chunk, Path], None],
    writer: ShardWriter | None = None,
    group: Callable[[tuple[str, str]], str] | None = None,
) -> Iterator[Chunk]:
    """Store every chunk of ``size`` items as ``store/shard-NNNNN<suffix>`` with ``encode(chunk,
    path)``, and yield the chunks in order.

    A chunk that an earlier, interrupted attempt already stored (the same ids and texts, as its
    ``.done`` marker records) is not encoded again: filling the same ``store`` again resumes.
    ``encode`` must write ``path`` atomically (see :func:`dapr.io.files.write_bytes_atomic`);
    ``group`` keeps items of one group in one chunk (see :func:`chunks`).
    Inside :func:`dapr.ray_actors.on_actors`, missing chunks go to Ray Data actors calling
    ``writer.write_shard`` instead (``store`` must then be on a file system they share).
    """
    setting = ray_actors.current()
    if writer is not None and setting is not None:
        yield from _on_ray(items, store, size, suffix, writer, setting, group)
        return
    for n, chunk in enumerate(chunks(items, size, group)):
        path = store / f"shard-{n:05d}{suffix}"
        if not _stored(chunk, path):
            encode(chunk, path)
            _mark(chunk, path)
        yield chunk


class ShardedEncoder(ShardWriter, Protocol):
    """A retriever that :func:`encode_into` can fill a store for."""

    document_name: str
    shard_size: int

    @property
    def devices(self) -> Sequence[str] | None: ...  # read only: a list or None serves

    def write_shard(self, chunk: Chunk, path: Path, pool: Any = None) -> None: ...


def encode_into(
    retriever: ShardedEncoder,
    model: Any,
    items: Iterable[tuple[str, str]],
    store: Path,
    suffix: str,
    group: Callable[[tuple[str, str]], str] | None = None,
) -> None:
    """Fill ``store`` with ``retriever``'s shard files (``shard-NNNNN<suffix>``) of ``items``,
    ``model`` encoding them on every device of its ``devices`` (or on Ray actors), and their
    ids in ``ids.json``; an interrupted fill of the same ``store`` resumes (see
    :func:`shards`, which ``group`` goes to)."""
    store.mkdir(parents=True, exist_ok=True)
    ids: list[str] = []
    progress = tqdm(
        desc=f"encoding with {retriever.document_name}", unit=" items", delay=1, disable=None
    )
    with encoding_pool(model, retriever.devices) as pool:

        def encode(chunk: Chunk, path: Path) -> None:
            retriever.write_shard(chunk, path, pool=pool)

        stored = shards(items, store, retriever.shard_size, suffix, encode, retriever, group)
        for chunk in stored:
            ids.extend(item_id for item_id, _ in chunk)
            progress.update(len(chunk))
    progress.close()
    _sweep(store)
    (store / "ids.json").write_text(json.dumps(ids))


def _sweep(store: Path) -> None:
    """Remove what writers killed mid-shard left in ``store`` (their temporaries and claims):
    every shard is stored now and this job holds the store, so nothing else writes there."""
    for debris in [*store.glob(".shard-*.tmp"), *store.glob(".shard-*.claim")]:
        debris.unlink(missing_ok=True)


def _digest(chunk: Chunk) -> str:
    digest = hashlib.sha256()
    for item_id, text in chunk:
        digest.update(f"{len(item_id)}:{item_id}{len(text)}:{text}".encode())
    return digest.hexdigest()


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".done")


def _stored(chunk: Chunk, path: Path) -> bool:
    marker = _marker(path)
    return marker.is_file() and path.is_file() and marker.read_text() == _digest(chunk)


def _mark(chunk: Chunk, path: Path) -> None:
    write_bytes_atomic(_marker(path), [_digest(chunk).encode()])


def _on_ray(
    items: Iterable[tuple[str, str]],
    store: Path,
    size: int,
    suffix: str,
    writer: ShardWriter,
    setting: ray_actors.Actors,
    group: Callable[[tuple[str, str]], str] | None = None,
) -> Iterator[Chunk]:
    """:func:`shards` with the missing shards of each window encoded by Ray Data actors."""
    window = setting.window or 16 * setting.count
    held: list[tuple[Chunk, Path]] = []
    missing: list[tuple[Chunk, Path]] = []
    for n, chunk in enumerate(chunks(items, size, group)):
        path = store / f"shard-{n:05d}{suffix}"
        held.append((chunk, path))
        if not _stored(chunk, path):
            missing.append((chunk, path))
        if len(missing) >= window:
            _encode_on_ray(missing, writer, setting)
            yield from (chunk for chunk, _ in held)
            held, missing = [], []
    _encode_on_ray(missing, writer, setting)
    yield from (chunk for chunk, _ in held)


def _encode_on_ray(
    missing: list[tuple[Chunk, Path]], writer: ShardWriter, setting: ray_actors.Actors
) -> None:
    """Write and mark the shards of ``missing`` with one Ray Data pass; each actor marks the
    shards it stored as it goes."""
    if not missing:
        return
    rows = [
        {"ids": [i for i, _ in chunk], "texts": [t for _, t in chunk], "path": str(path)}
        for chunk, path in missing
    ]
    written, failure = _ray_pass(rows, writer, setting)
    _report_lost(missing)
    if failure is not None:
        raise RuntimeError(f"encoding {len(rows)} shards on Ray actors failed: {failure}")
    for chunk, path in missing:
        if str(path) not in written or not _stored(chunk, path):
            raise RuntimeError(f"Ray encoding returned without storing {path}")


def _claim(path: Path) -> Path:
    """The file an actor holds while it writes the shard ``path`` (see :class:`_ShardActor`)."""
    return path.with_name(f".{path.name}.{os.getpid()}.claim")


def _report_lost(missing: list[tuple[Chunk, Path]]) -> None:
    """Say, a line each, which shards an actor died writing (its claim is left) and whether
    the actor Ray restarted in its place wrote them again; the claims are removed."""
    for chunk, path in missing:
        for claim in sorted(path.parent.glob(f".{path.name}.*.claim")):
            pid = claim.name[len(path.name) + 2 : -len(".claim")]
            host = claim.read_text().strip() or "its host"
            again = "written again" if _stored(chunk, path) else "not written"
            print(
                f"dapr: an encoding actor (process {pid} on {host}) was lost writing "
                f"{path.name}; Ray restarted it (up to {ray_actors.RETRIES} times) and the "
                f"shard was {again}",
                file=sys.stderr,
                flush=True,
            )
            claim.unlink(missing_ok=True)


def _ray_pass(
    rows: list[dict[str, Any]], writer: ShardWriter, setting: ray_actors.Actors
) -> tuple[set[str], str | None]:
    """The paths one Ray Data pass over ``rows`` wrote, and what went wrong (None: nothing).

    Ray Data frees a pass's actors (and their GPUs) only when the last reference to its
    operators goes, which an exception's traceback would hold; the references are dropped
    here, also when the pass failed, so later passes and jobs find the resources free."""
    import ray.data

    with warnings.catch_warnings():  # Ray 2.60 names no parameter for restarts but these
        warnings.filterwarnings("ignore", "`ray_remote_args` is deprecated")
        dataset = ray.data.from_items(rows).map_batches(
            _ShardActor,
            fn_constructor_args=(writer,),
            batch_size=1,
            concurrency=min(setting.count, len(rows)),
            num_gpus=setting.gpus,
            num_cpus=setting.cpus,
            # Ray Data's default restarts a dying actor forever: one that dies on every shard
            # (out of memory) would stall the job; after these the pass fails, the job is retried
            max_restarts=ray_actors.RETRIES,
            max_task_retries=ray_actors.RETRIES,
        )
    written: set[str] = set()
    failure = None
    try:
        for row in dataset.iter_rows():
            written.add(row["path"])
    except Exception as error:  # noqa: BLE001 -- reported by the caller, without the traceback
        failure = f"{type(error).__name__}: {error}"
    del dataset
    gc.collect()
    return written, failure


class _ShardActor:
    """A Ray Data actor: one loaded encoder writing the shards it is given."""

    def __init__(self, writer: ShardWriter):
        self.writer = writer

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for ids, texts, path in zip(batch["ids"], batch["texts"], batch["path"]):
            chunk = list(zip(map(str, ids), map(str, texts)))
            claim = _claim(Path(path))  # left behind if this process dies writing the shard
            claim.write_text(socket.gethostname())
            self.writer.write_shard(chunk, Path(path))
            _mark(chunk, Path(path))  # at once: a pass killed later keeps this shard
            claim.unlink()
        return {"path": batch["path"]}


def cuda_available() -> bool:
    """Whether torch sees a CUDA device, asked only where a GPU driver is present (or torch is
    loaded already): a CPU-only machine answers without importing torch."""
    if "torch" not in sys.modules:
        if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
            return False
        drivers = ("/proc/driver/nvidia/version", "/dev/kfd")  # NVIDIA's, ROCm's
        if not any(os.path.exists(path) for path in drivers):
            return False
    import torch

    return bool(torch.cuda.is_available())


def gpus() -> list[str]:
    """Every visible CUDA device."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [f"cuda:{i}" for i in range(torch.cuda.device_count())]


@contextmanager
def encoding_pool(model: Any, devices: Sequence[str] | None) -> Iterator[Any]:
    """A sentence-transformers multi-process pool over ``devices`` (by default every GPU when
    there are several), passed as ``pool=`` to ``encode``/``predict``; None when there is at
    most one device, so the model encodes in this process."""
    chosen = list(devices) if devices is not None else gpus()
    if len(chosen) < 2:
        yield None
        return
    pool = model.start_multi_process_pool(target_devices=chosen)
    try:
        yield pool
    finally:
        model.stop_multi_process_pool(pool)
