"""Descriptive statistics of a dataset: the columns of the DAPR paper's Table 1.

Lengths are in words (whitespace tokens), or in characters for languages written without spaces
(Chinese, Japanese). The depth of a relevant passage is its 0-based position in its document.
"""

from __future__ import annotations

from collections import Counter
from statistics import mean, median, pstdev

from dapr.data import Dataset

UNSPACED = frozenset({"zh", "ja"})


def dataset_stats(dataset: Dataset) -> dict[str, object]:
    """Documents, passages, lengths, relevance scale, depth of relevant passages, and per split
    the number of queries and of judgements per query."""
    length = _characters if dataset.language in UNSPACED else _words
    relevant = {
        item
        for split in dataset.splits.values()
        for judged in split.qrels.values()
        for item, grade in judged.items()
        if grade >= dataset.relevance_level
    }
    passages_per_doc: list[int] = []
    passage_lengths: list[int] = []
    title_lengths: list[int] = []
    depth: dict[str, int] = {}
    candidates = 0
    for document in dataset.corpus:
        passages_per_doc.append(len(document.passages))
        title_lengths.append(length(document.title))
        for p in document.passages:
            passage_lengths.append(length(p.text))
            candidates += p.is_candidate
            if p.id in relevant:
                depth[p.id] = p.position
    grades = sorted(
        {g for split in dataset.splits.values() for j in split.qrels.values() for g in j.values()}
    )
    relevant_depths = [depth[i] for i in relevant if i in depth]
    return {
        "dataset": dataset.name,
        "language": dataset.language,
        "length_unit": "characters" if dataset.language in UNSPACED else "words",
        "documents": len(passages_per_doc),
        "passages": len(passage_lengths),
        "candidate_passages": candidates,
        "passages_per_document": _summary(passages_per_doc),
        "passage_length": _summary(passage_lengths),
        "title_length": _summary(title_lengths),
        "relevance_scale": f"{grades[0]}-{grades[-1]}" if grades else "-",
        "relevance_level": dataset.relevance_level,
        "relevant_passage_depth": {
            "mean": _round(mean(relevant_depths)) if relevant_depths else 0.0,
            "std": _round(pstdev(relevant_depths)) if relevant_depths else 0.0,
            "found": len(relevant_depths),
            "judged": len(relevant),
        },
        "splits": {name: _split_stats(dataset, name, length) for name in dataset.splits},
        "labels": dict(sorted(Counter(x for ls in dataset.labels.values() for x in ls).items())),
        "notes": list(dataset.notes),
    }


def _split_stats(dataset: Dataset, name: str, length) -> dict[str, object]:
    split = dataset.splits[name]
    per_query = [len(split.qrels.get(q, {})) for q in split.queries]
    relevant = [
        sum(g >= dataset.relevance_level for g in split.qrels.get(q, {}).values())
        for q in split.queries
    ]
    return {
        "queries": len(split.queries),
        "judgements": sum(per_query),
        "judgements_per_query": _round(mean(per_query)) if per_query else 0.0,
        "relevant_per_query": _round(mean(relevant)) if relevant else 0.0,
        "query_length": _round(mean(length(t) for t in split.queries.values()))
        if split.queries
        else 0.0,
    }


def _words(text: str) -> int:
    return len(text.split())


def _characters(text: str) -> int:
    return sum(not c.isspace() for c in text)


def _summary(values: list[int]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "std": 0.0, "median": 0.0, "max": 0}
    return {
        "mean": _round(mean(values)),
        "std": _round(pstdev(values)),
        "median": float(median(values)),
        "max": max(values),
    }


def _round(value: float) -> float:
    return round(float(value), 2)


def format_stats(stats: dict) -> str:
    """A readable plain-text rendering of :func:`dataset_stats`."""
    unit = stats["length_unit"]

    def spread(key: str) -> str:
        s = stats[key]
        return f"mean {s['mean']} (std {s['std']}), median {s['median']}, max {s['max']}"

    depth = stats["relevant_passage_depth"]
    lines = [
        f"dataset            {stats['dataset']} ({stats['language']})",
        f"documents          {stats['documents']:,}",
        f"passages           {stats['passages']:,} ({stats['candidate_passages']:,} candidates)",
        f"passages/document  {spread('passages_per_document')}",
        f"passage length     {spread('passage_length')} {unit}",
        f"title length       {spread('title_length')} {unit}",
        f"relevance scale    {stats['relevance_scale']} "
        f"(relevant from grade {stats['relevance_level']})",
        f"relevant depth     mean {depth['mean']} (std {depth['std']}), 0-based position, "
        f"over {depth['found']:,} of {depth['judged']:,} relevant passages",
    ]
    for name, split in stats["splits"].items():
        lines.append(
            f"{name:<18} {split['queries']:,} queries ({split['query_length']} {unit}), "
            f"{split['judgements']:,} judgements ({split['judgements_per_query']}/query, "
            f"{split['relevant_per_query']} relevant/query)"
        )
    if stats["labels"]:
        counts = ", ".join(f"{label} {n:,}" for label, n in stats["labels"].items())
        lines.append(f"query labels       {counts}")
    lines.extend(f"note               {note}" for note in stats["notes"])
    return "\n".join(lines)
