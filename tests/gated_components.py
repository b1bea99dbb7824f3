"""A retriever that stops halfway through indexing until a gate opens, so that a test can lose
the node it runs on in the middle of a job.

``GatedBM25`` writes half of its items to ``items.tsv`` in its store, leaves a marker
``waiting-<pid>`` in the folder ``$DAPR_TEST_GATE`` and waits there until that folder holds
``open``; then it writes the rest and indexes as BM25 does. With the gate open it never waits, so
a run with it open from the start is the sequential reference."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

from dapr.retrievers.bm25 import BM25


class GatedBM25(BM25):
    """BM25 waiting at ``$DAPR_TEST_GATE`` halfway through indexing."""

    def index(self, items: Iterable[tuple[str, str]], store: Path) -> None:
        items = list(items)
        gate = Path(os.environ["DAPR_TEST_GATE"])
        half = len(items) // 2
        with (store / "items.tsv").open("w") as out:
            out.writelines(f"{key}\t{len(text)}\n" for key, text in items[:half])
            out.flush()
            if not (gate / "open").exists():
                (gate / f"waiting-{os.getpid()}").touch()
                while not (gate / "open").exists():
                    time.sleep(0.05)
            out.writelines(f"{key}\t{len(text)}\n" for key, text in items[half:])
        super().index(items, store)
