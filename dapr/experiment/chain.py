"""A chain of contextualizers: each step sees the passages as the previous step left them
(``[coref, title]`` prepends the title to coreference-annotated passages)."""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dapr import registry
from dapr.data import Dataset, Document, Passage
from dapr.errors import DaprError
from dapr.interfaces import BatchContextualizer, Parallel, identity_of, version_of
from dapr.store.contexts import Done

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
            out.append([step.name, version_of(component), identity_of(component, step.args)])
        return out

    def parallel(self, index: int) -> bool:
        """Whether step ``index`` runs in worker processes: it asks for them (``parallel =
        True``: CPU work on one document at a time) and does not batch documents itself."""
        component = self.components[index]
        return (
            isinstance(component, Parallel)
            and component.parallel is True
            and not isinstance(component, BatchContextualizer)
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
        if isinstance(component, BatchContextualizer):
            outputs = component.contextualize_batch(list(documents))
        else:
            outputs = [component.contextualize(document) for document in documents]
        return [
            with_texts(document, texts, step.name)
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


def with_texts(document: Document, texts: object, step: str) -> Document:
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


def timed(chain: Chain, index: int, documents: list[Document]) -> list[Done]:
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
