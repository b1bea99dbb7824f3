"""Benchmark dapr's bounded-memory exact search against FAISS's exact inner-product index.

Writes ``--documents`` random unit vectors of ``--dim`` dimensions as memory-mapped float32 shards
(as the dense retriever stores a corpus) and ``--queries`` query vectors, then runs in separate
processes, each using every core:

- dapr: :func:`dapr.retrievers.support.canonical.exact_search` over the memory-mapped shards,
  as the dense retriever searches (dot product; candidates by the BLAS product, then exact
  float64 scores);
- dapr-torch: the same with torch's matrix product in place of the BLAS one (before issue 23);
- faiss: ``IndexFlatIP`` (exact), which first loads every vector into RAM;
- numpy: a bare GEMM per block of queries over all vectors in RAM, then ``argpartition``.

It prints time, queries/s, peak resident memory (file pages included) and peak anonymous memory
(what must fit in RAM) per method, the memory one full score matrix would need, and whether both
methods return the same top 10 for a sample of queries. Exits 1 when they differ. Each method
runs ``--repeats`` times, the methods taking turns; the fastest run of each is reported.

    python benchmarks/exact_search.py [--documents 1000000 --dim 768 --queries 10000 --k 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import results_json  # benchmarks/results_json.py, beside this script
from child import fastest_in_turns

SHARD = 65_536
METHODS = {
    "dapr": "dapr exact_search (mmap, BLAS)",
    "dapr-torch": "dapr exact_search (mmap, torch product)",
    "faiss": "faiss IndexFlatIP",
    "numpy": "numpy GEMM + argpartition (in RAM)",
}
SAMPLE = 200
"""Queries whose top 10 both methods must agree on."""


def write_vectors(folder: Path, documents: int, dim: int, queries: int, seed: int) -> None:
    """Random unit vectors, written shard by shard so that the parent never holds them all."""
    rng = np.random.default_rng(seed)
    for n, start in enumerate(range(0, documents, SHARD)):
        rows = min(SHARD, documents - start)
        block = rng.standard_normal((rows, dim), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        np.save(folder / f"shard-{n:05d}.npy", block)
    query = rng.standard_normal((queries, dim), dtype=np.float32)
    query /= np.linalg.norm(query, axis=1, keepdims=True)
    np.save(folder / "queries.npy", query)


def shards(folder: Path) -> list[np.ndarray]:
    return [np.load(p, mmap_mode="r") for p in sorted(folder.glob("shard-*.npy"))]


def run_dapr(folder: Path, k: int, torch_product: bool = False) -> tuple[np.ndarray, np.ndarray]:
    import torch
    from sentence_transformers.util import dot_score

    from dapr.retrievers.support.canonical import exact_search, fast_product

    queries = torch.from_numpy(np.load(folder / "queries.npy"))
    fast = fast_product("dot", dot_score)
    if torch_product:
        fast = lambda q, x: dot_score(torch.from_numpy(q), torch.from_numpy(np.array(x))).numpy()  # noqa: E731
    codes, scores = exact_search(queries, shards(folder), k, "dot", fast)
    best = [c[np.argsort(-s, kind="stable")[:k]] for c, s in zip(codes, scores)]
    return np.stack(best), np.stack([np.sort(s)[::-1][:k] for s in scores])


def run_numpy(folder: Path, k: int) -> tuple[np.ndarray, np.ndarray]:
    vectors = np.concatenate(shards(folder))
    queries = np.load(folder / "queries.npy")
    items = np.empty((len(queries), k), dtype=np.int64)
    for start in range(0, len(queries), 1024):
        scores = queries[start : start + 1024] @ vectors.T
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(scores, top, 1), axis=1)
        items[start : start + 1024] = np.take_along_axis(top, order, 1)
    return items, None


def run_faiss(folder: Path, k: int) -> tuple[np.ndarray, np.ndarray]:
    import faiss

    faiss.omp_set_num_threads(len(os.sched_getaffinity(0)))
    parts = shards(folder)
    index = faiss.IndexFlatIP(parts[0].shape[1])
    for part in parts:
        index.add(np.ascontiguousarray(part))
    scores, items = index.search(np.load(folder / "queries.npy"), k)
    return items, scores


def worker(method: str, folder: Path, k: int) -> None:
    """Run one method in this process and print its measurements as JSON."""
    from memory import PeakMemory

    if method.startswith("dapr"):  # imports are not search time
        import sentence_transformers.util  # noqa: F401

        import dapr.retrievers.support.canonical  # noqa: F401
    else:
        import faiss  # noqa: F401
    with PeakMemory() as memory:
        start = time.perf_counter()
        methods = {
            "dapr": run_dapr,
            "dapr-torch": lambda f, n: run_dapr(f, n, torch_product=True),
            "faiss": run_faiss,
            "numpy": run_numpy,
        }
        items, _ = methods[method](folder, k)
        seconds = time.perf_counter() - start
    top10 = [sorted(row[:10].tolist()) for row in items[:SAMPLE]]
    print(
        json.dumps(
            {
                "seconds": seconds,
                "rss": memory.rss,
                "anonymous": memory.anonymous,
                "top10": top10,
            }
        )
    )


def measure(method: str, folder: Path, k: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", method, "--folder", str(folder), "--k", str(k)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--k", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs per method, in turns; the fastest is kept"
    )
    parser.add_argument("--json", help="also write the table as a results file (docs/results/)")
    parser.add_argument("--worker", choices=METHODS, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.folder, args.k)
        return 0

    with tempfile.TemporaryDirectory(prefix="dapr-exact-") as tmp:
        folder = Path(tmp)
        start = time.perf_counter()
        write_vectors(folder, args.documents, args.dim, args.queries, args.seed)
        took = time.perf_counter() - start
        print(f"wrote {args.documents:,} x {args.dim} vectors in {took:.0f} s")
        results = fastest_in_turns(METHODS, args.repeats, lambda m, _: measure(m, folder, args.k))

    sample = len(results["dapr"]["top10"])
    agree = {
        m: sum(a == b for a, b in zip(results["dapr"]["top10"], r["top10"]))
        for m, r in results.items()
    }
    full_matrix = args.queries * args.documents * 4 / 2**30
    corpus = args.documents * args.dim * 4 / 2**30
    cores = len(os.sched_getaffinity(0))
    print(
        f"\n{args.documents:,} documents x {args.dim} float32 ({corpus:.1f} GiB), "
        f"{args.queries:,} queries, top {args.k}, {cores} cores, "
        f"fastest of {args.repeats} runs each\n"
    )
    lines = [
        "| method | seconds | queries/s | throughput / faiss | peak RSS (GiB) | "
        "peak anonymous (GiB) | same top 10 as dapr |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    faiss_seconds = results["faiss"]["seconds"]
    for method, label in METHODS.items():
        r = results[method]
        lines.append(
            f"| {label} | {r['seconds']:.1f} | {args.queries / r['seconds']:,.0f} | "
            f"{faiss_seconds / r['seconds']:.2f}x | {r['rss']:.2f} | {r['anonymous']:.2f} | "
            f"{agree[method]}/{sample} |"
        )
    lines.append(f"| one full score matrix | - | - | - | {full_matrix:.1f} (computed) | - | - |")
    print("\n".join(lines))
    if args.json:
        results_json.write(args.json, {"exact-search": lines})
    return 0 if all(n == sample for n in agree.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
