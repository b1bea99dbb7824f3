"""Does a cross-encoder trained at laptop size rank? Train one as the DuReader / RocketQA recipes
do on wiki-sample (all-MiniLM-L6-v2 with a fresh head, BM25-mined negatives), then re-rank BM25's
top 50 for sampled test queries and compare MRR@10 with BM25's own order.

    python benchmarks/cross_encoder_learning.py [--epochs 3 --learning-rate 1e-4 --queries 150]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2")
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--negatives", type=int, default=2)
    parser.add_argument("--queries", type=int, default=150)
    parser.add_argument("--depth", type=int, default=50)
    args = parser.parse_args(argv)

    from sentence_transformers import CrossEncoder

    from dapr.checkpoints import resolve
    from dapr.data import Run
    from dapr.datasets import load_dataset
    from dapr.evaluation import evaluate
    from dapr.retrievers.bm25 import BM25
    from dapr.training.cross import train_cross_encoder
    from dapr.training.dual import Settings
    from dapr.training.examples import examples

    dataset = load_dataset("wiki-sample", train_articles=0.3)
    texts = {p.id: p.text for d in dataset.corpus for p in d.passages if p.is_candidate}
    train, test = dataset.split("train"), dataset.split("test")
    with tempfile.TemporaryDirectory() as folder:
        bm25 = BM25()
        bm25.index(texts.items(), Path(folder) / "bm25")
        mined = bm25.search(train.queries, args.depth)
        rows = examples(train.queries, train.qrels, texts, dataset.corpus, mined=mined,
                        mined_count=args.negatives)  # fmt: skip
        model = CrossEncoder(resolve(args.model), num_labels=1)
        settings = Settings(epochs=args.epochs, learning_rate=args.learning_rate, max_length=128)
        started = time.perf_counter()
        record = train_cross_encoder(model, rows, Path(folder) / "ce", settings=settings)
        seconds = time.perf_counter() - started
        sample = random.Random(0).sample(sorted(test.qrels), min(args.queries, len(test.qrels)))
        first = bm25.search({q: test.queries[q] for q in sample}, args.depth).to_dict()
    reranked = {}
    for qid, candidates in first.items():
        scores = model.predict([(test.queries[qid], texts[p]) for p in candidates])
        reranked[qid] = dict(zip(candidates, scores.tolist()))
    qrels = {q: test.qrels[q] for q in sample}
    ours, theirs = (
        evaluate(Run.from_dict(run), qrels, ["MRR@10"]).means["MRR@10"] for run in (reranked, first)
    )
    share = 1 / (1 + args.negatives)  # of the rows, positives
    base = -(share * np.log(share) + (1 - share) * np.log(1 - share))
    print(f"{args.model}, {len(rows):,} examples x (1 positive + {args.negatives} negatives), "
          f"{record['steps']} steps at {args.learning_rate:g} ({seconds:.0f} s)")  # fmt: skip
    print(f"training loss {record['training_loss']:.3f} (predicting the share of positives: "
          f"{base:.3f})")  # fmt: skip
    print(f"MRR@10 over BM25's top {args.depth} of {len(sample)} test queries: cross-encoder "
          f"{ours:.4f}, BM25's order {theirs:.4f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
