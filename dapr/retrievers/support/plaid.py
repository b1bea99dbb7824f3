"""PLAID: colbert-ai's compressed ColBERTv2 index, for corpora too large for exact MaxSim.

ColBERTv2 (Santhanam et al., 2022) clusters a sample of the corpus's token vectors with k-means
(about ``16 * sqrt(#vectors)`` centroids, rounded down to a power of two) and stores every token
vector as its nearest centroid plus the residual quantised to ``nbits`` bits per dimension
(``nbits: 2`` is about 36 bytes per 128-d vector instead of 256 in float16). PLAID (Santhanam et
al., 2022b) searches in stages: the ``ncells`` centroids nearest each query vector give candidate
passages, centroid-only scores (pruned at ``centroid_score_threshold``) keep the best ``ndocs``,
and those are scored by MaxSim over their decompressed vectors. colbert-ai sets the three from
``k`` unless they are given.

Everything is colbert-ai 0.2.22's own ``Indexer`` and ``Searcher``, run in this process; the
index lives in ``<store>/plaid`` beside ``ids.json``. On CPU the searcher needs three C++
extensions that torch compiles on first use (a few minutes once; kept in ``TORCH_EXTENSIONS_DIR``,
by default ``$DAPR_HOME/torch_extensions``); they are compiled in parallel. colbert-ai's CPU
scorer starts each query token's maximum at 0, so a PLAID score ignores negative similarities,
which exact MaxSim counts (trained ColBERT vectors rarely have any).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np

from dapr.checkpoints import load
from dapr.data import Run
from dapr.errors import DaprError
from dapr.paths import home
from dapr.retrievers.support.colbert import ColBERTSettings, import_colbert, quiet

_INDEX = "plaid"
"""Folder of the colbert-ai index inside the store."""
_LOG = "colbert.log"
"""What colbert-ai prints goes to this file in the store."""
_MIN_VECTORS = 256
"""Below this many token vectors colbert-ai asks k-means for more centroids than points."""


def build_index(retriever: ColBERTSettings, items: Iterable[tuple[str, str]], store: Path) -> None:
    """Index ``items`` with colbert-ai's ``Indexer`` into ``store``."""
    colbert = import_colbert()
    _tolerate_detached_git()
    checkpoint = load(_checked, retriever.model)
    collection = store / "collection.tsv"
    ids = _write_collection(items, collection)
    (store / "ids.json").write_text(json.dumps(ids))
    settings = _lengths(retriever)
    config = colbert.ColBERTConfig(
        nbits=retriever.nbits,
        kmeans_niters=retriever.kmeans_niters,
        index_bsize=retriever.batch_size,
        index_path=str(store / _INDEX),
        **settings,
    )
    try:
        with colbert_run(colbert, store):
            indexer = colbert.Indexer(checkpoint=checkpoint, config=config, verbose=0)
            indexer.index(
                name=_INDEX, collection=str(collection), overwrite="force_silent_overwrite"
            )
    except RuntimeError as error:
        if "training points" in str(error) or "clusters" in str(error):
            raise DaprError(
                f"retriever 'late_interaction' with method: plaid: a corpus of {len(ids)} items "
                f"is too small for PLAID's k-means (it needs at least about {_MIN_VECTORS} "
                "token vectors); use method: exact"
            ) from None
        raise
    finally:
        collection.unlink(missing_ok=True)


class PlaidIndex:
    """colbert-ai's ``Searcher`` over the PLAID index in a store, opened on the first search."""

    def __init__(self, retriever: ColBERTSettings, store: Path):
        if not (store / _INDEX / "metadata.json").is_file():
            raise DaprError(
                f"retriever 'late_interaction': no PLAID index in {store / _INDEX}; "
                "build it with index()"
            )
        self.retriever = retriever
        self.store = store
        self._searcher: Any = None

    def searcher(self):
        if self._searcher is None:
            colbert = import_colbert()
            checkpoint = load(_checked, self.retriever.model)
            with colbert_run(colbert, self.store):
                build_extensions()
                self._searcher = colbert.Searcher(
                    index=str(self.store / _INDEX),
                    checkpoint=checkpoint,
                    collection=[""],  # passages' texts are not needed to rank them
                    config=colbert.ColBERTConfig(**_lengths(self.retriever)),
                    verbose=0,
                )
        return self._searcher

    def search(self, qids: Sequence[str], texts: Sequence[str], k: int, ids: np.ndarray) -> Run:
        """The top ``k`` of each query (``texts``, in ``qids`` order) over item ids ``ids``."""
        searcher = self.searcher()
        colbert = import_colbert()
        items: list[np.ndarray] = []
        scores: list[np.ndarray] = []
        with colbert_run(colbert, self.store):
            searcher.configure(**self.retriever.search_options)  # unset ones: chosen from k
            vectors = searcher.encode(list(texts))
            for row in range(len(qids)):
                pids, _, found = searcher.dense_search(vectors[row : row + 1], k)
                items.append(np.asarray(pids, dtype=np.int64))
                scores.append(np.asarray(found, dtype=np.float64))
        return Run.from_lists(list(qids), items, scores, ids)


@contextmanager
def colbert_run(colbert, store: Path) -> Iterator[None]:
    """colbert-ai's run context for one process on one rank, its printing sent to
    ``<store>/colbert.log``, and the environment it changes (CUDA_VISIBLE_DEVICES) restored;
    ``TORCH_EXTENSIONS_DIR`` defaults to ``$DAPR_HOME/torch_extensions`` meanwhile."""
    saved = {
        name: os.environ.get(name) for name in ("CUDA_VISIBLE_DEVICES", "TORCH_EXTENSIONS_DIR")
    }
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(home() / "torch_extensions"))
    run = colbert.RunConfig(
        nranks=1, avoid_fork_if_possible=True, root=str(store), experiment="log"
    )
    try:
        with (
            (store / _LOG).open("a") as log,
            redirect_stdout(log),
            quiet(),
            colbert.Run().context(run),
        ):
            yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def build_extensions() -> None:
    """Compile (or load from ``TORCH_EXTENSIONS_DIR``) the C++ extensions colbert-ai's searcher
    uses on CPU, its two loaders side by side; a clear error when they cannot be built."""
    import torch
    from colbert.search.index_storage import IndexScorer
    from colbert.search.strided_tensor import StridedTensor

    if torch.cuda.is_available() or hasattr(IndexScorer, "loaded_extensions"):
        return  # the GPU code paths need none of them; or they are loaded already
    print(
        "loading colbert-ai's C++ search extensions from "
        f"{os.environ.get('TORCH_EXTENSIONS_DIR')} (compiled on first use: about 3 minutes)",
        file=sys.stderr,
    )
    loaders = [IndexScorer.try_load_torch_extensions, StridedTensor.try_load_torch_extensions]
    try:
        with ThreadPoolExecutor(max_workers=len(loaders)) as pool:
            for done in [pool.submit(loader, False) for loader in loaders]:
                done.result()
    except (RuntimeError, OSError, ImportError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DaprError(
            "retriever 'late_interaction' with method: plaid needs colbert-ai's C++ extensions, "
            f"which did not compile ({reason}); install a C++ compiler and the Python headers "
            "(e.g. apt-get install g++ python3-dev), or use method: exact"
        ) from None


def _tolerate_detached_git() -> None:
    """colbert-ai records the git branch of the working directory in each index file it writes,
    and fails inside a checkout with a detached HEAD; there it records no git details."""
    from colbert.infra.config import base_config

    original = base_config.get_metadata_only
    if getattr(original, "tolerant", False):
        return

    def metadata():
        try:
            return original()
        except Exception:  # noqa: BLE001 - GitPython's errors for unusual checkouts
            return {"hostname": socket.gethostname(), "cmd": " ".join(sys.argv)}

    metadata.tolerant = True  # type: ignore[attr-defined]  # marks the wrapper as installed
    base_config.get_metadata_only = metadata


def _checked(path: str) -> str:
    """``path`` once transformers can read its config: a missing model fails here, before
    colbert-ai starts (its own error would name a fallback model)."""
    from transformers import AutoConfig

    AutoConfig.from_pretrained(path)
    return path


def _lengths(retriever: ColBERTSettings) -> dict[str, int]:
    settings = {"query_maxlen": retriever.query_maxlen, "doc_maxlen": retriever.doc_maxlen}
    return {k: v for k, v in settings.items() if v is not None}


def _write_collection(items: Iterable[tuple[str, str]], path: Path) -> list[str]:
    """colbert-ai's collection TSV (``pid<TAB>text``, pids from 0); tabs and line breaks in a
    text become spaces, which BERT's tokenizer treats alike. Returns the item ids in pid order."""
    ids: list[str] = []
    table = str.maketrans({"\t": " ", "\n": " ", "\r": " "})
    with path.open("w", encoding="utf-8") as out:
        for pid, (item_id, text) in enumerate(items):
            out.write(f"{pid}\t{text.translate(table)}\n")
            ids.append(item_id)
    return ids


def plaid_scores(index: Any, texts: Sequence[str], rows: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The scores a PLAID ``index`` (:class:`dapr.retrievers.support.plaid.PlaidIndex`) gives each
    query (``texts[q]``) on its candidate passages ``rows[q]`` (pids), in that order: colbert-ai's
    final ranking stage alone, MaxSim over the candidates' decompressed vectors, which is what
    PLAID's search scores the passages it keeps with."""
    import torch

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
