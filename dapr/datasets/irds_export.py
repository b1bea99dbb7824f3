"""dapr datasets in ir_datasets' registry: ``dapr/<name>`` and ``dapr/<name>/<split>``.

Each passage is a doc (:class:`DaprDoc`): ``doc_id`` is the passage id, ``text`` the passage,
``title`` its document's title, ``document_id`` its document, ``position`` its place in it and
``is_candidate`` whether it is retrievable; ``default_text()`` is ``"{title} {text}"``, as
ir_datasets gives titled docs. ``dapr/<name>`` holds the docs; ``dapr/<name>/<split>`` the docs,
the split's queries and its graded qrels. Nothing is copied: every iteration reads the dapr
dataset. ``irds:dapr/<name>`` (:mod:`dapr.datasets.irds`) reads it back as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from dapr.data import Dataset, Split
from dapr.errors import DaprError

try:
    import ir_datasets
    from ir_datasets.datasets.base import Dataset as IrdsDataset
    from ir_datasets.formats import BaseDocs, BaseQrels, BaseQueries, GenericQuery, TrecQrel
except ImportError:
    raise DaprError(
        'irds: datasets need ir_datasets; install it with: pip install "dapr-ir[irds]"'
    ) from None

NAMESPACE = "dapr"
"""dapr datasets are registered in ir_datasets as ``dapr/<name>[/<split>]``."""

_registered: dict[str, str] = {}
"""ir_datasets id -> fingerprint of the dapr dataset registered under it in this process."""


class DaprDoc(NamedTuple):
    """A dapr passage as an ir_datasets doc."""

    doc_id: str
    text: str
    title: str
    document_id: str
    position: int
    is_candidate: bool

    def default_text(self) -> str:
        return f"{self.title} {self.text}"


class DaprDocs(BaseDocs):
    """The passages of a dapr dataset, in corpus order."""

    def __init__(self, dataset: Dataset, namespace: str):
        self._dataset = dataset
        self._namespace = namespace

    def docs_iter(self) -> Iterator[DaprDoc]:
        for document in self._dataset.corpus:
            for p in document.passages:
                yield DaprDoc(p.id, p.text, document.title, document.id, p.position, p.is_candidate)

    def docs_count(self) -> int:
        return len(self._dataset.corpus.ids.passage_ids)

    def docs_cls(self) -> type:
        return DaprDoc

    def docs_namespace(self) -> str:
        return self._namespace

    def docs_lang(self) -> str:
        return self._dataset.language


class DaprQueries(BaseQueries):
    """The queries of one split."""

    def __init__(self, split: Split, namespace: str, language: str):
        self._split = split
        self._namespace = namespace
        self._language = language

    def queries_iter(self) -> Iterator[GenericQuery]:
        for qid, text in self._split.queries.items():
            yield GenericQuery(qid, text)

    def queries_namespace(self) -> str:
        return self._namespace

    def queries_lang(self) -> str:
        return self._language


class DaprQrels(BaseQrels):
    """The graded judgements of one split (of passages)."""

    def __init__(self, split: Split, relevance_level: int):
        self._split = split
        self._relevance_level = relevance_level

    def qrels_iter(self) -> Iterator[TrecQrel]:
        for qid, judged in self._split.qrels.items():
            for passage, grade in judged.items():
                yield TrecQrel(qid, passage, grade, "0")

    def qrels_defs(self) -> dict[int, str]:
        return {self._relevance_level: "the lowest grade that counts as relevant"}


def register_dataset(dataset: Dataset | str, name: str | None = None) -> list[str]:
    """Register ``dataset`` as ``dapr/<name>`` and ``dapr/<name>/<split>`` (``name`` defaults
    to the dataset's); the ids registered. Registering the same data again does nothing;
    other data under a registered id is a DaprError."""
    if isinstance(dataset, str):
        from dapr.datasets import load_dataset

        dataset = load_dataset(dataset)
    name = dataset.name if name is None else name
    if not name or "/" in name or name != name.strip():
        raise DaprError(
            f"cannot register dataset {name!r} in ir_datasets: its name becomes part of the id "
            "dapr/<name>; pass name=... without '/' or surrounding spaces"
        )
    root = f"{NAMESPACE}/{name}"
    ids = [root, *(f"{root}/{split}" for split in dataset.splits)]
    fingerprint = dataset.fingerprint
    for dataset_id in ids:
        known = _registered.get(dataset_id)
        if known == fingerprint:
            continue
        if known is not None or _in_registry(dataset_id):
            raise DaprError(
                f"ir_datasets already has a dataset {dataset_id!r}; register this one under "
                "another name: register(dataset, name=...)"
            )
    docs = DaprDocs(dataset, root)
    for dataset_id in ids:
        if _registered.get(dataset_id) == fingerprint:
            continue
        split = dataset_id.removeprefix(root + "/") if dataset_id != root else None
        parts = [docs]
        if split is not None:
            data = dataset.splits[split]
            parts.append(DaprQueries(data, root, dataset.language))
            parts.append(DaprQrels(data, dataset.relevance_level))
        ir_datasets.registry.register(dataset_id, IrdsDataset(*parts))
        _registered[dataset_id] = fingerprint
    return ids


def _in_registry(dataset_id: str) -> bool:
    try:
        ir_datasets.registry[dataset_id]
    except KeyError:
        return False
    return True
