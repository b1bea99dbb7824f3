"""Components that take their time, so that a test can kill a run in the middle of a step.

``python tests/slow_components.py ARGS`` runs ``dapr ARGS`` with them registered."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from pathlib import Path

from dapr import registry
from dapr.contextualizers.title import Title
from dapr.data import Document
from dapr.retrievers.bm25 import BM25
from dapr.retrievers.dense import Dense

PAUSE = 0.05


class SlowTitle(Title):
    """The title contextualizer, pausing on every document."""

    parallel = False

    def contextualize(self, document: Document) -> list[str]:
        time.sleep(PAUSE)
        return super().contextualize(document)


class SlowBM25(BM25):
    """BM25 whose indexing pauses on every 20th item."""

    def index(self, items: Iterable[tuple[str, str]], store: Path) -> None:
        def slowly():
            for n, item in enumerate(items):
                if n % 20 == 0:
                    time.sleep(PAUSE)
                yield item

        super().index(slowly(), store)


class SlowDense(Dense):
    """The dense retriever storing shards of 40 items, pausing before each."""

    def index(self, items: Iterable[tuple[str, str]], store: Path) -> None:
        self.shard_size = 40

        def slowly():
            for n, item in enumerate(items):
                if n % 40 == 0:
                    time.sleep(PAUSE * 4)
                yield item

        super().index(slowly(), store)


def register() -> None:
    registry.contextualizers.add("slow-title", SlowTitle)
    registry.retrievers.add("slow-bm25", SlowBM25)
    registry.retrievers.add("slow-dense", SlowDense)


if __name__ == "__main__":
    from dapr.cli import main

    register()
    raise SystemExit(main(sys.argv[1:]))
