"""Peak memory and time of BM25 document + passage retrieval and convex fusion at NQ scale.

A synthetic corpus the size of DAPR's NaturalQuestions (``--passages`` 2.7M in ``--documents``
108k, 25 a document; about 100 words a passage, Zipf-distributed pseudo-words plus a few topic
words of the document, commas and full stops; fixed seed) is written once, in the hub layout as
parquet, with ``--queries`` test queries (words of a gold passage plus its document's title)
and their qrels, and a one-query split ``probe``. Then each step runs through dapr's experiment
runner (an experiment file written beside it, ``$DAPR_HOME`` a fresh directory) in a fresh
process of its own, so its peak RSS is its own; every step reuses the cached output of the
steps before it, as a rerun does:

- read: the dataset read and its corpus streamed once, for the fingerprint and the id arrays
  together, which leaves the corpus record that every runner process below takes instead;
- read (warm): a fresh process reading the dataset again, from the record: a step's start-up;
- index document / passage: BM25 over whole documents / passages (searching the probe query);
- search document / passage: the cached index loaded, the queries searched (top 1,000);
- fuse: the cached runs loaded, fused by ``convex`` (alpha 0.2) and evaluated.

``--whole`` also runs the complete experiment in one process from an empty cache, as ``dapr
run`` does. ``--index-memory SIZE`` (e.g. ``200MB``) gives the BM25 steps their working memory
(the retriever's ``index_memory``; it changes no cache key). Prints a markdown table: the
runner's own step seconds, the process's wall time, its peak RSS (``VmHWM``) and peak anonymous
memory (``RssAnon``, sampled), and the total; ``--json PATH`` also writes the measurements with
the command, date, commit and machine.

    python benchmarks/scale.py [--passages 2700000 --documents 108000 --queries 1000 --seed 0]
                               [--index-memory SIZE] [--workdir DIR] [--keep] [--whole]
                               [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from bm25 import vocabulary, zipf_cdf
from child import run_child
from memory import PeakMemory

from dapr.data import Corpus, Dataset, Document, Passage, Qrels, Queries, Split

WORDS = 200_000
"""Size of the pseudo-word vocabulary."""
TOPIC_SHARE = 0.1
"""Share of a passage's words drawn from its document's topic words (the title's among them)."""
TOPIC_WORDS = 20
TARGET_GB = 3.0
REFERENCE = (
    "the reference code (UKPLab/acl2024-dapr, README, 'Pre-Built Data') lists 25.6 GB of memory "
    "and 39 min (12 processes) to build NaturalQuestions"
)
WARM = "read (warm)"
"""A second read of the dataset in a fresh process: from the corpus record the first one left."""
PROBE = "probe"
"""The one-query split that index steps search, so that they index without searching much."""


# --- the synthetic corpus --------------------------------------------------------------------


class Synthetic:
    """``passages`` passages in ``documents`` documents, each document generated on its own from
    ``seed`` and its number, so any one can be generated again (for the queries)."""

    def __init__(self, passages: int, documents: int, seed: int):
        if not 0 < documents <= passages:
            raise SystemExit("--documents must be positive and at most --passages")
        self.passages, self.documents, self.seed = passages, documents, seed
        self.vocab = vocabulary(WORDS, seed)
        self.spelled = np.concatenate([self.vocab, self.vocab + ",", self.vocab + "."])
        self.cdf = zipf_cdf(WORDS)

    def count(self, d: int) -> int:
        """The number of passages of document ``d`` (as even as the totals allow)."""
        base, extra = divmod(self.passages, self.documents)
        return base + (d < extra)

    def document(self, d: int) -> Document:
        rng = np.random.default_rng([self.seed, 0, d])
        n = self.count(d)
        title = rng.choice(np.arange(300, 30_000), rng.integers(2, 4), replace=False)
        topic = np.concatenate([title, rng.integers(300, 50_000, TOPIC_WORDS)])
        lengths = np.clip(rng.normal(100, 30, n), 20, 300).astype(np.int64)
        total = int(lengths.sum())
        codes = np.minimum(np.searchsorted(self.cdf, rng.random(total)), WORDS - 1)
        on_topic = np.flatnonzero(rng.random(total) < TOPIC_SHARE)
        codes[on_topic] = topic[rng.integers(0, len(topic), len(on_topic))]
        mark = rng.choice(3, total, p=[0.88, 0.06, 0.06])  # plain, comma, full stop
        tokens = self.spelled[codes + WORDS * mark].tolist()
        bounds = np.concatenate(([0], np.cumsum(lengths))).tolist()
        doc_id = f"d{d}"
        passages = tuple(
            Passage(f"{doc_id}-{i}", doc_id, i, " ".join(tokens[bounds[i] : bounds[i + 1]]))
            for i in range(n)
        )
        return Document(doc_id, " ".join(self.vocab[title]).title(), passages)

    def __call__(self) -> Iterator[Document]:
        for d in range(self.documents):
            yield self.document(d)

    def queries(self, count: int) -> tuple[Queries, Qrels]:
        """``count`` queries: the title of a random document and 3-5 distinct words of one of its
        passages, which is the query's one relevant passage."""
        rng = np.random.default_rng([self.seed, 1, 0])
        queries: Queries = {}
        qrels: Qrels = {}
        for q in range(count):
            document = self.document(int(rng.integers(self.documents)))
            gold = document.passages[int(rng.integers(len(document.passages)))]
            words = list(dict.fromkeys(w.strip(",.") for w in gold.text.split()))
            picked = rng.choice(len(words), min(int(rng.integers(3, 6)), len(words)), False)
            queries[f"q{q}"] = " ".join([document.title.lower(), *(words[i] for i in picked)])
            qrels[f"q{q}"] = {gold.id: 1}
        return queries, qrels


def write_corpus(
    folder: Path, passages: int, documents: int, queries: int, seed: int
) -> tuple[Path, bool]:
    """The dataset directory under ``folder`` for these parameters, written unless it exists,
    and whether this call wrote it."""
    from dapr.datasets import write_dataset

    out = folder / f"synthetic-{passages}p-{documents}d-{queries}q-seed{seed}"
    if out.is_dir():
        print(f"reusing {out}", file=sys.stderr)
        return out, False
    started = time.perf_counter()
    synthetic = Synthetic(passages, documents, seed)
    test_queries, test_qrels = synthetic.queries(queries)
    first = next(iter(test_queries))
    splits = {
        "test": Split(test_queries, test_qrels),
        PROBE: Split({first: test_queries[first]}, {first: test_qrels[first]}),
    }
    write_dataset(Dataset(out.name, Corpus(synthetic), splits), out, "parquet")
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) / 2**20
    print(
        f"wrote {out} ({size:,.0f} MB) in {time.perf_counter() - started:,.0f} s", file=sys.stderr
    )
    return out, True


# --- the steps -------------------------------------------------------------------------------


RETRIEVERS = {
    "bm25-document": {"name": "bm25", "level": "document"},
    "bm25-passage": {"name": "bm25", "level": "passage"},
}
FUSION = {
    "convex": {
        "name": "convex",
        "document": "bm25-document",
        "passage": "bm25-passage",
        "args": {"alpha": 0.2},
    }
}
STEPS: dict[str, tuple[str, tuple[str, ...], bool]] = {
    # name: (split, retrievers, fusion)
    "index document": (PROBE, ("bm25-document",), False),
    "index passage": (PROBE, ("bm25-passage",), False),
    "search document": ("test", ("bm25-document",), False),
    "search passage": ("test", ("bm25-passage",), False),
    "fuse": ("test", tuple(RETRIEVERS), True),
}
COMPUTED = {
    # the runner steps each process must compute itself (the others must come from the cache)
    "index document": {("index", "bm25-document"), ("search", "bm25-document")},
    "index passage": {("index", "bm25-passage"), ("search", "bm25-passage")},
    "search document": {("search", "bm25-document")},
    "search passage": {("search", "bm25-passage")},
    "fuse": {("fuse", "convex")},
}


def settle(dataset: Path) -> None:
    """Wait until the dataset's newest file is older than the corpus record's racy window, as
    a dataset written a while ago is: a record taken sooner is rightly not trusted, and the warm
    start-up would measure a second full read."""
    from dapr.datasets.record import RACY_NS

    newest = max(f.stat().st_mtime_ns for f in dataset.rglob("*") if f.is_file())
    time.sleep(max(0.0, (newest + RACY_NS - time.time_ns()) / 1e9 + 0.1))


def write_experiment(
    folder: Path, name: str, dataset: Path, index_memory: str | None = None
) -> Path:
    """The experiment file of one step (JSON is YAML); ``index_memory`` the BM25 budget."""
    split, systems, fused = STEPS.get(name, ("test", tuple(RETRIEVERS), True))
    budget = {"args": {"index_memory": index_memory}} if index_memory else {}
    experiment = {
        "name": f"scale-{name.replace(' ', '-')}",
        "dataset": str(dataset),
        "split": split,
        "depth": 1000,
        "metrics": ["nDCG@10", "R@100", "MRR@10"],
        "retrievers": {system: {**RETRIEVERS[system], **budget} for system in systems},
    }
    if fused:
        experiment["fusion"] = FUSION
    path = folder / f"{experiment['name']}.yaml"
    path.write_text(json.dumps(experiment, indent=1) + "\n")
    return path


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One step in this process: its runner steps, seconds and peak memory."""
    started = time.perf_counter()
    out: dict[str, Any] = {}
    with PeakMemory() as peak:
        if spec["step"] in ("read", WARM):
            from dapr.datasets import read_dataset

            dataset = read_dataset(Path(spec["dataset"]))
            out["fingerprint"] = dataset.fingerprint
            out["passages"] = len(dataset.corpus.ids.passage_ids)
            out["documents"] = len(dataset.corpus.ids.doc_ids)
        else:
            from dapr.experiment.config import load
            from dapr.experiment.runner import Runner

            outcome = Runner(load(Path(spec["experiment"]))).run()
            out["steps"] = [[s.kind, s.system, s.status, s.seconds] for s in outcome.steps]
            out["means"] = {system: e.means for system, e in outcome.evaluations.items()}
    out["seconds"] = time.perf_counter() - started
    out["peak_rss_mb"] = peak_rss_kib() / 1024
    out["peak_anon_mb"] = peak.anonymous * 1024
    return out


def peak_rss_kib() -> int:
    """This process's peak resident set since it started (``VmHWM``; ``ru_maxrss`` would count
    the parent's resident set at the fork, which Linux carries across ``execve``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def check(name: str, result: dict[str, Any]) -> None:
    """The step computed what it measures and took everything else from the cache."""
    if name not in COMPUTED:
        return
    computed = {(kind, system) for kind, system, status, _ in result["steps"] if status != "cached"}
    if computed != COMPUTED[name]:
        raise SystemExit(f"step {name!r} computed {sorted(computed)}, not {COMPUTED[name]}")


# --- report ----------------------------------------------------------------------------------


def row(name: str, result: dict[str, Any]) -> str:
    runner = ", ".join(
        f"{kind} {system} {'(cached) ' if status == 'cached' else ''}{seconds:,.1f}"
        for kind, system, status, seconds in result.get("steps", [])
    )
    return (
        f"| {name} | {runner or '-'} | {result['seconds']:,.1f} | "
        f"{result['peak_rss_mb']:,.0f} | {result['peak_anon_mb']:,.0f} |"
    )


def _corpus(written: float | None) -> str:
    """How the corpus came to be: written in this run, and how long it took, or reused."""
    return (
        "corpus reused from --workdir" if written is None else f"corpus written in {written:,.0f} s"
    )


def report(
    args: argparse.Namespace, results: dict[str, dict[str, Any]], written: float | None
) -> str:
    read = results["read"]
    peak = max(r["peak_rss_mb"] for r in results.values()) / 1024
    lines = [
        f"{read['passages']:,} passages in {read['documents']:,} documents, {args.queries:,} "
        f"queries, top 1,000; {len(os.sched_getaffinity(0))} cores; {_corpus(written)}; "
        f"BM25 index memory {args.index_memory or 'default'}; every step a "
        "fresh process reusing the cache of the steps above\n",
        "| step | runner steps, seconds | process seconds | peak RSS MB | peak anonymous MB |",
        "| --- | --- | ---: | ---: | ---: |",
        *(row(name, result) for name, result in results.items()),
        "",
        f"total peak RSS (largest process): {peak:.2f} GB; target: under {TARGET_GB:g} GB "
        f"({'met' if peak < TARGET_GB else 'NOT MET'}); {REFERENCE}",
        f"total process seconds: {sum(r['seconds'] for r in results.values()):,.0f}",
    ]
    fused = results.get("whole", results["fuse"])["means"]
    lines.append(
        "quality: "
        + "; ".join(
            f"{system} " + ", ".join(f"{m} {v:.3f}" for m, v in means.items())
            for system, means in fused.items()
        )
    )
    return "\n".join(lines)


LABELS = {
    "read": "read the corpus (fingerprint, ids)",
    WARM: "start-up from the corpus record",
    "index document": "index documents",
    "index passage": "index passages",
    "fuse": "fuse (and evaluate)",
    "whole": "the whole experiment in one process",
}


def docs_table(queries: int, results: dict[str, dict[str, Any]]) -> list[str]:
    """The docs' table: a row per step, the seconds of the runner steps it computed (the
    process's own for the reads), its peak RSS, process seconds and peak anonymous memory."""
    lines = [
        "| step | runner seconds | peak RSS | process seconds | peak anonymous |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, result in results.items():
        computed = [s for _, _, status, s in result.get("steps", []) if status != "cached"]
        seconds = sum(computed) if computed and name != "whole" else result["seconds"]
        label = LABELS.get(name) or f"{name}s ({queries:,} queries)"
        lines.append(
            f"| {label} | {seconds:.1f} | {result['peak_rss_mb'] / 1024:.1f} GB | "
            f"{result['seconds']:,.1f} | {result['peak_anon_mb'] / 1024:.1f} GB |"
        )
    return lines


def write_json(
    path: Path, args: argparse.Namespace, results: dict[str, dict[str, Any]], written: float | None
) -> None:
    """The docs' table as a results file (benchmarks/results_json.py), the raw measurements
    beside it."""
    from results_json import write

    read = results["read"]
    notes = (
        f"{read['passages']:,} synthetic passages in {read['documents']:,} documents, "
        f"{args.queries:,} queries, top 1,000; BM25 index memory "
        f"{args.index_memory or 'default (1GB)'}; {_corpus(written)}; each step "
        "in a fresh process reusing the cache of the steps above."
    )
    table = {"steps": docs_table(args.queries, results)}
    write(path, table, notes, passages=read["passages"], documents=read["documents"], data=results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=2_700_000)
    parser.add_argument("--documents", type=int, default=108_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--index-memory", help="working memory of the BM25 index steps, e.g. 1GB or 200MB"
    )
    parser.add_argument(
        "--workdir", type=Path, help="keep the generated corpus here and reuse it between runs"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the caches ($DAPR_HOME: indexes, runs) too"
    )
    parser.add_argument(
        "--whole", action="store_true", help="also run the whole experiment in one process"
    )
    parser.add_argument("--json", type=Path, help="also write the measurements to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.queries < 1:
        raise SystemExit("--queries must be positive")

    root = args.workdir or Path(tempfile.mkdtemp(prefix="dapr-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    homes = [root / "home", root / "home-whole"]
    try:
        started = time.perf_counter()
        dataset, wrote = write_corpus(root, args.passages, args.documents, args.queries, args.seed)
        written = time.perf_counter() - started if wrote else None
        settle(dataset)
        results = {}
        plan = [("read", homes[0]), (WARM, homes[0]), *((step, homes[0]) for step in STEPS)]
        for name, home in plan + ([("whole", homes[1])] if args.whole else []):
            if name in ("read", "whole"):
                shutil.rmtree(home, ignore_errors=True)  # computed from an empty cache
            os.environ["DAPR_HOME"] = str(home)
            spec = {"step": name, "dataset": str(dataset)}
            if name not in ("read", WARM):
                experiment = write_experiment(root, name, dataset, args.index_memory)
                spec["experiment"] = str(experiment)
            results[name] = run_child(__file__, spec)
            check(name, results[name])
            print(f"  {name}: {json.dumps(results[name])}", file=sys.stderr)
        print(report(args, results, written))
        if args.json:
            write_json(args.json, args, results, written)
    finally:
        if not args.keep:
            for home in homes:
                shutil.rmtree(home, ignore_errors=True)
            if args.workdir is None:
                shutil.rmtree(root, ignore_errors=True)
    if args.keep or args.workdir:
        print(f"\n(kept {root})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
