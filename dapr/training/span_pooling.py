"""Span pooling (Günther et al., 2024, arXiv 2409.04701): dual-encoder training for late chunking.

Each passage of a training row (the positive and any negatives) is encoded inside its document,
as ``dense`` with ``encoding: late`` encodes it at search time: the document's windows (the same
:func:`~dapr.retrievers.support.late_chunking.spans`), and the passage's vector the mean of its own
tokens' outputs, finished by the model's modules after its pooling; queries are encoded as usual.
Negatives are pooled the same way, since the index they must be told apart from holds
late-chunked vectors (in-batch negatives are other rows' pooled positives, as in the paper).

A row names its passages by reference (``[document key, position]`` as JSON), the documents' texts
are held once beside the rows, and only the windows a passage's tokens are pooled from are run
through the model, with gradients. sentence-transformers' trainer runs it unchanged: a collator
turns the references into windows and the rows each passage pools, and the loss is
``MultipleNegativesRankingLoss`` over those vectors.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dapr.data import Corpus
from dapr.retrievers.support.late_chunking import Frame, frame_of, spans, tokenized


def in_documents(
    corpus: Corpus, texts: Mapping[str, str], tag: str = ""
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """References to stand for the passage texts of training rows: each passage of ``texts`` ->
    ``[document key, position]`` (the key is ``tag`` and the document's id), and each document
    key -> its passages' texts in order (``texts``' own, else the passage's text)."""
    references: dict[str, str] = {}
    documents: dict[str, list[str]] = {}
    for document in corpus:
        key = f"{tag}{document.id}"
        documents[key] = [texts.get(p.id, p.text) for p in document.passages]
        for position, passage in enumerate(document.passages):
            if passage.id in texts:
                references[passage.id] = json.dumps([key, position])
    return references, documents


def check_span(kind: str, loss: str | None, workers: int, augment: bool, model: str) -> str | None:
    """Why ``encoding: late`` cannot train with these settings of a ``train:`` entry, or None:
    ``model``'s pooling when its files are here and say it is not the mean."""
    from dapr.checkpoints import offline_copy
    from dapr.retrievers.support.late_chunking import mean_pooled

    pooling = mean_pooled(offline_copy(model), None) if kind == "dual" else None
    if pooling is not None:
        return (
            f"mean-pools each passage's tokens, and model {model!r} pools by {pooling}: choose "
            "a mean-pooled model (all-MiniLM-L6-v2, jinav2) or encoding: passage"
        )
    if kind != "dual":
        return "is a dual encoder's setting; remove it for a cross-encoder"
    if loss not in (None, "mnrl"):
        return f"trains with loss mnrl, not {loss}; set loss: mnrl or encoding: passage"
    if workers > 1:
        return "trains on one worker; set workers: 1 or encoding: passage"
    if augment:
        return "does not take pseudo-labelled rows; remove augment or set encoding: passage"
    return None


class SpanCollator:
    """The trainer's collator for span pooling: the ``plain`` collator's features for the query
    column (and the labels), and for each column of ``spanned`` (references of
    :func:`in_documents`) the windows its passages are pooled from (``input_ids``,
    ``attention_mask``, ``token_type_ids`` where the model takes them) with ``span_index`` (the
    pooled rows of the windows' outputs laid end to end) and ``span_row`` (whose row each is)."""

    def __init__(
        self,
        plain: Any,
        model: Any,
        frame: Frame,
        documents: Mapping[str, Sequence[str]],
        spanned: Sequence[str],
    ) -> None:
        self.plain, self.model, self.frame = plain, model, frame
        self.documents, self.spanned = documents, tuple(spanned)
        self.typed = "token_type_ids" in model.tokenize(["a"])
        self.pad = model.tokenizer.pad_token_id or 0
        self._seen: dict[str, tuple[list[int], np.ndarray, np.ndarray, list[np.ndarray]]] = {}

    @property
    def valid_label_columns(self) -> list[str]:
        """The label columns (the trainer's batch sampler asks)."""
        return list(self.plain.valid_label_columns)

    @property
    def include_prompt_lengths(self) -> bool:
        """Whether the queries' features carry their prompt's length (the trainer sets it)."""
        return bool(self.plain.include_prompt_lengths)

    @include_prompt_lengths.setter
    def include_prompt_lengths(self, value: bool) -> None:
        self.plain.include_prompt_lengths = value

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        batch: dict[str, Any] = self.plain(
            [{k: v for k, v in row.items() if k not in self.spanned} for row in rows]
        )
        for column in self.spanned:
            for key, value in self.features([row[column] for row in rows]).items():
                batch[f"{column}_{key}"] = value
        return batch

    def _document(self, key: str) -> tuple[list[int], np.ndarray, np.ndarray, list[np.ndarray]]:
        """A document's tokens, windows and pooled rows (:func:`spans`), worked out once."""
        if key not in self._seen:
            passages = tokenized(self.model, self.documents[key])
            tokens = [t for passage in passages for t in passage]
            self._seen[key] = (tokens, *spans([len(p) for p in passages], self.frame))
        return self._seen[key]

    def features(self, references: Sequence[str]) -> dict[str, Any]:
        """The windows and pooled rows of the passages ``references`` name (a window two of
        them pool from is run once)."""
        import torch

        framed: list[list[int]] = []
        slots: dict[tuple[str, int], int] = {}
        places: list[tuple[int, np.ndarray, int]] = []  # slot, places in it, passage
        for n, reference in enumerate(references):
            key, position = json.loads(reference)
            tokens, starts, stops, rows = self._document(key)
            width = int(stops[0] - starts[0]) + len(self.frame.prefix) + len(self.frame.suffix)
            mine = rows[position]
            for window in np.unique(mine // width).tolist():
                if (key, window) not in slots:
                    slots[key, window] = len(framed)
                    content = tokens[int(starts[window]) : int(stops[window])]
                    framed.append([*self.frame.prefix, *content, *self.frame.suffix])
                taken = mine[mine // width == window] % width
                places.append((slots[key, window], taken, n))
        longest = max(len(w) for w in framed)
        ids = torch.full((len(framed), longest), self.pad, dtype=torch.long)
        mask = torch.zeros((len(framed), longest), dtype=torch.long)
        for slot, window_ids in enumerate(framed):
            ids[slot, : len(window_ids)] = torch.tensor(window_ids)
            mask[slot, : len(window_ids)] = 1
        index = np.concatenate([slot * longest + taken for slot, taken, _ in places])
        owner = np.concatenate([np.full(len(taken), n) for _, taken, n in places])
        found = {"input_ids": ids, "attention_mask": mask}
        if self.typed:
            found["token_type_ids"] = torch.zeros_like(ids)
        found["span_index"] = torch.from_numpy(index.astype(np.int64))
        found["span_row"] = torch.from_numpy(owner.astype(np.int64))
        return found


def span_vectors(model: Any, features: Mapping[str, Any]) -> Any:
    """The passages' vectors from :class:`SpanCollator`'s features: the model's ``Transformer``
    over the windows, each passage the mean of its rows, then the modules after the pooling
    (``Normalize``...), with gradients."""
    import torch

    names = ("input_ids", "attention_mask", "token_type_ids")
    tokens = model[0]({k: features[k] for k in names if k in features})["token_embeddings"]
    flat = tokens.reshape(-1, tokens.shape[-1])[features["span_index"]]
    rows = features["span_row"]
    count = int(rows.max()) + 1
    sums = torch.zeros((count, flat.shape[1]), dtype=flat.dtype, device=flat.device)
    sums = sums.index_add(0, rows, flat)
    pooled = sums / torch.bincount(rows, minlength=count).unsqueeze(1).to(flat.dtype)
    finished: dict[str, Any] = {"sentence_embedding": pooled}
    for module in list(model)[2:]:
        finished = module(finished)
    return finished["sentence_embedding"]


def span_training(
    model: Any,
    name: str,
    settings: Any,
    documents: Mapping[str, Sequence[str]],
    columns: Sequence[str],
    arguments: Any,
) -> tuple[SpanCollator, Any]:
    """The collator and the loss that train ``model`` (named ``name`` in errors) by span
    pooling: the passage ``columns`` (all but the first, the queries) pooled inside their
    documents in windows of ``settings.late_window`` and ``settings.late_overlap``; queries
    through the collator the trainer ``arguments`` would give (their prompt, no router)."""
    from sentence_transformers import losses
    from sentence_transformers.data_collator import SentenceTransformerDataCollator

    frame = frame_of(model, name, settings.late_window, settings.late_overlap, "training")
    plain = SentenceTransformerDataCollator(tokenize_fn=model.tokenize, prompts=arguments.prompts)

    class SpanPooledLoss(losses.MultipleNegativesRankingLoss):
        """In-batch negatives over queries encoded as usual and span-pooled passages."""

        def forward(self, sentence_features: Any, labels: Any) -> Any:
            queries, *passages = sentence_features
            embeddings = [self.model(queries)["sentence_embedding"]]
            embeddings += [span_vectors(self.model, f) for f in passages]
            return self.compute_loss_from_embeddings(embeddings, labels)

    collator = SpanCollator(plain, model, frame, documents, columns[1:])
    return collator, SpanPooledLoss(model)
