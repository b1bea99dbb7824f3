"""What the neural retrievers share: items in chunks, and encoding on several devices."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import islice
from typing import Any, TypeVar

T = TypeVar("T")


def chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in consecutive lists of ``size`` (the last one shorter)."""
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
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
