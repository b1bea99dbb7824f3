"""Learned sparse retrieval with SPLADE, through sentence-transformers' ``SparseEncoder``.

SPLADE (Formal et al., SIGIR 2021) reads a text with BERT and keeps its masked-language-model
head: for every input token the head gives a logit for each of the ~30k vocabulary terms. The
text's weight for a term is the largest ``log(1 + relu(logit))`` over its tokens (max pooling,
introduced with SPLADE v2), so a text becomes a vector over the vocabulary with a few hundred
non-zero weights: the words it contains, re-weighted, plus related words it does not contain
(expansion). A query and a text are scored by the dot product of their vectors. The checkpoint
the DAPR paper calls SPLADEv2 is ``naver/splade-cocondenser-ensembledistil`` (SPLADE++, Formal
et al., SIGIR 2022: CoCondenser initialisation, distilled from an ensemble of cross-encoders),
one encoder for queries and passages, up to 512 tokens each.

Index: the corpus is encoded chunk by chunk, and each chunk is written as one shard, a
``scipy.sparse`` matrix (documents x vocabulary, float32) stored column-wise, which read
transposed is an inverted index (for each term, the documents holding it). Search is exact: the
queries (a CSR matrix) times a shard's inverted index gives the queries' scores on the shard's
documents, touching only the documents that share a term with a query. Batches of queries are
scored on separate threads (scipy's sparse product releases the GIL but is single-threaded) and
the best ``k`` items are merged block by block (see :mod:`dapr.retrievers.support.exact`), so the
score matrix of all queries against the corpus is never held. Items that share no active term with a
query (score 0) are not returned, as with BM25. ``score`` ranks given candidates (hierarchical
retrieval) reading only the shards that hold them; there a candidate sharing no term scores 0.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import torch

from dapr.checkpoints import load, revision
from dapr.data import Run, id_ranks
from dapr.errors import DaprError
from dapr.ids import read_id_list
from dapr.interfaces import Preset
from dapr.io.files import write_bytes_atomic
from dapr.ranges import Device, Range
from dapr.retrievers.support.batches import (
    check_batching,
    chosen_plan,
    encode_padded,
    encode_unpadded,
    plan_identity,
)
from dapr.retrievers.support.cores import cores
from dapr.retrievers.support.encoding import encode_into
from dapr.retrievers.support.exact import (
    TopK,
    candidate_rows,
    score_candidates,
    shard_pieces,
    use_all_cores,
)
from dapr.retrievers.support.presets import paper_fusion

_SHARD = 16_384
"""Items encoded in one call and written to one shard file."""

PRESETS = {
    "spladev2": Preset(
        {"model": "naver/splade-cocondenser-ensembledistil", "max_length": 512},
        about="SPLADE++ CoCondenser-EnsembleDistil (Formal et al., 2022): the paper's SPLADEv2",
        fusion=paper_fusion("spladev2"),
    ),
}


class Sparse:
    """A SPLADE encoder: one ``model`` for both sides, or a ``query_model`` and a
    ``document_model``; ``max_length`` tokens per text (the model's own when None).

    The batch, block, shard and device settings change speed and memory, never the results; on
    CUDA the padded batch plan (as for :class:`~dapr.retrievers.dense.Dense`) makes the batch
    and shard sizes part of the index's identity. Search holds about
    ``12 * query_batch * block_size`` bytes per core (dense scores, the sparse product they come
    from, the running top ``k``) besides one shard of the index.

    :param model: The SPLADE model (sentence-transformers ``SparseEncoder``) for both sides.
    :param query_model: The model that encodes queries, in place of ``model``.
    :param document_model: The model that encodes passages or documents, in place of ``model``.
    :param max_length: Tokens kept of each text (None: the model's own limit).
    :param batch_size: Texts encoded per forward pass.
    :param block_size: Items scored at once in search.
    :param query_batch: Queries per sparse product, at most (the queries are split among the
        cores).
    :param device: The device that encodes (``cpu``, ``cuda:0``...); None: a GPU if there is one.
    :param devices: Devices that encode together, one process each (None: every GPU when there
        are several).
    :param shard_size: Items a shard file holds: the unit of resuming and of Ray encoding.
    :param batching: How documents are batched for encoding: ``exact``, ``padded`` or ``auto``
        (``padded`` on CUDA).
    """

    version = "2"
    resumable = True
    """An interrupted :meth:`index` into the same store resumes from its stored shards."""
    presets = PRESETS

    def __init__(
        self,
        model: str = "naver/splade-cocondenser-ensembledistil",
        query_model: str | None = None,
        document_model: str | None = None,
        max_length: Annotated[int | None, Range(1)] = None,
        batch_size: Annotated[int, Range(1)] = 32,
        block_size: Annotated[int, Range(1)] = _SHARD,
        query_batch: Annotated[int, Range(1)] = 1024,
        device: Annotated[str | None, Device()] = None,
        devices: Annotated[list[str] | None, Device()] = None,
        shard_size: Annotated[int, Range(1)] = _SHARD,
        batching: str = "auto",
    ) -> None:
        check_batching(batching, "retriever 'sparse'")
        for name, value in (
            ("shard_size", shard_size),
            ("max_length", max_length),
            ("batch_size", batch_size),
            ("block_size", block_size),
            ("query_batch", query_batch),
        ):
            if value is not None and value < 1:
                raise DaprError(f"retriever 'sparse': {name} must be at least 1, got {value}")
        self.query_name = query_model or model
        self.document_name = document_model or model
        self.max_length = max_length
        self.batch_size = batch_size
        self.block_size = block_size
        self.query_batch = query_batch
        self.device = device
        self.devices = devices
        self.shard_size = shard_size
        self.batching = batching
        self._models: dict[str, Any] = {}
        self._shards: list[Path] = []
        self._ids: np.ndarray | None = None

    def identity(self) -> dict[str, Any]:
        return {
            "query_model": self.query_name,
            "query_revision": revision(self.query_name),
            "document_model": self.document_name,
            "document_revision": revision(self.document_name),
            "max_length": self.max_length,
        } | plan_identity(self._plan(), self.batch_size, self.shard_size)

    def _plan(self) -> str:
        """The batch plan documents are encoded with, decided once (``auto``: ``padded`` on
        CUDA) and carried to Ray workers with the settings."""
        self.batching = chosen_plan(self.batching, self.device, self.devices)
        return self.batching

    def _model(self, name: str) -> Any:
        if name not in self._models:
            try:
                from sentence_transformers import SparseEncoder
            except ImportError:
                raise DaprError(
                    "retriever 'sparse' needs sentence-transformers 5 or later; "
                    'install it with: pip install "dapr-ir[sparse]"'
                ) from None
            encoder = load(SparseEncoder, name, device=self.device)
            if self.max_length is not None:
                config = getattr(encoder.transformers_model, "config", None)
                limit = getattr(config, "max_position_embeddings", None)
                if limit is not None and self.max_length > limit:
                    raise DaprError(
                        f"retriever 'sparse': max_length {self.max_length} exceeds the "
                        f"{limit} positions of model {name!r}; set max_length to {limit} or less"
                    )
                encoder.max_seq_length = self.max_length
            self._models[name] = encoder
        return self._models[name]

    def index(self, items: Iterable[tuple[str, str]], store: Path) -> None:
        encode_into(self, self._model(self.document_name), items, store, ".npz")
        self.load(store)

    def write_shard(self, chunk: list[tuple[str, str]], path: Path, pool: Any = None) -> None:
        """Encode ``chunk`` into the shard file ``path`` (an uncompressed CSC ``.npz``),
        atomically."""
        import scipy.sparse as sp

        encode = encode_padded if self._plan() == "padded" else encode_unpadded
        vectors = encode(
            self._model(self.document_name),
            [text for _, text in chunk],
            "document",
            batch_size=self.batch_size,
            save_to_cpu=True,
            pool=pool,
        )
        buffer = io.BytesIO()
        sp.save_npz(buffer, _to_scipy(vectors).tocsc(), compressed=False)
        write_bytes_atomic(path, [buffer.getbuffer()])

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (for a Ray worker) with its settings only: models and shards load there."""
        return {**self.__dict__, "_models": {}, "_shards": [], "_ids": None}

    def load(self, store: Path) -> None:
        self._shards = sorted(store.glob("shard-*.npz"))
        items = 0
        for path in self._shards:  # a CSC shard's shape (items x terms) is a member of its own
            with np.load(path) as shard:
                items += int(shard["shape"][0])
        self._ids = read_id_list(store / "ids.json", items)

    def search(self, queries: Mapping[str, str], k: int) -> Run:
        import scipy.sparse as sp

        if self._ids is None:
            raise RuntimeError("Sparse.search called before index() or load()")
        qids = list(queries)
        depth = min(k, len(self._ids))
        if not qids or depth < 1:
            empty = [np.zeros(0, dtype=np.int64)] * len(qids)
            return Run.from_lists(qids, empty, empty, self._ids)
        use_all_cores()
        matrix = self._encode_queries([queries[q] for q in qids])
        dim = matrix.shape[1]
        workers = cores()
        size = min(self.query_batch, -(-len(qids) // workers))
        batches = [matrix[start : start + size] for start in range(0, len(qids), size)]
        ranks = torch.from_numpy(id_ranks(self._ids))
        tops = [TopK(batch.shape[0], depth, ranks, floor=0.0) for batch in batches]
        offset = 0
        with ThreadPoolExecutor(max_workers=min(workers, len(batches))) as threads:
            for path in self._shards:
                inverted = sp.load_npz(path).T.tocsr()  # vocabulary x documents: free from CSC
                if inverted.shape[0] != dim:
                    raise DaprError(
                        f"{path}: this SPLADE index has {inverted.shape[0]} vocabulary terms but "
                        f"query model {self.query_name!r} has {dim}; use the index's own model"
                    )
                for start in range(0, inverted.shape[1], self.block_size):
                    block = _columns(inverted, start, self.block_size)
                    list(threads.map(_scorer(block, offset + start), batches, tops))
                offset += inverted.shape[1]
        return _matching(tops, qids, self._ids)

    def _encode_queries(self, texts: list[str]) -> Any:
        """The queries' sparse vectors, as a scipy CSR matrix (queries x vocabulary)."""
        encoder = self._model(self.query_name)
        return _to_scipy(
            encode_unpadded(
                encoder,
                texts,
                "query",
                batch_size=self.batch_size,
                save_to_cpu=True,
                show_progress_bar=len(texts) > 1000 and sys.stderr.isatty(),
            )
        )

    def score(self, queries: Mapping[str, str], candidates: Run) -> Run:
        """The items of ``candidates`` (its scores ignored) ranked for each of its queries that
        ``queries`` has, with the scores :meth:`search` gives them; candidates that are not in
        the index are dropped, and candidates sharing no active term with the query, which
        search leaves out, score 0. Only the shards holding candidates are read."""
        if self._ids is None:
            raise RuntimeError("Sparse.score called before index() or load()")
        qids, rows = candidate_rows(queries, candidates, self._ids)
        if not any(len(r) for r in rows):
            return Run.from_lists(qids, rows, [r.astype(np.float64) for r in rows], self._ids)
        matrix = self._encode_queries([queries[q] for q in qids])
        sizes = [_rows(path) for path in self._shards]
        opened: dict[int, Any] = {}

        def pieces(union: np.ndarray) -> Iterator[tuple[int, int, Any]]:
            for lo, hi, shard, local in shard_pieces(union, sizes, self.block_size):
                if shard not in opened:
                    opened.clear()
                    opened[shard] = self._documents(shard, matrix.shape[1])
                yield lo, hi, opened[shard][local]

        def score(block: Any, q: int, local: np.ndarray) -> np.ndarray:
            query = matrix[[q]].toarray().ravel()
            return np.asarray(block[local] @ query, dtype=np.float64)

        return Run.from_lists(qids, rows, score_candidates(rows, pieces, score), self._ids)

    def _documents(self, shard: int, dim: int) -> Any:
        """Shard ``shard`` of the index as a CSR matrix of items x vocabulary."""
        import scipy.sparse as sp

        path = self._shards[shard]
        documents = sp.load_npz(path).tocsr()
        if documents.shape[1] != dim:
            raise DaprError(
                f"{path}: this SPLADE index has {documents.shape[1]} vocabulary terms but "
                f"query model {self.query_name!r} has {dim}; use the index's own model"
            )
        return documents


def _scorer(block: Any, offset: int) -> Callable[[Any, TopK], None]:
    """Scores a batch of queries on ``block`` (vocabulary x items) into its TopK."""

    def score(batch: Any, top: TopK) -> None:
        top.add(torch.from_numpy((batch @ block).toarray()), offset)

    return score


def _matching(tops: Sequence[TopK], qids: Sequence[str], ids: np.ndarray) -> Run:
    """The run of the TopKs of consecutive query batches, without items scored 0 (sharing no
    active term with the query): zeros only fill a TopK when fewer items match, so dropping
    them at the end is the same as never scoring them, and cheaper than masking every block."""
    items: list[np.ndarray] = []
    scores: list[np.ndarray] = []
    for top in tops:
        for codes, values in zip(*top.rows()):
            keep = values > 0
            items.append(codes[keep])
            scores.append(values[keep])
    return Run.from_lists(qids, items, scores, ids)


def _rows(path: Path) -> int:
    """How many items a shard holds, read from its header alone."""
    with np.load(path) as stored:
        return int(stored["shape"][0])


def _columns(matrix: Any, start: int, size: int) -> Any:
    """Columns ``start .. start + size`` of a CSR matrix; the matrix itself when that is all."""
    if start == 0 and size >= matrix.shape[1]:
        return matrix
    return matrix[:, start : start + size]


def _to_scipy(vectors: Any) -> Any:
    """A torch tensor (sparse COO, or dense) of texts x vocabulary as a float32 scipy CSR
    matrix."""
    import scipy.sparse as sp

    vectors = vectors.coalesce() if vectors.is_sparse else vectors.to_sparse().coalesce()
    rows, cols = vectors.indices().cpu().numpy()
    values = vectors.values().float().cpu().numpy()
    return sp.csr_array((values, (rows, cols)), shape=tuple(vectors.shape), dtype=np.float32)
