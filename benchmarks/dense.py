"""Benchmark dapr's dense retriever against bare sentence-transformers on the same data.

Both encode the candidate passages of the embedded Wikipedia sample and its test queries with
the same model (all-MiniLM-L6-v2, shipped on PyPI, so this runs offline) and return the top
``--k`` passages per query:

- bare: ``encode_document`` + ``encode_query`` + one similarity matrix product + ``topk``, all in
  memory (what a script would do);
- dapr: ``Dense.index`` (sharded embeddings written to disk) + ``Dense.search`` (blocked exact
  search over the memory-mapped shards).

Timings are the best of ``--repeats`` alternating runs, model loading excluded. Prints the
overhead of dapr over bare, and whether both give the same top 10. Exits 1 when they differ.

    python benchmarks/dense.py [--passages 0 (all) --k 1000 --repeats 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from dapr.data_loaders.wiki_sample import adapter as wiki_sample

from dapr.checkpoints import sentence_transformer
from dapr.retrievers.dense import Dense

MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def workload(limit: int) -> tuple[list[tuple[str, str]], dict[str, str]]:
    dataset = wiki_sample.load()
    items = [(p.id, p.text) for d in dataset.corpus for p in d.passages if p.is_candidate]
    return (items[:limit] if limit else items), dataset.split("test").queries


def bare(model, items, queries, k) -> dict[str, list[str]]:
    documents = model.encode_document([t for _, t in items], batch_size=64, convert_to_tensor=True)
    qids = list(queries)
    vectors = model.encode_query([queries[q] for q in qids], batch_size=64, convert_to_tensor=True)
    scores = model.similarity(vectors, documents)
    top = torch.topk(scores, min(k, len(items)), dim=1).indices.numpy()
    return {q: [items[i][0] for i in row] for q, row in zip(qids, top)}


def framework(retriever: Dense, items, queries, k) -> dict[str, list[str]]:
    with tempfile.TemporaryDirectory(prefix="dapr-dense-") as store:
        retriever.index(iter(items), Path(store))
        run = retriever.search(queries, k)
    return {q: list(ranked) for q, ranked in run.to_dict().items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=0, help="first N passages (0: all)")
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)

    items, queries = workload(args.passages)
    model = sentence_transformer(MODEL)
    retriever = Dense(MODEL, batch_size=64)
    retriever._models[MODEL] = model  # the same loaded model: time only encode and search
    times: dict[str, float] = {"bare": float("inf"), "dapr": float("inf")}
    results: dict[str, dict[str, list[str]]] = {}
    for _ in range(args.repeats):
        for name, call in (
            ("bare", lambda: bare(model, items, queries, args.k)),
            ("dapr", lambda: framework(retriever, items, queries, args.k)),
        ):
            start = time.perf_counter()
            results[name] = call()
            times[name] = min(times[name], time.perf_counter() - start)

    same = sum(results["bare"][q][:10] == results["dapr"][q][:10] for q in queries)
    overhead = times["dapr"] / times["bare"] - 1
    print(f"\n{len(items):,} passages, {len(queries):,} queries, top {args.k}, {MODEL}\n")
    print("| method | seconds | passages/s |")
    print("|---|---:|---:|")
    for name, label in (("bare", "sentence-transformers + matmul"), ("dapr", "dapr Dense")):
        print(f"| {label} | {times[name]:.1f} | {len(items) / times[name]:,.0f} |")
    print(f"\noverhead of dapr: {overhead:+.1%} (target at most +10%)")
    print(f"same top 10 for {same}/{len(queries)} queries")
    return 0 if same == len(queries) else 1


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    sys.exit(main())
