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
:class:`~dapr.retrievers.support.exact.TopK`. ``method: plaid`` builds a colbert-ai PLAID index
instead (centroids and ``nbits`` residuals, candidate generation, then MaxSim over decompressed
vectors), for corpora whose token vectors are too large to scan; see
:mod:`dapr.retrievers.support.plaid`. ``score`` ranks given candidates (hierarchical retrieval):
exact MaxSim over their token vectors alone, or with PLAID colbert-ai's last stage (MaxSim over
their decompressed vectors) on them.

colbert-ai compiles a C++ MaxSim kernel whenever it builds a model on CPU, though encoding never
calls it; here that kernel is replaced by the same computation in torch (:func:`segmented_maxsim`)
so encoding starts at once. PLAID's other kernels are compiled on first use (see ``plaid``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from tqdm.auto import tqdm

from dapr.checkpoints import revision
from dapr.data import Run
from dapr.errors import DaprError, check_choice
from dapr.ids import read_id_list
from dapr.interfaces import Preset
from dapr.ranges import Range
from dapr.retrievers.support.colbert import (
    DTYPES,
    ColBERTEncoder,
    score_token_shards,
    search_token_shards,
)
from dapr.retrievers.support.encoding import chunks
from dapr.retrievers.support.exact import (
    TopK,
    candidate_rows,
)
from dapr.retrievers.support.presets import paper_fusion

NAME = "retriever 'late_interaction'"
METHODS = ("exact", "plaid")
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
        fusion=paper_fusion("colbertv2"),
    ),
}


class LateInteraction:
    """ColBERT retrieval with a colbert-ai checkpoint: exact MaxSim or a PLAID index.

    ``query_maxlen`` and ``doc_maxlen`` (tokens, markers included) default to the checkpoint's
    own. ``dtype`` is how exact search stores token vectors; ``nbits``, ``kmeans_niters`` (index)
    and ``ncells``, ``centroid_score_threshold``, ``ndocs`` (search; colbert-ai picks them from
    ``k`` when unset) configure PLAID. ``batch_size``, ``block_size`` (document tokens scored at
    once) and ``query_batch`` (queries scored at once) change speed and memory, not results.

    :param model: The colbert-ai checkpoint: a hub id or a local folder.
    :param method: ``exact`` (MaxSim over every stored token vector) or ``plaid`` (a
        compressed index, for large corpora).
    :param query_maxlen: Tokens per query, markers included (None: the checkpoint's own).
    :param doc_maxlen: Tokens per passage or document, markers included (None: the
        checkpoint's own).
    :param dtype: How exact search stores token vectors: ``float16`` or ``float32``.
    :param nbits: PLAID: bits per dimension of each vector's residual (1, 2 or 4).
    :param kmeans_niters: PLAID: k-means iterations that place the centroids.
    :param ncells: PLAID: centroids nearest each query vector whose passages become candidates
        (None: colbert-ai's choice from ``k``).
    :param centroid_score_threshold: PLAID: centroid scores below it are pruned (None:
        colbert-ai's choice from ``k``).
    :param ndocs: PLAID: candidates kept after centroid-only scoring (None: colbert-ai's choice
        from ``k``).
    :param batch_size: Texts encoded per forward pass.
    :param block_size: Document token vectors scored at once in exact search.
    :param query_batch: Queries scored at once in exact search.
    """

    version = "1"
    presets = PRESETS

    def __init__(
        self,
        model: str = "colbert-ir/colbertv2.0",
        method: str = "exact",
        query_maxlen: Annotated[int | None, Range(4)] = None,
        doc_maxlen: Annotated[int | None, Range(4)] = None,
        dtype: str = "float16",
        nbits: Annotated[int, Range(1, 4)] = 2,  # and one of NBITS
        kmeans_niters: Annotated[int, Range(1)] = 4,
        ncells: Annotated[int | None, Range(1)] = None,
        centroid_score_threshold: Annotated[float | None, Range(-1, 1)] = None,  # a cosine
        ndocs: Annotated[int | None, Range(1)] = None,
        batch_size: Annotated[int, Range(1)] = 32,
        block_size: Annotated[int, Range(1)] = 16_384,
        query_batch: Annotated[int, Range(1)] = 32,
    ) -> None:
        check_choice(NAME, "method", method, METHODS)
        check_choice(NAME, "dtype", dtype, tuple(DTYPES))
        check_choice(NAME, "nbits", nbits, NBITS)
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
        found: dict[str, Any] = {
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
            from dapr.retrievers.support.plaid import build_index

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
        progress = tqdm(desc=f"encoding with {self.model}", unit=" items", delay=1, disable=None)
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
        if self.method == "plaid":
            from dapr.retrievers.support.plaid import PlaidIndex

            self._ids = read_id_list(store / "ids.json")
            self._plaid = PlaidIndex(self, store)
            return
        self._shards = [
            (np.load(p, mmap_mode="r"), np.load(p.with_name(p.name.replace("shard", "doclens"))))
            for p in sorted(store.glob("shard-*.npy"))
        ]  # one token count per item: the ids are checked against them
        self._ids = read_id_list(store / "ids.json", sum(len(lens) for _, lens in self._shards))

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
            from dapr.retrievers.support.plaid import plaid_scores

            found = plaid_scores(self._plaid, texts, rows)
        else:
            found = score_token_shards(
                self.encoder().queries(texts), rows, self._shards, self.block_size
            )
        return Run.from_lists(qids, rows, found, self._ids)


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
