"""What a dataset holds, for pricing an experiment (:mod:`dapr.experiment.estimate`): from its
statistics when it is readable here, else, for the DAPR datasets, from the paper's Table 1."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dapr.errors import DaprError
from dapr.experiment.spec import Experiment

TABLE1_SOURCE = "the DAPR paper's Table 1 (Wang et al., ACL 2024)"
TABLE1: dict[str, tuple[int, float | None, float, float, float, dict[str, int]]] = {
    "MSMARCO": (1_359_163, None, 63.9, 7.7, 7.2, {"train": 92_905, "dev": 2_839, "test": 2_722}),
    "NaturalQuestions": (
        108_626, 24.7, 105.5, 4.7, 9.9, {"train": 93_275, "dev": 3_610, "test": 3_610}
    ),
    "MIRACL": (5_758_285, 5.7, 105.3, 5.0, 9.1, {"train": 2_064, "dev": 799, "test": 799}),
    "Genomics": (162_259, 77.9, 150.5, 22.0, 14.0, {"test": 62}),
    "ConditionalQA": (652, 106.1, 15.8, 6.2, 58.7, {"train": 1_975, "dev": 271, "test": 271}),
}  # fmt: skip
"""Per dataset: documents, passages per document, mean passage, title and query length in words,
and queries per split, from the paper's Table 1."""
MSMARCO_PASSAGES = 8_841_823
"""Table 1 gives no passages per document for MS MARCO; assumed: the size of the MS MARCO passage
collection (Bajaj et al., 2016), whose passages DAPR locates in their documents."""
NQ_HARD_TEST = 479
"""NQ-hard: NaturalQuestions' corpus and its 479 test queries labelled CR / MT / MHR / AC."""


@dataclass(frozen=True)
class Sizes:
    """What a dataset holds, and where the figures come from."""

    documents: int
    passages: int
    passage_words: float
    title_words: float
    query_words: float
    queries: int
    source: str

    @property
    def words(self) -> float:
        return self.passages * self.passage_words


def corpus_of(dataset: str) -> str:
    """The Table 1 dataset whose corpus ``dataset`` searches (NQ-hard: NaturalQuestions)."""
    return "NaturalQuestions" if dataset == "NQ-hard" else dataset


def table1_sizes(dataset: str, split: str) -> Sizes:
    """The sizes of a DAPR dataset from the paper's Table 1 (no data needed)."""
    if corpus_of(dataset) not in TABLE1:
        raise DaprError(
            f"dataset {dataset}: neither readable here nor in the paper's Table 1 "
            f"({', '.join(TABLE1)}, NQ-hard); build or fetch it, then check again"
        )
    documents, per, passage, title, query, splits = TABLE1[corpus_of(dataset)]
    if dataset == "NQ-hard":
        queries = NQ_HARD_TEST
    elif split in splits:
        queries = splits[split]
    else:
        raise DaprError(f"dataset {dataset}: Table 1 has no {split} queries; choose test")
    passages = round(documents * per) if per else MSMARCO_PASSAGES
    source = TABLE1_SOURCE + ("" if per else "; passages: the MS MARCO passage collection")
    return Sizes(documents, passages, passage, title, query, queries, source)


def stats_sizes(stats: dict[str, Any], split: str) -> Sizes:
    """The sizes of a dataset from :func:`dapr.datasets.stats.dataset_stats`."""
    queries = stats["splits"].get(split, {})
    return Sizes(
        stats["documents"],
        stats["passages"],
        stats["passage_length"]["mean"],
        stats["title_length"]["mean"],
        queries.get("query_length", 0.0),
        queries.get("queries", 0),
        f"the dataset's statistics (dapr data stats {stats['dataset']})",
    )


def sizes_of(experiment: Experiment) -> Sizes:
    """The sizes of the experiment's dataset: Table 1's for a DAPR dataset, else its
    statistics (it must be readable here)."""
    if corpus_of(experiment.dataset) in TABLE1:
        return table1_sizes(experiment.dataset, experiment.split)
    from dapr.datasets import load_dataset
    from dapr.datasets.stats import dataset_stats

    dataset = load_dataset(experiment.dataset, **experiment.dataset_args)
    return stats_sizes(dataset_stats(dataset), experiment.split)
