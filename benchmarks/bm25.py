"""Benchmark dapr's BM25 on its two backends, bm25s and pyserini (Lucene), on the same corpora.

Two corpora: the ``wiki-sample`` passages with all their queries (real text), and a synthetic one
(``--passages``, Zipf-distributed pseudo-words, about 100 words a passage, commas and full stops,
fixed seed) with ``--queries`` queries of 2-6 words from the same distribution. Each backend runs
in processes of its own, so their peak RSS (``ru_maxrss``, the JVM included) is theirs alone:
one indexes and searches with every core, a second, pinned to one CPU, loads the index and
searches one query at a time. Both take the top ``--depth`` items; the first 100 queries warm up
untimed. Indexing runs ``--repeats`` times per backend, the backends taking turns, and the fastest
run of each is kept (the machine's load moves single runs by 10-20%). Prints a markdown table and
the bm25s / Lucene ratios.

Then the start-up tax of tokenizing in worker processes: small corpora (the ``wiki-sample``
documents, the quick tour's 103-document index, and synthetic passages around the threshold
``postings.POOL_CHARS``) tokenized into postings in one process and in a pool of every core
(forced), in turns in one fresh process, the fastest of ``--repeats`` each; ``--start-up-only``
runs only this.

    python benchmarks/bm25.py [--passages 500000 --queries 1000 --depth 1000 --seed 0 --repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import results_json  # benchmarks/results_json.py, beside this script
from child import fastest_in_turns, run_child

BACKENDS = ("bm25s", "pyserini")
_CHUNK = 10_000
"""Synthetic passages generated at a time."""
_WARM_UP = 100


# --- corpora ---------------------------------------------------------------------------------


def vocabulary(size: int, seed: int) -> np.ndarray:
    """``size`` distinct pronounceable pseudo-words of 2-4 syllables, none a stop word."""
    from dapr.retrievers.support.english import STOP_WORDS

    rng = np.random.default_rng(seed)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["an", "el", "or", "is"]
    words: dict[str, None] = {}
    while len(words) < size:
        counts = rng.integers(2, 5, size)
        parts = rng.integers(0, len(syllables), (size, 4))
        for count, row in zip(counts.tolist(), parts.tolist()):
            word = "".join(syllables[p] for p in row[:count])
            if word not in STOP_WORDS:
                words[word] = None
    return np.array(list(words)[:size], dtype=object)


def zipf_cdf(size: int, exponent: float = 1.07, shift: float = 2.7) -> np.ndarray:
    """Cumulative Zipf-Mandelbrot probabilities of ranks 1..size (word frequencies of text)."""
    weights = 1.0 / (np.arange(1, size + 1) + shift) ** exponent
    return np.cumsum(weights) / weights.sum()


def synthetic_passages(count: int, seed: int, words: int = 200_000) -> Iterator[tuple[str, str]]:
    """``count`` passages (id, text), generated ``_CHUNK`` at a time."""
    vocab = vocabulary(words, seed)
    spelled = np.concatenate([vocab, vocab + ",", vocab + "."])  # a word, then with punctuation
    cdf = zipf_cdf(words)
    rng = np.random.default_rng(seed + 1)
    for start in range(0, count, _CHUNK):
        n = min(_CHUNK, count - start)
        lengths = np.clip(rng.normal(100, 30, n), 20, 300).astype(np.int64)
        total = int(lengths.sum())
        mark = rng.choice(3, total, p=[0.88, 0.06, 0.06])
        tokens = spelled[np.searchsorted(cdf, rng.random(total)) + words * mark]
        bounds = np.concatenate(([0], np.cumsum(lengths))).tolist()
        for i in range(n):
            yield f"p{start + i}", " ".join(tokens[bounds[i] : bounds[i + 1]])


def synthetic_queries(count: int, seed: int, words: int = 200_000) -> dict[str, str]:
    """``count`` queries of 2-6 words drawn like the passages' words."""
    vocab, cdf = vocabulary(words, seed), zipf_cdf(words)
    rng = np.random.default_rng(seed + 2)
    lengths = rng.integers(2, 7, count)
    picks = vocab[np.searchsorted(cdf, rng.random(int(lengths.sum())))]
    bounds = np.concatenate(([0], np.cumsum(lengths))).tolist()
    return {f"q{i}": " ".join(picks[bounds[i] : bounds[i + 1]]) for i in range(count)}


def wiki_sample() -> tuple[Iterator[tuple[str, str]], dict[str, str]]:
    from dapr.datasets import load_dataset

    dataset = load_dataset("wiki-sample")
    queries = {q: t for split in dataset.splits.values() for q, t in split.queries.items()}
    return ((p.id, p.text) for p in dataset.corpus.passages()), queries


def write_synthetic(folder: Path, passages: int, queries: int, seed: int) -> None:
    """The synthetic corpus as JSON lines and its queries as JSON, generated once for every
    process to stream (their generation is no backend's work)."""
    with (folder / "synthetic.jsonl").open("w", encoding="utf-8") as out:
        for item in synthetic_passages(passages, seed):
            out.write(json.dumps(item) + "\n")
    (folder / "synthetic-queries.json").write_text(json.dumps(synthetic_queries(queries, seed)))


def read_synthetic(folder: Path) -> tuple[Iterator[tuple[str, str]], dict[str, str]]:
    def items() -> Iterator[tuple[str, str]]:
        with (folder / "synthetic.jsonl").open(encoding="utf-8") as lines:
            for line in lines:
                item_id, text = json.loads(line)
                yield item_id, text

    return items(), json.loads((folder / "synthetic-queries.json").read_text())


def corpus(spec: dict[str, Any]) -> tuple[Iterator[tuple[str, str]], dict[str, str]]:
    if spec["corpus"] == "wiki-sample":
        return wiki_sample()
    return read_synthetic(Path(spec["folder"]))


# --- one backend in one process ------------------------------------------------------------


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """Index (``spec["index"]``) or load, then search; timings and this process's peak RSS."""
    from dapr.retrievers.bm25 import BM25

    items, queries = corpus(spec)
    retriever = BM25(backend=spec["backend"], threads=spec["threads"])
    store = Path(spec["store"])
    out: dict[str, Any] = {}
    if spec["index"]:
        counted = _Counted(items)
        start = time.perf_counter()
        retriever.index(counted, store)
        out["index_seconds"] = time.perf_counter() - start
        out["passages"] = counted.count
    else:
        retriever.load(store)
    warm = dict(list(queries.items())[:_WARM_UP])
    retriever.search(warm, spec["depth"])
    start = time.perf_counter()
    run = retriever.search(queries, spec["depth"])
    out["search_seconds"] = time.perf_counter() - start
    out["queries"] = len(queries)
    out["hits"] = len(run.items)  # the same for both backends when they agree
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


class _Counted:
    """Items passed through, counted."""

    def __init__(self, items: Iterator[tuple[str, str]]):
        self.items, self.count = items, 0

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for item in self.items:
            self.count += 1
            yield item


def measure(
    name: str, spec: dict[str, Any], folder: Path, repeats: int
) -> dict[str, dict[str, Any]]:
    """Both backends on one corpus: index + search on every core ``repeats`` times, the
    backends taking turns, keeping each one's fastest indexing run; then search on one CPU."""
    one_cpu = {min(os.sched_getaffinity(0))}

    def indexed(backend: str, turn: int) -> dict[str, Any]:
        store = str(folder / f"{name}-{backend}-{turn}")
        every = dict(spec, backend=backend, store=store, index=True, threads=0)
        return {**run_child(__file__, every), "store": store}

    best = fastest_in_turns(BACKENDS, repeats, indexed, key="index_seconds")
    results = {backend: {"store": run.pop("store"), "all": run} for backend, run in best.items()}
    for backend in BACKENDS:
        single = dict(spec, backend=backend, store=results[backend]["store"], index=False)
        results[backend]["one"] = run_child(__file__, dict(single, threads=1), one_cpu)
        print(f"  {name} {backend}: {results[backend]}", file=sys.stderr)
    return results


def start_up(spec: dict[str, Any]) -> dict[str, Any]:
    """Seconds to tokenize each small corpus into postings in this process and in worker
    processes on every core (forced past ``POOL_CHARS``; no more than batches), in turns, each
    with a new analyzer: the fastest of each."""
    from dapr.datasets import load_dataset
    from dapr.retrievers.support import postings
    from dapr.retrievers.support.cores import cores
    from dapr.retrievers.support.english import english_batch, process_analyzer

    documents = [(d.id, d.text) for d in load_dataset("wiki-sample").corpus]
    corpora = {"wiki-sample documents": documents}
    synthetic = synthetic_passages(30_000, spec["seed"])
    for millions in (1, 2, 4, 8):
        items, size = [], 0
        while size < millions * 1_000_000:
            items.append(next(synthetic))
            size += len(items[-1][1])
        corpora[f"synthetic {millions}M characters"] = items
    default = postings.POOL_CHARS
    rows = []
    for name, items in corpora.items():
        best = {"here": float("inf"), "pool": float("inf")}
        for _ in range(spec["repeats"]):
            for way, threshold in (("here", float("inf")), ("pool", 0)):
                postings.POOL_CHARS = threshold
                process_analyzer.cache_clear()  # cold, as at a run's first index
                start = time.perf_counter()
                for _ in postings.stream_postings(items, english_batch, {}, cores()):
                    pass
                best[way] = min(best[way], time.perf_counter() - start)
        chars = sum(len(text) for _, text in items)
        rows.append({"corpus": name, "texts": len(items), "chars": chars, **best})
    return {"rows": rows, "cores": cores(), "threshold": default}


def start_up_rows(result: dict[str, Any]) -> list[str]:
    lines = [
        f"\ntokenizing small corpora: one process vs {result['cores']} worker processes "
        f"(workers start from {result['threshold']:,} characters)\n",
        "| corpus | texts | characters | one process s | workers s | **workers / one** |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['corpus']} | {row['texts']:,} | {row['chars']:,} | {row['here']:.3f} | "
            f"{row['pool']:.3f} | **{row['pool'] / row['here']:.2f}x** |"
        )
    return lines


# --- report ----------------------------------------------------------------------------------


def rows(name: str, results: dict[str, dict[str, Any]]) -> list[str]:
    lines, rates = [], {}
    for backend in BACKENDS:
        every, one = results[backend]["all"], results[backend]["one"]
        rates[backend] = {
            "index": every["passages"] / every["index_seconds"],
            "one": one["queries"] / one["search_seconds"],
            "all": every["queries"] / every["search_seconds"],
            "rss": max(every["peak_rss_mb"], one["peak_rss_mb"]),
        }
        r = rates[backend]
        label = "bm25s" if backend == "bm25s" else "Lucene (pyserini)"
        lines.append(
            f"| {name} | {label} | {every['passages']:,} | {every['queries']:,} | "
            f"{r['index']:,.0f} | {r['one']:,.1f} | {r['all']:,.1f} | {r['rss']:,.0f} |"
        )
    a, b = rates["bm25s"], rates["pyserini"]
    ratio = {key: a[key] / b[key] for key in a}
    lines.append(
        f"| {name} | **bm25s / Lucene** | | | {ratio['index']:.2f}x | **{ratio['one']:.2f}x** | "
        f"{ratio['all']:.2f}x | {ratio['rss']:.2f}x |"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=500_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--depth", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--repeats", type=int, default=3, help="indexing runs per backend; the fastest is kept"
    )
    parser.add_argument(
        "--start-up-only", action="store_true", help="only the worker start-up measurement"
    )
    parser.add_argument("--json", help="also write the tables as a results file (docs/results/)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(start_up(spec) if spec.get("start_up") else child(spec)))
        return 0
    start_up_spec = {"start_up": True, "seed": args.seed, "repeats": args.repeats}
    if args.start_up_only:
        print("\n".join(start_up_rows(run_child(__file__, start_up_spec))))
        return 0

    cores = len(os.sched_getaffinity(0))
    base = {"depth": args.depth, "seed": args.seed, "queries": args.queries}
    workloads = {
        "wiki-sample": dict(base, corpus="wiki-sample", passages=0),
        "synthetic": dict(base, corpus="synthetic", passages=args.passages),
    }
    start = time.perf_counter()
    lines = [
        f"top {args.depth} per query; {cores} cores; fastest of {args.repeats} indexing runs per "
        "backend, in turns; queries/s on one pinned CPU and on all cores "
        "(bm25s searches on one core either way); peak RSS of the backend's processes (the JVM "
        "included)\n",
        "| corpus | backend | passages | queries | index docs/s | queries/s, 1 thread "
        f"| queries/s, {cores} cores | peak RSS MB |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    with tempfile.TemporaryDirectory(prefix="dapr-bm25-bench-") as folder:
        write_synthetic(Path(folder), args.passages, args.queries, args.seed)
        print(f"synthetic corpus written in {time.perf_counter() - start:.0f}s", file=sys.stderr)
        for name, spec in workloads.items():
            spec["folder"] = folder
            lines += rows(name, measure(name, spec, Path(folder), args.repeats))
    start_up_lines = start_up_rows(run_child(__file__, start_up_spec))
    print("\n".join(lines + start_up_lines))
    print(f"\n(total {time.perf_counter() - start:.0f}s)")
    if args.json:
        tables = {"backends": lines[1:], "start-up": start_up_lines[1:]}
        notes = f"{lines[0].strip()}; {start_up_lines[0].strip()}"
        results_json.write(args.json, tables, notes=notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
