"""The cost per passage of giving a dense retriever's passages their document, as the DAPR paper's
Table 6 prices its contextualizers: the same documents indexed by ``dense`` (all-MiniLM-L6-v2)
with passages alone, with the title prepended, between their neighbours, and late-chunked inside
their document (``encoding: late``), in one process, the four taking turns for ``--repeats``
rounds; each keeps its fastest round. Prints milliseconds per passage, tokens the encoder ran per
passage, and the ratio to passages alone; ``--json PATH`` writes it as a results file.

    python benchmarks/late_chunking.py [--dataset wiki-sample] [--documents 40] [--repeats 3]
                                       [--dataset-arg KEY=VALUE ...] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import results_json  # benchmarks/results_json.py, beside this script
from child import fastest_in_turns

MODEL = "sentence-transformers/all-MiniLM-L6-v2"
NEIGHBOURS = {"before": 1, "after": 1, "max_words": 50}
"""experiments/late_chunking.yaml's neighbours."""


def variants(documents: list[Any]) -> dict[str, tuple[dict[str, Any], Any]]:
    """name -> (dense's arguments, what its index call gets for ``documents``)."""
    from dapr.contextualizers.neighbours import Neighbours
    from dapr.contextualizers.title import Title

    def texts(contextualizer: Any) -> list[tuple[str, str]]:
        return [
            (p.id, text)
            for d in documents
            for p, text in zip(d.passages, contextualizer.contextualize(d), strict=True)
        ]

    passages = [(p.id, p.text) for d in documents for p in d.passages]
    whole = [[(p.id, p.text, True) for p in d.passages] for d in documents]
    return {
        "passage only": ({}, passages),
        "+ title": ({}, texts(Title())),
        "+ neighbours": ({}, texts(Neighbours(**NEIGHBOURS))),
        "late chunking": ({"encoding": "late"}, whole),
    }


def tokens(model: Any, items: Any, late: bool) -> int:
    """Tokens the encoder runs over: each text cut to the model's limit, or for late chunking
    each document's passages once (its windows' overlap not counted)."""
    limit = model.max_seq_length

    def count(text: str) -> int:
        return len(model.tokenizer(text, verbose=False)["input_ids"])

    if late:
        return sum(count(text) - 2 for document in items for _, text, _ in document)
    return sum(min(count(text), limit) for _, text in items)


def measure(args: argparse.Namespace) -> tuple[list[str], int]:
    from dapr.datasets import load_dataset
    from dapr.retrievers.dense import Dense

    extra = dict(pair.split("=", 1) for pair in args.dataset_arg)
    dataset = load_dataset(args.dataset, **{k: _value(v) for k, v in extra.items()})
    documents = [d for _, d in zip(range(args.documents), dataset.corpus, strict=False)]
    count = sum(len(d.passages) for d in documents)
    cases = variants(documents)
    with tempfile.TemporaryDirectory() as scratch:
        retrievers = {name: Dense(model=MODEL, **kwargs) for name, (kwargs, _) in cases.items()}
        warm = next(iter(retrievers.values()))
        warm.index(cases["passage only"][1][:8], Path(scratch) / "warm")  # model loaded, untimed

        def indexed(name: str, turn: int) -> dict[str, float]:
            items, store = cases[name][1], Path(scratch) / f"{turn}-{name}"
            started = time.perf_counter()
            if name == "late chunking":
                retrievers[name].index_documents(items, store)
            else:
                retrievers[name].index(items, store)
            seconds = time.perf_counter() - started
            print(f"round {turn + 1}: {name} {seconds:.1f} s", file=sys.stderr)
            return {"seconds": seconds}

        fastest = fastest_in_turns(cases, args.repeats, indexed)
    best = {name: run["seconds"] for name, run in fastest.items()}
    from sentence_transformers import SentenceTransformer

    from dapr.checkpoints import resolve

    model = SentenceTransformer(resolve(MODEL), device="cpu")  # its tokenizer and limit
    base = best["passage only"]
    lines = [
        "| passages given | ms per passage | tokens per passage | cost vs passage only |",
        "|---|---:|---:|---:|",
    ]
    for name, (kwargs, items) in cases.items():
        per = tokens(model, items, bool(kwargs)) / count
        lines.append(
            f"| {name} | {1000 * best[name] / count:.1f} | {per:.0f} | {best[name] / base:.2f}x |"
        )
    return lines, count


def _value(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="wiki-sample")
    parser.add_argument(
        "--dataset-arg", action="append", default=[], metavar="KEY=VALUE", help="e.g. max_words=80"
    )
    parser.add_argument("--documents", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the table as a results file")
    args = parser.parse_args(argv)
    if args.documents < 1 or args.repeats < 1:
        raise SystemExit("--documents and --repeats must be positive")
    lines, count = measure(args)
    notes = (
        f"The first {args.documents} documents of {args.dataset} ({count:,} passages), "
        f"{MODEL} on {os.cpu_count()} CPU cores; each variant's fastest of {args.repeats} rounds."
    )
    print(notes + "\n\n" + "\n".join(lines))
    if args.json:
        results_json.write(args.json, {"cost": lines}, notes, passages=count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
