"""ColBERT through colbert-ai: its checkpoint as an encoder of query and passage token vectors,
exact MaxSim over shards of token vectors, PLAID scoring, and importing colbert-ai without its
process-wide side effects."""

from __future__ import annotations

import multiprocessing
import os
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Protocol

import numpy as np
import torch

from dapr.checkpoints import load
from dapr.errors import DaprError
from dapr.retrievers.support.exact import (
    TopK,
    score_candidates,
    shard_pieces,
    use_all_cores,
)


class ColBERTSettings(Protocol):
    """What a PLAID index is built and searched with (the late-interaction retriever's settings)."""

    model: str
    nbits: int
    kmeans_niters: int
    batch_size: int
    query_maxlen: int | None
    doc_maxlen: int | None
    search_options: dict[str, Any]
    """PLAID's search settings (ncells, centroid_score_threshold, ndocs) that are set."""


DTYPES = {"float16": np.float16, "float32": np.float32}
"""Storage types of token vectors."""


class ColBERTEncoder:
    """colbert-ai's ``Checkpoint`` for a model name: query and passage token vectors."""

    def __init__(
        self,
        name: str,
        query_maxlen: int | None = None,
        doc_maxlen: int | None = None,
        batch_size: int = 32,
    ):
        colbert = import_colbert()
        settings = {"query_maxlen": query_maxlen, "doc_maxlen": doc_maxlen}
        config = colbert.ColBERTConfig(**{k: v for k, v in settings.items() if v is not None})
        with quiet():
            self.checkpoint = load(
                lambda path: colbert.Checkpoint(path, colbert_config=config, verbose=0), name
            )
        self.batch_size = batch_size

    @property
    def config(self):
        """The checkpoint's ``ColBERTConfig`` with the overrides applied."""
        return self.checkpoint.colbert_config

    def queries(self, texts: Sequence[str]) -> torch.Tensor:
        """``(queries, query_maxlen, dim)`` float32 vectors, ``[MASK]``-augmented."""
        with quiet(), torch.inference_mode():
            vectors = self.checkpoint.queryFromText(list(texts), bsize=self.batch_size, to_cpu=True)
        return vectors.float()

    def documents(self, texts: Sequence[str], dtype: str = "float32") -> tuple[np.ndarray, list]:
        """The token vectors of every text, one after another (``tokens x dim``, as ``dtype``),
        and how many each text has. Texts are batched by length, so little is padded."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        parts: list[torch.Tensor | None] = [None] * len(texts)
        with quiet(), torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                batch = order[start : start + self.batch_size]
                flat, counts = self.checkpoint.docFromText(
                    [texts[i] for i in batch], bsize=len(batch), keep_dims="flatten", to_cpu=True
                )
                for i, vectors in zip(batch, torch.split(flat, counts)):
                    parts[i] = vectors.to(getattr(torch, dtype))
        encoded = [p for p in parts if p is not None]  # every one, each batch filled its own
        counts = [len(p) for p in encoded]
        dim = self.config.dim
        if not encoded:
            return np.zeros((0, dim), DTYPES[dtype]), counts
        return torch.cat(encoded).numpy(), counts


def maxsim(queries: torch.Tensor, vectors: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """ColBERT scores ``(queries, documents)``: for each query vector the largest dot product
    with a document's vectors, summed over the query's vectors. ``queries`` is ``(queries,
    tokens, dim)``; ``vectors`` holds the documents' vectors one document after another, document
    ``i`` having ``lengths[i]`` of them."""
    count, tokens, dim = queries.shape
    owner = torch.repeat_interleave(torch.arange(len(lengths)), lengths.long())
    similarity = vectors @ queries.reshape(-1, dim).T
    best = torch.full((len(lengths), similarity.shape[1]), float("-inf"))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*index_reduce\(\) is in beta")
        best.index_reduce_(0, owner, similarity, "amax", include_self=True)
    return best.view(len(lengths), count, tokens).sum(2).T


def segmented_maxsim(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """colbert-ai's CPU ``segmented_maxsim`` kernel in torch: ``scores`` (document tokens x
    query tokens) of consecutive documents of ``lengths`` tokens -> each document's score. As in
    the C++, each query token's maximum starts from 0."""
    owner = torch.repeat_interleave(torch.arange(len(lengths)), lengths.long())
    best = torch.zeros((len(lengths), scores.shape[1]), dtype=scores.dtype)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*index_reduce\(\) is in beta")
        best.index_reduce_(0, owner, scores, "amax", include_self=True)
    return best.sum(1)


def search_token_shards(
    queries: torch.Tensor,
    shards: Sequence[tuple[np.ndarray, np.ndarray]],
    k: int,
    block_size: int = 16_384,
    query_batch: int = 32,
) -> list[TopK]:
    """Exact MaxSim top ``k`` over ``shards`` of (memory-mapped) token vectors, each with the
    token count of its documents, which follow one another; one :class:`TopK` per batch of
    ``query_batch`` queries. Each block of whole documents of at most ``block_size`` tokens (or
    one longer document) is read once and scored against every query batch."""
    use_all_cores()
    total = sum(len(lengths) for _, lengths in shards)
    batches = list(torch.split(queries, query_batch))
    tops = [TopK(len(batch), min(k, total)) for batch in batches]
    first = 0
    for vectors, lengths in shards:
        starts = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        if starts[-1] != len(vectors):
            raise DaprError(
                "retriever 'late_interaction': an index shard does not match its token counts; "
                "build the index again"
            )
        for low, high in _blocks(starts, block_size):
            block = torch.from_numpy(np.array(vectors[starts[low] : starts[high]], np.float32))
            sizes = torch.from_numpy(np.asarray(lengths[low:high], np.int64))
            for batch, top in zip(batches, tops):
                top.add(maxsim(batch, block, sizes), first + low)
        first += len(lengths)
    return tops


def score_token_shards(
    queries: torch.Tensor,
    rows: Sequence[np.ndarray],
    shards: Sequence[tuple[np.ndarray, np.ndarray]],
    block_size: int = 16_384,
) -> list[np.ndarray]:
    """Exact MaxSim of each query (``queries[q]``) with each of its candidate documents
    (``rows[q]``: ascending global rows of ``shards``, as in :func:`search_token_shards`), in
    that order. Only the candidates' token vectors are read, in blocks of whole documents of at
    most ``block_size`` tokens (or one longer document)."""
    sizes = [len(lengths) for _, lengths in shards]

    def pieces(union: np.ndarray) -> Iterator[tuple[int, int, Any]]:
        for lo, _, shard, local in shard_pieces(union, sizes, max(sizes)):
            vectors, lengths = shards[shard]
            starts = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
            if starts[-1] != len(vectors):
                raise DaprError(
                    "retriever 'late_interaction': an index shard does not match its token "
                    "counts; build the index again"
                )
            counts = np.asarray(lengths, np.int64)[local]
            within = np.concatenate([[0], np.cumsum(counts)])
            for low, high in _blocks(within, block_size):
                tokens = _ranges(starts[local[low:high]], counts[low:high])
                block = np.array(vectors[tokens], np.float32)
                yield lo + low, lo + high, (block, counts[low:high], within[low:high] - within[low])

    def score(data, q: int, local: np.ndarray) -> np.ndarray:
        block, counts, starts = data
        # tokens gathered by numpy: torch's threaded indexing costs milliseconds a call
        tokens = torch.from_numpy(block[_ranges(starts[local], counts[local])])
        found = maxsim(queries[q : q + 1], tokens, torch.from_numpy(counts[local]))
        return found[0].double().numpy()

    return score_candidates(rows, pieces, score)


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The positions ``starts[i] .. starts[i] + counts[i]`` of every ``i``, one after another."""
    ends = np.cumsum(counts)
    total = int(ends[-1]) if len(ends) else 0
    return np.repeat(starts - (ends - counts), counts) + np.arange(total, dtype=np.int64)


def _blocks(starts: np.ndarray, size: int) -> Iterator[tuple[int, int]]:
    """Consecutive ranges ``[low, high)`` of documents (token offsets ``starts``) of at most
    ``size`` tokens, or a single document when one is longer."""
    low, total = 0, len(starts) - 1
    while low < total:
        high = int(np.searchsorted(starts, starts[low] + size, side="right")) - 1
        high = min(max(high, low + 1), total)
        yield low, high
        low = high


def import_colbert() -> SimpleNamespace:
    """colbert-ai's classes, imported without leaving its process-wide settings behind (it sets
    multiprocessing's start method to spawn and TOKENIZERS_PARALLELISM on import), and with its
    CPU MaxSim kernel replaced by :func:`segmented_maxsim` so nothing is compiled to encode."""
    start_method = multiprocessing.get_start_method(allow_none=True)
    parallelism = os.environ.get("TOKENIZERS_PARALLELISM")
    try:
        with warnings.catch_warnings():  # transformers' DeBERTa-v2, which colbert-ai imports
            warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.*")
            from colbert import Indexer, Searcher
            from colbert.infra import ColBERTConfig, Run, RunConfig
            from colbert.modeling.checkpoint import Checkpoint
            from colbert.modeling.colbert import ColBERT
    except ImportError as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else "not installed"
        raise DaprError(
            f"retriever 'late_interaction' needs colbert-ai, which cannot be imported ({reason}); "
            'install it with: pip install "dapr-ir[colbert]"'
        ) from None
    finally:
        if multiprocessing.get_start_method(allow_none=True) != start_method:
            multiprocessing.set_start_method(start_method, force=True)
        if parallelism is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = parallelism
    if not hasattr(ColBERT, "loaded_extensions"):
        ColBERT.segmented_maxsim = staticmethod(segmented_maxsim)
        ColBERT.loaded_extensions = True
    return SimpleNamespace(
        Checkpoint=Checkpoint,
        ColBERTConfig=ColBERTConfig,
        Indexer=Indexer,
        Searcher=Searcher,
        Run=Run,
        RunConfig=RunConfig,
    )


@contextmanager
def quiet() -> Iterator[None]:
    """Silence colbert-ai's warnings about CUDA mixed precision on a machine without CUDA."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*torch\.cuda\.amp.*", category=FutureWarning)
        warnings.filterwarnings("ignore", message=r".*CUDA is not available.*")
        yield
