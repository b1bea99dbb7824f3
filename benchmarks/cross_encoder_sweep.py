"""What makes a cross-encoder rank after a few hundred steps on a laptop: a recorded sweep.

On COVID-QA (real questions over long articles, split by article: 60% of the articles train,
10% dev, the test questions never trained on), a cross-encoder started from all-MiniLM-L6-v2
(a dual encoder's checkpoint, with a fresh head) is trained by dapr's own
``train_cross_encoder`` under each setting below, then re-ranks the untrained dual encoder's
top 20 for every test question. Each setting varies one or a few things from ``base`` (the
table shows them all); every result is appended to a JSON-lines file as it finishes (a rerun
skips what is there), and ``--table`` prints the markdown table of that file. The data are the
raw files ``dapr data build COVID-QA --download`` (and ``XQuAD`` for the ``xquad-too`` settings)
keep in ``$DAPR_HOME/raw``, or ``--data DIR`` holding ``covid-qa/`` and ``xquad/``.

    python benchmarks/cross_encoder_sweep.py --out benchmarks/cross-encoder-sweep.jsonl
    python benchmarks/cross_encoder_sweep.py --out benchmarks/cross-encoder-sweep.jsonl --table
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

FOLDERS = {"COVID-QA": "covid-qa", "XQuAD": "xquad"}
"""The folder of each dataset's raw file under ``--data``."""

BASE = {
    "learning_rate": 1e-4, "warmup_ratio": 0.1, "epochs": 1.0, "negatives": 3, "mined": "bm25",
    "loss": "bce", "head": "fresh", "distill": 0.0, "teacher": "de", "batch_size": 32,
    "sample_from": 0, "extra": "",
}  # fmt: skip
SETTINGS = {
    "rocketqa": {"learning_rate": 1e-5},
    "base": {},
    "lr-3e-5": {"learning_rate": 3e-5},
    "lr-2e-4": {"learning_rate": 2e-4},
    "no-warmup": {"warmup_ratio": 0.0},
    "epochs-2": {"epochs": 2.0},
    "batch-16-epochs-3": {"batch_size": 16, "epochs": 3.0},
    "listnet-epochs-3": {"loss": "listnet", "batch_size": 4, "epochs": 3.0},
    "sampled-negatives": {"batch_size": 16, "epochs": 3.0, "sample_from": 30},
    "lr-2e-4-epochs-3": {"batch_size": 16, "epochs": 3.0, "learning_rate": 2e-4},
    "xquad-too": {"batch_size": 16, "epochs": 2.0, "extra": "xquad"},
    "negatives-1": {"negatives": 1, "epochs": 2.0},
    "negatives-7": {"negatives": 7, "epochs": 0.5},
    "de-negatives": {"mined": "de"},
    "listnet": {"loss": "listnet", "batch_size": 8},
    "mnrl": {"loss": "mnrl", "batch_size": 8},
    "mnrl-epochs-2": {"loss": "mnrl", "batch_size": 8, "epochs": 2.0},
    "mnrl-lr-3e-5": {"loss": "mnrl", "batch_size": 8, "learning_rate": 3e-5},
    "mnrl-negatives-7": {"loss": "mnrl", "batch_size": 8, "negatives": 7},
    "mnrl-batch-16": {"loss": "mnrl", "batch_size": 16},
    "mnrl-xquad-too": {"loss": "mnrl", "batch_size": 8, "extra": "xquad"},
    "head-prior": {"head": "prior"},
    "distill": {"distill": 1.0},
    "distill-only": {"distill": 1.0, "epochs": 0.0},
    "distill-bm25": {"distill": 1.0, "teacher": "bm25"},
    "distill-bm25-only": {"distill": 1.0, "teacher": "bm25", "epochs": 0.0},
}
"""Each setting's changes to BASE; ``epochs`` 0 skips the labelled stage. Negatives per positive
times epochs is held near 3 x 1 where it changes, so settings cost about the same."""


def sources(data: Path | None, names: list[str]) -> dict[str, Path]:
    """The raw file of each dataset of ``names``: under ``data`` (see :data:`FOLDERS`), else the
    one ``dapr data build NAME --download`` keeps; a one-line exit saying how to get it."""
    from dapr.datasets.adapter import adapter_of

    found = {}
    for name in names:
        adapter = adapter_of(name)
        file = adapter.raw_files[0].path
        path = data / FOLDERS[name] / file if data else adapter.raw / file
        where = f"{FOLDERS[name]}/{file}"
        if not path.is_file() and data:
            raise SystemExit(f"--data {data}: no {where}; put {name}'s raw file there")
        if not path.is_file():
            raise SystemExit(
                f"{name} is not fetched ({path}): run `dapr data build {name} --download` once, "
                f"or give --data DIR holding {where}"
            )
        found[name] = path
    return found


def prepare(work: Path, depth: int, max_words: int, covid: Path):
    """COVID-QA's splits, passage texts, BM25 and the untrained dual encoder's runs (train
    queries: mining and the teacher; test queries: the first stage), cached under ``work``."""
    from dapr.data import Run
    from dapr.datasets import load_dataset
    from dapr.retrievers.bm25 import BM25
    from dapr.retrievers.dense import Dense

    dataset = load_dataset(
        "COVID-QA", path=str(covid), train_articles=0.6, dev_articles=0.1, max_words=max_words
    )
    texts = {p.id: p.text for d in dataset.corpus for p in d.passages if p.is_candidate}
    train, test = dataset.split("train"), dataset.split("test")
    runs_file = work / f"runs-{max_words}.json"
    if not runs_file.is_file():
        bm25, dense = BM25(), Dense(max_length=256)
        bm25.index(texts.items(), work / f"bm25-{max_words}")
        dense.index(texts.items(), work / f"dense-{max_words}")
        runs = {
            "bm25-train": bm25.search(train.queries, 50).to_dict(),
            "de-train": dense.search(train.queries, 50).to_dict(),
            "de-test": dense.search(test.queries, depth).to_dict(),
            "bm25-test": bm25.search(test.queries, depth).to_dict(),
        }
        runs_file.write_text(json.dumps(runs))
    runs = json.loads(runs_file.read_text())
    return dataset, texts, {k: Run.from_dict(v) for k, v in runs.items()}


def xquad_rows(work: Path, negatives: int, sample_from: int, xquad: Path) -> list:
    """Training rows from XQuAD's 1,190 questions, negatives mined by BM25 over its paragraphs."""
    from dapr.data import Run
    from dapr.datasets import load_dataset
    from dapr.retrievers.bm25 import BM25
    from dapr.training.examples import examples

    dataset = load_dataset("squad", path=str(xquad))
    texts = {p.id: p.text for d in dataset.corpus for p in d.passages if p.is_candidate}
    split = dataset.split("test")
    runs_file = work / "runs-xquad.json"
    if not runs_file.is_file():
        bm25 = BM25()
        bm25.index(texts.items(), work / "bm25-xquad")
        runs_file.write_text(json.dumps(bm25.search(split.queries, 50).to_dict()))
    mined = Run.from_dict(json.loads(runs_file.read_text()))
    return examples(split.queries, split.qrels, texts, dataset.corpus, mined=mined,
                    mined_count=negatives, sample_from=sample_from)  # fmt: skip


def one(name: str, dataset, texts, runs, work: Path, depth: int, max_words: int,
        xquad: Path | None = None) -> dict:  # fmt: skip
    """Train the cross-encoder of setting ``name`` and measure its re-ranking."""
    import torch
    from sentence_transformers import CrossEncoder

    from dapr.checkpoints import resolve
    from dapr.data import Run
    from dapr.evaluation import evaluate
    from dapr.training.cross import distill, teacher_rows, train_cross_encoder
    from dapr.training.dual import Settings
    from dapr.training.examples import examples

    s = {**BASE, **SETTINGS[name]}
    train, test = dataset.split("train"), dataset.split("test")
    rows = examples(train.queries, train.qrels, texts, dataset.corpus,
                    mined=runs[f"{s['mined']}-train"], mined_count=s["negatives"],
                    sample_from=s["sample_from"])  # fmt: skip
    if s["extra"] == "xquad":  # XQuAD's questions too, with negatives BM25 mined from XQuAD
        assert xquad is not None, "sources() finds XQuAD for the settings that train on it"
        rows += xquad_rows(work, s["negatives"], s["sample_from"], xquad)
    teacher = []
    if s["distill"]:
        teacher = teacher_rows(runs[f"{s['teacher']}-train"].to_dict(), train.queries, texts, 20, 3)
    settings = Settings(
        epochs=s["epochs"] or 1.0, learning_rate=s["learning_rate"], warmup_ratio=s["warmup_ratio"],
        batch_size=s["batch_size"], max_length=128, save_steps=10_000,
    )  # fmt: skip
    model = CrossEncoder(resolve("sentence-transformers/all-MiniLM-L6-v2"), num_labels=1)
    started = time.perf_counter()
    out = work / f"{name}-{max_words}"
    shutil.rmtree(out, ignore_errors=True)  # the sweep's own folder: an earlier model would resume
    if s["epochs"]:
        record = train_cross_encoder(model, rows, out, s["loss"], settings, print, s["head"],
                                     teacher, s["distill"])  # fmt: skip
        steps, loss = record["steps"], record["training_loss"]
        steps += record.get("distilled", {}).get("steps", 0)
    else:  # the teacher alone
        model.max_length = 128
        model, record = distill(model, teacher, out / "distill", settings, s["distill"], print)
        steps, loss = record["steps"], record["training_loss"]
    seconds = time.perf_counter() - started
    first = runs["de-test"].to_dict()
    reranked = {}
    for qid, candidates in first.items():
        ids = list(candidates)
        scores = model.predict([(test.queries[qid], texts[p]) for p in ids], batch_size=64)
        reranked[qid] = dict(zip(ids, map(float, scores)))
    metric = ["MRR@10"]
    found = {
        name: evaluate(Run.from_dict(run), test.qrels, metric).means["MRR@10"]
        for name, run in (("ce", reranked), ("de", first), ("bm25", runs["bm25-test"].to_dict()))
    }
    return {"setting": name, **s, "steps": steps, "final_loss": loss, "seconds": round(seconds),
            "base_rate_loss": record.get("base_rate_loss"), "depth": depth, "max_words": max_words,
            "questions": len(first), "mrr_ce": found["ce"], "mrr_de": found["de"],
            "mrr_bm25": found["bm25"], "device": device(torch)}  # fmt: skip


def device(torch) -> str:
    """What trained the model: the GPU's name, or the CPU cores torch used."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return f"{torch.get_num_threads()} CPU cores"


SOURCES = {"": "COVID-QA", "xquad": "COVID-QA + XQuAD"}
"""What each value of ``extra`` trains on: COVID-QA's training questions, plus XQuAD's 1,190."""


def table(lines: list[dict]) -> str:
    """The sweep as a markdown table."""
    head = (
        "| passage words | setting | trained on | lr | warm-up | epochs | negatives | loss | head "
        "| distill | steps | mean loss | min | trained by | CE MRR@10 | vs DE |"
    )
    out = [head, "|---:|---|---|---:|---:|---:|---|---|---|---:|---:|---:|---:|---|---:|---:|"]
    for r in lines:
        negatives = f"{r['negatives']} {r['mined']}"
        if r.get("sample_from"):
            negatives += f" of top {r['sample_from']}"
        distill = f"{r['distill']:g} {r.get('teacher', 'de')}" if r["distill"] else "-"
        out.append(
            f"| {r['max_words']} | {r['setting']} | {SOURCES[r.get('extra', '')]} | "
            f"{r['learning_rate']:g} | "
            f"{r['warmup_ratio']:g} | "
            f"{r['epochs']:g} | {negatives} | {r['loss']} | {r['head']} | {distill} | "
            f"{r['steps']} | {r['final_loss']:.3f} | {r['seconds'] / 60:.1f} | "
            f"{r.get('device', '2 CPU cores')} | {r['mrr_ce']:.4f} | "
            f"{r['mrr_ce'] - r['mrr_de']:+.4f} |"
        )
    seen = {r["max_words"]: r for r in lines}
    out += [""] + [
        f"First stage at {words} words a passage: the untrained dual encoder's top {r['depth']} "
        f"for {r['questions']} test questions, MRR@10 {r['mrr_de']:.4f} (BM25 {r['mrr_bm25']:.4f})."
        for words, r in sorted(seen.items())
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON-lines file of results (appended)")
    parser.add_argument("--work", default="/tmp/dapr-ce-sweep", help="models and runs")
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--max-words", type=int, default=80, help="COVID-QA's passage length")
    parser.add_argument(
        "--data",
        type=Path,
        help="folder of covid-qa/covid-qa.json and xquad/xquad.en.json "
        "(default: the raw files `dapr data build NAME --download` fetched)",
    )
    parser.add_argument("--table", action="store_true", help="print the table and stop")
    args = parser.parse_args(argv)
    out = Path(args.out)
    done = [json.loads(x) for x in out.read_text().splitlines()] if out.is_file() else []
    if args.table:
        print(table(done))
        return 0
    xquad = any(SETTINGS[name].get("extra") == "xquad" for name in args.settings)
    found = sources(args.data, ["COVID-QA", "XQuAD"] if xquad else ["COVID-QA"])
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    dataset, texts, runs = prepare(work, args.depth, args.max_words, found["COVID-QA"])
    for name in args.settings:
        if any(r["setting"] == name and r["max_words"] == args.max_words for r in done):
            continue
        print(f"== {name}", flush=True)
        result = one(
            name, dataset, texts, runs, work, args.depth, args.max_words, found.get("XQuAD")
        )
        print(json.dumps(result), flush=True)
        with out.open("a") as f:
            f.write(json.dumps(result) + "\n")
        done.append(result)
    print(table(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
