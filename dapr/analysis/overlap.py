"""Lexical overlap of queries and their gold passages (the DAPR paper's Table 5): the Jaccard
similarity of their word sets, with and without the document title prepended to the passage.

Tokens are lowercased Unicode word runs (``\\w+``), compared as sets. The paper does not say how
it tokenized for this table, and its reference code does not hold the script, so the numbers are
comparable with one another (passage vs. title + passage, dataset vs. dataset), not digit for
digit with the paper's. With a title the passage reads ``f"{title} {passage}"``, as the
``title`` contextualizer writes it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Set
from dataclasses import dataclass

from dapr.data import Dataset
from dapr.errors import DataError

_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class OverlapStats:
    """The mean Jaccard similarity over ``pairs`` (query, relevant passage) pairs of
    ``queries`` queries (NaN when there are none)."""

    mean: float
    pairs: int
    queries: int


def tokens(text: str) -> frozenset[str]:
    """The set of lowercased word tokens of ``text``."""
    return frozenset(_WORD.findall(text.lower()))


def jaccard(a: Set[str], b: Set[str]) -> float:
    """``|a & b| / |a | b|``; 0 when both sets are empty."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


def gold_overlap(dataset: Dataset, split: str, with_title: bool) -> OverlapStats:
    """Mean query / gold-passage Jaccard over the split's relevant pairs (grade at least
    ``dataset.relevance_level``), with the title prepended to the passage when ``with_title``."""
    return overlap_table(dataset, split, (with_title,))[with_title]


def overlap_table(
    dataset: Dataset, split: str, variants: tuple[bool, ...] = (False, True)
) -> dict[bool, OverlapStats]:
    """:func:`gold_overlap` for each ``with_title`` in ``variants``, in one pass over the corpus."""
    queries = dataset.split(split).queries
    sums = dict.fromkeys(variants, 0.0)
    pairs, judged = 0, set()
    for qid, title, text in _gold_pairs(dataset, split):
        query = tokens(queries[qid])
        for with_title in variants:
            sums[with_title] += jaccard(query, tokens(f"{title} {text}" if with_title else text))
        pairs += 1
        judged.add(qid)
    return {
        v: OverlapStats(sums[v] / pairs if pairs else float("nan"), pairs, len(judged))
        for v in variants
    }


def _gold_pairs(dataset: Dataset, split: str) -> Iterator[tuple[str, str, str]]:
    """``(query id, document title, passage text)`` for every relevant pair, in qrels order."""
    data = dataset.split(split)
    gold = {
        qid: [p for p, grade in judged.items() if grade >= dataset.relevance_level]
        for qid, judged in data.qrels.items()
    }
    wanted = {p for passages in gold.values() for p in passages}
    found: dict[str, tuple[str, str]] = {}
    for document in dataset.corpus:
        for passage in document.passages:
            if passage.id in wanted:
                found[passage.id] = (document.title, passage.text)
    for qid, passages in gold.items():
        if passages and qid not in data.queries:
            raise DataError(
                f"dataset {dataset.name!r}, split {split!r}: qrels judge query {qid!r}, which has "
                "no text; fix the queries"
            )
        for p in passages:
            if p not in found:
                raise DataError(
                    f"dataset {dataset.name!r}, split {split!r}: query {qid!r} judges passage "
                    f"{p!r}, which is not in the corpus; fix the qrels"
                )
            yield (qid, *found[p])
