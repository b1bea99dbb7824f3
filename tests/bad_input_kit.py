"""The bad-input catalogue's kit: a small good dataset, a base experiment, the case registry.

Cases live in ``tests/test_bad_inputs.py`` and in ``tests/hostile_*.py`` (the hostile files and
environments: names that become paths, settings, numbers, devices, readers, training checks);
each registers itself with :func:`case`, and ``test_bad_inputs.py`` runs them all.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from dapr.data import Corpus, Dataset, Document, Passage, Split

DOCUMENTS = {  # doc id -> (title, passages)
    "d1": ("Alpha Castle", ["The castle stands on a hill.", "The king built it in 1150."]),
    "d2": ("Bravo Lake", ["The lake is deep and cold.", "Trout live in the lake.", "A road."]),
    "d3": ("Charlie Mine", ["The mine produced silver until 1900.", "Its tunnels are a museum."]),
}
SPLITS = {  # split -> query id -> (text, judged passage)
    "test": {
        "q1": ("when was the castle built", "d1-1"),
        "q2": ("which fish live in the lake", "d2-1"),
    },
    "dev": {"q3": ("what did the mine produce", "d3-0"), "q4": ("where is the castle", "d1-0")},
}
# corpus.jsonl lines: 1 d1-0, 2 d1-1, 3 d2-0, 4 d2-1, 5 d2-2, 6 d3-0, 7 d3-1


def good_dataset(path: Path, fmt: str = "jsonl") -> Path:
    """The small good dataset, written in the hub layout."""
    from dapr.datasets import write_dataset

    documents = [
        Document(
            doc,
            title,
            tuple(Passage(f"{doc}-{i}", doc, i, text) for i, text in enumerate(texts)),
        )
        for doc, (title, texts) in DOCUMENTS.items()
    ]
    splits = {
        name: Split(
            {q: text for q, (text, _) in queries.items()},
            {q: {passage: 1} for q, (_, passage) in queries.items()},
        )
        for name, queries in SPLITS.items()
    }
    write_dataset(Dataset(path.name, Corpus(documents), splits), path, format=fmt)
    return path


def edit_jsonl(path: Path, line: int, change: Callable[[dict], dict | str]) -> None:
    """Replace row ``line`` (from 1) of a JSON lines file by ``change(row)`` (a dict or text)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    new = change(json.loads(lines[line - 1]))
    lines[line - 1] = new if isinstance(new, str) else json.dumps(new)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def append_jsonl(path: Path, row: dict) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


BASE = {
    "name": "bad",
    "split": "test",
    "depth": 10,
    "metrics": ["nDCG@10", "R@100", "MRR@10"],
    "retrievers": {"bm25": {"name": "bm25"}, "bm25-doc": {"name": "bm25", "level": "document"}},
    "fusion": {
        "fused": {
            "name": "convex",
            "document": "bm25-doc",
            "passage": "bm25",
            "args": {"alpha": 0.5},
        }
    },
}


@dataclass
class Kit:
    """A case's workspace: ``tmp`` (the working directory), and the good results of a run."""

    tmp: Path
    results: Path

    def dataset(self, fmt: str = "jsonl", name: str = "data") -> Path:
        return good_dataset(self.tmp / name, fmt)

    def experiment(self, dataset: Path | None = None, text: str | None = None, **changes) -> Path:
        """An experiment file: BASE on ``dataset`` (default: a good one) with ``changes``."""
        path = self.tmp / "bad.yaml"
        if text is None:
            raw = {**BASE, "dataset": str(dataset or self.dataset()), **changes}
            text = yaml.safe_dump({k: v for k, v in raw.items() if v is not None})
        path.write_text(text, encoding="utf-8")
        return path

    def run(self, experiment: Path, *extra: str) -> list[str]:
        return ["run", str(experiment), "--out", str(self.tmp / "out"), *extra]

    def copy_results(self, name: str = "results") -> Path:
        return Path(shutil.copytree(self.results, self.tmp / name))


@dataclass
class Bad:
    """What the CLI is given, and what its one line must say: ``names`` (file, key, row)
    and ``fix`` (a key phrase of the remedy); ``env``: environment variables the CLI is run
    with (set by the runner, restored after)."""

    argv: list[str]
    names: tuple[str, ...]
    fix: str
    env: dict[str, str] = field(default_factory=dict)


CASES: dict[str, Callable[[Kit], Bad]] = {}


def case(build: Callable[[Kit], Bad]) -> Callable[[Kit], Bad]:
    CASES[build.__name__] = build
    return build
