"""The ``dapr`` command."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dapr.errors import DaprError


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except DaprError as error:
        print(f"dapr: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dapr: interrupted; finished steps are cached, rerun to resume", file=sys.stderr)
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dapr", description="Document-aware passage retrieval")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run an experiment file")
    run.add_argument("file", type=Path)
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting, e.g. --set split=dev or --set fusion.f.args.alpha=0.3",
    )
    run.add_argument("--out", type=Path, help="output directory (default results/<experiment>)")
    run.add_argument(
        "--ray",
        action="store_true",
        help="run the retrieval jobs as Ray tasks on a local Ray sized to this machine",
    )
    run.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="run the retrieval jobs on the Ray cluster at ADDR (auto, or ray://host:port); "
        "$DAPR_HOME must be on a file system every node shares",
    )
    run.set_defaults(handler=_run)

    data = commands.add_parser("data", help="list, build, fetch, inspect and export datasets")
    data_commands = data.add_subparsers(required=True, metavar="ACTION")
    listing = data_commands.add_parser("list", help="every registered dataset and its source")
    listing.set_defaults(handler=_list)
    build = data_commands.add_parser("build", help="build a dataset from its raw files")
    build.add_argument("name", help="a registered dataset, e.g. NaturalQuestions")
    build.add_argument("--source", type=Path, required=True, help="directory of the raw files")
    build.add_argument("--out", type=Path, help="default: the dataset's prepared copy")
    build.add_argument("--format", choices=("jsonl", "parquet"), default="parquet")
    build.add_argument(
        "--set",
        dest="options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a build option, e.g. --set tagged=true for ConditionalQA",
    )
    build.add_argument(
        "--download", action="store_true", help="download missing raw files into --source"
    )
    build.set_defaults(handler=_build)
    fetch = data_commands.add_parser("fetch", help="fetch a prebuilt dataset from the hub")
    fetch.add_argument("name", help="a dataset of the DAPR benchmark, e.g. ConditionalQA")
    fetch.add_argument(
        "--from",
        dest="snapshot",
        type=Path,
        help="a local copy of the hub repository (huggingface-cli download ... --local-dir)",
    )
    fetch.set_defaults(handler=_fetch)
    stats = data_commands.add_parser("stats", help="print dataset statistics")
    stats.add_argument("name", help="a registered dataset or a dataset directory")
    stats.add_argument("--json", action="store_true", help="print one JSON object")
    stats.set_defaults(handler=_stats)
    export = data_commands.add_parser("export", help="write a dataset in the hub layout")
    export.add_argument("name", help="a registered dataset or a dataset directory")
    export.add_argument("--out", type=Path, required=True)
    export.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    export.set_defaults(handler=_export)

    context = commands.add_parser(
        "contextualize",
        help="contextualize a corpus (or a sample of it) and report the cost",
        description="Fills the contextualization cache that `dapr run` reuses, and prints the "
        "speed and the time the whole corpus takes (the DAPR paper's Table 6).",
    )
    context.add_argument("dataset", help="a registered dataset or a dataset directory")
    context.add_argument(
        "-c",
        "--contextualizer",
        dest="steps",
        action="append",
        required=True,
        metavar="STEP",
        help="a contextualizer name or a YAML mapping, e.g. -c title or "
        "-c '{name: keyphrases, args: {backend: pke}}'; repeat to chain steps in order",
    )
    context.add_argument(
        "--sample", type=int, help="only this many documents, spread evenly over the corpus"
    )
    context.add_argument("--workers", type=int, help="worker processes (default: every core)")
    context.set_defaults(handler=_contextualize)

    report = commands.add_parser(
        "report",
        help="the paper's Table 3 from results directories (markdown, CSV, LaTeX)",
        description="Rows: approach x retriever; columns: datasets, Avg., then the datasets kept "
        "apart (NQ-hard). The best value per column is bold; with --baseline, a dagger marks a "
        "significant difference (paired t-test, Holm-corrected per column).",
    )
    report.add_argument("results", nargs="+", type=Path, help="results directories of dapr run")
    report.add_argument("--metric", default="nDCG@10")
    report.add_argument(
        "--baseline", help="a system, or an approach compared within each retriever"
    )
    report.add_argument(
        "--apart",
        nargs="*",
        default=["nq-hard"],
        help="datasets shown after Avg. and left out of it (default: nq-hard)",
    )
    report.add_argument("--out", type=Path, help="also write table3.md, .csv and .tex here")
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

    cache = commands.add_parser("cache", help="list or prune the cache ($DAPR_HOME/cache)")
    cache_commands = cache.add_subparsers(required=True, metavar="ACTION")
    cache_ls = cache_commands.add_parser("ls", help="entries per kind and their size")
    cache_ls.add_argument("--all", action="store_true", help="one line per entry")
    cache_ls.set_defaults(handler=_cache_ls)
    prune = cache_commands.add_parser(
        "prune",
        help="remove entries not used for a while, and what killed runs left behind",
        description="Removes complete entries unused for --older-than DAYS (or every entry with "
        "--everything), always with the temporary files of killed runs and incomplete entries. "
        "An entry a running experiment holds is waited for, never removed under it.",
    )
    when = prune.add_mutually_exclusive_group(required=True)
    when.add_argument("--older-than", type=float, metavar="DAYS")
    when.add_argument("--everything", action="store_true")
    prune.add_argument("--kind", action="append", help="only these kinds (indexes, runs, contexts)")
    prune.add_argument("--dry-run", action="store_true", help="list, remove nothing")
    prune.set_defaults(handler=_cache_prune)

    plugins = commands.add_parser("plugins", help="list the installed components")
    plugins.set_defaults(handler=_plugins)
    return parser


def _run(args: argparse.Namespace) -> int:
    from dapr.experiment.config import load_grid
    from dapr.report import check_output

    experiments = load_grid(args.file, args.overrides)
    outs = []
    for experiment in experiments:
        # one experiment per dataset of a grid, named <name>/<dataset>: a directory each
        name, _, dataset = experiment.name.partition("/")
        out = args.out or Path("results") / name
        outs.append(out / dataset if dataset else out)
        check_output(outs[-1])  # before any work
    if args.ray or args.ray_address:
        _run_jobs(experiments, args.ray_address)
    for experiment, out in zip(experiments, outs):
        _run_one(experiment, out)
    return 0


def _run_jobs(experiments: list, ray_address: str | None) -> None:
    """Compute every retrieval run of the experiments (and of their sweeps' tuning splits) as
    parallel Ray jobs; the experiments then find them in the cache."""
    from dataclasses import replace

    from dapr.experiment.cache import Cache
    from dapr.experiment.schedule import plan, run_jobs

    tuning = [replace(e, split=e.sweep.tune_on) for e in experiments if e.sweep is not None]
    jobs = plan([*experiments, *tuning])
    print(f"{len(jobs)} retrieval jobs on Ray")
    finished = run_jobs(jobs, Cache(), ray_address, use_ray=True)
    started = min((done.started for done in finished), default=0.0)
    for done in finished:
        what = ", ".join(done.computed) or "all cached"
        print(
            f"  job {done.system:<20} {done.host}:{done.pid:<7} "
            f"{done.started - started:6.1f}s .. {done.finished - started:6.1f}s  {what}"
        )


def _run_one(experiment, out: Path) -> None:
    import time

    from dapr import report
    from dapr.experiment import sweep
    from dapr.experiment.manifest import manifest
    from dapr.experiment.runner import Runner

    started = time.time()
    swept = None
    if experiment.sweep is None:
        outcome = Runner(experiment).run()
    else:
        swept = sweep.run_sweep(experiment)
        outcome = swept.outcome
    report.write(
        outcome,
        out,
        manifest(outcome, started, time.time()),
        (lambda directory: sweep.write(swept, directory)) if swept else None,
    )
    width = max((len(step.system) for step in outcome.steps), default=0)
    for step in outcome.steps:
        print(f"  {step.kind:<6} {step.system:<{width}}  {step.status:<8} {step.seconds:7.1f}s")
    print(f"\n{experiment.name}: {outcome.dataset.name}, split {experiment.split}\n")
    if swept is not None:
        print(sweep.markdown(swept))
    print(report.markdown(outcome))
    if outcome.costs:
        print(report.cost_markdown(report.cost_rows(outcome.costs, outcome)))
    print(f"results written to {out}")


def _metrics_files(paths: list[Path]) -> list[Path]:
    """Each path's metrics.json, or those of the results directories under it (a grid)."""
    found = []
    for path in paths:
        if path.is_file() or (path / "metrics.json").is_file():
            found.append(path)
        elif path.is_dir() and (below := sorted(path.rglob("metrics.json"))):
            found.extend(below)
        else:
            raise DaprError(f"{path}: no metrics.json here; give a results directory of dapr run")
    return found


def _read_metrics(path: Path) -> dict:
    file = path if path.is_file() else path / "metrics.json"
    try:
        return json.loads(file.read_text())
    except (OSError, ValueError) as error:
        raise DaprError(f"{file}: not a readable metrics.json ({error})") from None


def _report(args: argparse.Namespace) -> int:
    from dapr.analysis.table import load_results, table3, to_csv, to_latex, to_markdown
    from dapr.evaluation import parse_metric

    metric = parse_metric(args.metric).name
    table = table3(
        load_results(_metrics_files(args.results)),
        metric=metric,
        baseline=args.baseline,
        apart=tuple(args.apart),
    )
    text = to_markdown(table)
    print(text)
    if args.out:
        from dapr.io.files import write_bytes_atomic

        args.out.mkdir(parents=True, exist_ok=True)
        for name, content in (("md", text), ("csv", to_csv(table)), ("tex", to_latex(table))):
            write_bytes_atomic(args.out / f"table3.{name}", [content.encode()])
        print(f"written to {args.out}/table3.md, .csv and .tex")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from dapr.evaluation import parse_metric

    metric = parse_metric(args.metric).name
    stem = args.out or args.results / args.kind
    if args.kind == "sweep":
        from dapr.plots import sweep_plot

        path = args.results / "sweep.json"
        if not path.is_file():
            raise DaprError(f"{args.results}: no sweep.json; run an experiment with a sweep block")
        swept = json.loads(path.read_text())
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
        from dapr.plots import category_plot

        metrics = _read_metrics(args.results)
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

    results = [_read_metrics(p) for p in _metrics_files(args.results)]
    scores = gather_scores(results, parse_metric(args.metric).name, args.systems)
    labels = hard_subset(scores, args.threshold)
    write_labels(args.out, labels)
    hard = sum(HARD in categories for categories in labels.values())
    print(
        f"{hard} of {len(labels)} queries are hard: every one of {', '.join(scores)} scores "
        f"{args.metric} <= {args.threshold:g}; written to {args.out}"
    )
    return 0


def _overlap(args: argparse.Namespace) -> int:
    from dapr.analysis.overlap import overlap_table
    from dapr.registry import load_dataset

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
    from dapr.io import read_trec_run
    from dapr.registry import load_dataset

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
    if args.level == "document":
        qrels = evaluation.document_qrels(qrels, dataset.corpus.ids)
    result = evaluation.evaluate(run, qrels, metrics, relevance_level=dataset.relevance_level)
    print(f"{args.run.name}: {dataset.name}, split {args.split}, {args.level} level\n")
    print("| run | level | " + " | ".join(metrics) + " |")
    print("|---|---|" + "---:|" * len(metrics))
    values = " | ".join(f"{result.means[m]:.4f}" for m in metrics)
    print(f"| {args.run.stem} | {args.level} | {values} |")
    return 0


def _cache_ls(args: argparse.Namespace) -> int:
    from dapr.experiment.cache import Cache
    from dapr.experiment.housekeeping import entries, human_size, summary

    cache = Cache()
    found = entries(cache)
    print(f"{cache.root}\n")
    print(summary(found))
    if args.all:
        for entry in found:
            print(f"{entry.kind:<9} {entry.key}  {human_size(entry.bytes):>9}  {entry.state}")
    return 0


def _cache_prune(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from dapr.experiment.cache import Cache
    from dapr.experiment.housekeeping import human_size, prune

    if args.older_than is not None and args.older_than < 0:
        raise DaprError(f"--older-than must be a number of days >= 0, got {args.older_than}")
    older = None if args.everything else timedelta(days=args.older_than)
    removed = prune(Cache(), older_than=older, kinds=args.kind, dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    for entry in removed:
        print(f"  {entry.kind:<9} {entry.key}  {human_size(entry.bytes)}  {entry.state}")
    total = human_size(sum(entry.bytes for entry in removed))
    print(f"{verb} {len(removed)} entries, {total}")
    return 0


def _contextualize(args: argparse.Namespace) -> int:
    import os

    import yaml

    from dapr import report
    from dapr.contextualizers.pipeline import sample_cost
    from dapr.experiment.config import context_steps
    from dapr.registry import load_dataset

    try:
        raw = [yaml.safe_load(step) for step in args.steps]
    except yaml.YAMLError:
        raise DaprError("--contextualizer: not a name or a YAML mapping {name, args}") from None
    steps = context_steps(raw, Path("--contextualizer"), "steps")
    for flag, value in (("--sample", args.sample), ("--workers", args.workers)):
        if value is not None and value < 1:
            raise DaprError(f"{flag} must be a positive integer, got {value}")
    dataset = load_dataset(args.dataset)
    workers = args.workers or os.cpu_count() or 1
    cost = sample_cost(dataset, steps, args.sample, workers)
    print(report.cost_markdown(report.cost_rows({dataset.name: cost}, of="dataset")), end="")
    return 0


def _stats(args: argparse.Namespace) -> int:
    from dapr.registry import load_dataset
    from dapr.stats import dataset_stats, format_stats

    stats = dataset_stats(load_dataset(args.name))
    print(json.dumps(stats, indent=1) if args.json else format_stats(stats))
    return 0


def _list(args: argparse.Namespace) -> int:
    from dapr.adapters import Adapter
    from dapr.registry import datasets

    rows = []
    for name in datasets.names():
        try:
            found = datasets.get(name)
        except Exception as e:  # a broken plugin must not hide the others
            rows.append((name, "error", f"cannot be imported: {e}"))
            continue
        if isinstance(found, Adapter):
            state = "cached" if found.cached() else "-"
            rows.append((name, state, found.origin))
        else:
            rows.append((name, "?", "a loader function"))
    width = max(len(name) for name, _, _ in rows)
    for name, state, origin in [("dataset", "cached", "source"), *rows]:
        print(f"{name:<{width}}  {state:<6}  {origin}")
    return 0


def _build(args: argparse.Namespace) -> int:
    from dapr.adapters import adapter_of
    from dapr.io import write_dataset

    adapter = adapter_of(args.name)
    options = adapter.check_options(_options(args.options))
    if not args.source.exists():
        raise DaprError(f"{args.source}: no such file or directory; give --source the raw files")
    adapter.require(args.source, download=args.download)
    dataset = adapter.build(args.source, **options)
    # a variant (e.g. a subset) gets its own copy beside the adapter's, under its own name
    out = args.out or adapter.prepared.with_name(dataset.name)
    write_dataset(dataset, out, format=args.format)
    print(f"built {args.name} from {args.source} into {out}")
    return 0


def _options(assignments: list[str]) -> dict[str, object]:
    """``key=value`` pairs, values parsed as YAML scalars."""
    import yaml

    options = {}
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        if not sep or not key:
            raise DaprError(f"--set {assignment!r}: write it as key=value, e.g. --set tagged=true")
        try:
            options[key] = yaml.safe_load(value) if value else ""
        except yaml.YAMLError:
            raise DaprError(f"--set {assignment!r}: the value is not valid YAML") from None
    return options


def _fetch(args: argparse.Namespace) -> int:
    from dapr.adapters import adapter_of
    from dapr.published import fetch_published

    adapter = adapter_of(args.name)
    if adapter.hub_repo is None:
        raise DaprError(f"dataset {args.name!r} is not published on the hub; build it instead")
    fetch_published(args.name, adapter.prepared, adapter.hub_repo, args.snapshot)
    print(f"fetched {args.name} into {adapter.prepared}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from dapr.io import write_dataset
    from dapr.registry import load_dataset

    write_dataset(load_dataset(args.name), args.out, format=args.format)
    print(f"wrote {args.name} to {args.out} ({args.format})")
    return 0


def _plugins(args: argparse.Namespace) -> int:
    from dapr import registry

    for reg in (registry.datasets, registry.retrievers, registry.contextualizers, registry.fusers):
        rows = reg.sources()
        print(f"{reg.group} ({len(rows)})")
        name_width = max((len(r[0]) for r in rows), default=0)
        dist_width = max((len(r[1]) for r in rows), default=0)
        target_width = max((len(r[2]) for r in rows), default=0)
        for name, dist, target in rows:
            line = f"  {name:<{name_width}}  {dist:<{dist_width}}  {target:<{target_width}}"
            print((line + _presets(reg, name)).rstrip())
    return 0


def _presets(reg, name: str) -> str:
    """``  presets: a, b`` for a component that has presets ('' if it has none or cannot load)."""
    if reg.group != "dapr.retrievers":
        return ""
    try:
        presets = getattr(reg.get(name), "presets", {})
    except Exception as error:  # noqa: BLE001 - a broken plugin is reported, not fatal
        return f"  (cannot load: {type(error).__name__}: {str(error).splitlines()[0][:80]})"
    return f"  presets: {', '.join(sorted(presets))}" if presets else ""


if __name__ == "__main__":
    sys.exit(main())
