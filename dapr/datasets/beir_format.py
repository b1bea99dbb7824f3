"""A dataset written in the BEIR layout (https://github.com/beir-cellar/beir), which BEIR,
PyTerrier, Pyserini and most retrieval toolkits read: ``corpus.jsonl`` (one entry per passage),
``queries.jsonl`` and ``qrels/<split>.tsv``.

A passage's entry keeps its document in ``metadata`` (``doc_id``, ``position``, ``doc_title``), so
that the ``beir`` adapter with ``group_by=doc_id`` rebuilds the documents. ``title`` is the
document's title, which BEIR's retrievers prepend to the text; a corpus whose texts already carry
their context (``dapr data export --contextualized``) is written with ``title`` empty instead,
so that no tool adds the title a second time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from dapr.data import Dataset
from dapr.errors import DataError
from dapr.io.files import atomic_directory, write_bytes_atomic


def write_beir(dataset: Dataset, out: Path, titles: bool = True) -> None:
    """Write ``dataset`` to ``out`` in the BEIR layout (the directory appears only complete;
    other files of an existing ``out`` are kept). ``titles=False`` leaves ``title`` empty."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise DataError(f"{out}: exists and is not a directory; remove it or choose another path")
    with atomic_directory(out, owned=_beir_file) as root:
        write_bytes_atomic(root / "corpus.jsonl", _corpus_lines(dataset, titles))
        queries: dict[str, str] = {}
        for split in dataset.splits.values():
            queries.update(split.queries)
        write_bytes_atomic(
            root / "queries.jsonl",
            (_line({"_id": qid, "text": text}) for qid, text in queries.items()),
        )
        (root / "qrels").mkdir()
        for name, split in dataset.splits.items():
            rows = (
                f"{qid}\t{item}\t{grade}\n".encode()
                for qid, judged in split.qrels.items()
                for item, grade in judged.items()
            )
            write_bytes_atomic(
                root / "qrels" / f"{name}.tsv", [b"query-id\tcorpus-id\tscore\n", *rows]
            )


def _corpus_lines(dataset: Dataset, titles: bool) -> Iterator[bytes]:
    for document in dataset.corpus:
        for passage in document.passages:
            metadata = {"doc_id": document.id, "position": passage.position}
            yield _line(
                {
                    "_id": passage.id,
                    "title": document.title if titles else "",
                    "text": passage.text,
                    "metadata": metadata | {"doc_title": document.title},
                }
            )


def _line(row: dict) -> bytes:
    return (json.dumps(row, ensure_ascii=False) + "\n").encode()


def _beir_file(path: PurePosixPath) -> bool:
    """Whether ``path`` (relative to the directory) is part of the BEIR layout."""
    if len(path.parts) == 1:
        return path.name in ("corpus.jsonl", "queries.jsonl", "qrels")
    return len(path.parts) == 2 and path.parts[0] == "qrels" and path.suffix == ".tsv"
