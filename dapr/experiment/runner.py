"""Run an experiment: index, search, fuse and evaluate, reusing every cached step."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np
from tqdm.auto import tqdm

from dapr import evaluation, registry
from dapr.data import Dataset, Document, Queries, Run, Split
from dapr.datasets import load_dataset
from dapr.errors import DaprError
from dapr.evaluation import Evaluation
from dapr.evaluation import evaluate as evaluate_run
from dapr.experiment import plan
from dapr.experiment.chain import Chain
from dapr.experiment.contextualize import Cost, contextualize_corpus, record_cost, recorded_cost
from dapr.experiment.plan import with_language as with_language  # where it was
from dapr.experiment.progress import Progress
from dapr.experiment.spec import Experiment, FusionSpec, RetrieverSpec
from dapr.experiment.train_sources import warn_if_trained_on
from dapr.experiment.training import train_models
from dapr.interfaces import (
    BoundedReranker,
    Described,
    DocumentIndexer,
    Resumable,
    ScopingFuser,
)
from dapr.store.cache import Cache, content_key

T = TypeVar("T")


@dataclass(frozen=True)
class Step:
    """What one step did: ``computed`` it, or found it ``cached``."""

    kind: str
    system: str
    status: str
    seconds: float


@dataclass
class Outcome:
    """Runs, evaluations and the step log of one experiment."""

    experiment: Experiment
    dataset: Dataset
    runs: dict[str, Run] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    levels: dict[str, str] = field(default_factory=dict)
    evaluations: dict[str, Evaluation] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    costs: dict[str, Cost] = field(default_factory=dict)
    """What contextualizing the corpus cost, per system that uses a contextualizer."""
    tags: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per system, its ``approach`` and ``retriever`` as tables name them."""
    labels: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Categories of the split's queries (see ``Experiment.categories``)."""
    trained: dict[str, dict] = field(default_factory=dict)
    """Per model of the ``train:`` block, its cache key and model card."""


class Runner:
    """Executes an :class:`Experiment` against a :class:`Cache`."""

    def __init__(self, experiment: Experiment, cache: Cache | None = None):
        self.experiment = experiment
        self.cache = cache or Cache()
        self.workers = experiment.workers or os.cpu_count() or 1
        self._open: dict[str, Callable[[], Any]] = {}
        self.progress = Progress()

    def run(
        self, dataset: Dataset | None = None, evaluate: Collection[str] | None = None
    ) -> Outcome:
        """Every system's run, and the evaluation of those in ``evaluate`` (default: all);
        ``dataset`` saves loading the experiment's dataset again."""
        exp = self.experiment
        dataset = dataset or load_dataset(exp.dataset, **exp.dataset_args)
        split = dataset.split(exp.split)
        outcome = Outcome(exp, dataset)
        for done in train_models(exp, self, dataset):  # models the retrievers may use
            outcome.steps.append(Step("train", done["name"], done["status"], done["seconds"]))
            outcome.trained[done["name"]] = {"key": done["key"], **done["card"]}
        if evaluate is None or evaluate:  # results on this split are reported
            warn_if_trained_on(exp, dataset, split)
        for system, spec in exp.retrievers.items():
            outcome.runs[system] = self._retrieve(outcome, system, spec, split.queries)
            outcome.levels[system] = spec.level
            outcome.tags[system] = describe(spec, exp)
        for system, fusion in exp.fusion.items():
            outcome.runs[system] = self._fuse(outcome, system, fusion, split.queries)
            outcome.levels[system] = "passage"
            outcome.tags[system] = describe(fusion, exp)
        for system in exp.maxp:
            outcome.runs[f"{system}@maxp"] = evaluation.maxp(
                outcome.runs[system], dataset.corpus.ids
            )
            outcome.levels[f"{system}@maxp"] = "document"
            outcome.tags[f"{system}@maxp"] = {
                **outcome.tags[system],
                "approach": f"{outcome.tags[system]['approach']} (MaxP)",
            }
        outcome.labels = query_labels(exp.categories, dataset, exp.split, split)
        document_qrels = evaluation.document_qrels(split.qrels, dataset.corpus.ids)
        for system, run in outcome.runs.items():
            if evaluate is not None and system not in evaluate:
                continue
            qrels = document_qrels if outcome.levels[system] == "document" else split.qrels
            outcome.evaluations[system] = evaluate_run(
                run, qrels, exp.metrics, relevance_level=dataset.relevance_level
            )
        return outcome

    def _retrieve(
        self, outcome: Outcome, system: str, spec: RetrieverSpec, queries: Queries
    ) -> Run:
        made = plan.retrieval(spec, outcome.dataset)  # the keys as dapr check plans them
        component, chain = made.component, made.chain
        if spec.first_stage:
            return self._rerank(outcome, system, spec, component, chain, made.made_by, queries)
        index_key = plan.index_key(made.made_by, outcome.dataset)
        run_key = plan.search_key(index_key, component, queries, self.experiment.depth)
        outcome.keys[system] = run_key

        def open_index() -> Any:
            started = time.perf_counter()
            with self.cache.lock("indexes", index_key):
                if self.cache.valid("indexes", index_key):
                    status = "cached"
                    self.cache.touch("indexes", index_key)
                    self._recorded_cost(outcome, system, chain)
                else:
                    since = self.progress.started("index", system, spec.level + "s")
                    resume = isinstance(component, Resumable) and component.resumable
                    with self.cache.writing("indexes", index_key, resume) as store:
                        if spec.level == "passage" and _by_document(component):
                            whole = _counted(_whole(self._pairs(outcome, chain, system)), _size)
                            component.index_documents(whole, store)
                            count = whole.count
                        else:
                            items = _counted(self._items(outcome, spec.level, chain, system))
                            component.index(items, store)
                            count = items.count
                    status = "computed"
                    self.progress.finished("index", system, since, f"{count:,} items")
                component.load(self.cache.path("indexes", index_key))
            outcome.steps.append(Step("index", system, status, time.perf_counter() - started))
            self._open[system] = lambda: component
            return component

        self._open[system] = open_index
        if self.cache.valid("runs", run_key):  # a cached run needs no index at all
            self._recorded_cost(outcome, system, chain)
        else:
            open_index()
        return self._stored_run(
            outcome,
            "search",
            system,
            run_key,
            lambda: component.search(queries, self.experiment.depth),
        )

    def _rerank(
        self,
        outcome: Outcome,
        system: str,
        spec: RetrieverSpec,
        reranker: Any,
        chain: Chain | None,
        made_by: tuple,
        queries: Queries,
    ) -> Run:
        """Re-score the run of ``spec.first_stage`` with the texts of its items."""
        first_stage = spec.first_stage
        assert first_stage is not None  # _retrieve reranks a retriever with a first stage only
        key = plan.rerank_key(made_by, outcome.keys[first_stage])
        outcome.keys[system] = key

        def rerank() -> Run:
            first = outcome.runs[first_stage]
            top_k = reranker.top_k if isinstance(reranker, BoundedReranker) else None
            needed = _head_items(first, top_k)
            texts = {
                item: text
                for item, text in self._items(outcome, spec.level, chain, system)
                if item in needed
            }
            return reranker.rerank(queries, first, texts)

        if self.cache.valid("runs", key):
            self._recorded_cost(outcome, system, chain)
        return self._stored_run(outcome, "rerank", system, key, rerank)

    def _items(
        self, outcome: Outcome, level: str, chain: Chain | None, system: str
    ) -> Iterator[tuple[str, str]]:
        """The ``(id, text)`` pairs a retriever indexes: candidate passages (contextualized by
        ``chain``, cached per document) or whole documents; a chain's cost is recorded."""
        if level == "document":
            for document in _reading(outcome.dataset, system):
                yield document.id, document.text
            return
        yield from _candidates(self._pairs(outcome, chain, system))

    def _pairs(
        self, outcome: Outcome, chain: Chain | None, system: str
    ) -> Iterator[tuple[Document, list[str]]]:
        """Every document with its passages' texts, contextualized by ``chain`` (cached per
        document; its cost recorded)."""
        dataset = outcome.dataset
        documents = _reading(dataset, system)
        if chain is None:
            yield from ((d, [p.text for p in d.passages]) for d in documents)
            return
        cost = outcome.costs[system] = Cost(chain.label)
        # one run at a time fills a chain's stores; another waits, then reads what it stored
        with self.cache.lock("contexts", content_key(chain.identity())):
            yield from contextualize_corpus(documents, chain, self.cache.root, cost, self.workers)
            record_cost(self.cache.root, chain, dataset.corpus.fingerprint, cost)

    def passage_texts(
        self, dataset: Dataset, chain: Chain | None, system: str
    ) -> Iterator[tuple[str, str]]:
        """``(id, text)`` of the dataset's candidate passages, contextualized by ``chain``
        (cached per document, as for indexing); ``system`` names the work in progress lines."""
        yield from self._items(Outcome(self.experiment, dataset), "passage", chain, system)

    def _recorded_cost(self, outcome: Outcome, system: str, chain: Chain | None) -> None:
        """The cost a complete earlier pass of ``chain`` over this corpus recorded, if any."""
        if chain is None:
            return
        recorded = recorded_cost(self.cache.root, chain, outcome.dataset.corpus.fingerprint)
        if recorded is not None:
            outcome.costs[system] = recorded

    def _fuse(self, outcome: Outcome, system: str, spec: FusionSpec, queries: Queries) -> Run:
        fuser, made_by = plan.fusion_made_by(spec)
        if spec.passages:
            first, second = spec.passages
            key = plan.fused_key(made_by, outcome.keys[first], outcome.keys[second])
            outcome.keys[system] = key
            return self._stored_run(
                outcome,
                "fuse",
                system,
                key,
                lambda: fuser.fuse_passages(outcome.runs[first], outcome.runs[second]),
            )
        document, passage = spec.document, spec.passage
        assert document is not None and passage is not None  # without passages: both (validated)
        document_run = outcome.runs[document]
        passage_key = outcome.keys[passage]
        if isinstance(fuser, ScopingFuser):
            passage_key = plan.scope_key(fuser, outcome.keys[document], passage_key)

            def score() -> Run:
                candidates = fuser.scope(document_run, outcome.dataset.corpus.ids)
                scored = self._open[passage]().score(queries, candidates)
                return scored.top(self.experiment.depth)

            passage_run = self._stored_run(outcome, "score", system, passage_key, score)
        else:
            passage_run = outcome.runs[passage]
        key = plan.fused_key(made_by, outcome.keys[document], passage_key)
        outcome.keys[system] = key

        def fuse() -> Run:
            doc_of = doc_codes(outcome.dataset, passage_run, document_run)
            return fuser.fuse(document_run, passage_run, doc_of)

        return self._stored_run(outcome, "fuse", system, key, fuse)

    def _stored_run(
        self, outcome: Outcome, kind: str, system: str, key: str, compute: Callable[[], Run]
    ) -> Run:
        """The run cached under ``key``, else ``compute()``'s, stored there; logged as a step.
        Computed under the entry's lock, so runs sharing the cache compute it once."""
        with self.cache.lock("runs", key):
            if self.cache.valid("runs", key):
                self.cache.touch("runs", key)
                outcome.steps.append(Step(kind, system, "cached", 0.0))
                return Run.load(self.cache.path("runs", key) / "run.npz")
            started = self.progress.started(kind, system)
            run = compute()
            self.progress.finished(kind, system, started, f"{len(run.queries):,} queries")
            if (bad := run.not_finite()) is not None:
                query, item, score = bad
                raise DaprError(
                    f"{kind} {system}: item {item!r} of query {query!r} got the score {score}; "
                    "nothing was stored: fix the component that gave it (scores must be finite)"
                )
            with self.cache.writing("runs", key) as entry:
                run.save(entry / "run.npz")
        outcome.steps.append(Step(kind, system, "computed", time.perf_counter() - started))
        return run


class _counted(Generic[T]):
    """An iterator that counts what it yields (the items an index took): ``size`` of each."""

    def __init__(self, items: Iterator[T], size: Callable[[T], int] = lambda _: 1):
        self.items, self.size, self.count = items, size, 0

    def __iter__(self) -> Iterator[T]:
        for item in self.items:
            self.count += self.size(item)
            yield item


def _reading(dataset: Dataset, system: str) -> Iterable[Document]:
    """The dataset's documents, with a progress bar."""
    return tqdm(
        dataset.corpus, desc=f"{system}: reading documents", unit=" docs", delay=1, disable=None
    )


def _by_document(component: object) -> bool:
    """Whether ``component`` indexes passages from whole documents (:class:`DocumentIndexer`)."""
    return isinstance(component, DocumentIndexer) and component.by_document


def _whole(pairs: Iterator[tuple[Document, list[str]]]) -> Iterator[list[tuple[str, str, bool]]]:
    """Each document's passages as ``(id, text, is_candidate)``, in order."""
    for document, texts in pairs:
        yield [(p.id, t, p.is_candidate) for p, t in zip(document.passages, texts, strict=True)]


def _size(passages: list[tuple[str, str, bool]]) -> int:
    """The candidate passages (the items) of a document."""
    return sum(candidate for _, _, candidate in passages)


def _candidates(pairs: Iterator[tuple[Document, list[str]]]) -> Iterator[tuple[str, str]]:
    """``(passage id, text)`` of the candidate passages of ``(document, texts)`` pairs."""
    for document, texts in pairs:
        for passage, text in zip(document.passages, texts, strict=True):
            if passage.is_candidate:
                yield passage.id, text


def _head_items(run: Run, k: int | None) -> set[str]:
    """The ids of the items ranked in the first ``k`` (all when ``k`` is None) of any query."""
    if k is None:
        codes = run.items
    else:
        starts = run.offsets[:-1]
        lengths = np.minimum(np.diff(run.offsets), k)
        pieces: list[np.ndarray] = [
            run.items[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist())
        ]
        codes = np.concatenate(pieces or [np.empty(0)]).astype(np.int64)
    return set(run.vocab[np.unique(codes)].tolist())


def doc_codes(dataset: Dataset, passage_run: Run, document_run: Run) -> np.ndarray:
    """For each passage of ``passage_run.vocab``, its document's code in ``document_run.vocab``
    (-1 when the document run lacks the document, or the corpus the passage)."""
    ids = dataset.corpus.ids
    in_run = ids.document_codes(document_run.vocab)
    listed = np.flatnonzero(in_run >= 0)
    run_code = np.full(len(ids.doc_ids), -1, dtype=np.int64)  # corpus document -> run code
    run_code[in_run[listed]] = listed
    codes = ids.document_of(passage_run.vocab)
    found = codes >= 0
    codes[found] = run_code[codes[found]]
    return codes


def describe(spec: RetrieverSpec | FusionSpec, exp: Experiment) -> dict[str, str]:
    """How tables name a system: its ``approach`` (``passage only``, ``+ title``, ``rank fusion
    (convex)``, ``hierarchical``...) and its ``retriever`` (``dense (all-MiniLM-L6-v2)``)."""
    if isinstance(spec, FusionSpec):
        inputs = [exp.retrievers[s] for s in spec.inputs if exp.retrievers[s].level == "passage"]
        retriever = " + ".join(_retriever_label(s) for s in inputs)
        if spec.passages:
            approach = f"passage hybrid ({spec.name})"
        elif isinstance(fuser := registry.fusers.get(spec.name), Described):
            approach = fuser.approach
        else:
            approach = f"rank fusion ({spec.name})"
        return {"approach": spec.approach or approach, "retriever": retriever}
    if spec.level == "document":
        approach = "document"
    elif spec.first_stage:
        approach = f"rerank {spec.first_stage}"
    elif spec.contextualizer:
        approach = "+ " + " + ".join(step.name for step in spec.contextualizer)
    else:
        approach = "passage only"
    return {"approach": spec.approach or approach, "retriever": _retriever_label(spec)}


def _retriever_label(spec: RetrieverSpec) -> str:
    model = spec.args.get("model")
    return f"{spec.name} ({Path(str(model)).name})" if model else spec.name


def query_labels(
    source: str, dataset: Dataset, split_name: str, split: Split
) -> dict[str, tuple[str, ...]]:
    """The categories of the split's queries: the dataset's own, ``title_mention``, or a TSV."""
    if source == "dataset":
        labels = dataset.labels
    elif source == "title_mention":
        from dapr.analysis.categories import title_mention_labels

        labels = title_mention_labels(dataset, split_name)
    else:
        from dapr.analysis.categories import read_labels

        labels = read_labels(Path(source))
    return {qid: tuple(labels[qid]) for qid in split.queries if qid in labels}
