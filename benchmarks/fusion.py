"""Benchmark dapr's convex fusion against a plain dict-per-query implementation of the reference.

Synthesises a corpus, a BM25-like document run and a cosine-like passage run, times both
implementations (best of 3), checks they rank identically and prints a markdown table. Exits 1
when the rankings differ.

    python benchmarks/fusion.py [--queries 3610 --depth 1000 --seed 0]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import results_json  # benchmarks/results_json.py, beside this script

from dapr.data import Run
from dapr.fusion import Convex

DictRun = dict[str, dict[str, float]]
Ranking = dict[str, list[tuple[str, float]]]


@dataclass
class Workload:
    """The same inputs as dapr runs and as the plain dicts the reference reads."""

    document_run: Run
    passage_run: Run
    doc_of: np.ndarray
    document_dict: DictRun
    passage_dict: DictRun
    pid2did: dict[str, str]


def synthesise(queries: int, depth: int, documents: int, seed: int) -> Workload:
    """A corpus of ``documents`` with 1-30 passages each, and two runs of ``depth`` per query.

    Each query has a topical pool of documents. Its document run is ``depth`` of them, BM25-like
    scores; its passage run (cosine-like scores) is drawn from passages of those documents (often
    several per document), of the rest of the pool, and of anywhere in the corpus.
    """
    rng = np.random.default_rng(seed)
    passages_per_doc = np.minimum(rng.geometric(1 / 6, documents), 30)
    first_passage = np.concatenate([[0], np.cumsum(passages_per_doc)])
    doc_ids = np.array([f"doc{d}" for d in range(documents)], dtype=object)
    passage_doc = np.repeat(np.arange(documents), passages_per_doc)
    passage_pos = np.arange(len(passage_doc)) - first_passage[passage_doc]
    passage_ids = np.array(
        [f"doc{d}-{p}" for d, p in zip(passage_doc.tolist(), passage_pos.tolist(), strict=True)],
        dtype=object,
    )

    qids = [f"q{q}" for q in range(queries)]
    doc_items, doc_scores, passage_items, passage_scores = [], [], [], []
    for _ in qids:
        pool = rng.choice(documents, size=depth + depth // 2, replace=False)
        doc_items.append(pool[:depth])
        doc_scores.append(np.round(np.sort(rng.gamma(4.0, 3.0, depth))[::-1] + 5.0, 4))

        candidates = np.unique(
            np.concatenate(
                [
                    _passages_of(rng.choice(pool[:depth], depth), first_passage, rng),
                    _passages_of(rng.choice(pool[depth:], depth // 4), first_passage, rng),
                    rng.integers(0, len(passage_ids), depth // 3),
                ]
            )
        )
        candidates = rng.permutation(candidates)[:depth]
        passage_items.append(candidates)
        passage_scores.append(np.clip(rng.normal(0.55, 0.12, len(candidates)), -1.0, 1.0))

    document_run = Run.from_lists(qids, doc_items, doc_scores, doc_ids)
    passage_run = Run.from_lists(qids, passage_items, passage_scores, passage_ids)
    # a run's vocabulary holds the ids it ranks: each passage's document as a document run code
    in_run = {doc: code for code, doc in enumerate(document_run.vocab.tolist())}
    position = {pid: n for n, pid in enumerate(passage_ids.tolist())}
    documents_of = doc_ids[passage_doc[[position[p] for p in passage_run.vocab.tolist()]]]
    return Workload(
        document_run=document_run,
        passage_run=passage_run,
        doc_of=np.array([in_run.get(d, -1) for d in documents_of.tolist()], dtype=np.int64),
        # the dicts come in an order of their own: match queries by id, not by position
        document_dict=_shuffled(document_run.to_dict(), rng),
        passage_dict=passage_run.to_dict(),
        pid2did=dict(zip(passage_ids.tolist(), doc_ids[passage_doc].tolist(), strict=True)),
    )


def _passages_of(
    docs: np.ndarray, first_passage: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """One random passage of each of ``docs``."""
    counts = np.diff(first_passage)[docs]
    return first_passage[docs] + rng.integers(0, counts)


def _shuffled(run: DictRun, rng: np.random.Generator) -> DictRun:
    keys = list(run)
    return {keys[i]: run[keys[i]] for i in rng.permutation(len(keys))}


def normalize_min_max(scores: dict[str, float]) -> dict[str, float]:
    """Min-max normalisation with the divisor floored at 1e-4, as the reference does."""
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    divisor = max(high - low, 1e-4)
    return {key: (value - low) / divisor for key, value in scores.items()}


def reference_fuse(
    document_run: DictRun, passage_run: DictRun, pid2did: dict[str, str], alpha: float
) -> Ranking:
    """The reference algorithm with dicts per query, each fused list sorted into a ranking."""
    fused = {}
    for qid, pid2score in passage_run.items():
        did2score = document_run.get(qid, {})
        doc_pid2score = {
            pid: did2score[pid2did[pid]]
            for pid in pid2score
            if pid in pid2did and pid2did[pid] in did2score
        }
        doc_side = normalize_min_max(doc_pid2score)
        passage_side = normalize_min_max(pid2score)
        scores = {
            pid: alpha * doc_side.get(pid, 0.0) + (1 - alpha) * passage_side.get(pid, 0.0)
            for pid in doc_side.keys() | passage_side.keys()
        }
        fused[qid] = sorted(scores.items(), key=lambda pair: pair[1], reverse=True)
    return fused


def overlap(work: Workload) -> float:
    """The share of candidate passages whose document is in the query's document run."""
    hits = total = 0
    for qid, ranked in work.passage_dict.items():
        listed = work.document_dict.get(qid, {})
        hits += sum(work.pid2did[pid] in listed for pid in ranked)
        total += len(ranked)
    return hits / max(total, 1)


def best_of(repeats: int, call: Callable[[], Any]) -> tuple[float, Any]:
    """The fastest wall time of ``repeats`` calls, and the last result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = call()
        best = min(best, time.perf_counter() - start)
    return best, result


def run_ranking(run: Run) -> Ranking:
    return {qid: list(ranked.items()) for qid, ranked in run.to_dict().items()}


def tie_groups(ranking: list[tuple[str, float]]) -> list[set[str]]:
    """The ranking as consecutive groups of exactly tied scores, order inside a group ignored."""
    groups: list[set[str]] = []
    previous = None
    for pid, score in ranking:
        if not groups or score != previous:
            groups.append(set())
        groups[-1].add(pid)
        previous = score
    return groups


def compare(ours: Ranking, reference: Ranking, tolerance: float = 1e-9) -> tuple[bool, float]:
    """Whether both rank alike (same queries, same tie groups in the same order, scores within
    ``tolerance``), and the largest absolute score difference."""
    same = ours.keys() == reference.keys()
    worst = 0.0
    for qid in ours.keys() & reference.keys():
        mine, theirs = dict(ours[qid]), dict(reference[qid])
        if mine.keys() != theirs.keys():
            same = False
            continue
        gaps = [abs(mine[pid] - theirs[pid]) for pid in mine]
        worst = max([worst, *gaps])
        if max(gaps, default=0.0) > tolerance:
            same = False
        if tie_groups(ours[qid]) != tie_groups(reference[qid]):
            same = False
    return same, worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=3610)
    parser.add_argument("--depth", type=int, default=1000)
    parser.add_argument("--documents", type=int, default=200_000)
    parser.add_argument("--alpha", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the table as a results file (docs/results/)")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    work = synthesise(args.queries, args.depth, args.documents, args.seed)
    print(
        f"synthesised in {time.perf_counter() - start:.1f}s: {args.documents:,} documents, "
        f"{len(work.doc_of):,} passages; {args.queries:,} queries x {args.depth} documents and "
        f"passages; {overlap(work):.0%} of candidates have their document in the document run; "
        f"alpha {args.alpha}\n"
    )

    fuser = Convex(args.alpha)
    fast_time, fused = best_of(
        args.repeats, lambda: fuser.fuse(work.document_run, work.passage_run, work.doc_of)
    )
    ref_time, reference = best_of(
        args.repeats,
        lambda: reference_fuse(work.document_dict, work.passage_dict, work.pid2did, args.alpha),
    )
    same, worst = compare(run_ranking(fused), reference)

    lines = [
        "| implementation | seconds | ratio vs reference | rankings identical | max abs diff |",
        "| --- | ---: | ---: | --- | ---: |",
        f"| reference (dict per query) | {ref_time:.3f} | 1.0x | - | - |",
        f"| `dapr.fusion.Convex` | {fast_time:.3f} | {ref_time / fast_time:.1f}x faster "
        f"| {'yes' if same else 'NO'} | {worst:.1e} |",
    ]
    print("\n".join(lines))
    if args.json:
        results_json.write(args.json, {"fusion": lines}, notes=f"best of {args.repeats}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
