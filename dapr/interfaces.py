"""What a plugin implements: one Protocol per role, and one per optional ability.

A retriever, reranker, contextualizer, fuser, dataset or metric is any object registered under
its entry-point group (see :mod:`dapr.registry`). The roles below say what each must have; an
optional ability is a Protocol of its own, and dapr asks for it with ``isinstance`` (on the
component or on its class: a runtime-checkable Protocol checks that the attributes exist), never
by probing attributes one by one.

Each role, and the abilities it may add:

- Retriever: ScopedRetriever (scores given candidates), Resumable (continues an interrupted
  index), DocumentIndexer (indexes whole documents), Identified (cache identity), HasPresets,
  Versioned
- Reranker: BoundedReranker (re-scores the first ``top_k`` only), Identified, Versioned
- Contextualizer: BatchContextualizer (a batched model), Parallel (worth worker processes),
  NamesModels (the models it loads), Identified, Versioned
- Fuser: PassageFuser (a hybrid of two passage runs), ScopingFuser (hierarchical), Described
  (how tables name it)
- DatasetAdapter: none
- Measure: none (see :mod:`dapr.evaluation.metrics`)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from dapr.data import Dataset, Document, Qrels, Run
from dapr.ids import CorpusIds


@dataclass(frozen=True)
class Preset:
    """Named settings of a retriever (a paper checkpoint), and the levels it is meant for."""

    args: Mapping[str, Any]
    levels: tuple[str, ...] = ("passage", "document")
    about: str = ""
    fusion: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Per fuser name, the arguments tuned for this retriever as the passage side (the paper's
    alphas); an experiment's fusion takes them where its own ``args`` leave them out."""


# -- abilities shared by several roles ------------------------------------------------------


@runtime_checkable
class Versioned(Protocol):
    """``version`` is part of every cache key: bump it when a change alters the output."""

    version: str


@runtime_checkable
class Rescored(Protocol):
    """``scoring`` is part of the cache key of a retriever's runs (not of its index): bump it
    when search gives other scores from the same index."""

    scoring: str


def scoring_of(component: object) -> str | None:
    """The component's :class:`Rescored` scoring version, None when it declares none."""
    return component.scoring if isinstance(component, Rescored) else None


@runtime_checkable
class Identified(Protocol):
    """``identity()`` says what determines the output (model names and their
    :func:`dapr.checkpoints.revision`, pooling, backend...) but not how fast it comes (batch
    size, device, threads); cache keys use it instead of the keyword arguments."""

    def identity(self) -> Mapping[str, Any]:
        """What determines this component's results (JSON-serializable)."""


def version_of(component: object) -> str:
    """The component's :class:`Versioned` version, ``"0"`` when it declares none."""
    return component.version if isinstance(component, Versioned) else "0"


def identity_of(component: object, args: Mapping[str, Any]) -> Any:
    """The component's :class:`Identified` identity, else the arguments it was made with."""
    return component.identity() if isinstance(component, Identified) else dict(args)


# -- retrievers -----------------------------------------------------------------------------


@runtime_checkable
class Retriever(Protocol):
    """Indexes ``(id, text)`` items once, then answers queries with a :class:`Run`."""

    def index(self, items: Iterable[tuple[str, str]], store: Path) -> None:
        """Build the index from the items and persist it under ``store``; ready to search."""

    def load(self, store: Path) -> None:
        """Open an index that :meth:`index` persisted under ``store``."""

    def search(self, queries: Mapping[str, str], k: int) -> Run:
        """The top ``k`` items for every query."""


@runtime_checkable
class ScopedRetriever(Retriever, Protocol):
    """A retriever that ranks given candidates (hierarchical retrieval searches the passages of
    the top documents with it)."""

    def score(self, queries: Mapping[str, str], candidates: Run) -> Run:
        """On a loaded index, the items of ``candidates`` (its scores ignored) ranked for each
        of its queries that ``queries`` has, with the score :meth:`search` gives each (0 for an
        item search leaves out for sharing no term with the query); candidates not in the index
        are dropped, an empty candidate list gives an empty ranking. It should read only the
        candidates' part of the index."""


@runtime_checkable
class Resumable(Protocol):
    """``resumable = True``: :meth:`Retriever.index` may find in ``store`` what an interrupted
    attempt stored and continues from it; a retriever without it always gets an empty store.
    Storing items through :func:`dapr.retrievers.support.encoding.shards` with ``writer=self``
    gives both resuming and, in a job on Ray with ``resources.actors``, Ray Data encoding."""

    resumable: bool


@runtime_checkable
class DocumentIndexer(Protocol):
    """``by_document`` true: a passage-level index is built with :meth:`index_documents`, whose
    vectors depend on the rest of each document (late chunking), instead of ``index``."""

    by_document: bool

    def index_documents(
        self, documents: Iterable[Sequence[tuple[str, str, bool]]], store: Path
    ) -> None:
        """Like ``index``, given whole documents: each its passages' ``(id, text,
        is_candidate)`` in order (texts contextualized); the candidates are the items."""


@runtime_checkable
class HasPresets(Protocol):
    """Named settings selected with the keyword argument ``preset``."""

    presets: Mapping[str, Preset]


@runtime_checkable
class NamesModels(Protocol):
    """Says which models it loads with ``args`` (checked and fetched ahead by ``dapr check``
    and ``dapr fetch``), where its ``*model`` arguments do not show them all."""

    def models_needed(self, args: Mapping[str, Any]) -> list[str]:
        """The models (hub names or paths) a component made with ``args`` loads."""


@runtime_checkable
class Reranker(Protocol):
    """Re-scores the items of a first-stage run (a cross-encoder). Registered under
    ``dapr.retrievers`` like a retriever; an experiment names its ``first_stage`` system."""

    def rerank(self, queries: Mapping[str, str], run: Run, texts: Mapping[str, str]) -> Run:
        """New scores for the items of ``run``; ``texts`` holds the text of each of them."""


@runtime_checkable
class BoundedReranker(Reranker, Protocol):
    """A reranker that reads only the first ``top_k`` items of each query (None: all), so only
    their texts need to be produced."""

    top_k: int | None


# -- contextualizers ------------------------------------------------------------------------


@runtime_checkable
class Contextualizer(Protocol):
    """Gives each passage of a document the text a retriever should see for it. Its
    constructor is cheap (models load at first use), so it pickles small to worker processes."""

    def contextualize(self, document: Document) -> list[str]:
        """One text per passage, in passage order."""


@runtime_checkable
class BatchContextualizer(Contextualizer, Protocol):
    """Contextualizes many documents at once in this process (a batched model on a GPU); used
    instead of worker processes."""

    def contextualize_batch(self, documents: Sequence[Document]) -> list[list[str]]:
        """For each document, one text per passage, as :meth:`Contextualizer.contextualize`
        gives."""


@runtime_checkable
class Parallel(Protocol):
    """``parallel = True``: CPU work on one document at a time, worth worker processes;
    ``False`` where processes do not help or are not safe."""

    parallel: bool


# -- fusion ---------------------------------------------------------------------------------


@runtime_checkable
class Fuser(Protocol):
    """Combines a document run and a passage run into a passage run."""

    def fuse(self, document_run: Run, passage_run: Run, doc_of: np.ndarray) -> Run:
        """``doc_of[i]`` is the code in ``document_run.vocab`` of the document of passage
        ``passage_run.vocab[i]`` (or -1 when that document is not in the document vocabulary)."""


@runtime_checkable
class PassageFuser(Protocol):
    """Fuses two passage runs into a passage-level hybrid (``passages: [a, b]``)."""

    def fuse_passages(self, first: Run, second: Run) -> Run:
        """One passage run from two."""


@runtime_checkable
class ScopingFuser(Fuser, Protocol):
    """Names the candidate passages the passage system must score (with its
    :class:`ScopedRetriever`'s ``score``) before :meth:`fuse`: hierarchical retrieval."""

    def scope(self, document_run: Run, ids: CorpusIds) -> Run:
        """The passages to score: those of the documents ``document_run`` retrieved (``ids``
        maps passages to documents)."""

    def scope_identity(self) -> Mapping[str, Any]:
        """What determines the scope, for the cache key of the scored passage run."""


@runtime_checkable
class Described(Protocol):
    """``approach``: how result tables name what the component does (``hierarchical``)."""

    approach: str


# -- datasets and metrics -------------------------------------------------------------------


@runtime_checkable
class DatasetAdapter(Protocol):
    """What ``dapr.datasets`` registers: called with options, it gives the dataset (a plain
    loader function qualifies). :class:`dapr.datasets.adapter.Adapter` adds building from raw
    files, downloads and a prepared copy."""

    def __call__(self, **options: Any) -> Dataset: ...


@runtime_checkable
class Measure(Protocol):
    """A metric family registered under ``dapr.metrics`` (``nDCG`` gives ``nDCG@10``).

    ``cutoff`` is ``"required"``, ``"optional"`` or ``"none"``; :meth:`per_query` scores every
    judged query (a query the run does not answer scores 0)."""

    @property
    def cutoff(self) -> str:  # read only: a class attribute or a frozen field serves
        """``"required"`` (``Hits@10``), ``"optional"`` or ``"none"``: whether a name of the
        family takes ``@k``."""

    def per_query(
        self,
        run: Mapping[str, Mapping[str, float]],
        qrels: Qrels,
        cutoff: int | None,
        relevance_level: int,
    ) -> dict[str, float]:
        """Each judged query's score; ``run`` is ``{query: {item: score}}`` in rank order
        (ties by descending item id), ``cutoff`` the ``k`` of ``@k`` (``None`` without one), and
        grades from ``relevance_level`` up are relevant."""
