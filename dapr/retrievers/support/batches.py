"""Encoding in batches that leave each embedding a function of its text alone.

A transformer's output for a text depends on what it is batched with in two ways. Padding: the
attention sums run over the padded length, which moves the last bits. Shape: the matrix
kernels pick their blocking (and with it the order of each sum) by the size of the product, and
a product of very few rows is summed differently from a larger one. So a corpus encoded in
shards of 7 differs from one encoded in shards of 16,384, and nearly tied items swap.

:func:`encode_unpadded` batches only texts of one token length (no padding) and never runs a
batch of fewer than :data:`MIN_TOKENS` tokens (small batches are filled with repeats), so the
embedding does not depend on the batch size, the shard size or the number of workers. Checked
on CPU kernels; GPU kernels may still choose by shape (the README says so).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

MIN_TOKENS = 32
"""The fewest tokens (rows x length) a batch is run with."""

_PROMPTS = {"query": ("query",), "document": ("document", "passage", "corpus")}
"""The prompt names sentence-transformers' ``encode_query``/``encode_document`` look for."""


def encode_unpadded(
    model: Any, texts: Sequence[str], side: str, batch_size: int = 32, **options: Any
) -> Any:
    """``model.encode_query`` (``side="query"``) or ``encode_document`` of ``texts``, in order,
    every batch made of texts of one token length. ``options`` go to the encode call (``pool``
    included); the result is what it returns (numpy array or tensor, dense or sparse)."""
    encode = model.encode_query if side == "query" else model.encode_document
    lengths = token_lengths(model, texts, side)
    if lengths is None or not len(texts):
        return encode(list(texts), batch_size=batch_size, **options)
    pool = options.get("pool")
    batches = plan_batches(lengths, batch_size, fill=pool is not None)
    options = {**options, "show_progress_bar": False}
    if pool is not None:  # the pool's chunks are the batches: all hold `widest` texts
        widest = len(batches[0])
        flat = [texts[i] for batch in batches for i in batch.tolist()]
        parts = [encode(flat, batch_size=widest, chunk_size=widest, **options)]
    else:
        parts = [
            encode([texts[i] for i in batch.tolist()], batch_size=len(batch), **options)
            for batch in batches
        ]
    order = np.concatenate(batches)
    first = np.full(len(texts), -1, dtype=np.int64)
    first[order[::-1]] = np.arange(len(order) - 1, -1, -1)  # each text's first place
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts)[first]
    import torch

    joined = parts[0] if len(parts) == 1 else torch.cat(parts)
    return joined.index_select(0, torch.from_numpy(first).to(joined.device))


def plan_batches(lengths: np.ndarray, batch_size: int, fill: bool = False) -> list[np.ndarray]:
    """Indices of texts with token ``lengths`` in batches of one length each: at most
    ``batch_size`` texts, or as many as :data:`MIN_TOKENS` tokens take (and at least two), a
    short batch filled with repeats of its first text. With ``fill``, every batch is as wide as
    the widest."""
    order = np.argsort(lengths, kind="stable")
    groups = np.split(order, np.flatnonzero(np.diff(lengths[order])) + 1)
    needs = [max(2, math.ceil(MIN_TOKENS / max(int(lengths[g[0]]), 1))) for g in groups]
    widest = max(batch_size, *needs)
    batches = []
    for group, need in zip(groups, needs):
        size = widest if fill else max(batch_size, need)
        rows = size if fill else need
        for start in range(0, len(group), size):
            batch = group[start : start + size]
            if len(batch) < rows:
                batch = np.concatenate([batch, np.repeat(batch[:1], rows - len(batch))])
            batches.append(batch)
    return batches


def token_lengths(model: Any, texts: Sequence[str], side: str) -> np.ndarray | None:
    """How many tokens ``model`` gives each of ``texts`` (with the prompt its ``side``'s encode
    call adds, truncated as it truncates), or None for a model without an attention mask."""
    prompts = getattr(model, "prompts", None) or {}
    name = next((n for n in _PROMPTS[side] if n in prompts), model.default_prompt_name)
    prompt = prompts.get(name, "") if name else ""
    router = type(model[0]).__name__ == "Router"
    options = {"task": side} if router else {}
    lengths = []
    for start in range(0, len(texts), 1024):
        batch = [prompt + text for text in texts[start : start + 1024]]
        features = model.tokenize(batch, **options)
        if "attention_mask" not in features:
            return None
        lengths.append(features["attention_mask"].sum(dim=1).numpy())
    return np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
