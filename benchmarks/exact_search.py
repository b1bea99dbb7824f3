"""Benchmark dapr's bounded-memory exact search against FAISS's exact inner-product index.

Writes ``--documents`` random unit vectors of ``--dim`` dimensions as memory-mapped float32 shards
(as the dense retriever stores a corpus) and ``--queries`` query vectors, then runs in separate
processes, each using every core:

- dapr: :func:`dapr.retrievers.support.exact.search_shards` over the memory-mapped shards;
- faiss: ``IndexFlatIP`` (exact), which first loads every vector into RAM.

It prints time, queries/s, peak resident memory (file pages included) and peak anonymous memory
(what must fit in RAM) per method, the memory one full score matrix would need, and whether both
methods return the same top 10 for a sample of queries. Exits 1 when they differ.

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

SHARD = 65_536
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


def run_dapr(folder: Path, k: int) -> tuple[np.ndarray, np.ndarray]:
    import torch

    from dapr.retrievers.support.exact import search_shards

    queries = torch.from_numpy(np.load(folder / "queries.npy"))
    tops = search_shards(queries, shards(folder), k, lambda q, d: q @ d.T)
    items = torch.cat([top.items for top in tops]).numpy()
    scores = torch.cat([top.scores for top in tops]).numpy()
    return items, scores


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

    with PeakMemory() as memory:
        start = time.perf_counter()
        items, _ = (run_dapr if method == "dapr" else run_faiss)(folder, k)
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
    parser.add_argument("--worker", choices=("dapr", "faiss"), help=argparse.SUPPRESS)
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
        results = {method: measure(method, folder, args.k) for method in ("dapr", "faiss")}

    agree = sum(a == b for a, b in zip(results["dapr"]["top10"], results["faiss"]["top10"]))
    sample = len(results["dapr"]["top10"])
    full_matrix = args.queries * args.documents * 4 / 2**30
    corpus = args.documents * args.dim * 4 / 2**30
    cores = len(os.sched_getaffinity(0))
    print(
        f"\n{args.documents:,} documents x {args.dim} float32 ({corpus:.1f} GiB), "
        f"{args.queries:,} queries, top {args.k}, {cores} cores\n"
    )
    print("| method | seconds | queries/s | peak RSS (GiB) | peak anonymous (GiB) |")
    print("|---|---:|---:|---:|---:|")
    for method, label in (("dapr", "dapr search_shards (mmap)"), ("faiss", "faiss IndexFlatIP")):
        r = results[method]
        print(
            f"| {label} | {r['seconds']:.1f} | {args.queries / r['seconds']:,.0f} | "
            f"{r['rss']:.2f} | {r['anonymous']:.2f} |"
        )
    print(f"| one full score matrix | - | - | {full_matrix:.1f} (computed) | - |")
    d, f = results["dapr"], results["faiss"]
    print(
        f"\ndapr / faiss: time x{d['seconds'] / f['seconds']:.2f}, "
        f"anonymous memory x{d['anonymous'] / f['anonymous']:.2f}; "
        f"same top 10 on {agree}/{sample} sampled queries"
    )
    return 0 if agree == sample else 1


if __name__ == "__main__":
    sys.exit(main())
