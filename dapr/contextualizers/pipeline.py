"""Contextualize a corpus: chained steps, cached per document and step, spread over processes.

A :class:`Chain` applies contextualizers in order; each step sees the passages as the previous
step left them (``[coref, title]`` prepends the title to coreference-annotated passages).

:func:`contextualize_corpus` streams ``(document, texts)`` in corpus order. Each step keeps its
outputs in a :class:`ContextStore` (SQLite, one file per step and its settings) under a hash of
the document it read, with the words it held and the seconds it took. A corpus is therefore
never contextualized twice by the same step, in any chain (``[coref, title]`` reuses what
``coref`` alone computed); an interrupted pass resumes where it stopped; an edited document is
the only one computed again. A step runs in worker processes (spawned, each building the chain
once) when it asks for them (``parallel = True``) and does not batch documents itself
(``contextualize_batch``: a neural model on a GPU). In a job on Ray with ``resources.actors``
(:mod:`dapr.actors`) every step runs on that many Ray actors instead, batching ones too.

The measured speed is words per second of one process, the unit of the DAPR paper's Table 6
(it reports 618.8 words/s for TopicRank): total process time is the sum of per-document times
of every step, so it does not depend on how many workers ran.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import multiprocessing
import os
import sqlite3
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dapr import actors, registry
from dapr.data import Dataset, Document, Passage
from dapr.errors import DaprError
from dapr.experiment.cache import Cache, content_key

CHUNK = 16
"""Documents per task sent to a worker process (and per store commit)."""
WARM_UP = Document(
    "dapr-warm-up",
    "The Half Moon",
    (
        Passage("dapr-warm-up-0", "dapr-warm-up", 0, "The Half Moon is a music venue in Putney."),
        Passage("dapr-warm-up-1", "dapr-warm-up", 1, "The venue opened in 1963. It is a pub."),
    ),
)
"""A tiny document run through a chain before any timing, to load its models."""


@dataclass(frozen=True)
class ContextStep:
    """One registered contextualizer and its keyword arguments."""

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        if not self.args:
            return self.name
        settings = ", ".join(f"{k}={v}" for k, v in sorted(self.args.items()))
        return f"{self.name} ({settings})"


class Chain:
    """Contextualizers applied one after another. It pickles as its steps and classes (by
    reference), so a worker process builds its own instances, which load their models lazily."""

    def __init__(self, steps: Sequence[ContextStep]):
        if not steps:
            raise DaprError("a contextualizer chain needs at least one step")
        self.steps = tuple(steps)
        self.factories = [registry.contextualizers.get(step.name) for step in self.steps]
        self._components: list[Any] | None = None
        self._warm: set[int] = set()

    def __getstate__(self) -> dict:
        return {"steps": self.steps, "factories": self.factories}

    def __setstate__(self, state: dict) -> None:
        self.steps, self.factories = state["steps"], state["factories"]
        self._components, self._warm = None, set()

    @property
    def components(self) -> list[Any]:
        if self._components is None:
            self._components = [f(**step.args) for f, step in zip(self.factories, self.steps)]
        return self._components

    @property
    def label(self) -> str:
        return " + ".join(step.label for step in self.steps)

    def identity(self) -> list:
        """What determines the output: each step's name, version and identity (else args)."""
        out = []
        for step, component in zip(self.steps, self.components):
            identity = getattr(component, "identity", None)
            made_of = identity() if callable(identity) else dict(step.args)
            out.append([step.name, getattr(component, "version", "0"), made_of])
        return out

    def parallel(self, index: int) -> bool:
        """Whether step ``index`` runs in worker processes: it asks for them (``parallel =
        True``: CPU work on one document at a time) and does not batch documents itself."""
        component = self.components[index]
        return getattr(component, "parallel", None) is True and not hasattr(
            component, "contextualize_batch"
        )

    def warm_up(self, index: int) -> None:
        """Load step ``index``'s models on a tiny document, so that loading is not timed as
        work. An error here is left for the real documents to raise, with their names in it."""
        if index in self._warm:
            return
        self._warm.add(index)
        with contextlib.suppress(DaprError):
            self.apply_step(index, [WARM_UP])

    def apply_step(self, index: int, documents: Sequence[Document]) -> list[Document]:
        """``documents`` with their passages as step ``index`` rewrites them."""
        step, component = self.steps[index], self.components[index]
        if hasattr(component, "contextualize_batch"):
            outputs = component.contextualize_batch(list(documents))
        else:
            outputs = [component.contextualize(document) for document in documents]
        return [
            _with_texts(document, texts, step.name)
            for document, texts in zip(documents, outputs, strict=True)
        ]


def chain_for(steps: Sequence[ContextStep], dataset: Dataset) -> Chain:
    """The chain of ``steps`` for ``dataset``: a step that reads the dataset's published tables
    (it takes ``dataset_dir``) is pointed at the dataset's directory unless its args say
    otherwise."""
    placed = []
    for step in steps:
        factory = registry.contextualizers.get(step.name)
        try:
            takes = "dataset_dir" in inspect.signature(factory).parameters
        except (TypeError, ValueError):
            takes = False
        if takes and "dataset_dir" not in step.args and dataset.root is not None:
            step = ContextStep(step.name, {**step.args, "dataset_dir": str(dataset.root)})
        placed.append(step)
    return Chain(placed)


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


def _with_texts(document: Document, texts: object, step: str) -> Document:
    """``document`` with its passages' texts replaced, after checking what a step returned."""
    if (
        not isinstance(texts, list | tuple)
        or len(texts) != len(document.passages)
        or not all(isinstance(t, str) for t in texts)
    ):
        raise DaprError(
            f"contextualizer {step!r} returned {_describe(texts)} for document {document.id!r} "
            f"of {len(document.passages)} passages; it must return one string per passage"
        )
    passages = tuple(replace(p, text=t) for p, t in zip(document.passages, texts))
    return replace(document, passages=passages)


def _describe(value: object) -> str:
    if isinstance(value, list | tuple):
        return f"{len(value)} values"
    return f"a {type(value).__name__}"


def document_key(document: Document) -> str:
    """A hash of what a contextualizer reads: the ids, the title and the passage texts, in
    order (ids too, because a step may look a document up by id, as ``precomputed`` does)."""
    digest = hashlib.sha256()
    fields = (document.id, document.title, *(f for p in document.passages for f in (p.id, p.text)))
    for text in fields:
        data = text.encode()
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()[:32]


def words(document: Document) -> int:
    """Whitespace words of the passages: the unit of contextualization speed."""
    return sum(len(p.text.split()) for p in document.passages)


@dataclass(frozen=True)
class Done:
    """A document's texts, its words and the process seconds they took."""

    texts: list[str]
    words: int
    seconds: float


class ContextStore:
    """The output of one contextualizer for every document it has read, by the document's
    key (SQLite, WAL): any chain in which the step reads the same document reuses it.

    Several runs may share the file: SQLite locks it, and an entry written twice is the same.
    """

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, timeout=600)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS documents "
            "(key TEXT PRIMARY KEY, texts TEXT NOT NULL, words INTEGER, seconds REAL)"
        )
        self._db.commit()

    @classmethod
    def for_step(cls, root: Path, identity: object) -> ContextStore:
        return cls(root / "contexts" / f"{content_key(identity)}.sqlite")

    def get(self, keys: Sequence[str]) -> dict[str, Done]:
        found: dict[str, Done] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), 500):
            part = unique[start : start + 500]
            marks = ",".join("?" * len(part))
            rows = self._db.execute(
                f"SELECT key, texts, words, seconds FROM documents WHERE key IN ({marks})", part
            )
            for key, texts, n, seconds in rows:
                found[key] = Done(json.loads(texts), n, seconds)
        return found

    def put(self, entries: Mapping[str, Done]) -> None:
        self._db.executemany(
            "INSERT OR IGNORE INTO documents VALUES (?, ?, ?, ?)",
            [
                (key, json.dumps(done.texts, ensure_ascii=False), done.words, done.seconds)
                for key, done in entries.items()
            ],
        )
        self._db.commit()

    def close(self) -> None:
        self._db.close()


def _cost_log(root: Path) -> sqlite3.Connection:
    path = root / "contexts" / "costs.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, timeout=600)
    db.execute(
        "CREATE TABLE IF NOT EXISTS costs "
        "(key TEXT PRIMARY KEY, documents INTEGER, words INTEGER, seconds REAL)"
    )
    return db


def record_cost(root: Path, chain: Chain, fingerprint: str, cost: Cost) -> None:
    """Remember the totals of a complete pass of ``chain`` over the corpus ``fingerprint``."""
    db = _cost_log(root)
    with db:
        db.execute(
            "INSERT OR REPLACE INTO costs VALUES (?, ?, ?, ?)",
            (content_key(chain.identity(), fingerprint), cost.documents, cost.words, cost.seconds),
        )
    db.close()


def recorded_cost(root: Path, chain: Chain, fingerprint: str) -> Cost | None:
    """What :func:`record_cost` remembered of ``chain`` on corpus ``fingerprint``, if anything."""
    db = _cost_log(root)
    row = db.execute(
        "SELECT documents, words, seconds FROM costs WHERE key = ?",
        (content_key(chain.identity(), fingerprint),),
    ).fetchone()
    db.close()
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
    on_ray = actors.current()
    pool = _RayPool(chain, on_ray) if on_ray else _Pool(chain, workers)
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
        cost.workers = width if pool.started else 1
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
    pool: _Pool | None,
    workers: int,
) -> Iterator[_Item]:
    """Step ``index`` over a stream: stored outputs reused, missing ones computed in chunks (in
    worker processes when ``pool`` is given, a bounded number of chunks ahead)."""
    pending: deque[_Batch] = deque()
    for chunk in _chunks(items, CHUNK):
        batch = _Batch(chunk, store)
        if batch.missing and pool is not None:
            batch.future = pool.submit(index, batch.missing)
        elif batch.missing:
            batch.finish(store, _timed(chain, index, batch.missing))
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
            item.current = _with_texts(item.current, done.texts, step)
            item.seconds += done.seconds
            item.computed = item.computed or key in self.computed
            self.computed.discard(key)  # a document repeated in the corpus is computed once
            yield item


def _timed(chain: Chain, index: int, documents: list[Document]) -> list[Done]:
    """Apply step ``index``; the elapsed time is shared among the documents by their words."""
    chain.warm_up(index)
    started = time.perf_counter()
    outputs = chain.apply_step(index, documents)
    seconds = time.perf_counter() - started
    counts = [words(d) for d in documents]
    total = sum(counts)
    shares = [n / total for n in counts] if total else [1 / len(counts)] * len(counts)
    return [
        Done([p.text for p in out.passages], n, seconds * share)
        for out, n, share in zip(outputs, counts, shares)
    ]


def _chunks(items: Iterable[_Item], size: int) -> Iterator[list[_Item]]:
    batch: list[_Item] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class _Pool:
    """Worker processes (spawned, each building the chain once), started at the first task."""

    def __init__(self, chain: Chain, workers: int):
        self.chain, self.workers = chain, workers
        self._executor: ProcessPoolExecutor | None = None

    @property
    def started(self) -> bool:
        return self._executor is not None

    def submit(self, index: int, documents: list[Document]) -> Future:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
                initargs=(self.chain,),
            )
        return self._executor.submit(_work, index, documents)

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(cancel_futures=True)


class _RayPool:
    """Ray actors (each building the chain once), started at the first task; chunks go in turn
    to those that have started, so actors the cluster has no room for do not stall the pass.
    Every step runs there, batching ones too (an actor may hold a GPU); an actor whose process
    dies is restarted and its tasks retried."""

    def __init__(self, chain: Chain, setting: actors.Actors):
        self.chain, self.setting = chain, setting
        self._actors: list[Any] = []
        self._starting: dict[Any, Any] = {}
        self._ready: list[Any] = []
        self._turn = 0

    @property
    def started(self) -> bool:
        return bool(self._actors)

    def submit(self, index: int, documents: list[Document]) -> Future:
        import ray

        if not self._actors:
            remote = ray.remote(
                num_cpus=self.setting.cpus,
                num_gpus=self.setting.gpus,
                max_restarts=actors.RETRIES,
                max_task_retries=actors.RETRIES,
            )(_ChainActor)
            self._actors = [remote.remote(self.chain) for _ in range(self.setting.count)]
            self._starting = {actor.__ray_ready__.remote(): actor for actor in self._actors}
        if self._starting:
            waiting = list(self._starting)
            ready, _ = ray.wait(waiting, num_returns=len(waiting), timeout=0)
            if not ready and not self._ready:  # none has started yet: wait for the first
                ready, _ = ray.wait(waiting, num_returns=1)
            for ref in ready:
                ray.get(ref)  # raises if the actor could not start
                self._ready.append(self._starting.pop(ref))
        actor = self._ready[self._turn % len(self._ready)]
        self._turn += 1
        return actor.work.remote(index, documents).future()

    def shutdown(self) -> None:
        import ray

        for actor in self._actors:
            ray.kill(actor)


class _ChainActor:
    """A Ray actor applying steps of its own copy of a chain."""

    def __init__(self, chain: Chain):
        _start_worker(chain)

    def work(self, index: int, documents: list[Document]) -> list[Done]:
        return _work(index, documents)


_worker_chain: Chain | None = None


def _start_worker(chain: Chain) -> None:
    global _worker_chain
    _worker_chain = chain
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def _work(index: int, documents: list[Document]) -> list[Done]:
    assert _worker_chain is not None
    return _timed(_worker_chain, index, documents)
