"""Contextualize a corpus: the steps of a :class:`~dapr.experiment.chain.Chain`, cached per
document and step, spread over processes or Ray actors, with what it cost.

:func:`contextualize_corpus` streams ``(document, texts)`` in corpus order. Each step keeps its
outputs in a :class:`~dapr.store.contexts.ContextStore` under a hash of the document it read,
with the words it held and the seconds it took. A corpus is therefore never contextualized twice
by the same step, in any chain (``[coref, title]`` reuses what ``coref`` alone computed); an
interrupted pass resumes where it stopped; an edited document is the only one computed again. A
step runs in worker processes (:mod:`dapr.experiment.pools`) when it asks for them
(:class:`~dapr.interfaces.Parallel`), does not batch documents itself
(:class:`~dapr.interfaces.BatchContextualizer`) and has enough to compute (:data:`POOL_WORDS`);
the texts are the same either way. In a job on Ray with ``resources.actors``
(:mod:`dapr.ray_actors`) every step runs on that many Ray actors instead, batching ones too.

The measured speed is words per second of one process, the unit of the DAPR paper's Table 6
(it reports 618.8 words/s for TopicRank): total process time is the sum of per-document times
of every step, so it does not depend on how many workers ran.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dapr import ray_actors
from dapr.data import Corpus, Dataset, Document
from dapr.experiment.chain import (
    Chain,
    ContextStep,
    chain_for,
    document_key,
    timed,
    with_texts,
    words,
)
from dapr.experiment.pools import ProcessPool, RayPool
from dapr.store.cache import Cache, content_key
from dapr.store.contexts import ContextStore, Done, record_pass, recorded_pass

CHUNK = 16
"""Documents per task sent to a worker process (and per store commit)."""
POOL_WORDS = 50_000
"""Words to compute (in two chunks or more) below which a step runs in this process rather than
in spawned worker processes, which import dapr and load the step's models first. Measured on
the first 1-64 wiki-sample documents on 2 busy cores: one worker on one chunk took 0.5-1.5 s
longer than this process, which computes 5k (rules coref) to 30k (keyphrases) words a second;
two workers took 1.1-2.5x this process's time up to 79k words, 0.8-1.0x from 134k (keyphrases).
A step reads its input ahead until it has met this many words to compute, or :data:`AHEAD`
chunks."""
AHEAD = 64
"""Chunks a step reads ahead at most to find :data:`POOL_WORDS` words to compute; past them,
its worker processes start once it has met that many."""


def sample_cost(
    dataset: Dataset,
    steps: Sequence[ContextStep],
    sample: int | None = None,
    workers: int = 1,
    cache: Cache | None = None,
) -> Cost:
    """Contextualize the corpus, or ``sample`` documents spread evenly over it, into the store
    that experiments share; the cost of a sample carries the estimate for the whole corpus."""
    chain = chain_for(steps, dataset)
    root = (cache or Cache()).root
    cost = Cost(chain.label)
    documents: Iterable[Document] = dataset.corpus
    total = sum(1 for _ in dataset.corpus) if sample else 0
    if sample and sample < total:
        cost.corpus_words = sum(words(d) for d in dataset.corpus)
        chosen = {i * total // sample for i in range(sample)}
        documents = (d for i, d in enumerate(dataset.corpus) if i in chosen)
    for _ in contextualize_corpus(documents, chain, root, cost, workers):
        pass
    if cost.corpus_words is None:
        record_cost(root, chain, dataset.corpus.fingerprint, cost)
    return cost


def contextualized(
    dataset: Dataset, steps: Sequence[ContextStep], workers: int = 1, cache: Cache | None = None
) -> Dataset:
    """``dataset`` with every passage's text as ``steps`` contextualize it (the stores that
    experiments share, filled on the first pass); the corpus streams, one document at a time."""
    chain = chain_for(steps, dataset)
    cache = cache or Cache()

    def documents() -> Iterator[Document]:
        with cache.lock("contexts", content_key(chain.identity())):
            cost = Cost(chain.label)
            pairs = contextualize_corpus(dataset.corpus, chain, cache.root, cost, workers)
            for document, texts in pairs:
                yield with_texts(document, texts, chain.label)

    return replace(dataset, corpus=Corpus(documents))


def record_cost(root: Path, chain: Chain, fingerprint: str, cost: Cost) -> None:
    """Remember the totals of a complete pass of ``chain`` over the corpus ``fingerprint``."""
    key = content_key(chain.identity(), fingerprint)
    record_pass(root, key, cost.documents, cost.words, cost.seconds)


def recorded_cost(root: Path, chain: Chain, fingerprint: str) -> Cost | None:
    """What :func:`record_cost` remembered of ``chain`` on corpus ``fingerprint``, if anything."""
    row = recorded_pass(root, content_key(chain.identity(), fingerprint))
    return Cost(chain.label, *row) if row else None


@dataclass
class Cost:
    """What contextualizing a corpus cost: the Table 6 numbers of the DAPR paper.

    ``seconds`` is the process time of every document (also those computed in an earlier run,
    as the store recorded it); ``wall_seconds`` the time this pass took; ``computed`` how many
    documents this pass computed rather than found in the store.
    """

    approach: str
    documents: int = 0
    words: int = 0
    seconds: float = 0.0
    computed: int = 0
    wall_seconds: float = 0.0
    workers: int = 1
    corpus_words: int | None = None
    """Words of the whole corpus when only a sample was contextualized."""

    @property
    def words_per_second(self) -> float:
        return self.words / self.seconds if self.seconds > 0 else float("nan")

    @property
    def estimated_seconds(self) -> float:
        """Process time for the whole corpus at the measured speed."""
        total = self.corpus_words if self.corpus_words is not None else self.words
        return total / self.words_per_second if self.seconds > 0 else 0.0

    def add(self, words: int, seconds: float, computed: bool) -> None:
        self.documents += 1
        self.words += words
        self.seconds += seconds
        self.computed += computed

    def as_dict(self) -> dict[str, Any]:
        return {
            "approach": self.approach,
            "documents": self.documents,
            "computed": self.computed,
            "words": self.words,
            "words_per_second": round(self.words_per_second, 1) if self.seconds else None,
            "process_seconds": round(self.seconds, 3),
            "estimated_process_hours": round(self.estimated_seconds / 3600, 4),
            "wall_seconds": round(self.wall_seconds, 3),
            "workers": self.workers,
        }


def contextualize_corpus(
    documents: Iterable[Document],
    chain: Chain,
    root: Path,
    cost: Cost,
    workers: int = 1,
) -> Iterator[tuple[Document, list[str]]]:
    """``(document, texts)`` for every document, in order, through every step of ``chain``.

    Each step reads its input from the stream of the step before and keeps its own store under
    ``root``; what a step computes is stored at once. Words count the input documents; seconds
    add up every step's time, measured when it computed (also in an earlier run)."""
    started = time.perf_counter()
    on_ray = ray_actors.current()
    pool = RayPool(chain, on_ray) if on_ray else ProcessPool(chain, workers)
    width = on_ray.count if on_ray else workers
    stores = [ContextStore.for_step(root, identity) for identity in chain.identity()]
    items: Iterator[_Item] = (_Item(d, d) for d in documents)
    for index, store in enumerate(stores):
        parallel = on_ray is not None or (workers > 1 and chain.parallel(index))
        items = _stage(items, chain, index, store, pool if parallel else None, width)
    try:
        for item in items:
            cost.add(words(item.original), item.seconds, item.computed)
            yield item.original, [p.text for p in item.current.passages]
    finally:
        pool.shutdown()
        for store in stores:
            store.close()
        cost.workers = min(width, pool.tasks) if pool.started else 1
        cost.wall_seconds = time.perf_counter() - started


@dataclass
class _Item:
    """A document on its way through the steps: as given, as the last step left it, the
    seconds spent on it so far and whether any step computed it in this pass."""

    original: Document
    current: Document
    seconds: float = 0.0
    computed: bool = False


def _stage(
    items: Iterable[_Item],
    chain: Chain,
    index: int,
    store: ContextStore,
    pool: ProcessPool | RayPool | None,
    workers: int,
) -> Iterator[_Item]:
    """Step ``index`` over a stream: stored outputs reused, missing ones computed in chunks (in
    worker processes when ``pool`` is given, a bounded number of chunks ahead). Processes are
    started for the step only once it has :data:`POOL_WORDS` words in two chunks or more to
    compute; Ray actors and processes already started take every chunk."""
    todo = [0, 0]  # words and chunks to compute met so far (counted while too few)

    def enough() -> bool:
        return todo[0] >= POOL_WORDS and todo[1] > 1

    def batches() -> Iterator[_Batch]:
        for chunk in _chunks(items, CHUNK):
            batch = _Batch(chunk, store)
            if pool is not None and batch.missing and not enough():
                todo[0] += sum(map(words, batch.missing))
                todo[1] += 1
            yield batch

    stream = batches()
    ahead: list[_Batch] = []
    if isinstance(pool, ProcessPool) and not pool.started:  # enough work to start them?
        for batch in stream:
            ahead.append(batch)
            if enough() or len(ahead) >= AHEAD:
                break
    pending: deque[_Batch] = deque()
    for batch in itertools.chain(ahead, stream):
        ready = pool is not None and (pool.started or isinstance(pool, RayPool) or enough())
        if batch.missing and ready and pool is not None:  # (ready implies a pool)
            batch.future = pool.submit(index, batch.missing)
        elif batch.missing:
            batch.finish(store, timed(chain, index, batch.missing))
        pending.append(batch)
        while pending and (len(pending) > 2 * workers or pending[0].future is None):
            yield from pending.popleft().results(store, chain.steps[index].name)
    while pending:
        yield from pending.popleft().results(store, chain.steps[index].name)


class _Batch:
    """A chunk of a step's input: documents found in its store, and those still to compute."""

    def __init__(self, items: list[_Item], store: ContextStore):
        self.items = items
        self.keys = [document_key(item.current) for item in items]
        self.found = store.get(self.keys)
        first = {key: item.current for key, item in zip(self.keys, items)}
        self.missing_keys = [key for key in first if key not in self.found]
        self.missing = [first[key] for key in self.missing_keys]
        self.computed: set[str] = set()
        self.future: Future | None = None

    def finish(self, store: ContextStore, results: list[Done]) -> None:
        """Store the results computed for :attr:`missing`."""
        entries = dict(zip(self.missing_keys, results, strict=True))
        store.put(entries)
        self.found |= entries
        self.computed = set(entries)

    def results(self, store: ContextStore, step: str) -> Iterator[_Item]:
        if self.future is not None:
            self.finish(store, self.future.result())
            self.future = None
        for item, key in zip(self.items, self.keys):
            done = self.found[key]
            item.current = with_texts(item.current, done.texts, step)
            item.seconds += done.seconds
            item.computed = item.computed or key in self.computed
            self.computed.discard(key)  # a document repeated in the corpus is computed once
            yield item


def _chunks(items: Iterable[_Item], size: int) -> Iterator[list[_Item]]:
    batch: list[_Item] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
