"""Late chunking (Günther et al., 2024, arXiv 2409.04701): passages pooled inside their document.

A document's passages are tokenized once each (no special tokens) and concatenated in order; the
document is run through the encoder in windows of ``size`` content tokens, each framed by the
model's own special tokens (``[CLS] ... [SEP]``). A document longer than one window is covered by
windows ``size - overlap`` apart, the last one ending at the document's end (so every window is
full). Each token's output is taken from the window where it is most central (nearest that
window's middle, the earlier window on a tie), which splits an overlap at its middle; the paper's
long late chunking instead keeps the whole overlap from the earlier window, where those tokens
sit at its edge, and lets its last window run short. A passage's vector is the mean of its own
tokens' outputs; the first window's leading special tokens are pooled with the first passage and
the last window's trailing ones with the last passage, so a one-passage document is encoded
exactly as ordinary mean pooling encodes that passage. A passage with no tokens gets its
document's mean.

:func:`spans` says which outputs each passage pools (span-pooled training uses it too) and
:func:`late_chunk` is the algorithm over token ids (the encoder is a function it calls);
:func:`window_outputs` runs a sentence-transformers model's ``Transformer`` module over windows
with dapr's batch plans, and :func:`mean_pooled` tells from a model's files whether it pools by
the mean (what late chunking needs), before any model is loaded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dapr.errors import DaprError
from dapr.retrievers.support.batches import plan_batches

Encode = Callable[[list[list[int]]], list[np.ndarray]]
"""Windows of token ids (special tokens included) -> each window's per-token outputs."""


@dataclass(frozen=True)
class Frame:
    """How a model frames a window: ``size`` content tokens at most, ``overlap`` of them shared
    by consecutive windows, between the special tokens ``prefix`` and ``suffix``."""

    size: int
    overlap: int
    prefix: tuple[int, ...]
    suffix: tuple[int, ...]


def windows(length: int, size: int, overlap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The windows over ``length`` tokens (``starts``, ``stops``) and each token's owner, the
    window it is most central in (nearest its middle; the earlier one on a tie)."""
    if not 0 <= overlap < size:
        raise ValueError(f"overlap {overlap} must be in [0, window size {size})")
    if length <= size:
        return np.zeros(1, np.int64), np.array([length]), np.zeros(length, np.int64)
    step = size - overlap
    starts = np.array([*range(0, length - size, step), length - size], dtype=np.int64)
    stops = starts + size
    centres = starts + stops - 1  # twice each middle: integers
    boundaries = (centres[:-1] + centres[1:]) / 2  # in twice-token units
    owner = np.searchsorted(boundaries, 2 * np.arange(length), side="left")
    return starts, stops, owner.astype(np.int64)


def spans(lengths: Sequence[int], frame: Frame) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """For a document whose passages have ``lengths`` tokens: its windows (``starts``, ``stops``
    over its content tokens; framed, all are as long) and per passage the outputs it mean-pools,
    as rows of its windows' outputs laid end to end (``window * framed length + place``): its
    own tokens from the window each is most central in, the first window's leading special
    tokens with the first passage and the last window's trailing ones with the last; a passage
    with no tokens pools them all (its document's mean)."""
    total = int(sum(lengths))
    starts, stops, owner = windows(total, frame.size, frame.overlap)
    lead, trail = len(frame.prefix), len(frame.suffix)
    width = int(stops[0] - starts[0]) + lead + trail
    tokens = owner * width + np.arange(total) - starts[owner] + lead
    heads = np.arange(lead)
    tails = len(starts) * width - trail + np.arange(trail)
    whole = np.concatenate([heads, tokens, tails])
    rows, at = [], 0
    for n, length in enumerate(lengths):
        parts = [tokens[at : at + length]]
        at += length
        if n == 0:
            parts.insert(0, heads)
        if n == len(lengths) - 1:
            parts.append(tails)
        rows.append(np.concatenate(parts) if length else whole)
    return starts, stops, rows


def late_chunk(
    documents: Sequence[Sequence[Sequence[int]]], encode: Encode, frame: Frame
) -> list[np.ndarray]:
    """Per document (a list of passages, each its token ids), one mean-pooled vector per passage
    (float32, ``(passages, dim)``; the rows of :func:`spans`), from the outputs ``encode`` gives
    every window of every document, called once."""
    framed: list[list[int]] = []
    plans = []
    for passages in documents:
        tokens = [t for passage in passages for t in passage]
        starts, stops, rows = spans([len(p) for p in passages], frame)
        plans.append((len(framed), len(starts), rows))
        for start, stop in zip(starts.tolist(), stops.tolist()):
            framed.append([*frame.prefix, *tokens[start:stop], *frame.suffix])
    outputs = encode(framed) if framed else []
    pooled = []
    for first, count, rows in plans:
        # a document's windows are all as long (full, or its only one): one array
        stacked = np.concatenate([np.asarray(o) for o in outputs[first : first + count]])
        vectors = np.zeros((len(rows), stacked.shape[1]), np.float64)
        for n, mine in enumerate(rows):
            vectors[n] = stacked[mine].astype(np.float64).mean(axis=0)
        pooled.append(vectors.astype(np.float32))
    return pooled


def packed(documents: Iterable[Sequence[tuple[str, str, bool]]]) -> Iterator[tuple[str, str]]:
    """One item ``(id, text)`` per candidate passage of ``documents`` (each its passages' ``(id,
    text, is_candidate)`` in order), the text a JSON ``[document, texts, own]``: the document's
    key (its first passage's id), the texts this item brings (the non-candidates before it, its
    own at ``own``, and after the last candidate the document's trailing ones). Items carry
    their document, so a shard (written here or by a Ray actor) rebuilds whole documents."""
    for passages in documents:
        candidates = [i for i, (_, _, candidate) in enumerate(passages) if candidate]
        if not candidates:
            continue
        since = 0
        for c in candidates:
            stop = len(passages) if c == candidates[-1] else c + 1
            texts = [text for _, text, _ in passages[since:stop]]
            yield passages[c][0], json.dumps([passages[0][0], texts, c - since])
            since = stop


def document_key(item: tuple[str, str]) -> str:
    """The document a :func:`packed` item belongs to."""
    return str(json.loads(item[1])[0])


def shard_vectors(
    model: Any, chunk: Sequence[tuple[str, str]], frame: Frame, encode: Encode
) -> Any:
    """The late-chunked vectors of a chunk of :func:`packed` items (whole documents), finished
    by the model's modules after its pooling: one row per item, in order."""
    documents: list[tuple[list[str], list[int]]] = []  # texts, and where the items' own are
    last = None
    for _, text in chunk:
        key, texts, own = json.loads(text)
        if key != last:
            documents.append(([], []))
            last = key
        texts_so_far, owns = documents[-1]
        owns.append(len(texts_so_far) + own)
        texts_so_far.extend(texts)
    flat = tokenized(model, [t for texts, _ in documents for t in texts])
    grouped, at = [], 0
    for texts, _ in documents:
        grouped.append(flat[at : at + len(texts)])
        at += len(texts)
    pooled = late_chunk(grouped, encode, frame)
    rows = [vectors[owns] for vectors, (_, owns) in zip(pooled, documents)]
    dim = model[0].get_word_embedding_dimension()
    joined = np.concatenate(rows) if rows else np.zeros((0, dim), np.float32)
    return pooled_output(model, joined)


ENCODINGS = ("passage", "late")
"""How the dense retriever encodes passages: each alone, or late-chunked in its document."""


def check_late(
    encoding: str,
    window: int | None,
    overlap: int | None,
    backend: str,
    model: str,
    pooling: str | None,
) -> None:
    """A one-line DaprError for settings late chunking cannot run with, found before any work:
    ``pooling`` (or, without it, ``model``'s files when they are here) that is not the mean."""
    if encoding not in ENCODINGS:
        raise DaprError(f"dense: encoding {encoding!r} is not one of: {', '.join(ENCODINGS)}")
    if encoding == "passage":
        if window is not None or overlap is not None:
            raise DaprError(
                "dense: late_window and late_overlap are settings of encoding: late; "
                "set encoding: late or remove them"
            )
        return
    if backend != "torch":
        raise DaprError(f"dense: encoding late runs on the torch backend; remove backend {backend}")
    if window is not None and overlap is not None and overlap >= window:
        raise DaprError(f"dense: late_overlap {overlap} must be below late_window {window}")
    from dapr.checkpoints import offline_copy

    found = mean_pooled(offline_copy(model), pooling)
    if found is not None:
        raise DaprError(_not_mean(model, found))


def _not_mean(model: str, pooling: str, who: str = "dense") -> str:
    return (
        f"{who}: encoding late mean-pools each passage's tokens, and model {model!r} pools by "
        f"{pooling}: choose a mean-pooled model (all-MiniLM-L6-v2, jinav2) or encoding: passage"
    )


def late_identity(encoding: str, window: int | None, overlap: int | None) -> dict[str, Any]:
    """What late chunking adds to the index's identity (nothing for ``passage``, so those keys
    stay as they were); the keys name ``document`` (queries are encoded as usual)."""
    if encoding == "passage":
        return {}
    return {"document_encoding": encoding, "document_window": window, "document_overlap": overlap}


def frame_of(
    model: Any, name: str, size: int | None, overlap: int | None, who: str = "dense"
) -> Frame:
    """The window frame of the loaded ``model`` (named ``name`` in errors, which begin with
    ``who``): its special tokens around one sequence (found by tokenizing a word with and
    without them), ``size`` (default: its ``max_seq_length``) less those, and ``overlap``
    (default: a quarter of that)."""
    found = loaded_pooling(model)
    if found is not None:
        raise DaprError(_not_mean(name, found, who))
    limit = model.max_seq_length
    if size is not None and size > limit:
        raise DaprError(f"{who}: late_window {size} is over {name!r}'s {limit} tokens; lower it")
    tokenizer = model.tokenizer
    bare = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a")["input_ids"]
    at = next(i for i in range(len(full)) if full[i : i + len(bare)] == bare)
    prefix, suffix = tuple(full[:at]), tuple(full[at + len(bare) :])
    content = (size or limit) - len(prefix) - len(suffix)
    shared = content // 4 if overlap is None else overlap
    if not 0 <= shared < content:
        raise DaprError(
            f"{who}: late_overlap {shared} must be below the window's {content} text tokens "
            f"({size or limit} less {len(prefix) + len(suffix)} special ones); lower it"
        )
    return Frame(content, shared, prefix, suffix)


def tokenized(model: Any, texts: Sequence[str]) -> list[list[int]]:
    """``texts`` as the model's ``Transformer`` module tokenizes them (stripped, lower-cased
    when it lower-cases), without special tokens and without truncation."""
    lower = getattr(model[0], "do_lower_case", False)
    prepared = [t.strip().lower() if lower else t.strip() for t in texts]
    if not prepared:
        return []
    found = model.tokenizer(prepared, add_special_tokens=False, verbose=False)["input_ids"]
    return [list(ids) for ids in found]


def window_outputs(model: Any, framed: list[list[int]], batch_size: int, padded: bool) -> Any:
    """The ``Transformer`` module's token outputs for each window (float32 numpy arrays): with
    ``padded`` (the GPU plan) windows sorted by length in padded batches of ``batch_size``,
    else batches of one length (:func:`~dapr.retrievers.support.batches.plan_batches`), so a
    window's output does not depend on what it was batched with."""
    import torch

    transformer, device = model[0], model.device
    pad = model.tokenizer.pad_token_id or 0
    typed = "token_type_ids" in model.tokenize(["a"])
    lengths = np.array([len(w) for w in framed], dtype=np.int64)
    if padded:
        order = np.argsort(lengths, kind="stable")
        batches = [order[s : s + batch_size] for s in range(0, len(order), batch_size)]
    else:
        batches = plan_batches(lengths, batch_size)
    found: list[np.ndarray | None] = [None] * len(framed)
    with torch.inference_mode():
        for batch in batches:
            width = int(lengths[batch].max())
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, n in enumerate(batch.tolist()):
                ids[row, : lengths[n]] = torch.tensor(framed[n])
                mask[row, : lengths[n]] = 1
            features = {"input_ids": ids.to(device), "attention_mask": mask.to(device)}
            if typed:
                features["token_type_ids"] = torch.zeros_like(features["input_ids"])
            out = transformer(features)["token_embeddings"].float().cpu().numpy()
            for row, n in enumerate(batch.tolist()):
                if found[n] is None:  # a batch filled with repeats computes them again
                    found[n] = out[row, : lengths[n]]
    return found


def pooled_output(model: Any, vectors: np.ndarray) -> np.ndarray:
    """Mean-pooled ``vectors`` through the modules after the model's pooling (``Normalize``, a
    ``Dense`` projection...), as its own ``encode`` would finish them."""
    import torch

    weights = next(model.parameters()).dtype  # a half-precision model's own modules
    features = {"sentence_embedding": torch.from_numpy(vectors).to(model.device, weights)}
    with torch.inference_mode():
        for module in list(model)[2:]:
            features = module(features)
    return features["sentence_embedding"].float().cpu().numpy()


def loaded_pooling(model: Any) -> str | None:
    """The pooling of a loaded sentence-transformers ``model`` when late chunking cannot use
    it (not a ``Transformer`` then a mean ``Pooling``), else None."""
    names = [type(module).__name__ for module in model]
    if names[:2] != ["Transformer", "Pooling"]:
        return " -> ".join(names)
    mode = model[1].get_pooling_mode_str()
    return None if mode == "mean" else mode


def mean_pooled(path: str | None, pooling: str | None) -> str | None:
    """The pooling that keeps a model from late chunking (None: mean, or unknown until it is
    loaded): ``pooling`` when given, else what the model's files at ``path`` say (no
    ``modules.json``: sentence-transformers pools by the mean)."""
    if pooling is not None:
        return None if pooling == "mean" else pooling
    if path is None or not (Path(path) / "modules.json").is_file():
        return None
    modules = json.loads((Path(path) / "modules.json").read_text())
    for module in modules:
        if module.get("type", "").endswith("Pooling"):
            config = json.loads((Path(path) / module["path"] / "config.json").read_text())
            modes = [k[len("pooling_mode_") :] for k, v in config.items() if _mode(k, v)]
            return None if modes == ["mean_tokens"] else "+".join(modes) or "none"
    return None


def _mode(key: str, value: Any) -> bool:
    return key.startswith("pooling_mode_") and value is True
