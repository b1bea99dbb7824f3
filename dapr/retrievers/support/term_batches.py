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
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from itertools import islice

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
        for batch in (first, second, *_batches(stream)):
            if batch:
                yield _global(batch, tokenize([text for _, text in batch]), vocab)
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        pending: deque[tuple[list, Future]] = deque()
        for batch in (first, second, *_batches(stream)):
            pending.append((batch, pool.submit(tokenize, [text for _, text in batch])))
            if len(pending) >= 2 * workers:
                done, future = pending.popleft()
                yield _global(done, future.result(), vocab)
        while pending:
            done, future = pending.popleft()
            yield _global(done, future.result(), vocab)


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
    remap = np.fromiter(
        (vocab.setdefault(term, len(vocab)) for term in terms), dtype=np.int32, count=len(terms)
    )
    return [item_id for item_id, _ in batch], remap[local], counts
