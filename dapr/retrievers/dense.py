"""Dense retrieval with sentence-transformers: exact top-k over memory-mapped embedding shards.

The corpus is encoded chunk by chunk into ``shard-NNNNN.npy`` files (float32), on every visible
GPU when there are several; search maps the shards back and scores them block by block (see
:mod:`dapr.retrievers.support.exact`), so neither encoding nor search holds the corpus in memory.
Texts are batched by token length and scores are exact (:mod:`~dapr.retrievers.support.canonical`),
so a run does not depend on batch, block or shard sizes, nor on how many workers encoded it.
The shards live in the index store, whose cache key is the model's name and revision, its pooling
and length, the corpus fingerprint and the contextualizer: an encoded corpus is never encoded again.
``score`` ranks given candidates (hierarchical retrieval) reading only their rows of the shards.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np

from dapr.checkpoints import revision, sentence_transformer
from dapr.data import Run
from dapr.errors import DaprError
from dapr.ids import read_id_list
from dapr.interfaces import Preset
from dapr.io.files import write_bytes_atomic
from dapr.precision import check, check_device, dtype
from dapr.ranges import Device, Range
from dapr.retrievers.support.backends import backend_identity, check_backend, exported
from dapr.retrievers.support.batches import (
    check_batching,
    chosen_plan,
    encode_padded,
    encode_unpadded,
    plan_identity,
)
from dapr.retrievers.support.encoding import encode_into
from dapr.retrievers.support.late_chunking import (
    check_late,
    document_key,
    frame_of,
    late_identity,
    packed,
    shard_vectors,
    window_outputs,
)
from dapr.retrievers.support.presets import paper_fusion
from dapr.retrievers.support.quantized import scoring as quantized_scoring
from dapr.retrievers.support.query_vectors import SHARED

if TYPE_CHECKING:
    import torch
# search and scoring (support.canonical, support.exact) import torch when first used: a run
# whose dense steps are all cached never loads it

_SHARD = 16_384
"""Items encoded in one call and written to one shard file."""

PRESETS = {
    "dragon_plus": Preset(
        {
            "query_model": "facebook/dragon-plus-query-encoder",
            "document_model": "facebook/dragon-plus-context-encoder",
            "pooling": "cls",
            "similarity": "dot",
            "max_length": 512,
        },
        levels=("passage",),
        about="DRAGON+ (Lin et al., 2023): the paper's dense passage retriever",
        fusion=paper_fusion("dragon_plus"),
    ),
    "jinav2": Preset(
        {
            "model": "jinaai/jina-embeddings-v2-base-en",
            "pooling": "mean",
            "similarity": "cosine",
            "max_length": 8192,
            "trust_remote_code": True,
        },
        levels=("document",),
        about="Jina embeddings v2 (8,192 tokens): long-document retrieval (paper Appendix D)",
    ),
}


class Dense:
    """A bi-encoder: one ``model`` for both sides, or a ``query_model`` and a ``document_model``
    (DRAGON+ style). Pooling and similarity are the model's own unless overridden.

    The batch, block, shard and device settings change speed and memory, never the results;
    another ``backend`` is faster and slightly different. On CUDA, search runs on the GPU with
    the CPU path's results, and the padded batch plan's batch and shard sizes key the index.

    :param model: The sentence-transformers model for both sides: a hub id or a local folder.
    :param query_model: The model that encodes queries, in place of ``model``.
    :param document_model: The model that encodes passages or documents, in place of ``model``.
    :param pooling: A pooling mode (``cls``, ``mean``, ``max``...) in place of the model's own.
    :param similarity: ``cosine``, ``dot``, ``euclidean`` or ``manhattan``, for the model's own.
    :param max_length: Tokens kept of each text (None: the model's own limit).
    :param revision: The hub revision (commit, branch or tag) of the models to load.
    :param trust_remote_code: Run the code the model's hub repository ships (Jina v2 needs it).
    :param batch_size: Texts encoded per forward pass.
    :param block_size: Items scored at once in search.
    :param query_batch: Queries scored at once in search.
    :param device: The device that encodes (``cpu``, ``cuda:0``...); None: a GPU if there is one.
    :param devices: Devices that encode together, one process each (None: every GPU if several).
    :param shard_size: Items a shard file holds: the unit of resuming and of Ray encoding.
    :param backend: The runtime the model runs on: ``torch``, ``onnx`` or ``openvino``.
    :param quantize: ``int8`` (onnx) or ``bf16`` (openvino) weights; None: as stored.
    :param search_device: Where exact search runs: ``cpu``, a device or a list (None: the
        encoder's GPU, or every GPU when no device was named; the CPU without one).
    :param search_memory: The share of each GPU's memory search may use.
    :param batching: ``exact``, ``padded`` or ``auto`` (``padded`` on CUDA with torch): how
        documents are batched for encoding.
    :param precision: The weights converted to ``fp32``, ``bf16`` or ``fp16`` (torch only).
    :param encoding: ``passage`` (each passage alone) or ``late``: late chunking, each passage
        mean-pooled from its document's encoding (:mod:`~dapr.retrievers.support.late_chunking`;
        mean-pooled models only).
    :param late_window: Tokens per window of a late-chunked document (None: the model's limit).
    :param late_overlap: Tokens consecutive windows share (None: a quarter of a window).
    :param quantization: ``int8`` or ``binary``: search a compressed copy of the index first,
        then rescore its best ``k x rescore_multiplier`` exactly (``none``: exact search).
    :param rescore_multiplier: Candidates per result the compressed first pass keeps.
    :param ivf_lists: Binary codes only: partition them into this many lists (FAISS's binary
        IVF, a cached step) and search ``ivf_probe`` of them per query (0: scan every code).
    :param ivf_probe: Lists the IVF first pass searches per query.
    """

    version = "3"
    scoring = "tree-sum"
    """Keys runs apart from indexes: exact scores summed in a fixed order (CPU and GPU alike)."""
    resumable = True
    """An interrupted :meth:`index` into the same store resumes from its stored shards."""
    presets = PRESETS

    def __init__(
        self,
        model: str = "sentence-transformers/all-MiniLM-L6-v2",
        query_model: str | None = None,
        document_model: str | None = None,
        pooling: str | None = None,
        similarity: str | None = None,
        max_length: Annotated[int | None, Range(1)] = None,
        revision: str | None = None,
        trust_remote_code: bool = False,
        batch_size: Annotated[int, Range(1)] = 64,
        block_size: Annotated[int, Range(1)] = 65_536,
        query_batch: Annotated[int, Range(1)] = 4096,
        device: Annotated[str | None, Device()] = None,
        devices: Annotated[list[str] | None, Device()] = None,
        shard_size: Annotated[int, Range(1)] = _SHARD,
        backend: str = "torch",
        quantize: str | None = None,
        search_device: Annotated[str | list[str] | None, Device()] = None,
        search_memory: Annotated[float, Range(0, 1, min_open=True)] = 0.5,
        batching: str = "auto",
        precision: str = "fp32",
        encoding: str = "passage",
        late_window: Annotated[int | None, Range(3)] = None,
        late_overlap: Annotated[int | None, Range(0)] = None,
        quantization: str = "none",
        rescore_multiplier: Annotated[int, Range(1)] = 4,
        ivf_lists: Annotated[int, Range(0)] = 0,
        ivf_probe: Annotated[int, Range(1)] = 32,
    ) -> None:
        check_backend(backend, quantize)
        check_batching(batching, "dense")
        check(precision, "dense")
        if precision != "fp32" and backend != "torch":
            raise DaprError(f"precision {precision}: for backend torch; {backend} has quantize")
        if not isinstance(search_memory, int | float) or not 0 < search_memory <= 1:
            raise DaprError(
                f"search_memory {search_memory!r}: give the share of each GPU's memory exact "
                "search may use, in (0, 1] (default 0.5)"
            )
        if backend != "torch" and pooling is not None:
            raise DaprError(f"backend {backend}: give a sentence-transformers model, not pooling")
        self.query_name = query_model or model
        self.document_name = document_model or model
        check_late(encoding, late_window, late_overlap, backend, self.document_name, pooling)
        self.encoding, self.late_window, self.late_overlap = encoding, late_window, late_overlap
        self.scoring = quantized_scoring(
            Dense.scoring, quantization, rescore_multiplier, similarity, ivf_lists, ivf_probe
        )
        self.quantization, self.rescore_multiplier = quantization, rescore_multiplier
        self.ivf_lists, self.ivf_probe = ivf_lists, ivf_probe
        self.pooling, self.similarity, self.max_length = pooling, similarity, max_length
        self.revision, self.trust_remote_code = revision, trust_remote_code
        self.batch_size, self.block_size, self.query_batch = batch_size, block_size, query_batch
        self.device, self.devices = device, devices
        self.shard_size = shard_size
        self.backend = backend
        self.quantize = quantize
        self.search_device = search_device
        self.search_memory = search_memory
        self.batching = batching
        self.precision = precision
        self._models: dict[str, Any] = {}
        self._shards: list[np.ndarray] = []
        self._ids: np.ndarray | None = None
        self._on_devices: Any = None
        self._compressed: Any = None

    def identity(self) -> dict[str, Any]:
        """What determines the results: the models and their revisions, pooling, similarity..."""
        return (
            {
                "query_model": self.query_name,
                "query_revision": revision(self.query_name, self.revision),
                "document_model": self.document_name,
                "document_revision": revision(self.document_name, self.revision),
                "pooling": self.pooling,
                "similarity": self.similarity,
                "max_length": self.max_length,
            }
            | backend_identity(self.backend, self.quantize)
            | self._plan_identity()
            | late_identity(self.encoding, self.late_window, self.late_overlap)
        )

    @property
    def by_document(self) -> bool:
        """Late chunking indexes passages from whole documents (:meth:`index_documents`)."""
        return self.encoding == "late"

    def _plan_identity(self) -> dict[str, Any]:
        """What else decides the embeddings: the precision when not fp32, and with the padded
        (GPU) batch plan the batch and shard sizes that fix each text's batch. The default CPU
        plan adds nothing, so its cache keys stay those from before either existed."""
        found: dict[str, Any] = {}
        if self.precision != "fp32":
            found["precision"] = self.precision
        return found | plan_identity(self._plan(), self.batch_size, self.shard_size)

    def _plan(self) -> str:
        """The batch plan documents are encoded with, decided once (``auto``: ``padded`` on
        CUDA with the torch backend) and carried to Ray workers with the settings, so a
        cluster encodes with the plan its cache key names."""
        if self.batching == "auto" and self.backend != "torch":
            self.batching = "exact"
        self.batching = chosen_plan(self.batching, self.device, self.devices)
        return self.batching

    def _model(self, name: str) -> Any:
        if name not in self._models:
            options: dict[str, Any] = {"trust_remote_code": self.trust_remote_code}
            if self.revision:
                options["revision"] = self.revision
            if self.backend == "torch":
                encoder = sentence_transformer(
                    name, self.pooling, self.similarity, self.device, **options
                )
            else:
                from sentence_transformers import SentenceTransformer

                options.pop("revision", None)
                encoder = exported(
                    SentenceTransformer,
                    name,
                    self.backend,
                    self.quantize,
                    self.revision,
                    device=self.device,
                    similarity_fn_name=self.similarity,
                    **options,
                )
            if self.max_length:
                encoder.max_seq_length = self.max_length
            if self.precision != "fp32":
                check_device(self.precision, encoder.device.type, "dense")
                encoder.to(dtype(self.precision))
            self._models[name] = encoder
        return self._models[name]

    def index(self, items: Iterable[tuple[str, str]], store: Path) -> None:
        """Encode ``(id, text)`` pairs into shards in the folder ``store``, then search them."""
        if self.by_document:  # late chunking: each item a document of its own
            self.index_documents(([(i, text, True)] for i, text in items), store)
            return
        encode_into(self, self._model(self.document_name), items, store, ".npy")
        self.load(store)

    def index_documents(
        self, documents: Iterable[Sequence[tuple[str, str, bool]]], store: Path
    ) -> None:
        """Late chunking: the candidate passages of ``documents`` (each its passages' ``(id,
        text, is_candidate)``), every shard holding whole documents."""
        model = self._model(self.document_name)
        frame_of(model, self.document_name, self.late_window, self.late_overlap)  # before work
        encode_into(self, model, packed(documents), store, ".npy", group=document_key)
        self.load(store)

    def write_shard(self, chunk: list[tuple[str, str]], path: Path, pool: Any = None) -> None:
        """Encode ``chunk`` into the shard file ``path`` (float32 ``.npy``), atomically."""
        model, padded = self._model(self.document_name), self._plan() == "padded"
        if self.by_document:
            frame = frame_of(model, self.document_name, self.late_window, self.late_overlap)
            windows = partial(window_outputs, model, batch_size=self.batch_size, padded=padded)
            vectors = shard_vectors(model, chunk, frame, windows)
        else:
            encode = encode_padded if padded else encode_unpadded
            vectors = encode(
                model,
                [text for _, text in chunk],
                "document",
                batch_size=self.batch_size,
                convert_to_numpy=True,
                pool=pool,
            )
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(vectors, dtype=np.float32))
        write_bytes_atomic(path, [buffer.getbuffer()])

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (for a Ray worker) with its settings only: models and shards load there."""
        empty = dict.fromkeys(("_ids", "_on_devices", "_compressed"))
        return {**self.__dict__, "_models": {}, "_shards": [], **empty}

    def load(self, store: Path) -> None:
        """Search the shards :meth:`index` wrote in ``store`` (memory-mapped)."""
        self._shards = [np.load(p, mmap_mode="r") for p in sorted(store.glob("shard-*.npy"))]
        self._ids = read_id_list(store / "ids.json", sum(len(s) for s in self._shards))
        self._store, self._on_devices, self._compressed = store, None, None

    def search(self, queries: Mapping[str, str], k: int) -> Run:
        """The top ``k`` items for each of ``{query_id: text}``, by the model's similarity."""
        if self._ids is None:
            raise RuntimeError("Dense.search called before index() or load()")
        qids = list(queries)
        if not qids:
            return Run.from_lists([], [], [], self._ids)
        from dapr.retrievers.support.canonical import exact_search, fast_product

        encoder = self._model(self.query_name)
        vectors = self._encode_queries(qids, queries)
        devices = self._search_devices(encoder)
        if self.quantization != "none":  # a first pass over codes (support.quantized)
            from dapr.retrievers.support.quantized_search import compressed

            self._compressed = compressed(self, encoder.similarity_fn_name, devices)
            items, scores = self._compressed.search(vectors, k, self.rescore_multiplier)
        elif devices:
            from dapr.retrievers.support.device_search import device_search

            index = self._device_index(encoder, devices)
            items, scores = device_search(index, vectors, k, encoder.similarity)
        else:
            items, scores = exact_search(
                vectors,
                self._shards,
                k,
                encoder.similarity_fn_name,
                fast_product(encoder.similarity_fn_name, encoder.similarity),
                self.block_size,
                self.query_batch,
            )
        return Run.from_lists(qids, items, scores, self._ids).top(k)

    def _device_index(self, encoder: Any, devices: list[torch.device]) -> Any:
        """The index's rows on ``devices``, placed once and kept for later calls."""
        from dapr.retrievers.support.device_search import DeviceIndex

        if self._on_devices is None or self._on_devices.devices != devices:
            self._on_devices = DeviceIndex(
                self._shards,
                devices,
                encoder.similarity_fn_name,
                self.search_memory,
                query_batch=self.query_batch,
            )
        return self._on_devices

    def _search_devices(self, encoder: Any) -> list[torch.device]:
        """Where search runs (:func:`~dapr.retrievers.support.device_search.search_devices`)."""
        from dapr.retrievers.support.device_search import search_devices

        return search_devices(self.search_device, encoder.device, self.device, self.devices)

    def _encode_queries(self, qids: list[str], queries: Mapping[str, str]) -> torch.Tensor:
        """The queries' vectors (float32, on the CPU), each independent of the others: encoded
        once per process and query encoder (:mod:`~dapr.retrievers.support.query_vectors`)."""

        def encode(texts: list[str]) -> np.ndarray:
            return (
                encode_unpadded(
                    self._model(self.query_name),
                    texts,
                    "query",
                    batch_size=self.batch_size,
                    convert_to_tensor=True,
                    show_progress_bar=len(texts) > 1000 and sys.stderr.isatty(),
                )
                .float()
                .cpu()
                .numpy()
            )

        import torch

        encoder = json.dumps({k: v for k, v in self.identity().items() if "document" not in k})
        return torch.from_numpy(SHARED.get(encoder, [queries[q] for q in qids], encode))

    def score(self, queries: Mapping[str, str], candidates: Run) -> Run:
        """The items of ``candidates`` (its scores ignored) ranked for each of its queries that
        ``queries`` has, with the scores :meth:`search` gives them; candidates that are not in
        the index are dropped. Only the candidates' embeddings are read."""
        if self._ids is None:
            raise RuntimeError("Dense.score called before index() or load()")
        from dapr.retrievers.support.canonical import exact_scores
        from dapr.retrievers.support.exact import candidate_rows, score_candidates, shard_pieces

        qids, rows = candidate_rows(queries, candidates, self._ids)
        if not any(len(r) for r in rows):
            return Run.from_lists(qids, rows, [r.astype(np.float64) for r in rows], self._ids)
        encoder = self._model(self.query_name)
        similarity = encoder.similarity_fn_name
        vectors = self._encode_queries(qids, queries)
        devices = self._search_devices(encoder)
        if devices:
            from dapr.retrievers.support.device_search import device_scores

            scores = device_scores(self._device_index(encoder, devices), vectors, rows)
            return Run.from_lists(qids, rows, scores, self._ids)
        sizes = [len(shard) for shard in self._shards]

        def pieces(union: np.ndarray) -> Iterator[tuple[int, int, np.ndarray]]:
            for lo, hi, shard, local in shard_pieces(union, sizes, self.block_size):
                yield lo, hi, np.asarray(self._shards[shard][local], np.float32)

        def score(block: np.ndarray, q: int, local: np.ndarray) -> np.ndarray:
            # rows gathered by numpy: torch's threaded indexing costs milliseconds a call
            return exact_scores(similarity, vectors[q], block[local])

        return Run.from_lists(qids, rows, score_candidates(rows, pieces, score), self._ids)
