"""Benchmark dapr's dual-encoder training step against the bare sentence-transformers trainer.

Both fit all-MiniLM-L6-v2 (shipped on PyPI, so this runs offline) with
MultipleNegativesRankingLoss on the same examples: wiki-sample's training queries
(``train_articles: 0.3``) with their title-prepended positive passages, ``--steps`` steps of
``--batch`` examples, learning rate 3e-5 with 10% warm-up.

- bare: ``SentenceTransformerTrainer`` with the same arguments, the model saved at the end
  (what a script would do);
- dapr: :func:`dapr.training.dual.train_dual_encoder` (examples to columns, its checkpointing
  arguments, progress callback and the training record written beside the model).

Each run is a fresh process; the two alternate ``--repeats`` times and the best examples/s of
each counts. Memory: the peak resident memory of a process that trains two steps of a
gradient-cached batch of 512 (``cached_mnrl``, mini-batches of 32) against one of an uncached
batch of 64 (``mnrl``). Prints a markdown table and the ratios.

    python benchmarks/training.py [--steps 12 --batch 32 --repeats 2]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from child import fastest_in_turns, run_child

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def rows(count: int) -> list[Any]:
    """``count`` training examples of wiki-sample's train split, title-prepended positives."""
    from dapr.datasets import load_dataset
    from dapr.training.examples import examples

    dataset = load_dataset("wiki-sample", train_articles=0.3)
    texts = {p.id: f"{d.title} {p.text}" for d in dataset.corpus for p in d.passages}
    split = dataset.split("train")
    found = examples(split.queries, split.qrels, texts, dataset.corpus)
    return (found * (count // len(found) + 1))[:count]


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """One timed training in this (fresh) process."""
    from dapr.checkpoints import sentence_transformer
    from dapr.training.dual import Settings, columns, train_dual_encoder

    data = rows(spec["batch"] * spec["steps"])
    model = sentence_transformer(MODEL, None, None, "cpu")
    settings = Settings(
        batch_size=spec["batch"],
        max_steps=spec["steps"],
        mini_batch_size=32,
        save_steps=10_000,
    )
    out = Path(tempfile.mkdtemp())
    started = time.perf_counter()
    if spec["method"] == "dapr":
        train_dual_encoder(model, data, out, spec.get("loss", "mnrl"), settings)
    else:
        from datasets import Dataset
        from sentence_transformers import (
            SentenceTransformerTrainer,
            SentenceTransformerTrainingArguments,
            losses,
        )

        arguments = SentenceTransformerTrainingArguments(
            output_dir=str(out / "checkpoints"),
            max_steps=spec["steps"],
            per_device_train_batch_size=spec["batch"],
            learning_rate=3e-5,
            warmup_ratio=0.1,
            report_to="none",
            save_strategy="no",
            disable_tqdm=True,
        )
        trainer = SentenceTransformerTrainer(
            model=model,
            args=arguments,
            train_dataset=Dataset.from_dict(columns(data)),
            loss=losses.MultipleNegativesRankingLoss(model),
        )
        trainer.train()
        model.save(str(out / "model"))
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "examples": len(data), "peak_mb": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(json.loads(args.child))))
        return
    script = str(Path(__file__).resolve())
    fastest = fastest_in_turns(
        ("bare", "dapr"),
        args.repeats,
        lambda method, _: run_child(
            script, {"method": method, "steps": args.steps, "batch": args.batch}
        ),
    )
    best = {method: run["examples"] / run["seconds"] for method, run in fastest.items()}
    cached = run_child(script, {"method": "dapr", "steps": 2, "batch": 512, "loss": "cached_mnrl"})
    plain = run_child(script, {"method": "dapr", "steps": 2, "batch": 64, "loss": "mnrl"})
    print(f"{MODEL}, {args.steps} steps of {args.batch} examples, best of {args.repeats}\n")
    print("| method | examples/s |\n|---|---:|")
    for method, label in (("bare", "sentence-transformers trainer"), ("dapr", "dapr train")):
        print(f"| {label} | {best[method]:.1f} |")
    overhead = best["bare"] / best["dapr"] - 1
    print(f"\noverhead of dapr: {overhead:+.1%} (target at most +10%)\n")
    print("| batch | loss | peak memory |\n|---|---|---:|")
    print(f"| 64 | mnrl | {plain['peak_mb']:,.0f} MB |")
    print(f"| 512 | cached_mnrl (mini-batches of 32) | {cached['peak_mb']:,.0f} MB |")
    ratio = cached["peak_mb"] / plain["peak_mb"]
    print(f"\ncached 512 / uncached 64: {ratio:.2f}x (target at most 1.5x)")
    sys.exit(0 if overhead <= 0.10 and ratio <= 1.5 else 1)


if __name__ == "__main__":
    main()
