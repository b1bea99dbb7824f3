"""Time and peak memory of the MSMARCO build: streaming (ours) against a reference-style build.

A sample of MS MARCO's raw files, unpacked, in the folder ``--source`` (``msmarco-docs.tsv``,
``train_v2.1.json`` and ``dev_v2.1.json``; the recorded run's held 9 documents, 6 train and 3 dev
QnA rows) is replicated ``--scale`` times into a temporary directory: every replica gets new
document ids, URLs and query ids, and its document bodies get a few random character edits, so
some passages match exactly, some within 5 edits and some not at all. Two builds of the same
files then run, each in its own process so that its peak RSS (``resource.getrusage``) is its own,
each writing the dataset as JSON lines:

- ``streaming``: ``dapr.data_loaders.msmarco`` (ijson, an SQLite store, a gzipped corpus spill);
- ``in-memory``: the reference builder's way: ``json.load`` of both QnA files, every document in
  a dict, lists of records, the same locating function and rules.

Both must give the same dataset (fingerprint). A last table compares the locating function with
the reference's matcher (``str.find``, else ``regex`` over the whole document) on a few pairs.

    python benchmarks/msmarco_build.py --source SAMPLE [--scale 4000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_FILES = ("msmarco-docs.tsv", "train_v2.1.json", "dev_v2.1.json")
EDITS_PER_DOCUMENT = 12
COLUMNS = ("answers", "passages", "query", "query_id", "query_type", "wellFormedAnswers")


# --------------------------------------------------------------------------- synthetic data


def _perturb(text: str, rng: random.Random, edits: int) -> str:
    chars = list(text)
    for _ in range(edits):
        i = rng.randrange(len(chars) + 1)
        op = rng.randrange(3)
        if op == 0 and i < len(chars):
            chars[i] = rng.choice("abcdefghijklmnopqrstuvwxyz ")
        elif op == 1:
            chars.insert(i, rng.choice("abcdefghijklmnopqrstuvwxyz "))
        elif i < len(chars):
            del chars[i]
    return "".join(chars)


def _url(url: str, replica: int) -> str:
    return f"{url}{'&' if '?' in url else '?'}replica={replica}"


def check_sample(source: Path | None) -> Path:
    """The folder of the raw sample, or a one-line exit saying what it must hold."""
    missing = [n for n in SAMPLE_FILES if source is None or not (source / n).is_file()]
    if source is None or missing:
        where = "is required" if source is None else f"{source}: no {', '.join(missing)}"
        raise SystemExit(
            f"--source {where}; give a folder holding a sample of MS MARCO's raw files, unpacked "
            f"({', '.join(SAMPLE_FILES)}); `dapr data build MSMARCO --download` fetches the full "
            "ones (gzipped) into $DAPR_HOME/raw/MSMARCO"
        )
    return source


def write_scaled(sample: Path, target: Path, scale: int) -> dict[str, int]:
    """The raw files in ``sample`` replicated ``scale`` times into ``target``; returns sizes."""
    target.mkdir(parents=True, exist_ok=True)
    lines = (sample / "msmarco-docs.tsv").read_text(encoding="utf-8").splitlines()
    docs = [line.split("\t") for line in lines]
    with (target / "msmarco-docs.tsv").open("w", encoding="utf-8") as out:
        for replica in range(scale):
            rng = random.Random(replica)
            for doc_id, url, title, body in docs:
                new_id = f"D{(replica + 1) * 10_000_000 + int(doc_id[1:])}"
                new_body = _perturb(body, rng, EDITS_PER_DOCUMENT)
                out.write(f"{new_id}\t{_url(url, replica)}\t{title}\t{new_body}\n")
    rows = 0
    for name in ("train_v2.1.json", "dev_v2.1.json"):
        qna = json.loads((sample / name).read_text(encoding="utf-8"))
        rows += scale * len(qna["query"])
        with (target / name).open("w", encoding="utf-8") as out:
            out.write("{")
            for c, column in enumerate(COLUMNS):
                out.write(("," if c else "") + json.dumps(column) + ":{")
                for n, (key, value) in enumerate(_column(qna, column, scale)):
                    out.write(("," if n else "") + json.dumps(key) + ":" + json.dumps(value))
                out.write("}")
            out.write("}")
    return {"documents": scale * len(docs), "qna_rows": rows}


def _column(qna: dict, column: str, scale: int) -> Iterator[tuple[str, object]]:
    for replica in range(scale):
        for key, value in qna[column].items():
            if column == "query_id":
                value = (replica + 1) * 2_000_000 + value
            elif column == "passages":
                value = [{**p, "url": _url(p["url"], replica)} for p in value]
            yield f"{replica}_{key}", value


# --------------------------------------------------------------------------- the two builds


def build_streaming(source: Path):
    from dapr.data_loaders.msmarco import adapter

    return adapter.build(source, split="qna")


def build_in_memory(source: Path):
    """The reference's way: everything loaded, then matched and assembled in lists and dicts."""
    from dapr.data_loaders import msmarco as m
    from dapr.data_loaders import msmarco_spans as ms
    from dapr.data_loaders.msmarco_store import SEED, _sample

    from dapr.data import Corpus, Dataset, Document, Passage, Split

    docs: dict[str, tuple[str, str, str]] = {}
    for line in (source / m.DOCS).read_text(encoding="utf-8").splitlines():
        doc_id, url, title, body = line.split("\t")
        if body.strip():
            docs.setdefault(url, (doc_id, title, body.strip()))
    records: dict[int, list[tuple]] = {}
    for name, file in ((m.TRAIN, m.TRAIN_FILE), (m.DEV, m.DEV_FILE)):
        with (source / name).open(encoding="utf-8") as handle:
            qna = json.load(handle)
        found, seen = [], set()
        for row, passages in qna["passages"].items():
            qid, query = str(qna["query_id"][row]), qna["query"][row]
            for p in passages:
                if p["url"] not in docs:
                    continue
                span = ms.locate(p["passage_text"], docs[p["url"]][2])
                if span and span[1] > span[0] and (p["url"], span) not in seen:
                    seen.add((p["url"], span))
                    found.append((qid, query, p["is_selected"], p["url"], span))
        records[file] = found
        del qna
    test = [r for r in records[m.DEV_FILE] if r[2]]
    pool = [r for r in records[m.TRAIN_FILE] if r[2]]
    dev_qids = {r[0] for r in _sample(pool, len(test), SEED)}
    by_url: dict[str, list[tuple]] = {}
    for r in records[m.TRAIN_FILE]:
        split = ms.DEV_SPLIT if r[2] and r[0] in dev_qids else ms.TRAIN_SPLIT
        by_url.setdefault(r[3], []).append((*r[4], split, r))
    for r in test:
        by_url.setdefault(r[3], []).append((*r[4], ms.TEST_SPLIT, r))
    splits = {name: Split({}, {}) for name in ms.SPLIT_NAMES}
    documents = []
    for url, (doc_id, title, body) in docs.items():
        if url not in by_url:
            continue
        spans = by_url[url]
        losers = set(
            ms.overlap_losers([(s, e, split, i) for i, (s, e, split, _) in enumerate(spans)])
        )
        kept = sorted(x for i, x in enumerate(spans) if i not in losers)
        pieces = ms.cut(body, [(s, e) for s, e, *_ in kept])
        for position, (_, _, index) in enumerate(pieces):
            if index >= 0 and kept[index][3][2]:
                _, _, split, (qid, query, *_) = kept[index]
                target = splits[ms.SPLIT_NAMES[split]]
                target.queries.setdefault(qid, query)
                target.qrels.setdefault(qid, {})[f"{doc_id}-{position}"] = 1
        passages = tuple(
            Passage(f"{doc_id}-{i}", doc_id, i, text, candidate)
            for i, (text, candidate, _) in enumerate(pieces)
        )
        documents.append(Document(doc_id, title, passages))
    return Dataset(m.NAME, Corpus(documents), splits)


def child(approach: str, source: Path, out: Path) -> None:
    """Build and write one way; print time, peak RSS and what was built as JSON."""
    from dapr.datasets import write_dataset

    started = time.perf_counter()
    build = build_streaming if approach == "streaming" else build_in_memory
    dataset = build(source)
    write_dataset(dataset, out, "jsonl")
    seconds = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    queries = {name: len(split.queries) for name, split in dataset.splits.items()}
    print(
        json.dumps(
            {
                "seconds": seconds,
                "peak_mb": peak_kb / 1024,
                "fingerprint": dataset.fingerprint,
                "queries": queries,
            }
        )
    )


def run_child(approach: str, source: Path, out: Path) -> dict:
    command = [sys.executable, __file__, "--child", approach, "--raw", str(source)]
    done = subprocess.run(
        [*command, "--out", str(out)], capture_output=True, text=True, check=False, cwd=ROOT
    )
    if done.returncode != 0:
        raise SystemExit(f"{approach} build failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- matcher


def compare_matchers(source: Path, pairs: int) -> tuple[float, float, int]:
    """Seconds per pair of the reference matcher and of ``locate``; how many spans differ."""
    import regex
    from dapr.data_loaders.msmarco_spans import locate

    docs = {}
    for line in (source / "msmarco-docs.tsv").read_text(encoding="utf-8").splitlines()[:200]:
        _, url, _, body = line.split("\t")
        docs[url] = body.strip()
    qna = json.loads((source / "train_v2.1.json").read_text(encoding="utf-8"))
    work = [
        (p["passage_text"], docs[p["url"]])
        for passages in qna["passages"].values()
        for p in passages
        if p["url"] in docs
    ][:pairs]

    def reference(passage: str, body: str) -> tuple[int, int] | None:
        found = body.find(passage)
        if found != -1:
            return found, found + len(passage)
        match = regex.compile(f"({regex.escape(passage)}){{e<=5}}").search(body)
        return match.span() if match else None

    started = time.perf_counter()
    theirs = [reference(p, d) for p, d in work]
    middle = time.perf_counter()
    ours = [locate(p, d) for p, d in work]
    ended = time.perf_counter()
    differ = sum(a != b for a, b in zip(theirs, ours))
    return (middle - started) / len(work), (ended - middle) / len(work), differ


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--source",
        type=Path,
        help=f"a folder of MS MARCO raw files to scale: {', '.join(SAMPLE_FILES)}",
    )
    parser.add_argument("--scale", type=int, default=4000, help="replicas of the raw sample")
    parser.add_argument(
        "--keep", type=Path, help="write the synthetic raw files here and keep them"
    )
    parser.add_argument("--pairs", type=int, default=150, help="pairs for the matcher table")
    parser.add_argument("--child", choices=("streaming", "in-memory"), help=argparse.SUPPRESS)
    parser.add_argument("--raw", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.raw, args.out)
        return
    sample = check_sample(args.source)
    with tempfile.TemporaryDirectory(prefix="msmarco-bench-") as tmp:
        source = args.keep or Path(tmp) / "raw"
        started = time.perf_counter()
        sizes = write_scaled(sample, source, args.scale)
        raw_mb = sum(f.stat().st_size for f in source.iterdir()) / 2**20
        print(
            f"synthetic raw files: {sizes['documents']:,} documents, {sizes['qna_rows']:,} QnA "
            f"rows, {raw_mb:,.0f} MB ({time.perf_counter() - started:.0f} s to write)"
        )
        results = {a: run_child(a, source, Path(tmp) / a) for a in ("streaming", "in-memory")}
        base = results["in-memory"]
        print(f"\n{'approach':<11} {'time (s)':>9} {'peak RSS (MB)':>14} {'time ratio':>11} "
              f"{'RSS ratio':>10}")  # fmt: skip
        for approach, r in results.items():
            print(
                f"{approach:<11} {r['seconds']:>9.1f} {r['peak_mb']:>14.0f} "
                f"{r['seconds'] / base['seconds']:>11.2f} {r['peak_mb'] / base['peak_mb']:>10.2f}"
            )
        same = results["streaming"]["fingerprint"] == base["fingerprint"]
        print(f"queries {results['streaming']['queries']}; same dataset: {'yes' if same else 'NO'}")
        theirs, ours, differ = compare_matchers(source, args.pairs)
        print(f"\n{'matcher':<34} {'ms/pair':>8} {'ratio':>7}")
        print(f"{'reference (regex on whole doc)':<34} {theirs * 1e3:>8.2f} {1:>7.3f}")
        print(f"{'locate (pieces + rapidfuzz)':<34} {ours * 1e3:>8.2f} {ours / theirs:>7.3f}")
        print(f"spans that differ: {differ} of {args.pairs}")
        if not same:
            raise SystemExit("the two builds differ")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
