"""What the neural retrievers share: items in chunks stored as shards that an interrupted
index resumes from, and encoding on several devices."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import islice
from pathlib import Path
from typing import Any, TypeVar

from dapr.io.files import write_bytes_atomic

T = TypeVar("T")


def chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in consecutive lists of ``size`` (the last one shorter)."""
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


def shards(
    items: Iterable[tuple[str, str]],
    store: Path,
    size: int,
    suffix: str,
    encode: Callable[[list[tuple[str, str]], Path], None],
) -> Iterator[list[tuple[str, str]]]:
    """Store every chunk of ``size`` items as ``store/shard-NNNNN<suffix>`` with ``encode(chunk,
    path)``, and yield the chunks in order.

    A chunk that an earlier, interrupted attempt already stored (the same ids and texts, as its
    ``.done`` marker records) is not encoded again: filling the same ``store`` again resumes.
    ``encode`` must write ``path`` atomically (see :func:`dapr.io.files.write_bytes_atomic`).
    """
    for n, chunk in enumerate(chunks(items, size)):
        path = store / f"shard-{n:05d}{suffix}"
        marker = path.with_name(path.name + ".done")
        digest = hashlib.sha256()
        for item_id, text in chunk:
            digest.update(f"{len(item_id)}:{item_id}{len(text)}:{text}".encode())
        if not (marker.is_file() and path.is_file() and marker.read_text() == digest.hexdigest()):
            encode(chunk, path)
            write_bytes_atomic(marker, [digest.hexdigest().encode()])
        yield chunk


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
