"""A cross-encoder's learning curve: MRR@10 of re-ranking its first stage against the number of
training questions.

A dataset built in ``$DAPR_HOME`` (COVID-QA or XQuAD: ``dapr data list``) is split by article
(60% of the articles train, 10% dev, the rest test: questions of articles never trained on;
COVID-QA's passages cut at ``--max-words`` 80 as in the recipes' covid-qa variants). For
each loss and each size N (``--sizes``, ``all`` for every training question), a cross-encoder
started from all-MiniLM-L6-v2 with a fresh head is trained by dapr's own ``train_cross_encoder``
on N training questions (a seeded draw; each with ``--negatives`` BM25-mined negatives), then
re-ranks the first stage's top ``--depth`` for the test questions (the untrained dual encoder's,
as the recipes' cross-encoders re-rank theirs, or BM25's). Each loss keeps its recipe settings
unless told otherwise (``bce``: 3 epochs of 16 pairs; ``mnrl`` and ``listnet``: 1 epoch of 8
questions; 1e-4, 128 tokens). Prints one row per (loss, size); ``--json PATH`` also writes them
as a results file (docs/results/), keeping the rows it already holds for the same settings: a
curve that stopped goes on where it stopped, and losses or sizes can be added later.

    python benchmarks/cross_encoder_curve.py --dataset COVID-QA --losses mnrl bce \\
        [--sizes 100 300 600 1000 all] [--json docs/results/ce-curve-covid-qa.json]
        [--plot docs/figures/ce-curve-covid-qa.png]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import results_json  # benchmarks/results_json.py, beside this script

DATASETS = ("COVID-QA", "XQuAD")
RECIPES = {
    "bce": {"epochs": 3.0, "batch_size": 16},
    "mnrl": {"epochs": 1.0, "batch_size": 8},
    "listnet": {"epochs": 1.0, "batch_size": 8},
}
"""Each loss's epochs and batch (pairs for bce, questions for the listwise losses)."""
MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def sizes_of(given: list[str], available: int) -> list[int]:
    """The sizes to train at: each of ``given`` (``all``: every question) that is at most
    ``available``, ``all`` included once, in increasing order."""
    found = set()
    for size in given:
        if size == "all":
            found.add(available)
        elif int(size) <= available:
            found.add(int(size))
        else:
            print(f"--sizes: {size} is more than the {available} training questions; skipped",
                  file=sys.stderr)  # fmt: skip
    return sorted(found)


def dataset_of(name: str, max_words: int) -> Any:
    """``name`` as built in ``$DAPR_HOME`` (COVID-QA's passages cut at ``max_words``, as the
    recipes' covid-qa variants cut them), split by article; a one-line exit when it is not
    built."""
    from dapr.data_loaders.covid_qa import split_by_article

    from dapr.datasets import load_dataset
    from dapr.errors import DaprError

    try:
        options = {"max_words": max_words} if name == "COVID-QA" else {}
        return split_by_article(load_dataset(name, **options), 0.6, 0.1)
    except DaprError as error:
        raise SystemExit(f"{name}: {error}") from None


def runs_of(dataset: Any, texts: dict, work: Path, first: str, depth: int) -> dict[str, Any]:
    """BM25's top 50 for the training questions (negatives) and the first stage's top ``depth``
    for the test questions, cached in ``work``."""
    from dapr.data import Run
    from dapr.retrievers.bm25 import BM25
    from dapr.retrievers.dense import Dense

    corpus = f"{dataset.name}-{dataset.corpus.fingerprint[:12]}"
    file = work / f"runs-{corpus}-{first}-{depth}.json"
    if not file.is_file():
        bm25 = BM25()
        bm25.index(texts.items(), work / f"bm25-{corpus}")
        stage: Any = bm25
        if first == "dense":
            stage = Dense(max_length=256)
            stage.index(texts.items(), work / f"dense-{corpus}")
        found = {
            "mined": bm25.search(dataset.split("train").queries, 50).to_dict(),
            "first": stage.search(dataset.split("test").queries, depth).to_dict(),
        }
        file.write_text(json.dumps(found))
    return {k: Run.from_dict(v) for k, v in json.loads(file.read_text()).items()}


def one(loss: str, size: int, dataset: Any, texts: dict, runs: dict, args: Any) -> dict:
    """Train the cross-encoder of ``loss`` on ``size`` training questions; its re-ranking."""
    import torch
    from sentence_transformers import CrossEncoder

    from dapr.checkpoints import resolve
    from dapr.data import Run
    from dapr.evaluation import evaluate
    from dapr.training.cross import train_cross_encoder
    from dapr.training.dual import Settings, seeded
    from dapr.training.examples import examples

    train, test = dataset.split("train"), dataset.split("test")
    chosen = random.Random(args.seed).sample(sorted(train.queries), size)
    queries = {q: train.queries[q] for q in chosen}
    rows = examples(queries, {q: train.qrels[q] for q in chosen}, texts, dataset.corpus,
                    mined=runs["mined"], mined_count=args.negatives, seed=args.seed)  # fmt: skip
    recipe = RECIPES[loss]
    settings = Settings(
        epochs=args.epochs or recipe["epochs"], batch_size=args.batch_size or recipe["batch_size"],
        learning_rate=args.learning_rate, max_length=128, max_steps=args.steps,
        save_steps=10_000, seed=args.seed,
    )  # fmt: skip
    seeded(args.seed)
    model = CrossEncoder(resolve(MODEL), num_labels=1)
    out = args.work / f"{dataset.name}-{loss}-{size}"
    shutil.rmtree(out, ignore_errors=True)  # this script's own folder: an old model would resume
    started = time.perf_counter()
    record = train_cross_encoder(model, rows, out, loss, settings)
    seconds = time.perf_counter() - started
    first = runs["first"].to_dict()
    if args.queries:
        drawn = random.Random(args.seed).sample(sorted(first), min(args.queries, len(first)))
        first = {q: first[q] for q in drawn}
    reranked = {}
    for qid, candidates in first.items():
        ids = [p for p in candidates if p in texts]
        scores = model.predict([(test.queries[qid], texts[p]) for p in ids], batch_size=64)
        reranked[qid] = dict(zip(ids, map(float, scores)))
    qrels = {q: test.qrels[q] for q in first}
    mrr = {
        name: evaluate(Run.from_dict(run), qrels, ["MRR@10"]).means["MRR@10"]
        for name, run in (("ce", reranked), ("first", first))
    }
    return {
        "dataset": dataset.name, "loss": loss, "questions": size, "examples": record["examples"],
        "epochs": settings.epochs, "batch_size": settings.batch_size,
        "learning_rate": settings.learning_rate, "negatives": args.negatives,
        "steps": record["steps"], "training_loss": record["training_loss"],
        "seconds": round(seconds, 1), "first_stage": args.first_stage, "depth": args.depth,
        "passage_words": args.max_words if dataset.name == "COVID-QA" else None,
        "test_questions": len(first), "mrr_ce": mrr["ce"], "mrr_first": mrr["first"],
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
    }  # fmt: skip


def earlier(path: Path | None) -> dict:
    """The results file ``path`` as it stands (empty when there is none)."""
    return json.loads(path.read_text()) if path is not None and path.is_file() else {}


def earlier_rows(path: Path | None) -> list[dict]:
    """The rows already in the results file ``path`` (none when there is no such file): all of
    them are kept when it is written again."""
    return list(earlier(path).get("rows", []))


def same_settings(row: dict, args: Any, test_questions: int) -> bool:
    """Whether ``row`` was measured with this run's dataset and settings, re-ranking its
    ``test_questions``: then it is not measured again."""
    recipe = RECIPES.get(row.get("loss", ""), {})
    same = {
        "dataset": args.dataset, "negatives": args.negatives, "depth": args.depth,
        "first_stage": args.first_stage, "learning_rate": args.learning_rate,
        "epochs": args.epochs or recipe.get("epochs"),
        "batch_size": args.batch_size or recipe.get("batch_size"),
        "test_questions": test_questions,
    }  # fmt: skip
    return all(row.get(key) == value for key, value in same.items())


def _order(row: dict) -> tuple:
    return (row["dataset"], row["loss"], row["negatives"], row["epochs"], row["questions"])


def table(rows: list[dict]) -> str:
    """The rows as a markdown table."""
    out = [
        "| dataset | loss | negatives | epochs | questions | steps | minutes | CE MRR@10 | "
        "first stage | CE - first |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['dataset']} | {r['loss']} | {r['negatives']} | {r['epochs']:g} | "
            f"{r['questions']:,} | {r['steps']} | "
            f"{r['seconds'] / 60:.1f} | {r['mrr_ce']:.4f} | {r['mrr_first']:.4f} | "
            f"{r['mrr_ce'] - r['mrr_first']:+.4f} |"
        )
    return "\n".join(out)


def plot(rows: list[dict], path: Path) -> None:
    """MRR@10 against training questions, a line per dataset and setting (loss, negatives,
    epochs), each dataset's first stage dashed; written to ``path`` (PNG or PDF)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6.4, 4.0))
    lines: dict[tuple, list[dict]] = {}
    for row in sorted(rows, key=_order):
        setting = (row["dataset"], row["loss"], row["negatives"], row["epochs"])
        lines.setdefault(setting, []).append(row)
    for (dataset, loss, negatives, epochs), found in lines.items():
        label = f"{dataset} {loss}, {negatives} negatives, {epochs:g} epoch{'s' * (epochs != 1)}"
        axes.plot([r["questions"] for r in found], [r["mrr_ce"] for r in found], "o-", label=label)
    for dataset in sorted({r["dataset"] for r in rows}):
        first = next(r["mrr_first"] for r in rows if r["dataset"] == dataset)
        axes.axhline(first, linestyle="--", color="grey")
        axes.annotate(f"{dataset} first stage", (0, first), xycoords=("axes fraction", "data"),
                      xytext=(4, 3), textcoords="offset points", color="grey")  # fmt: skip
    axes.set_xlabel("training questions")
    axes.set_ylabel("MRR@10 of the re-ranking")
    axes.set_ylim(0, 1)
    axes.legend(fontsize="small", loc="upper left")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.stem + ".partial" + path.suffix)
    figure.savefig(partial, dpi=120)
    plt.close(figure)
    partial.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=DATASETS, required=True)
    parser.add_argument("--losses", nargs="+", choices=list(RECIPES), default=["mnrl", "bce"])
    parser.add_argument("--sizes", nargs="+", default=["100", "300", "600", "1000", "all"])
    parser.add_argument("--max-words", type=int, default=80, help="COVID-QA's passage length")
    parser.add_argument("--first-stage", choices=("dense", "bm25"), default="dense")
    parser.add_argument("--depth", type=int, default=20, help="candidates re-ranked")
    parser.add_argument("--negatives", type=int, default=3, help="BM25-mined, per positive")
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--epochs", type=float, help="default: the loss's recipe")
    parser.add_argument("--batch-size", type=int, help="default: the loss's recipe")
    parser.add_argument("--steps", type=int, default=-1, help="stop after this many (a check)")
    parser.add_argument("--queries", type=int, help="test questions re-ranked (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/dapr-ce-curve"))
    parser.add_argument(
        "--json", type=Path, help="results file to write (its rows of these settings are kept)"
    )
    parser.add_argument("--plot", type=Path, help="also draw the rows as a PNG or PDF")
    args = parser.parse_args(argv)
    for size in args.sizes:  # before any work
        if size != "all" and not (size.isdigit() and int(size) >= 1):
            raise SystemExit(f"--sizes: {size!r} is not a positive number of questions or 'all'")
    dataset = dataset_of(args.dataset, args.max_words)
    available = len(dataset.split("train").queries)
    sizes = sizes_of(args.sizes, available)
    args.work.mkdir(parents=True, exist_ok=True)
    texts = {p.id: p.text for d in dataset.corpus for p in d.passages if p.is_candidate}
    runs = runs_of(dataset, texts, args.work, args.first_stage, args.depth)
    tested = len(runs["first"].to_dict())
    before = earlier(args.json)  # read once: its rows and the commands that measured them
    rows = list(before.get("rows", []))
    commands = [*before.get("earlier_commands", []), before["command"]] if rows else []
    notes = (
        "minutes: training alone, on this machine's CPU; rows this command did not measure were "
        "kept from the earlier runs into this file (earlier_commands)"
    )
    reranked = min(tested, args.queries or tested)
    done = {(r["loss"], r["questions"]) for r in rows if same_settings(r, args, reranked)}
    for loss in args.losses:
        for size in sizes:
            if (loss, size) in done:
                print(f"== {args.dataset} {loss} {size}: kept from {args.json}", flush=True)
                continue
            print(f"== {args.dataset} {loss} {size} of {available} questions", flush=True)
            row = one(loss, size, dataset, texts, runs, args)
            print(json.dumps(row), flush=True)
            rows = sorted([*rows, row], key=_order)
            if args.json:  # written as each row finishes: a long curve keeps what it measured
                curve = {"curve": table(rows).splitlines()}
                results_json.write(args.json, curve, notes, rows=rows, earlier_commands=commands)
    print(table(rows))
    if args.plot:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
