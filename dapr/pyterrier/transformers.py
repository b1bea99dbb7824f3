"""dapr's components as PyTerrier transformers.

:class:`DaprRetriever` (topics -> results, or results -> re-scored results), :class:`DaprReranker`
(results with text -> re-ranked results), :class:`DaprContextualizer` (passages -> passages with
their document context) and :class:`DocumentFusion` (a document-level and a passage-level
system -> fused passage results); :func:`fuse` is the fusion on two result frames.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyterrier as pt

from dapr import registry
from dapr.data import Dataset, Document
from dapr.errors import DaprError
from dapr.experiment.arguments import check_args
from dapr.experiment.chain import Chain, chain_for
from dapr.experiment.runner import Runner, doc_codes, with_language
from dapr.experiment.spec import Experiment
from dapr.experiment.validate import context_steps
from dapr.interfaces import (
    Fuser,
    Reranker,
    Resumable,
    ScopedRetriever,
    ScopingFuser,
    identity_of,
    version_of,
)
from dapr.pyterrier.frames import (
    LEVELS,
    DaprDataset,
    frame_run,
    need,
    queries_of,
    run_frame,
)
from dapr.pyterrier.frames import dataset as _data
from dapr.retrievers.support.presets import with_preset
from dapr.store.cache import Cache, content_key

Source = str | Dataset | DaprDataset
"""A dataset name or directory, a dapr Dataset, or one wrapped by :func:`dataset`."""


class DaprRetriever(pt.Transformer):
    """A registered dapr retriever over a dataset's passages (``level="passage"``, optionally
    through a ``contextualizer`` as in an experiment file) or whole documents.

    On a topics frame (``qid``, ``query``) it retrieves the top ``k``; on a result frame (with
    ``docno``) it scores those candidates instead (a retriever with a ``score`` method, such as
    bm25 or dense; the passage side of hierarchical retrieval), keeping the top ``k``. The index
    is built once into dapr's cache (``cache``, default ``$DAPR_HOME``) under the key ``dapr run``
    gives it, so the two share it. ``args`` are the retriever's (``preset`` included).
    """

    def __init__(
        self,
        dataset: Source,
        name: str = "bm25",
        level: str = "passage",
        contextualizer: Any = None,
        k: int = 1000,
        cache: Cache | None = None,
        **args: Any,
    ):
        self.data = _data(dataset)
        where = Path(f"DaprRetriever({name!r})")
        if level not in LEVELS:
            raise DaprError(f"{where}: level {level!r} is not one of: {', '.join(LEVELS)}")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise DaprError(f"{where}: k must be a positive integer, got {k!r}")
        self.factory = registry.retrievers.get(name)
        if isinstance(self.factory, Reranker):
            raise DaprError(f"{where}: {name!r} re-ranks; use DaprReranker({name!r}) for it")
        self.args = with_preset(name, self.factory, args, level)
        check_args(self.factory, self.args, where, "args")
        steps = context_steps(contextualizer, where, "contextualizer")
        if steps and level == "document":
            raise DaprError(f"{where}: contextualizers apply to passages; use level='passage'")
        self.name, self.level, self.k = name, level, k
        self.chain = chain_for(steps, self.data.dataset) if steps else None
        self.cache = cache or Cache()
        self._component: Any = None

    def __repr__(self) -> str:
        return f"DaprRetriever({self.name!r}, level={self.level!r}, k={self.k})"

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        """The top ``k`` per topic of ``inp`` (a topics frame), or its candidates scored (a
        result frame)."""
        queries = queries_of(inp, repr(self))
        component = self.component()
        if "docno" not in inp.columns:
            return run_frame(component.search(queries, self.k), inp)
        if not isinstance(component, ScopedRetriever):
            raise DaprError(
                f"{self!r}: {self.name!r} cannot score given candidates (no score method); "
                "give it a topics frame without docno"
            )
        candidates = frame_run(inp.assign(score=0.0), repr(self))
        return run_frame(component.score(queries, candidates).top(self.k), inp)

    def component(self) -> Any:
        """The retriever with its index loaded (built into the cache on first use)."""
        if self._component is None:
            self._component = self._open()
        return self._component

    def _open(self) -> Any:
        data = self.data.dataset
        component = self.factory(**with_language(self.factory, self.args, data.language))
        made_by = (
            self.name,
            version_of(self.factory),
            identity_of(component, self.args),
            self.level if self.level == "passage" else f"document: {Document.TEXT}",
            self.chain.identity() if self.chain else None,
        )
        key = content_key(*made_by, data.corpus.fingerprint)
        with self.cache.lock("indexes", key):
            if self.cache.valid("indexes", key):
                self.cache.touch("indexes", key)
            else:
                resume = isinstance(component, Resumable) and component.resumable
                with self.cache.writing("indexes", key, resume) as store:
                    component.index(self._items(), store)
            component.load(self.cache.path("indexes", key))
        return component

    def _items(self) -> Iterator[tuple[str, str]]:
        """What the index holds: candidate passages (contextualized, cached per document, as
        ``dapr run`` does it) or whole documents."""
        data = self.data.dataset
        if self.level == "document":
            yield from ((d.id, d.text) for d in data.corpus)
            return
        runner = Runner(Experiment(name="pyterrier", dataset=data.name), self.cache)
        yield from runner.passage_texts(data, self.chain, self.name)


class DaprReranker(pt.Transformer):
    """A registered dapr reranker (``rerank``, a cross-encoder) over a result frame with
    ``qid``, ``query`` and ``docno``: the texts come from its ``text`` column, else from
    ``dataset``; the items are taken in the order of ``score`` (else ``rank``, else as given)."""

    def __init__(self, name: str = "rerank", dataset: Source | None = None, **args: Any):
        where = Path(f"DaprReranker({name!r})")
        factory = registry.retrievers.get(name)
        make: Callable[..., Reranker] = factory  # a class whose instances rerank, checked here
        if not isinstance(factory, Reranker):
            raise DaprError(f"{where}: {name!r} is not a reranker; use DaprRetriever({name!r})")
        args = with_preset(name, factory, args, "passage")
        check_args(factory, args, where, "args")
        self.name = name
        self.data = None if dataset is None else _data(dataset)
        self.reranker = make(**args)

    def __repr__(self) -> str:
        return f"DaprReranker({self.name!r})"

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        """The result frame ``inp`` re-scored and re-ranked."""
        need(inp, ("qid", "query", "docno"), repr(self))
        queries = queries_of(inp, repr(self))
        if "score" in inp.columns:
            run = frame_run(inp, repr(self))
        elif "rank" in inp.columns:
            run = frame_run(inp.assign(order=-inp["rank"].astype(np.float64)), repr(self), "order")
        else:
            run = frame_run(
                inp.assign(order=-np.arange(len(inp), dtype=np.float64)), repr(self), "order"
            )
        if "text" in inp.columns:
            texts = dict(zip(inp["docno"].astype(str), inp["text"].astype(str)))
        elif self.data is not None:
            texts = self.data.passage_texts(inp["docno"].astype(str))
        else:
            raise DaprError(
                f"{self!r}: give the frame a text column, or give the reranker a dataset"
            )
        return run_frame(self.reranker.rerank(queries, run, texts), inp)


class DaprContextualizer(pt.Transformer):
    """Rewrites the ``text`` of each passage (``docno``) of a frame with its document context:
    a registered contextualizer (``"title"``), ``{"name": ..., "args": {...}}`` or a list of
    these applied in order, as in an experiment file. Texts are kept for the next frames."""

    def __init__(self, dataset: Source, contextualizer: Any):
        self.data = _data(dataset)
        steps = context_steps(contextualizer, Path("DaprContextualizer"), "contextualizer")
        if not steps:
            raise DaprError("DaprContextualizer: name a contextualizer, e.g. 'title'")
        self.chain: Chain = chain_for(steps, self.data.dataset)
        self._texts: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"DaprContextualizer({self.chain.label!r})"

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        """``inp`` with a ``text`` column of the contextualized passages."""
        need(inp, ("docno",), repr(self))
        docnos = inp["docno"].astype(str)
        self._contextualize(set(docnos) - self._texts.keys())
        return inp.assign(text=[self._texts[d] for d in docnos])

    def _contextualize(self, passages: set[str]) -> None:
        if not passages:
            return
        data = self.data.dataset
        codes = data.corpus.ids.document_of(sorted(passages))
        if (codes < 0).any():
            unknown = sorted(passages)[int(np.argmax(codes < 0))]
            raise DaprError(f"{self!r}: passage {unknown!r} is not in dataset {data.name!r}")
        wanted = set(data.corpus.ids.doc_ids[np.unique(codes)].tolist())
        documents = [d for d in data.corpus if d.id in wanted]
        for step in range(len(self.chain.steps)):
            documents = self.chain.apply_step(step, documents)
        self._texts.update((p.id, p.text) for d in documents for p in d.passages)


class DocumentFusion(pt.Transformer):
    """A document-level and a passage-level pipeline fused into passage results by a registered
    fuser (``args`` are its own, e.g. ``alpha``): ``convex`` (the DAPR paper's rank fusion) and
    ``rrf`` fuse the two pipelines' results for the same topics; ``hierarchical`` runs the passage
    pipeline on the passages of the retrieved documents (a result frame, so it must score given
    candidates, as :class:`DaprRetriever` does) and then fuses as ``convex`` does."""

    def __init__(
        self,
        dataset: Source,
        document: pt.Transformer,
        passage: pt.Transformer,
        fuser: str = "convex",
        **args: Any,
    ):
        self.data = _data(dataset)
        self.document, self.passage = document, passage
        self.fuser = _fuser(fuser, args)
        self.fuser_name = fuser

    def __repr__(self) -> str:
        return f"DocumentFusion({self.fuser_name!r}, {self.document!r}, {self.passage!r})"

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        """Passage results for the topics of ``inp``."""
        documents = self.document(inp)
        if isinstance(self.fuser, ScopingFuser):
            scope = self.fuser.scope(frame_run(documents, repr(self)), self.data.dataset.corpus.ids)
            passages = self.passage(run_frame(scope, inp))
        else:
            passages = self.passage(inp)
        return fuse(documents, passages, self.data, self.fuser)


def fuse(
    document: pd.DataFrame,
    passage: pd.DataFrame,
    dataset: Source,
    fuser: str | Fuser = "convex",
    **args: Any,
) -> pd.DataFrame:
    """Fuse a document-level and a passage-level result frame into a passage result frame:
    each passage (``docno``) meets its document in ``dataset``, as ``dapr run`` fuses runs.
    ``fuser`` is a registered fuser's name with its ``args`` (``alpha=0.3``) or a fuser."""
    data = _data(dataset)
    chosen: Fuser = _fuser(fuser, args) if isinstance(fuser, str) else fuser
    document_run = frame_run(document, "fuse (document frame)")
    passage_run = frame_run(passage, "fuse (passage frame)")
    fused = chosen.fuse(
        document_run, passage_run, doc_codes(data.dataset, passage_run, document_run)
    )
    return run_frame(fused, passage)


def _fuser(name: str, args: dict[str, Any]) -> Any:
    factory = registry.fusers.get(name)
    check_args(factory, args, Path(f"fuser {name!r}"), "args")
    fuser = factory(**args)
    if not isinstance(fuser, Fuser):
        raise DaprError(f"fuser {name!r} fuses two passage runs only; give it no document run")
    return fuser
