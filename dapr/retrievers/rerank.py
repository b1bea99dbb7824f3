"""Cross-encoder re-ranking: a second stage over the top ``k`` items of any first-stage run.

A cross-encoder reads the query and a candidate text together, as one sequence
(``[CLS] query [SEP] text [SEP]``), so every query token attends to every text token, and a
classification head turns the joint representation into one relevance score. That is far more
accurate than comparing two independently computed vectors, and far too slow for a whole
corpus, so it only re-scores the few candidates a cheap first stage (BM25, a bi-encoder)
returned. This is how the baselines of the Chinese passage-ranking benchmarks work:
DuReader-retrieval re-ranks the top 50 passages of a RocketQA dual encoder with an ERNIE 1.0
cross-encoder (384 tokens), and T2Ranking fine-tunes bert-base-chinese as a cross-encoder over
its dual encoder's candidates. Neither checkpoint exists in a form transformers can load
(PaddlePaddle weights; not released), so the Chinese preset is a comparable public reranker.

Scores are the model's raw logits (its classification head without the sigmoid some
checkpoints ask for): the order is the same, and large logits are not squashed into ties at 1.0.
The (query, text) pairs of many queries are scored together, longest first, so batches hold
texts of similar length and carry little padding.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Annotated, Any

import numpy as np
from tqdm.auto import tqdm

from dapr.checkpoints import load, revision
from dapr.data import Run
from dapr.errors import DaprError
from dapr.interfaces import Preset
from dapr.precision import check as check_precision
from dapr.precision import check_device, dtype
from dapr.ranges import Device, Range
from dapr.retrievers.support.backends import backend_identity, check_backend, exported
from dapr.retrievers.support.encoding import encoding_pool, gpus

_CHUNK_BATCHES = 64
"""Pairs scored per call to the model, in batches: memory stays bounded by this many pairs."""


class Rerank:
    """Re-scores the first ``top_k`` items of each query of a first-stage run with a
    sentence-transformers :class:`~sentence_transformers.CrossEncoder`.

    The result holds the re-ranked items only, or with ``keep_rest`` also the remaining
    first-stage items below them, in their first-stage order. ``backend`` and ``quantize`` run
    the model on ONNX Runtime or OpenVINO, as for :class:`~dapr.retrievers.dense.Dense`.
    ``precision`` (``fp32``, ``bf16`` or ``fp16``, torch backend only) converts the loaded
    weights; scores are returned in float64 whatever the precision.

    :param model: The cross-encoder: a hub id, a local folder or ``trained/<name>``.
    :param top_k: Items of each query's first-stage list that are re-scored.
    :param max_length: Tokens kept of each (query, text) pair (None: the model's own limit).
    :param batch_size: Pairs scored per forward pass.
    :param device: The device that scores (``cpu``, ``cuda:0``...); None: a GPU if there is one.
    :param keep_rest: Keep the first-stage items below ``top_k``, in their order, under the
        re-scored ones.
    :param backend: The runtime the model runs on: ``torch``, ``onnx`` or ``openvino``.
    :param quantize: ``int8`` (onnx) or ``bf16`` (openvino) weights; None: as stored.
    :param precision: The weights converted to ``fp32``, ``bf16`` or ``fp16`` (torch only).
    """

    version = "1"
    presets = {
        "minilm": Preset(
            {"model": "cross-encoder/ms-marco-MiniLM-L-6-v2"},
            about="MiniLM-L6 cross-encoder trained on MS MARCO passages (English)",
        ),
        "minilm12": Preset(
            {"model": "cross-encoder/ms-marco-MiniLM-L-12-v2"},
            about="MiniLM-L12 cross-encoder trained on MS MARCO passages (English)",
        ),
        "bge_zh": Preset(
            {"model": "BAAI/bge-reranker-base"},
            about="BGE reranker (XLM-R base, Chinese and English) in place of the DuReader-"
            "retrieval (ERNIE 1.0, PaddlePaddle) and T2Ranking (unreleased) cross-encoders",
        ),
    }

    def __init__(
        self,
        model: str = "cross-encoder/ms-marco-MiniLM-L-6-v2",
        top_k: Annotated[int, Range(1)] = 100,
        max_length: Annotated[int | None, Range(1)] = None,
        batch_size: Annotated[int, Range(1)] = 32,
        device: Annotated[str | None, Device()] = None,
        keep_rest: bool = False,
        backend: str = "torch",
        quantize: str | None = None,
        precision: str = "fp32",
    ) -> None:
        check_backend(backend, quantize)
        check_precision(precision, "reranker 'rerank'")
        if precision != "fp32" and backend != "torch":
            raise DaprError(
                f"reranker 'rerank': precision {precision} is for backend torch, not {backend} "
                "(openvino computes in bf16 with quantize: bf16)"
            )
        if top_k < 1:
            raise DaprError(f"reranker 'rerank': top_k must be at least 1, got {top_k}")
        if batch_size < 1:
            raise DaprError(f"reranker 'rerank': batch_size must be at least 1, got {batch_size}")
        self.model_name = model
        self.top_k = top_k
        self.max_length = max_length
        self.batch_size = batch_size
        self.device = device
        self.keep_rest = keep_rest
        self.backend = backend
        self.quantize = quantize
        self.precision = precision
        self._model: Any = None

    def identity(self) -> dict:
        found = {
            "model": self.model_name,
            "revision": revision(self.model_name),
            "top_k": self.top_k,
            "max_length": self.max_length,
            "keep_rest": self.keep_rest,
        } | backend_identity(self.backend, self.quantize)
        if self.precision != "fp32":  # absent for fp32: keys from before precision existed stay
            found["precision"] = self.precision
        return found

    def model(self) -> Any:
        """The cross-encoder, loaded on first use."""
        if self._model is None:
            try:
                from sentence_transformers import CrossEncoder
            except ImportError:
                raise DaprError(
                    "reranker 'rerank' needs sentence-transformers; "
                    'install it with: pip install "dapr-ir[dense]"'
                ) from None
            options: dict[str, Any] = {"max_length": self.max_length, "device": self.device}
            if self.backend == "torch":
                model = load(CrossEncoder, self.model_name, **options)
                if self.precision != "fp32":
                    check_device(self.precision, model.device.type, "reranker 'rerank'")
                    model.to(dtype(self.precision))
            else:
                model = exported(
                    CrossEncoder, self.model_name, self.backend, self.quantize, **options
                )
            labels = model.config.num_labels
            if labels != 1:
                raise DaprError(
                    f"reranker 'rerank': model {self.model_name!r} has {labels} output labels, "
                    "not one relevance score; pick a re-ranking cross-encoder"
                )
            self._model = model  # kept only once it passed the checks
        return self._model

    def rerank(self, queries: Mapping[str, str], run: Run, texts: Mapping[str, str]) -> Run:
        """Re-rank the first ``top_k`` items of every query of ``run`` by the cross-encoder's
        score of (query text, item text); ``texts`` must hold the text of each of those items."""
        heads = run.top(self.top_k)
        _check_inputs(queries, heads, texts)
        scores = self._score(queries, heads, texts)
        items, new_scores = [], []
        for q in range(len(run)):
            head = slice(heads.offsets[q], heads.offsets[q + 1])
            codes, ranked = heads.items[head], scores[head]
            if self.keep_rest:
                tail = run.items[run.offsets[q] + len(codes) : run.offsets[q + 1]]
                codes = np.concatenate([codes, tail])
                ranked = np.concatenate([ranked, _below(ranked, len(tail))])
            items.append(codes)
            new_scores.append(ranked)
        return Run.from_lists(list(run.queries), items, new_scores, run.vocab)

    def _score(
        self, queries: Mapping[str, str], heads: Run, texts: Mapping[str, str]
    ) -> np.ndarray:
        """One score per row of ``heads``, scored in chunks of pairs across queries."""
        import torch

        from dapr.retrievers.support.exact import use_all_cores

        model = self.model()
        use_all_cores()
        scores = np.empty(len(heads.items), dtype=np.float64)
        devices = gpus() if self.device is None else []
        chunk = self.batch_size * _CHUNK_BATCHES * max(1, len(devices))
        progress = tqdm(total=len(scores), desc="re-ranking", unit=" pairs", delay=1, disable=None)
        with encoding_pool(model, devices) as pool:
            for rows, pairs in _pair_chunks(queries, heads, texts, chunk):
                order = np.argsort([-len(q) - len(t) for q, t in pairs], kind="stable")
                predicted = model.predict(
                    [pairs[i] for i in order],
                    batch_size=self.batch_size,
                    activation_fn=torch.nn.Identity(),
                    convert_to_numpy=True,
                    show_progress_bar=False,
                    pool=pool,
                )
                scores[rows[order]] = np.asarray(predicted, dtype=np.float64).reshape(-1)
                progress.update(len(pairs))
        progress.close()
        return scores


def _check_inputs(queries: Mapping[str, str], heads: Run, texts: Mapping[str, str]) -> None:
    """A DaprError for the first query or re-ranked item without a text."""
    for q, qid in enumerate(heads.queries):
        if qid not in queries:
            raise DaprError(
                f"reranker 'rerank': no text for query {qid!r} of the first-stage run; "
                "pass the same queries the first stage searched"
            )
        rows = heads.items[heads.offsets[q] : heads.offsets[q + 1]]
        for item in heads.vocab[rows]:
            if item not in texts:
                raise DaprError(
                    f"reranker 'rerank': no text for item {item!r} (query {qid!r}) of the "
                    "first-stage run; rerank with the corpus and level the first stage used"
                )


def _pair_chunks(
    queries: Mapping[str, str], heads: Run, texts: Mapping[str, str], size: int
) -> Iterator[tuple[np.ndarray, list[tuple[str, str]]]]:
    """Rows of ``heads`` and their (query, text) pairs, about ``size`` pairs at a time."""
    rows: list[int] = []
    pairs: list[tuple[str, str]] = []
    for q, qid in enumerate(heads.queries):
        query = queries[qid]
        start, end = int(heads.offsets[q]), int(heads.offsets[q + 1])
        for row, item in zip(range(start, end), heads.vocab[heads.items[start:end]]):
            rows.append(row)
            pairs.append((query, texts[item]))
        if len(pairs) >= size:
            yield np.array(rows, dtype=np.int64), pairs
            rows, pairs = [], []
    if pairs:
        yield np.array(rows, dtype=np.int64), pairs


def _below(scores: np.ndarray, n: int) -> np.ndarray:
    """``n`` strictly decreasing scores, all strictly below ``scores`` (or below 0 if empty)."""
    lowest = float(scores.min()) if len(scores) else 0.0
    step = max(1.0, abs(lowest))
    return lowest - step * np.arange(1, n + 1, dtype=np.float64)
