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

Then, in the same run:

- per CPU backend (``--backends``: torch, onnx, openvino, openvino-bf16, onnx-int8): passages
  encoded per second (export and loading excluded), the speed-up over torch, and nDCG@10 on the
  test queries against torch's;
- query vectors shared: scoped scoring (hierarchical retrieval: each query's passages of its
  top 10 BM25 documents) after a full search over the same queries, against full search, with
  the query encoding it no longer repeats.

    python benchmarks/dense.py [--passages 0 (all) --k 1000 --repeats 2 --backends ...]
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
    parser.add_argument(
        "--backends",
        default="torch,onnx,openvino,openvino-bf16,onnx-int8",
        help="comma-separated CPU backends to compare ('' to skip)",
    )
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
    if args.backends:
        backend_table(items, args.backends.split(","), args.repeats)
    scoped_table(items)
    return 0 if same == len(queries) else 1


def backend_table(items, backends: list[str], repeats: int) -> None:
    """Passages/s per backend and nDCG@10 on the test queries, each against torch."""
    from dapr.evaluation import evaluate

    dataset = wiki_sample.load()
    test = dataset.split("test")
    kept = {i for i, _ in items}
    qrels = {q: j for q, j in test.qrels.items() if j.keys() & kept}
    queries = {q: test.queries[q] for q in qrels}
    rows = []
    for name in backends:
        backend, _, quantize = name.partition("-")
        retriever = Dense(MODEL, backend=backend, quantize=quantize or None)
        retriever._model(MODEL)  # export and load before timing
        best = float("inf")
        for _ in range(repeats):
            with tempfile.TemporaryDirectory(prefix="dapr-backend-") as store:
                start = time.perf_counter()
                retriever.index(iter(items), Path(store))
                best = min(best, time.perf_counter() - start)
                ndcg = evaluate(retriever.search(queries, 100), qrels, ["nDCG@10"]).means
        rows.append((name, len(items) / best, ndcg["nDCG@10"]))
    torch_speed, torch_ndcg = next((s, n) for b, s, n in rows if b == "torch")
    print(f"\nCPU backends: {len(items):,} passages, {len(queries):,} test queries\n")
    print("| backend | passages/s | vs torch | nDCG@10 | difference |")
    print("|---|---:|---:|---:|---:|")
    for name, speed, ndcg in rows:
        print(
            f"| {name} | {speed:,.0f} | {speed / torch_speed:.2f}x | {ndcg:.4f} | "
            f"{ndcg - torch_ndcg:+.4f} |"
        )


def scoped_table(items) -> None:
    """Full search, then scoped scoring of the same queries (query vectors reused), then the
    scoped scoring again with the query vectors encoded anew."""
    import dapr.retrievers.dense as dense_module
    from dapr.data import Run
    from dapr.retrievers.support.query_vectors import QueryVectors

    queries = wiki_sample.load().split("test").queries
    by_doc: dict[str, list[str]] = {}
    for item, _ in items:
        by_doc.setdefault(item.rsplit("-", 1)[0], []).append(item)
    docs = sorted(by_doc)
    scope = Run.from_dict(  # each query: the passages of 10 documents
        {
            q: {p: 0.0 for d in docs[n % len(docs) : n % len(docs) + 10] for p in by_doc[d]}
            for n, q in enumerate(queries)
        }
    )
    timings = {}
    with tempfile.TemporaryDirectory(prefix="dapr-scoped-") as store:
        retriever = Dense(MODEL)
        retriever.index(iter(items), Path(store))
        dense_module.SHARED = QueryVectors()  # as a process that has encoded no query yet
        start = time.perf_counter()
        retriever.search(queries, 1000)
        timings["full search (queries encoded)"] = time.perf_counter() - start
        start = time.perf_counter()
        retriever.score(queries, scope)
        timings["scoped scoring, query vectors reused"] = time.perf_counter() - start
        dense_module.SHARED = QueryVectors()
        start = time.perf_counter()
        retriever.score(queries, scope)
        timings["scoped scoring, queries encoded again (before)"] = time.perf_counter() - start
    print(f"\nscoped scoring: {len(queries):,} queries, {len(scope.items):,} candidates\n")
    print("| step | seconds |")
    print("|---|---:|")
    for step, seconds in timings.items():
        print(f"| {step} | {seconds:.2f} |")


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    sys.exit(main())
