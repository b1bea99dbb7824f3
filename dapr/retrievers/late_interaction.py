"""Late interaction (ColBERT): one vector per token, scored by MaxSim.

ColBERT (Khattab and Zaharia, 2020) encodes a text into one small vector per token (BERT's output
through a linear layer to 128 dimensions, L2-normalised) and scores a query against a passage by
*MaxSim*: for each query vector, the best dot product with any of the passage's vectors, summed
over the query vectors. ColBERTv2 (Santhanam et al., 2022) keeps this model and adds a compressed
index. Encoding follows colbert-ai's own ``Checkpoint``, which this module uses as it is:

- a query is ``[CLS] [Q] ...tokens [SEP]`` (``[Q]`` is BERT's ``[unused0]``), padded with
  ``[MASK]`` up to ``query_maxlen`` tokens (*query augmentation*: the masks are not attended to,
  but their output vectors take part in MaxSim as soft expansion terms);
- a passage is ``[CLS] [D] ...tokens [SEP]`` (``[D]`` is ``[unused1]``), cut at ``doc_maxlen``
  tokens, and the vectors of punctuation tokens are dropped.

The checkpoint's ``artifact.metadata`` gives the defaults (ColBERTv2: 32 query tokens); the
``colbertv2`` preset uses what the DAPR reference code passed to colbert-ai (150 query and 512
passage tokens, so long questions such as ConditionalQA's are not cut) with exact MaxSim search,
as the paper did.

``method: exact`` (the default) writes every passage's token vectors to memory-mapped shards
(``float16`` by default) and scores them block by block: memory is one block of document tokens
times a batch of query vectors, whatever the corpus size, and the best ``k`` are merged with
:class:`~dapr.retrievers.exact.TopK`. ``method: plaid`` builds a colbert-ai PLAID index instead
(centroids and ``nbits`` residuals, candidate generation, then MaxSim over decompressed vectors),
for corpora whose token vectors are too large to scan; see :mod:`dapr.retrievers.plaid`.
``score`` ranks given candidates (hierarchical retrieval): exact MaxSim over their token vectors
alone, or with PLAID colbert-ai's last stage (MaxSim over their decompressed vectors) on them.

colbert-ai compiles a C++ MaxSim kernel whenever it builds a model on CPU, though encoding never
calls it; here that kernel is replaced by the same computation in torch (:func:`segmented_maxsim`)
so encoding starts at once. PLAID's other kernels are compiled on first use (see ``plaid``).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from dapr.data import Run
from dapr.errors import DaprError
from dapr.models import load, revision
from dapr.registry import Preset
from dapr.retrievers.encoding import chunks
from dapr.retrievers.exact import (
    TopK,
    candidate_rows,
    score_candidates,
    shard_pieces,
    use_all_cores,
)

METHODS = ("exact", "plaid")
DTYPES = {"float16": np.float16, "float32": np.float32}
NBITS = (1, 2, 4)
"""Residual bits per dimension that colbert-ai's PLAID codec supports."""

_CHUNK = 2048
"""Passages encoded, then written as one shard of token vectors."""
_META = "late_interaction.json"

PRESETS = {
    "colbertv2": Preset(
        {
            "model": "colbert-ir/colbertv2.0",
            "query_maxlen": 150,
            "doc_maxlen": 512,
            "method": "exact",
        },
        levels=("passage",),
        about="ColBERTv2 (Santhanam et al., 2022) with exact MaxSim, query/passage lengths "
        "150/512 as in the DAPR reference code",
    ),
}


class LateInteraction:
    """ColBERT retrieval with a colbert-ai checkpoint: exact MaxSim or a PLAID index.

    ``query_maxlen`` and ``doc_maxlen`` (tokens, markers included) default to the checkpoint's
    own. ``dtype`` is how exact search stores token vectors; ``nbits``, ``kmeans_niters`` (index)
    and ``ncells``, ``centroid_score_threshold``, ``ndocs`` (search; colbert-ai picks them from
    ``k`` when unset) configure PLAID. ``batch_size``, ``block_size`` (document tokens scored at
    once) and ``query_batch`` (queries scored at once) change speed and memory, not results.
    """

    version = "1"
    presets = PRESETS

    def __init__(
        self,
        model: str = "colbert-ir/colbertv2.0",
        method: str = "exact",
        query_maxlen: int | None = None,
        doc_maxlen: int | None = None,
        dtype: str = "float16",
        nbits: int = 2,
        kmeans_niters: int = 4,
        ncells: int | None = None,
        centroid_score_threshold: float | None = None,
        ndocs: int | None = None,
        batch_size: int = 32,
        block_size: int = 16_384,
        query_batch: int = 32,
    ):
        _check_choice("method", method, METHODS)
        _check_choice("dtype", dtype, tuple(DTYPES))
        _check_choice("nbits", nbits, NBITS)
        for name, value in (("query_maxlen", query_maxlen), ("doc_maxlen", doc_maxlen)):
            if value is not None and (not isinstance(value, int) or value < 4):
                raise DaprError(
                    f"retriever 'late_interaction': {name} must be an integer of at least 4 "
                    f"tokens, not {value!r}"
                )
        self.model = model
        self.method = method
        self.query_maxlen = query_maxlen
        self.doc_maxlen = doc_maxlen
        self.dtype = dtype
        self.nbits = nbits
        self.kmeans_niters = kmeans_niters
        self.search_options = {
            "ncells": ncells,
            "centroid_score_threshold": centroid_score_threshold,
            "ndocs": ndocs,
        }
        self.batch_size = batch_size
        self.block_size = block_size
        self.query_batch = query_batch
        self._encoder: ColBERTEncoder | None = None
        self._shards: list[tuple[np.ndarray, np.ndarray]] = []
        self._ids: np.ndarray | None = None
        self._plaid: Any = None

    def identity(self) -> dict[str, Any]:
        found = {
            "model": self.model,
            "revision": revision(self.model),
            "query_maxlen": self.query_maxlen,
            "doc_maxlen": self.doc_maxlen,
            "method": self.method,
        }
        if self.method == "exact":
            found["dtype"] = self.dtype
        else:
            found.update(nbits=self.nbits, kmeans_niters=self.kmeans_niters, **self.search_options)
        return found

    def encoder(self) -> ColBERTEncoder:
        """The query and passage encoder, loaded on first use."""
        if self._encoder is None:
            self._encoder = ColBERTEncoder(
                self.model, self.query_maxlen, self.doc_maxlen, self.batch_size
            )
        return self._encoder

    def index(self, items: Iterable[tuple[str, str]], store: Path) -> None:
        store.mkdir(parents=True, exist_ok=True)
        if self.method == "plaid":
            from dapr.retrievers.plaid import build_index

            build_index(self, items, store)
        else:
            self._write_shards(items, store)
        _write_meta(store, self.method, self.identity())
        self.load(store)

    def _write_shards(self, items: Iterable[tuple[str, str]], store: Path) -> None:
        for old in [*store.glob("shard-*.npy"), *store.glob("doclens-*.npy")]:
            old.unlink()
        encoder = self.encoder()
        ids: list[str] = []
        progress = tqdm(desc=f"encoding with {self.model}", unit=" items", delay=1)
        try:
            for n, chunk in enumerate(chunks(items, _CHUNK)):
                vectors, counts = encoder.documents([text for _, text in chunk], self.dtype)
                np.save(store / f"shard-{n:05d}.npy", vectors)
                np.save(store / f"doclens-{n:05d}.npy", np.asarray(counts, dtype=np.int32))
                ids.extend(item_id for item_id, _ in chunk)
                progress.update(len(chunk))
        finally:
            progress.close()
        (store / "ids.json").write_text(json.dumps(ids))

    def load(self, store: Path) -> None:
        built = _read_meta(store)
        if built != self.method:
            raise DaprError(
                f"retriever 'late_interaction': the index in {store} was built with method "
                f"{built!r}, not {self.method!r}; set method: {built} or build it again"
            )
        self._ids = np.array(json.loads((store / "ids.json").read_text()), dtype=object)
        if self.method == "plaid":
            from dapr.retrievers.plaid import PlaidIndex

            self._plaid = PlaidIndex(self, store)
            return
        self._shards = [
            (np.load(p, mmap_mode="r"), np.load(p.with_name(p.name.replace("shard", "doclens"))))
            for p in sorted(store.glob("shard-*.npy"))
        ]

    def search(self, queries: Mapping[str, str], k: int) -> Run:
        if self._ids is None:
            raise RuntimeError("LateInteraction.search called before index() or load()")
        qids = list(queries)
        if not qids or not len(self._ids) or k < 1:
            empty = [np.zeros(0)] * len(qids)
            return Run.from_lists(qids, empty, empty, self._ids)
        if self._plaid is not None:
            return self._plaid.search(qids, [queries[q] for q in qids], k, self._ids)
        vectors = self.encoder().queries([queries[q] for q in qids])
        tops = search_token_shards(vectors, self._shards, k, self.block_size, self.query_batch)
        return TopK.merge(tops, qids, self._ids)

    def score(self, queries: Mapping[str, str], candidates: Run) -> Run:
        """The items of ``candidates`` (its scores ignored) ranked for each of its queries that
        ``queries`` has, with the scores :meth:`search` gives them; candidates that are not in
        the index are dropped. Exact: MaxSim over the candidates' token vectors alone. PLAID:
        colbert-ai's last stage (MaxSim over the decompressed vectors) on the candidates, with
        no candidate generation or pruning."""
        if self._ids is None:
            raise RuntimeError("LateInteraction.score called before index() or load()")
        qids, rows = candidate_rows(queries, candidates, self._ids)
        if not any(len(r) for r in rows):
            return Run.from_lists(qids, rows, [r.astype(np.float64) for r in rows], self._ids)
        texts = [queries[q] for q in qids]
        if self._plaid is not None:
            found = plaid_scores(self._plaid, texts, rows)
        else:
            found = score_token_shards(
                self.encoder().queries(texts), rows, self._shards, self.block_size
            )
        return Run.from_lists(qids, rows, found, self._ids)


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
        counts = [len(p) for p in parts]
        dim = self.config.dim
        if not parts:
            return np.zeros((0, dim), DTYPES[dtype]), counts
        return torch.cat(parts).numpy(), counts


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


def plaid_scores(index: Any, texts: Sequence[str], rows: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The scores a PLAID ``index`` (:class:`dapr.retrievers.plaid.PlaidIndex`) gives each query
    (``texts[q]``) on its candidate passages ``rows[q]`` (pids), in that order: colbert-ai's
    final ranking stage alone, MaxSim over the candidates' decompressed vectors, which is what
    PLAID's search scores the passages it keeps with."""
    from dapr.retrievers.plaid import colbert_run

    searcher = index.searcher()
    colbert = import_colbert()
    found: list[np.ndarray] = []
    with colbert_run(colbert, index.store), torch.inference_mode():
        vectors = searcher.encode(list(texts))
        for q, pids in enumerate(rows):
            if not len(pids):
                found.append(np.zeros(0, dtype=np.float64))
                continue
            wanted = torch.from_numpy(np.asarray(pids, dtype=np.int32))
            # without centroid scores colbert-ai neither prunes nor reorders the pids
            scores, _ = searcher.ranker.score_pids(
                searcher.config, vectors[q : q + 1], wanted, None
            )
            found.append(scores.double().numpy())
    return found


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
            'install it with: pip install "dapr[colbert]"'
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


def _check_choice(name: str, value: Any, choices: Sequence[Any]) -> None:
    if value not in choices:
        raise DaprError(
            f"retriever 'late_interaction': unknown {name} {value!r}; choose from: "
            + ", ".join(str(c) for c in choices)
        )


def _write_meta(store: Path, method: str, identity: Mapping[str, Any]) -> None:
    (store / _META).write_text(json.dumps({"method": method, **identity}, indent=1))


def _read_meta(store: Path) -> str:
    path = store / _META
    if not path.is_file():
        raise DaprError(
            f"retriever 'late_interaction': no index in {store} ({_META} is missing); "
            "build it with index()"
        )
    return json.loads(path.read_text())["method"]
