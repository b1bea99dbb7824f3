"""Benchmark the keyphrases backends, pke (the reference) and native TopicRank, on the same texts.

The documents are the ``wiki-sample`` articles and the XQuAD articles (an article's paragraphs
are its passages), each read as the contextualizer reads it: the passages joined by newlines, cut
to 65,536 characters. Speed is whitespace words of those texts per second. Each backend runs in
fresh processes of its own, after loading its spaCy pipeline and one warm-up text (untimed):
once in one process pinned to one CPU, once in a spawn pool of one process per core over the
documents (longest first). Parity is the mean over documents of |native top 10 & pke top 10| /
|pke top 10|, from the one-process runs. Prints a markdown table with the native / pke ratios.

XQuAD's English file is the one ``dapr data build XQuAD --download`` keeps in
``$DAPR_HOME/raw/XQuAD`` (``--xquad-file`` gives another; ``--xquad 0`` needs none).

    python benchmarks/keyphrases.py [--wiki 103] [--xquad 48] [--xquad-file PATH] [--no-pool]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import results_json  # benchmarks/results_json.py, beside this script
from child import run_child

BACKENDS = ("pke", "native")
LABELS = {"pke": "pke (reference)", "native": "native"}
PAPER_PKE_WORDS_PER_SECOND = 618.8
WARM_UP = "Solar panels convert sunlight into electricity. Many homes install solar panels."


# --- documents --------------------------------------------------------------------------------


def xquad_file(given: Path | None) -> Path:
    """XQuAD's English file: ``given``, else the one ``dapr data build XQuAD --download`` keeps;
    a one-line exit saying how to get it when it is not there."""
    from dapr.datasets.adapter import adapter_of

    if given is not None:
        if not given.is_file():
            raise SystemExit(f"--xquad-file {given}: no such file; give XQuAD's xquad.en.json")
        return given
    adapter = adapter_of("XQuAD")
    if not adapter.fetched():
        raise SystemExit(
            f"XQuAD is not in {adapter.raw}: run `dapr data build XQuAD --download` once, or give "
            "--xquad-file PATH (or --xquad 0)"
        )
    return adapter.raw / adapter.raw_files[0].path


def documents(wiki: int, xquad: int, xquad_path: Path | None = None) -> list[tuple[str, str]]:
    """``(name, text)`` of the first ``wiki`` wiki-sample and ``xquad`` XQuAD articles (from
    ``xquad_path``, else as :func:`xquad_file` finds it)."""
    from dapr.contextualizers.keyphrases import Keyphrases
    from dapr.data import Document, Passage
    from dapr.datasets import load_dataset

    reader = Keyphrases()
    found = []
    if wiki:
        for doc in list(load_dataset("wiki-sample").corpus)[:wiki]:
            found.append((f"wiki: {doc.title}", reader.text(doc)))
    if xquad:
        path = xquad_path or xquad_file(None)
        articles = json.loads(path.read_text(encoding="utf-8"))["data"][:xquad]
        for i, article in enumerate(articles):
            passages = tuple(
                Passage(f"x{i}-{j}", f"x{i}", j, p["context"])
                for j, p in enumerate(article["paragraphs"])
            )
            doc = Document(f"x{i}", article["title"], passages)
            found.append((f"xquad: {doc.title}", reader.text(doc)))
    return found


# --- one backend in its own processes ---------------------------------------------------------

_extract: Any = None


def _load(backend: str) -> Any:
    from dapr.contextualizers.keyphrases import NativeTopicRank, PkeTopicRank

    extractor = PkeTopicRank() if backend == "pke" else NativeTopicRank()
    extractor(WARM_UP, 10)
    return extractor


def _worker_start(backend: str, ready: Any) -> None:
    global _extract
    _extract = _load(backend)
    ready.wait()


def _worker_run(text: str) -> int:
    _extract(text, 10)
    return len(text.split())


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One process (``spec["pool"]`` 0) or a pool of that many over the texts; timings."""
    texts = json.loads(Path(spec["texts"]).read_text(encoding="utf-8"))
    words = sum(len(t.split()) for t in texts)
    if not spec["pool"]:
        start = time.perf_counter()
        extractor = _load(spec["backend"])
        loaded = time.perf_counter() - start
        start = time.perf_counter()
        phrases = [extractor(text, 10) for text in texts]
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "load_seconds": loaded, "words": words, "phrases": phrases}
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(spec["pool"] + 1)
    longest_first = sorted(texts, key=len, reverse=True)
    with context.Pool(spec["pool"], _worker_start, (spec["backend"], ready)) as pool:
        ready.wait()  # every worker has loaded its pipeline and warmed up
        start = time.perf_counter()
        counted = sum(pool.imap_unordered(_worker_run, longest_first, chunksize=1))
        seconds = time.perf_counter() - start
    return {"seconds": seconds, "words": counted}


# --- report -----------------------------------------------------------------------------------


def parity(native: list[list[str]], pke: list[list[str]]) -> tuple[float, int]:
    """Mean top-n overlap of native with pke, and how many lists are identical."""
    overlaps = [len(set(a) & set(b)) / max(1, len(b)) for a, b in zip(native, pke)]
    return sum(overlaps) / max(1, len(overlaps)), sum(a == b for a, b in zip(native, pke))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wiki", type=int, default=10_000, help="wiki-sample articles (all)")
    parser.add_argument("--xquad", type=int, default=10_000, help="XQuAD articles (all)")
    parser.add_argument("--xquad-file", type=Path, help="xquad.en.json (default: fetched)")
    parser.add_argument("--no-pool", action="store_true", help="skip the all-cores runs")
    parser.add_argument("--json", help="also write the table as a results file (docs/results/)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    xquad_path = xquad_file(args.xquad_file) if args.xquad else None

    started = time.perf_counter()
    cores = len(os.sched_getaffinity(0))
    one_cpu = {min(os.sched_getaffinity(0))}
    docs = documents(args.wiki, args.xquad, xquad_path)
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="dapr-keyphrases-bench-") as folder:
        texts = Path(folder) / "texts.json"
        texts.write_text(json.dumps([text for _, text in docs]), encoding="utf-8")
        for backend in BACKENDS:
            spec = {"backend": backend, "texts": str(texts), "pool": 0}
            results[backend] = {"one": run_child(__file__, spec, one_cpu)}
            if not args.no_pool:
                results[backend]["all"] = run_child(__file__, dict(spec, pool=cores))
            for kind, r in results[backend].items():
                shown = {m: v for m, v in r.items() if m != "phrases"}
                print(f"  {backend} {kind}: {shown}", file=sys.stderr)

    words = results["pke"]["one"]["words"]
    rate = {b: {k: r["words"] / r["seconds"] for k, r in results[b].items()} for b in BACKENDS}
    mean, identical = parity(results["native"]["one"]["phrases"], results["pke"]["one"]["phrases"])
    wiki = sum(name.startswith("wiki") for name, _ in docs)
    pool = f"words/s, {cores} processes"
    lines = [
        f"{len(docs)} documents ({wiki} wiki-sample, {len(docs) - wiki} XQuAD), {words:,} words; "
        f"{cores} cores; words/s in one process pinned to one CPU and in a pool of {cores} "
        f"(the paper measured {PAPER_PKE_WORDS_PER_SECOND} words/s per CPU process for pke)\n",
        f"| backend | words/s, 1 process | {pool} | pipeline load s |",
        "| --- | ---: | ---: | ---: |",
    ]
    for backend in BACKENDS:
        r = rate[backend]
        every = f"{r['all']:,.0f}" if "all" in r else "-"
        loaded = results[backend]["one"]["load_seconds"]
        lines.append(f"| {LABELS[backend]} | {r['one']:,.0f} | {every} | {loaded:.1f} |")
    ratio = {k: rate["native"][k] / rate["pke"][k] for k in rate["native"]}
    every = f"{ratio['all']:.1f}x" if "all" in ratio else "-"
    lines.append(f"| **native / pke** | **{ratio['one']:.1f}x** | {every} | |")
    lines.append(
        f"\nparity: mean top-10 overlap of native with pke {mean:.4f} over {len(docs)} documents; "
        f"identical top-10 lists {identical}/{len(docs)}"
    )
    print("\n".join(lines))
    print(f"\n(total {time.perf_counter() - started:.0f}s)")
    if args.json:
        results_json.write(
            args.json, {"keyphrases": lines[1:-1]}, notes=f"{lines[0].strip()} {lines[-1].strip()}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
