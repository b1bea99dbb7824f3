"""Benchmark compressed dense search (``quantization: int8 | binary``) against float exact search.

Speed and memory: ``--rows`` random-but-clustered unit vectors of ``--dim`` dimensions (points
scattered around ``--clusters`` random centres, as embeddings of topical text are) are written as
memory-mapped float32 shards, as the dense retriever stores a corpus, with ``--queries`` query
vectors drawn the same way. Each method then runs in a fresh process (child.py), the methods
taking turns ``--repeats`` times, the fastest kept:

- float exact: :func:`dapr.retrievers.support.canonical.exact_search` over the shards (the
  dense retriever's CPU path);
- int8 / binary + rescore: the codes built from the shards by
  :func:`dapr.retrievers.support.quantized.write_codes` (in a process of their own, timed
  apart), then :class:`~dapr.retrievers.support.quantized_search.Compressed` on the CPU path
  (torch's int8 product, FAISS's ``IndexBinaryFlat``), its ``k x --multiplier`` candidates
  rescored exactly from the memory-mapped shards.

Each row gives search seconds, the speed-up over float exact measured in the same run, the
peak resident memory of the search (file pages of the shards included) and its peak anonymous
memory, the bytes of what the first pass scans (shards or codes), and how many of exact
search's top 10 each method returns, over every query.

Quality: the embedded Wikipedia sample (all-MiniLM-L6-v2, shipped on PyPI) run by dapr's
runner, exact and with each quantization at multipliers 1, 4 (the default) and 10: nDCG@10 on
the test queries, its difference from exact, and the top-10 overlap with exact. The runner uses
dapr's cache (``$DAPR_HOME``): the float index is encoded once and each quantization's codes are
built once, as in ``dapr run``.

    python benchmarks/quantized.py [--rows 1000000 --dim 768 --queries 1000 --k 100 --json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import results_json  # benchmarks/results_json.py, beside this script
from child import fastest_in_turns, run_child

SHARD = 65_536
METHODS = {"float": "float exact", "int8": "int8 + rescore", "binary": "binary + rescore"}
MULTIPLIERS = (1, 4, 10)


def write_vectors(folder: Path, rows: int, dim: int, clusters: int, queries: int, seed: int):
    """Unit vectors around random centres, shard by shard (the parent never holds them all)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim), dtype=np.float32)

    def around(n: int) -> np.ndarray:
        block = centres[rng.integers(0, clusters, n)] + rng.standard_normal((n, dim), np.float32)
        return block / np.linalg.norm(block, axis=1, keepdims=True)

    for n, start in enumerate(range(0, rows, SHARD)):
        np.save(folder / f"shard-{n:05d}.npy", around(min(SHARD, rows - start)))
    np.save(folder / "queries.npy", around(queries))


def child(spec: dict) -> dict:
    """One measurement in this (fresh) process: build codes, or search with one method."""
    import faiss  # noqa: F401  (imports are not search time)
    import sentence_transformers.quantization  # noqa: F401
    import torch
    from memory import PeakMemory

    from dapr.retrievers.support import quantized
    from dapr.retrievers.support.canonical import exact_search, fast_product
    from dapr.retrievers.support.quantized_search import Compressed

    folder = Path(spec["folder"])
    shards = [np.load(p, mmap_mode="r") for p in sorted(folder.glob("shard-*.npy"))]
    method, k = spec["method"], spec["k"]
    if spec["build"]:
        (folder / method).mkdir(exist_ok=True)
        start = time.perf_counter()
        quantized.write_codes(shards, method, False, folder / method)
        return {"seconds": time.perf_counter() - start}
    queries = torch.from_numpy(np.load(folder / "queries.npy"))
    first = None
    if method != "float":
        codes = quantized.read_codes(folder / method)
        first = Compressed(codes, shards, "dot", None, 65_536, 4096)
    with PeakMemory() as memory:
        start = time.perf_counter()
        if first is None:
            items, scores = exact_search(queries, shards, k, "dot", fast_product("dot", None))
        else:
            items, scores = first.search(queries, k, spec["multiplier"])
        seconds = time.perf_counter() - start
    top10 = [c[np.lexsort((c, -s))[:10]].tolist() for c, s in zip(items, scores)]
    return {"seconds": seconds, "rss": memory.rss, "anonymous": memory.anonymous, "top10": top10}


def speed_table(args: argparse.Namespace) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="dapr-quantized-") as tmp:
        folder = Path(tmp)
        start = time.perf_counter()
        write_vectors(folder, args.rows, args.dim, args.clusters, args.queries, args.seed)
        print(f"wrote {args.rows:,} x {args.dim} vectors in {time.perf_counter() - start:.0f} s")
        base = {"folder": tmp, "k": args.k, "multiplier": args.multiplier}
        built = {m: run_child(__file__, {**base, "method": m, "build": True}) for m in METHODS}
        sizes = {
            m: _bytes(folder, "shard-*.npy" if m == "float" else f"{m}/codes.npy") for m in METHODS
        }
        results = fastest_in_turns(
            METHODS,
            args.repeats,
            lambda m, _: run_child(__file__, {**base, "method": m, "build": False}),
        )
    exact = results["float"]["top10"]
    lines = [
        "| method | codes built (s) | search (s) | queries/s | speed-up | peak RSS (GiB) | "
        "peak anonymous (GiB) | scanned (GiB) | smaller | exact top 10 found |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for method, label in METHODS.items():
        r = results[method]
        found = sum(len(set(a) & set(b)) for a, b in zip(r["top10"], exact))
        build = "-" if method == "float" else f"{built[method]['seconds']:.1f}"
        lines.append(
            f"| {label} | {build} | {r['seconds']:.1f} | {args.queries / r['seconds']:,.0f} | "
            f"{results['float']['seconds'] / r['seconds']:.2f}x | {r['rss']:.2f} | "
            f"{r['anonymous']:.2f} | {sizes[method] / 2**30:.3f} | "
            f"{sizes['float'] / sizes[method]:.0f}x | {found / (10 * len(exact)):.1%} |"
        )
    return lines


def _bytes(folder: Path, pattern: str) -> int:
    """What the first pass scans: the float shards, or the codes."""
    return sum(p.stat().st_size for p in folder.glob(pattern))


def quality_table(depth: int) -> list[str]:
    """nDCG@10 on wiki-sample's test queries, exact and compressed, from dapr's runner."""
    from dapr.experiment.config import load
    from dapr.experiment.runner import Runner

    systems = {"exact": ""} | {
        f"{kind}-x{m}": f", quantization: {kind}, rescore_multiplier: {m}"
        for kind in ("int8", "binary")
        for m in MULTIPLIERS
    }
    body = "".join(f"  {name}: {{name: dense, args: {{{a[2:]}}}}}\n" for name, a in systems.items())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "quantized.yaml"
        path.write_text(
            f"dataset: wiki-sample\nmetrics: [nDCG@10]\ndepth: {depth}\nretrievers:\n{body}"
        )
        started = time.perf_counter()
        outcome = Runner(load(path)).run()
    print(f"wiki-sample runs: {time.perf_counter() - started:.0f} s")
    exact_run = outcome.runs["exact"].to_dict()
    exact_ndcg = outcome.evaluations["exact"].means["nDCG@10"]
    lines = [
        "| first pass | multiplier | nDCG@10 | vs exact | exact top 10 found |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in systems:
        run = outcome.runs[name].to_dict()
        found = sum(len(set(list(run[q])[:10]) & set(list(exact_run[q])[:10])) for q in exact_run)
        total = sum(min(10, len(exact_run[q])) for q in exact_run)
        ndcg = outcome.evaluations[name].means["nDCG@10"]
        kind, _, multiplier = name.partition("-x")
        lines.append(
            f"| {kind} | {multiplier or '-'} | {ndcg:.4f} | {ndcg - exact_ndcg:+.4f} | "
            f"{found / total:.1%} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--multiplier", type=int, default=4, help="rescore_multiplier")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=2, help="runs per method, in turns")
    parser.add_argument("--depth", type=int, default=100, help="wiki-sample runs' depth")
    parser.add_argument("--skip-quality", action="store_true", help="no wiki-sample table")
    parser.add_argument("--json", help="also write the tables as a results file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0

    speed = speed_table(args)
    cores = len(os.sched_getaffinity(0))
    print(
        f"\n{args.rows:,} vectors x {args.dim} (float32, {args.clusters:,} clusters), "
        f"{args.queries:,} queries, top {args.k}, rescore_multiplier {args.multiplier}, "
        f"{cores} cores, fastest of {args.repeats} runs each\n"
    )
    print("\n".join(speed))
    tables = {"quantized-speed": speed}
    if not args.skip_quality:
        quality = quality_table(args.depth)
        print(f"\nwiki-sample test queries, all-MiniLM-L6-v2, depth {args.depth}\n")
        print("\n".join(quality))
        tables["quantized-quality"] = quality
    if args.json:
        results_json.write(args.json, tables, script="benchmarks/quantized.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
