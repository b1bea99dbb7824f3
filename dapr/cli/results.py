"""Commands over results directories: ``dapr report`` (Table 3), ``dapr plot``,
``dapr hard-subset`` and ``dapr results publish`` (:mod:`dapr.cli.publish`). Results are read
through :mod:`dapr.experiment.results`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from dapr.errors import DaprError

if TYPE_CHECKING:
    from dapr.analysis.reference import Scorer
    from dapr.data import Dataset


def add(commands: argparse._SubParsersAction) -> None:
    report = commands.add_parser(
        "report",
        help="the paper's Table 3 from results directories (markdown, CSV, LaTeX, HTML)",
        description="Rows: approach x retriever; columns: datasets, Avg., then the datasets kept "
        "apart (NQ-hard). The best value per column is bold; with --baseline, a dagger (then a "
        "double dagger, ... per further baseline) marks a significant difference (paired t-test, "
        "Holm-corrected per column unless --correction and --family say otherwise).",
    )
    report.add_argument(
        "results",
        nargs="+",
        type=Path,
        help="results directories of dapr run, or output folders of the reference code "
        "(UKPLab/acl2024-dapr: exps/...), whose passage_weight w is shown as alpha = 1 - w",
    )
    report.add_argument("--metric", default="nDCG@10")
    report.add_argument(
        "--evaluate-runs",
        action="store_true",
        help="score the reference code's run files with dapr (per query, so they get "
        "significance tests) instead of reading its metrics files; needs its datasets here",
    )
    report.add_argument(
        "--baseline",
        action="append",
        help="a system, or an approach compared within each retriever; repeat it to test "
        "every row against several baselines",
    )
    report.add_argument(
        "--correction",
        default="holm",
        help="multiple-testing correction of the p-values: holm (default), bonferroni or none",
    )
    report.add_argument(
        "--family",
        default="column",
        help="the comparisons corrected together: column (default: each dataset's, against "
        "every baseline) or table (all of them)",
    )
    report.add_argument(
        "--apart",
        nargs="*",
        default=["nq-hard"],
        help="datasets shown after Avg. and left out of it (default: nq-hard)",
    )
    report.add_argument(
        "--out",
        type=Path,
        help="also write table3.md, .csv, .tex and report.html (one self-contained web page with "
        "charts and per-category breakdowns) here",
    )
    report.set_defaults(handler=_report)

    plot = commands.add_parser("plot", help="plot a results directory (PNG and PDF)")
    plot.add_argument("results", type=Path, help="a results directory of dapr run")
    plot.add_argument(
        "--kind",
        choices=("categories", "sweep"),
        required=True,
        help="categories: the metric per query category and system (the paper's Figure 3); "
        "sweep: the metric against the swept value (Figure 2)",
    )
    plot.add_argument("--metric", default="nDCG@10")
    plot.add_argument("--systems", nargs="+", help="default: every passage-level system")
    plot.add_argument("--labels", type=Path, help="query categories (TSV) instead of the run's")
    plot.add_argument("--out", type=Path, help="file stem (default: RESULTS/<kind>)")
    plot.set_defaults(handler=_plot)

    hard = commands.add_parser(
        "hard-subset",
        help="the queries on which every given system fails, as a category table",
        description="The NQ-hard rule on any dataset: a query is hard when every system scores "
        "at most --threshold (default 0) on --metric. Writes a TSV query_id<TAB>category.",
    )
    hard.add_argument("results", nargs="+", type=Path, help="results directories of one split")
    hard.add_argument("--systems", nargs="+", help="default: every passage-level system")
    hard.add_argument("--metric", default="nDCG@10")
    hard.add_argument("--threshold", type=float, default=0.0)
    hard.add_argument("--out", type=Path, required=True, help="the TSV to write")
    hard.set_defaults(handler=_hard_subset)

    from dapr.cli import publish

    publish.add(commands)


def _report(args: argparse.Namespace) -> int:
    from dapr.analysis.html_report import to_html
    from dapr.analysis.reference import is_reference, reference_results
    from dapr.analysis.significance import check_correction
    from dapr.analysis.table import check_family, table3, to_csv, to_latex, to_markdown
    from dapr.evaluation import parse_metric
    from dapr.experiment import results, summary

    metric = parse_metric(args.metric).name
    check_correction(args.correction)
    check_family(args.family)
    theirs = [path for path in args.results if is_reference(path)]
    ours = [path for path in args.results if path not in theirs]
    found = results.load_results(results.metrics_files(ours)) if ours else []
    score = _run_scorer(metric) if args.evaluate_runs else None
    for path in theirs:
        found.extend(reference_results(path, score))
    table = table3(
        found,
        metric=metric,
        baseline=args.baseline,
        apart=tuple(args.apart),
        correction=args.correction,
        family=args.family,
    )
    text = to_markdown(table)
    print(text)
    paper = summary.paper_markdown(
        found,
        [results.read_published(r.path) if r.path.name == results.METRICS else None for r in found],
        metric,
    )
    if paper:
        print(f"The paper beside dapr ({metric}; difference: dapr minus the paper):\n")
        print(paper)
    if args.out:
        tables = {"md": text, "csv": to_csv(table), "tex": to_latex(table)}
        results.write_tables(args.out, "table3", tables)
        results.write_tables(args.out, "report", {"html": to_html(table, found)})
        print(f"written to {args.out}/table3.md, .csv, .tex and {args.out}/report.html")
    return 0


def _run_scorer(metric: str) -> Scorer:
    """Scores a reference run file against dapr's copy of the dataset its folder names."""
    from dapr import evaluation
    from dapr.datasets import load_dataset
    from dapr.io import read_trec_run

    metrics = list(dict.fromkeys([metric, *evaluation.DEFAULT_METRICS]))
    datasets: dict[str, Dataset] = {}

    def score(
        run_file: Path, name: str, split: str, level: str
    ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        if name not in datasets:
            datasets[name] = load_dataset(name)
        dataset = datasets[name]
        qrels = dataset.split(split).qrels
        if level == "document":
            qrels = evaluation.document_qrels(qrels, dataset.corpus.ids)
        run = read_trec_run(run_file)
        found = evaluation.evaluate(run, qrels, metrics, relevance_level=dataset.relevance_level)
        return found.means, found.per_query

    return score


def _plot(args: argparse.Namespace) -> int:
    from dapr.evaluation import parse_metric
    from dapr.experiment import results

    metric = parse_metric(args.metric).name
    stem = args.out or args.results / args.kind
    if args.kind == "sweep":
        from dapr.analysis.plots import sweep_plot

        swept = results.read_sweep(args.results)
        curves = {
            f"{subset} ({split}, n={swept['queries'][split][subset]})": [
                (value, float("nan") if mean is None else mean)
                for value, mean in zip(swept["values"], means)
            ]
            for split in (swept["reported_on"], swept["tune_on"])
            for subset, means in swept["means"][split].items()
        }
        written = sweep_plot(curves, swept["parameter"], swept["metric"], stem, swept["chosen"])
    else:
        from dapr.analysis.categories import category_table, read_labels
        from dapr.analysis.plots import category_plot

        metrics = results.read_metrics(args.results)
        labels = read_labels(args.labels) if args.labels else None
        if labels is None and not metrics.get("labels"):
            raise DaprError(
                f"{args.results}: its queries have no categories; run with categories: "
                "title_mention (or a dataset that has them), or pass --labels FILE.tsv"
            )
        table, counts = category_table(metrics, metric, args.systems, labels)
        written = category_plot(table, metric, stem, counts)
    print("written: " + ", ".join(str(p) for p in written))
    return 0


def _hard_subset(args: argparse.Namespace) -> int:
    from dapr.analysis.categories import write_labels
    from dapr.analysis.hard import HARD, gather_scores, hard_subset
    from dapr.evaluation import parse_metric
    from dapr.experiment import results

    found = [results.read_metrics(p) for p in results.metrics_files(args.results)]
    scores = gather_scores(found, parse_metric(args.metric).name, args.systems)
    labels = hard_subset(scores, args.threshold)
    write_labels(args.out, labels)
    hard = sum(HARD in categories for categories in labels.values())
    print(
        f"{hard} of {len(labels)} queries are hard: every one of {', '.join(scores)} scores "
        f"{args.metric} <= {args.threshold:g}; written to {args.out}"
    )
    return 0
