"""Descriptive statistics of a dataset, as the DAPR paper's dataset table reports them."""

from __future__ import annotations

from statistics import mean, median

from dapr.data import Dataset


def _words(text: str) -> int:
    return len(text.split())


def dataset_stats(dataset: Dataset) -> dict[str, object]:
    """Documents, passages, lengths in words, and queries/judgements per split."""
    passages_per_doc: list[int] = []
    passage_words: list[int] = []
    title_words: list[int] = []
    for document in dataset.corpus:
        passages_per_doc.append(len(document.passages))
        title_words.append(_words(document.title))
        passage_words.extend(_words(p.text) for p in document.passages)
    splits = {}
    for name, split in dataset.splits.items():
        splits[name] = {
            "queries": len(split.queries),
            "judgements": sum(len(j) for j in split.qrels.values()),
            "relevant": sum(g >= 1 for j in split.qrels.values() for g in j.values()),
            "mean_query_words": _mean([_words(t) for t in split.queries.values()]),
        }
    return {
        "dataset": dataset.name,
        "documents": len(passages_per_doc),
        "passages": len(passage_words),
        "passages_per_document": {
            "mean": _mean(passages_per_doc),
            "median": float(median(passages_per_doc)) if passages_per_doc else 0.0,
            "max": max(passages_per_doc, default=0),
        },
        "mean_passage_words": _mean(passage_words),
        "mean_title_words": _mean(title_words),
        "splits": splits,
    }


def _mean(values: list[int]) -> float:
    return round(float(mean(values)), 2) if values else 0.0


def format_stats(stats: dict) -> str:
    """A readable plain-text rendering of :func:`dataset_stats`."""
    per_doc = stats["passages_per_document"]
    lines = [
        f"dataset            {stats['dataset']}",
        f"documents          {stats['documents']:,}",
        f"passages           {stats['passages']:,}",
        f"passages/document  mean {per_doc['mean']}, median {per_doc['median']}, "
        f"max {per_doc['max']}",
        f"passage length     {stats['mean_passage_words']} words (mean)",
        f"title length       {stats['mean_title_words']} words (mean)",
    ]
    for name, split in stats["splits"].items():
        lines.append(
            f"{name:<18} {split['queries']:,} queries ({split['mean_query_words']} words), "
            f"{split['judgements']:,} judgements ({split['relevant']:,} relevant)"
        )
    return "\n".join(lines)
