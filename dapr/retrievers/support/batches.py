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

On a GPU those many small batches leave it idle. :func:`encode_padded` is the GPU plan: a
shard's texts sorted by token length once, cut into batches of ``batch_size`` padded within the
batch, each text tokenized once and run through the model's ``forward`` directly. A text's
batch is then fixed by its shard (a fixed range of the corpus) and the batch size, whatever the
number of GPUs or Ray actors and the order work is handed out; the batch and shard sizes are
part of the index's cache key.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dapr.errors import DaprError

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


def encode_padded(
    model: Any, texts: Sequence[str], side: str, batch_size: int = 64, **options: Any
) -> Any:
    """``model.encode_query``/``encode_document`` of ``texts`` (in order) with the GPU plan:
    texts sorted by token length (ties in input order), batches of ``batch_size`` padded to
    their longest. ``options``: ``convert_to_numpy`` (default), ``convert_to_tensor``,
    ``pool`` (a multi-process pool: one batch per chunk) or ``show_progress_bar``; a model
    whose features this cannot build (a prompt the pooling leaves out, a router, a truncated
    dimension, left padding) is encoded batch by batch through its own encode call, with
    the same plan."""
    import torch

    if not len(texts):
        return model.encode([], **options)
    tokens = _Tokens.of(model, texts, side)
    lengths = tokens.lengths if tokens else token_lengths(model, texts, side)
    if lengths is None:
        lengths = np.array([len(t) for t in texts], dtype=np.int64)
    order = np.argsort(lengths, kind="stable")
    batches = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
    inverse = np.argsort(order)  # each text's place in the sorted order
    pool = options.pop("pool", None)
    if tokens is None or pool is not None or set(options) - _DIRECT:
        encode = model.encode_query if side == "query" else model.encode_document
        options = {**options, "show_progress_bar": False}
        if pool is not None:
            flat = [texts[i] for i in order.tolist()]
            parts = [
                encode(flat, batch_size=batch_size, chunk_size=batch_size, pool=pool, **options)
            ]
        else:
            parts = [
                encode([texts[i] for i in b.tolist()], batch_size=len(b), **options)
                for b in batches
            ]
        if isinstance(parts[0], np.ndarray):  # what the model's encode returns, as it returns it
            return np.concatenate(parts)[inverse]
        joined = torch.cat(parts)  # dense or sparse
        return joined.index_select(0, torch.from_numpy(inverse).to(joined.device))
    device = model.device
    found = None
    with torch.inference_mode():
        for n, batch in enumerate(batches):
            features = {k: v.to(device, non_blocking=True) for k, v in tokens.batch(batch)}
            out = model.forward(features)["sentence_embedding"].float()
            if found is None:
                found = torch.empty((len(texts), out.shape[1]), device=device)
            found[n * batch_size : n * batch_size + len(batch)] = out
    assert found is not None
    vectors = found.index_select(0, torch.from_numpy(inverse).to(device))
    return vectors if options.get("convert_to_tensor") else vectors.cpu().numpy()


BATCHINGS = ("auto", "exact", "padded")
"""Batch plans: ``exact`` (batches of one token length, :func:`encode_unpadded`: the same
embeddings whatever the split; the CPU default), ``padded`` (:func:`encode_padded`: the GPU
default), ``auto`` (the one for the device that encodes)."""


def check_batching(batching: Any, who: str) -> None:
    """A one-line DaprError from ``who`` unless ``batching`` is one of :data:`BATCHINGS`."""
    if batching not in BATCHINGS:
        raise DaprError(f"{who}: batching {batching!r} is not one of: {', '.join(BATCHINGS)}")


def chosen_plan(batching: str, device: str | None, devices: Sequence[str] | None) -> str:
    """``batching`` with ``auto`` decided: ``padded`` when texts are encoded on CUDA (the named
    ``device``, else the first of ``devices``, else whether torch sees a GPU), else ``exact``."""
    if batching != "auto":
        return batching
    from dapr.retrievers.support.encoding import cuda_available

    named = device or (devices[0] if devices else None)
    return "padded" if (str(named).startswith("cuda") if named else cuda_available()) else "exact"


def plan_identity(batching: str, batch_size: int, shard_size: int) -> dict[str, Any]:
    """What the plan adds to an index's identity: nothing for ``exact`` (its embeddings do not
    depend on the split), the batch and shard sizes that fix each text's batch for
    ``padded``."""
    if batching != "padded":
        return {}
    return {"batching": "padded", "batch_size": batch_size, "shard_size": shard_size}


_DIRECT = {"convert_to_numpy", "convert_to_tensor", "show_progress_bar"}
"""The encode options :func:`encode_padded` handles when it runs the model itself."""


class _Tokens:
    """Texts tokenized once: per feature the tokens of all texts end to end, each text's
    length and where it starts, and the value that pads the feature."""

    def __init__(self, flat: dict[str, Any], lengths: np.ndarray, pads: dict[str, int]):
        self.flat = flat
        self.lengths = lengths
        self.starts = np.cumsum(lengths) - lengths
        self.pads = pads

    @classmethod
    def of(cls, model: Any, texts: Sequence[str], side: str) -> _Tokens | None:
        """``texts`` as ``side``'s encode call would tokenize them, or None where the features
        cannot be rebuilt from unpadded tokens alone."""
        import torch

        tokenizer = getattr(model, "tokenizer", None)
        prompt = _prompt(model, side)
        plain = type(model[0]).__name__ == "Transformer" and not getattr(model, "truncate_dim", 0)
        if tokenizer is None or prompt or not plain or tokenizer.padding_side != "right":
            return None
        pads = {"input_ids": tokenizer.pad_token_id, "token_type_ids": tokenizer.pad_token_type_id}
        flat: dict[str, list[Any]] = {}
        lengths = []
        for start in range(0, len(texts), 1024):
            features = model.tokenize(list(texts[start : start + 1024]))
            mask = features.pop("attention_mask", None)
            if mask is None or set(features) - set(pads) or pads["input_ids"] is None:
                return None
            kept = mask.bool()
            lengths.append(mask.sum(dim=1).numpy())
            for key, values in features.items():
                flat.setdefault(key, []).append(values[kept])
        joined = {key: torch.cat(parts) for key, parts in flat.items()}
        return cls(joined, np.concatenate(lengths), {k: pads[k] for k in joined})

    def batch(self, rows: np.ndarray) -> Any:
        """The features of texts ``rows``, padded to the longest of them."""
        import torch

        lengths = torch.from_numpy(self.lengths[rows])
        width = int(lengths.max())
        steps = torch.arange(width)
        valid = steps[None, :] < lengths[:, None]
        positions = torch.from_numpy(self.starts[rows])[:, None] + steps[None, :]
        for key, flat in self.flat.items():
            taken = flat[positions.clamp_max(len(flat) - 1)]
            yield key, torch.where(valid, taken, self.pads[key])
        yield "attention_mask", valid.long()


def _prompt(model: Any, side: str) -> str:
    """The prompt ``side``'s encode call puts before each text."""
    prompts = getattr(model, "prompts", None) or {}
    name = next((n for n in _PROMPTS[side] if n in prompts), model.default_prompt_name)
    return prompts.get(name, "") if name else ""


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
    prompt = _prompt(model, side)
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
