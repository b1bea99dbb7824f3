"""Commands over a dataset and a run file: ``dapr evaluate`` and ``dapr overlap`` (Table 5)."""

from __future__ import annotations

import argparse
from pathlib import Path

from dapr.errors import DaprError


def add(commands: argparse._SubParsersAction) -> None:
    overlap = commands.add_parser(
        "overlap",
        help="query / gold-passage Jaccard similarity with and without titles (Table 5)",
    )
    overlap.add_argument("dataset", help="a registered dataset or a dataset directory")
    overlap.add_argument("--split", default="test")
    overlap.set_defaults(handler=_overlap)

    evaluate = commands.add_parser(
        "evaluate",
        help="evaluate a TREC run file against a dataset's qrels",
        description="Reads RUN (qid Q0 docid rank score system lines), scores it with trec_eval's "
        "measures against the split's judgements and prints the means. A document-level run is "
        "judged against document qrels (a document takes the best grade of its passages).",
    )
    evaluate.add_argument("run", type=Path, help="a TREC run file")
    evaluate.add_argument(
        "--dataset", required=True, help="a registered dataset or a dataset directory"
    )
    evaluate.add_argument("--split", default="test")
    evaluate.add_argument(
        "--metrics", nargs="+", default=None, help="default: nDCG@10 R@100 MRR@10"
    )
    evaluate.add_argument("--level", choices=("passage", "document"), default="passage")
    evaluate.set_defaults(handler=_evaluate)


def _overlap(args: argparse.Namespace) -> int:
    from dapr.analysis.overlap import overlap_table
    from dapr.datasets import load_dataset

    dataset = load_dataset(args.dataset)
    stats = overlap_table(dataset, args.split)
    print(f"Query / gold-passage Jaccard similarity, {dataset.name}, split {args.split}\n")
    print("| passage | mean Jaccard | pairs | queries |\n|---|---:|---:|---:|")
    for with_title, label in ((False, "alone"), (True, "with title")):
        row = stats[with_title]
        print(f"| {label} | {row.mean:.4f} | {row.pairs:,} | {row.queries:,} |")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from dapr import evaluation
    from dapr.datasets import load_dataset
    from dapr.io import read_trec_run

    metrics = [evaluation.parse_metric(m).name for m in args.metrics or evaluation.DEFAULT_METRICS]
    if not args.run.is_file():
        raise DaprError(f"{args.run}: no such run file; give a TREC run (qid Q0 docid rank score)")
    run = read_trec_run(args.run)
    if not len(run.items):
        raise DaprError(f"{args.run}: the run ranks nothing; give a run with at least one line")
    dataset = load_dataset(args.dataset)
    qrels = dataset.split(args.split).qrels
    if not set(run.queries.tolist()) & qrels.keys():
        raise DaprError(
            f"{args.run}: none of its {len(run.queries)} queries is judged in split "
            f"{args.split!r} of {dataset.name}; evaluate it against the split it was run on "
            "(--split)"
        )
    _check_level(args.run, run.vocab, dataset, args.level)
    if args.level == "document":
        qrels = evaluation.document_qrels(qrels, dataset.corpus.ids)
    result = evaluation.evaluate(run, qrels, metrics, relevance_level=dataset.relevance_level)
    print(f"{args.run.name}: {dataset.name}, split {args.split}, {args.level} level\n")
    print("| run | level | " + " | ".join(metrics) + " |")
    print("|---|---|" + "---:|" * len(metrics))
    values = " | ".join(f"{result.means[m]:.4f}" for m in metrics)
    print(f"| {args.run.stem} | {args.level} | {values} |")
    return 0


def _check_level(path: Path, items, dataset, level: str) -> None:
    """A DaprError when the run's items are of the other level than ``level`` (it would score
    0 everywhere): none is an item of that level in the corpus, but some are of the other."""
    ids = dataset.corpus.ids
    passages = int((ids.passage_codes(items) >= 0).sum())
    documents = int((ids.document_codes(items) >= 0).sum())
    found, other = (passages, documents) if level == "passage" else (documents, passages)
    if found == 0 and other > 0:
        flip = "document" if level == "passage" else "passage"
        raise DaprError(
            f"{path}: ranks {flip}s of {dataset.name} ({other:,} of its ids are {flip} ids, none "
            f"is a {level} id); evaluate it with --level {flip}"
        )
