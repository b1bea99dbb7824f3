"""PyTerrier's data frames and dapr's values: datasets as topics and qrels, runs as result frames.

A result frame has one row per retrieved item: ``qid``, ``docno`` (a passage id, or a document
id for document-level systems), ``score`` and ``rank`` (0 first, in dapr's and trec_eval's
order: descending score, ties by descending id), plus the query columns it came with.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import pandas as pd
import pyterrier as pt

from dapr.data import Dataset, Run
from dapr.errors import DaprError
from dapr.evaluation import document_qrels

LEVELS = ("passage", "document")


class DaprDataset:
    """A dapr dataset as PyTerrier datasets look: topics, qrels and the corpus per split."""

    def __init__(self, dataset: Dataset):
        self.dataset = dataset

    def __repr__(self) -> str:
        return f"DaprDataset({self.dataset.name!r}, splits={list(self.dataset.splits)})"

    @property
    def relevance_level(self) -> int:
        """The lowest relevant grade: binary measures need ``rel=`` this (``RR(rel=2)@10``)."""
        return self.dataset.relevance_level

    def get_topics(self, split: str = "test") -> pd.DataFrame:
        """``qid``, ``query`` of the split's queries."""
        queries = self.dataset.split(split).queries
        return pd.DataFrame({"qid": list(queries), "query": list(queries.values())})

    def get_qrels(self, split: str = "test", level: str = "passage") -> pd.DataFrame:
        """``qid``, ``docno``, ``label``: the split's passage judgements, or with
        ``level="document"`` each document's best passage grade (as ``dapr run`` evaluates
        document-level systems)."""
        _check_level(level)
        qrels = self.dataset.split(split).qrels
        if level == "document":
            qrels = document_qrels(qrels, self.dataset.corpus.ids)
        rows = [(q, item, grade) for q, judged in qrels.items() for item, grade in judged.items()]
        frame = pd.DataFrame(rows, columns=["qid", "docno", "label"])
        return frame.astype({"qid": str, "docno": str, "label": np.int64})

    def get_corpus_iter(self, level: str = "passage") -> Iterator[dict[str, str]]:
        """``{docno, text, title, document_id}`` of every candidate passage, or with
        ``level="document"`` ``{docno, text, title}`` of every whole document (passages
        joined by spaces, as dapr gives documents to document-level retrievers)."""
        _check_level(level)
        for document in self.dataset.corpus:
            if level == "document":
                yield {"docno": document.id, "text": document.text, "title": document.title}
                continue
            for p in document.passages:
                if p.is_candidate:
                    yield {
                        "docno": p.id,
                        "text": p.text,
                        "title": document.title,
                        "document_id": document.id,
                    }

    def passage_texts(self, ids: Iterable[str]) -> dict[str, str]:
        """The text of each of the passages ``ids`` (one pass over the corpus)."""
        wanted = set(ids)
        found = {p.id: p.text for p in self.dataset.corpus.passages() if p.id in wanted}
        missing = wanted - found.keys()
        if missing:
            raise DaprError(
                f"passage {min(missing)!r} is not in dataset {self.dataset.name!r}; "
                "give frames of this dataset's passages"
            )
        return found


def dataset(source: str | Dataset | DaprDataset, **args: Any) -> DaprDataset:
    """A dapr dataset for PyTerrier: a registered name, a dataset directory or ``irds:<id>``
    (``args`` as ``load_dataset`` takes them), or a loaded :class:`~dapr.data.Dataset`."""
    if isinstance(source, DaprDataset):
        return source
    if isinstance(source, Dataset):
        return DaprDataset(source)
    if not isinstance(source, str):
        raise DaprError(
            f"dataset: expected a dataset name, directory or dapr Dataset, got "
            f"{type(source).__name__}"
        )
    from dapr.datasets import load_dataset

    return DaprDataset(load_dataset(source, **args))


def need(frame: pd.DataFrame, columns: Iterable[str], who: str) -> None:
    """A one-line DaprError when ``frame`` lacks one of ``columns``."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise DaprError(
            f"{who}: the input frame has no column {missing[0]!r} (it has: "
            f"{', '.join(map(str, frame.columns)) or 'none'}); give a frame with "
            f"{', '.join(columns)}"
        )


def queries_of(frame: pd.DataFrame, who: str) -> dict[str, str]:
    """``{qid: query}`` of a topics or result frame."""
    need(frame, ("qid", "query"), who)
    unique = frame.drop_duplicates("qid")
    return dict(zip(unique["qid"].astype(str), unique["query"].astype(str)))


def frame_run(frame: pd.DataFrame, who: str, scores: str = "score") -> Run:
    """The :class:`Run` of a result frame (its ``scores`` column ranks the items)."""
    need(frame, ("qid", "docno", scores), who)
    codes, vocab = pd.factorize(frame["docno"].astype(str))
    values = frame[scores].to_numpy(dtype=np.float64)
    groups = frame.groupby(frame["qid"].astype(str), sort=False).indices
    return Run.from_lists(
        list(groups),
        [codes[rows] for rows in groups.values()],
        [values[rows] for rows in groups.values()],
        np.asarray(vocab, dtype=object),
    )


def run_frame(run: Run, topics: pd.DataFrame | Mapping[str, str] | None = None) -> pd.DataFrame:
    """A result frame of ``run``; the query columns of ``topics`` (``qid``, ``query`` and the
    other columns PyTerrier counts as the query's, or ``{qid: query}``) are joined to it."""
    lengths = np.diff(run.offsets)
    frame = pd.DataFrame(
        {
            "qid": np.repeat(run.queries.astype(object), lengths).astype(str),
            "docno": run.vocab[run.items].astype(object).astype(str),
            "score": run.scores.astype(np.float64),
            "rank": np.arange(len(run.items)) - np.repeat(run.offsets[:-1], lengths),
        }
    )
    if topics is None:
        return frame
    queries: pd.DataFrame = (
        pd.DataFrame({"qid": list(topics), "query": list(topics.values())})
        if isinstance(topics, Mapping)
        else topics
    )
    columns = pt.model.query_columns(queries)
    if columns == ["qid"]:
        return frame
    query_rows = queries[columns].drop_duplicates("qid").astype({"qid": str})
    return frame.merge(query_rows, on="qid", how="left")


def _check_level(level: str) -> None:
    if level not in LEVELS:
        raise DaprError(f"level: {level!r} is not one of: {', '.join(LEVELS)}")
