"""Texts to term ids, a batch at a time, tokenized in worker processes when there are cores to
spare and more than one batch of texts.

A worker turns a batch into its own vocabulary (terms in order of first sight) and local term
ids; the parent maps each batch's vocabulary onto the global one in batch order, so term ids are
given in order of first sight over the whole stream, exactly as one process gives them: the
index does not depend on the number of workers. At most two batches per worker are in flight,
so a corpus streams through in bounded memory.
"""

from __future__ import annotations

import multiprocessing
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from itertools import chain, islice, repeat

import numpy as np

BATCH = 5_000
"""Texts per batch: a corpus of one batch is tokenized in this process (no workers started)."""

Tokenize = Callable[[list[str]], tuple[list[str], np.ndarray, np.ndarray]]
"""A batch of texts -> (its vocabulary, its term ids into that vocabulary one text after
another, how many terms each text has)."""


def term_batches(
    items: Iterable[tuple[str, str]], tokenize: Tokenize, vocab: dict[str, int], workers: int
) -> Iterator[tuple[list[str], np.ndarray, np.ndarray]]:
    """Per batch of ``items`` (id, text), in order: the ids, the term ids (into ``vocab``, which
    grows) one text after another, and each text's number of terms. ``tokenize`` must be a
    module-level function (it is sent to the workers by name)."""
    stream = iter(items)
    first = list(islice(stream, BATCH))
    second = list(islice(stream, BATCH)) if first else []
    if workers <= 1 or not second:
        for batch in chain((first, second), _batches(stream)):
            if batch:
                yield _global(batch, tokenize([text for _, text in batch]), vocab)
        return
    with ProcessPoolExecutor(max_workers=workers, mp_context=_context()) as pool:
        pending: deque[tuple[list, Future]] = deque()
        for batch in chain((first, second), _batches(stream)):
            pending.append((batch, pool.submit(tokenize, [text for _, text in batch])))
            if len(pending) >= 2 * workers:
                done, future = pending.popleft()
                yield _global(done, future.result(), vocab)
        while pending:
            done, future = pending.popleft()
            yield _global(done, future.result(), vocab)


def _context() -> multiprocessing.context.BaseContext:
    """Forked workers on Linux: they start at once and, unlike spawned ones, do not import the
    caller's script again (a script without an ``if __name__ == "__main__"`` guard would run
    twice); they run only the tokenizer, which shares no lock with the parent's threads."""
    return multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")


def _batches(stream: Iterator[tuple[str, str]]) -> Iterator[list[tuple[str, str]]]:
    while batch := list(islice(stream, BATCH)):
        yield batch


def _global(
    batch: list[tuple[str, str]],
    tokenized: tuple[list[str], np.ndarray, np.ndarray],
    vocab: dict[str, int],
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """A tokenized batch with its local term ids replaced by ids of ``vocab``."""
    terms, local, counts = tokenized
    remap = np.fromiter(map(vocab.get, terms, repeat(-1)), dtype=np.int64, count=len(terms))
    new = np.flatnonzero(remap < 0)  # terms first seen here, numbered in the batch's order
    first = len(vocab)
    vocab.update(zip([terms[i] for i in new.tolist()], range(first, first + len(new))))
    remap[new] = np.arange(first, first + len(new))
    return [item_id for item_id, _ in batch], remap.astype(np.int32)[local], counts
