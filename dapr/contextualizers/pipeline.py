"""Contextualize a corpus: chained steps, cached per document, spread over processes, timed.

A :class:`Chain` applies contextualizers in order; each step sees the passages as the previous
step left them (``[coref, title]`` prepends the title to coreference-annotated passages).

:func:`contextualize_corpus` streams ``(document, texts)`` in corpus order. Every document's
texts are stored in a :class:`ContextStore` (SQLite, one file per chain) under a hash of the
document's content, together with the words it held and the seconds it took. A corpus is
therefore never contextualized twice, an interrupted pass resumes where it stopped, and a changed
document is the only one computed again. Documents not in the store are computed in worker
processes (spawned, each building the chain once) when a step asks for them (``parallel =
True``) and none refuses them (``parallel = False``, or ``contextualize_batch``: a neural model
batching documents on a GPU).

The measured speed is words per second of one process, the unit of the DAPR paper's Table 6
(it reports 618.8 words/s for TopicRank): total process time is the sum of per-document times,
so it does not depend on how many workers ran.
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

from dapr import registry
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
        self._warm = False

    def __getstate__(self) -> dict:
        return {"steps": self.steps, "factories": self.factories}

    def __setstate__(self, state: dict) -> None:
        self.steps, self.factories = state["steps"], state["factories"]
        self._components, self._warm = None, False

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

    @property
    def parallel(self) -> bool:
        """Whether to use worker processes: some step asks for them (``parallel = True``: CPU
        work on one document at a time) and none refuses them (``parallel = False``, or it
        batches documents itself)."""
        wants = [getattr(c, "parallel", None) for c in self.components]
        batches = any(hasattr(c, "contextualize_batch") for c in self.components)
        return True in wants and False not in wants and not batches

    def warm_up(self) -> None:
        """Load every step's models on a tiny document, so that loading is not timed as work.
        An error here is left for the real documents to raise, with their names in it."""
        if self._warm:
            return
        self._warm = True
        with contextlib.suppress(DaprError):
            self.apply([WARM_UP])

    def apply(self, documents: Sequence[Document]) -> list[list[str]]:
        """The final texts of every passage of every document."""
        current = list(documents)
        for step, component in zip(self.steps, self.components):
            if hasattr(component, "contextualize_batch"):
                outputs = component.contextualize_batch(current)
            else:
                outputs = [component.contextualize(document) for document in current]
            current = [
                _with_texts(document, texts, step.name)
                for document, texts in zip(current, outputs, strict=True)
            ]
        return [[p.text for p in document.passages] for document in current]


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
    store = ContextStore.for_chain((cache or Cache()).root, chain)
    cost = Cost(chain.label)
    documents: Iterable[Document] = dataset.corpus
    total = sum(1 for _ in dataset.corpus) if sample else 0
    if sample and sample < total:
        cost.corpus_words = sum(words(d) for d in dataset.corpus)
        chosen = {i * total // sample for i in range(sample)}
        documents = (d for i, d in enumerate(dataset.corpus) if i in chosen)
    try:
        for _ in contextualize_corpus(documents, chain, store, cost, workers):
            pass
        if cost.corpus_words is None:
            store.record(dataset.corpus.fingerprint, cost)
    finally:
        store.close()
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
    """A hash of what a contextualizer reads: the title and the passage texts, in order."""
    digest = hashlib.sha256()
    for text in (document.title, *(p.text for p in document.passages)):
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
    """Texts of contextualized documents by document key, for one chain (SQLite, WAL).

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
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS corpora "
            "(fingerprint TEXT PRIMARY KEY, documents INTEGER, words INTEGER, seconds REAL)"
        )
        self._db.commit()

    @classmethod
    def for_chain(cls, root: Path, chain: Chain) -> ContextStore:
        return cls(root / "contexts" / f"{content_key(chain.identity())}.sqlite")

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

    def record(self, fingerprint: str, cost: Cost) -> None:
        """Remember the totals of a complete pass over the corpus ``fingerprint``."""
        self._db.execute(
            "INSERT OR REPLACE INTO corpora VALUES (?, ?, ?, ?)",
            (fingerprint, cost.documents, cost.words, cost.seconds),
        )
        self._db.commit()

    def recorded(self, fingerprint: str) -> tuple[int, int, float] | None:
        row = self._db.execute(
            "SELECT documents, words, seconds FROM corpora WHERE fingerprint = ?", (fingerprint,)
        ).fetchone()
        return tuple(row) if row else None

    def close(self) -> None:
        self._db.close()


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

    def add(self, done: Done, computed: bool) -> None:
        self.documents += 1
        self.words += done.words
        self.seconds += done.seconds
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
    store: ContextStore,
    cost: Cost,
    workers: int = 1,
) -> Iterator[tuple[Document, list[str]]]:
    """``(document, texts)`` for every document, in order; computed ones are stored at once."""
    started = time.perf_counter()
    use_pool = workers > 1 and chain.parallel
    cost.workers = workers if use_pool else 1
    pool: ProcessPoolExecutor | None = None
    pending: deque[_Batch] = deque()
    try:
        for documents_ in _chunks(documents, CHUNK):
            batch = _Batch(documents_, store)
            if batch.missing and use_pool:
                pool = pool or _pool(chain, workers)
                batch.future = pool.submit(_work, batch.missing)
            elif batch.missing:
                batch.finish(store, _timed(chain, batch.missing))
            pending.append(batch)
            while pending and (len(pending) > 2 * workers or pending[0].future is None):
                yield from pending.popleft().results(store, cost)
        while pending:
            yield from pending.popleft().results(store, cost)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    cost.wall_seconds = time.perf_counter() - started


class _Batch:
    """A chunk of documents: those found in the store, and those still to compute."""

    def __init__(self, documents: list[Document], store: ContextStore):
        self.documents = documents
        self.keys = [document_key(d) for d in documents]
        self.found = store.get(self.keys)
        self.missing = [
            documents[self.keys.index(key)]
            for key in dict.fromkeys(self.keys)
            if key not in self.found
        ]
        self.computed: set[str] = set()
        self.future: Future | None = None

    def finish(self, store: ContextStore, results: list[Done]) -> None:
        """Store the results computed for :attr:`missing`."""
        entries = {document_key(d): r for d, r in zip(self.missing, results, strict=True)}
        store.put(entries)
        self.found |= entries
        self.computed = set(entries)

    def results(self, store: ContextStore, cost: Cost) -> Iterator[tuple[Document, list[str]]]:
        if self.future is not None:
            self.finish(store, self.future.result())
            self.future = None
        for document, key in zip(self.documents, self.keys):
            done = self.found[key]
            cost.add(done, key in self.computed)
            self.computed.discard(key)  # a document repeated in the corpus is computed once
            yield document, done.texts


def _timed(chain: Chain, documents: list[Document]) -> list[Done]:
    """Apply the chain; the elapsed time is shared among the documents by their words."""
    chain.warm_up()
    started = time.perf_counter()
    outputs = chain.apply(documents)
    seconds = time.perf_counter() - started
    counts = [words(d) for d in documents]
    total = sum(counts)
    shares = [n / total for n in counts] if total else [1 / len(counts)] * len(counts)
    return [Done(t, n, seconds * share) for t, n, share in zip(outputs, counts, shares)]


def _chunks(documents: Iterable[Document], size: int) -> Iterator[list[Document]]:
    batch: list[Document] = []
    for document in documents:
        batch.append(document)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


_worker_chain: Chain | None = None


def _pool(chain: Chain, workers: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start_worker,
        initargs=(chain,),
    )


def _start_worker(chain: Chain) -> None:
    global _worker_chain
    _worker_chain = chain
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def _work(documents: list[Document]) -> list[Done]:
    assert _worker_chain is not None
    return _timed(_worker_chain, documents)
