"""Texts to postings, a batch at a time, in worker processes when there are cores to spare and
enough text to pay for starting them (:data:`POOL_CHARS`).

A worker keeps its own vocabulary for the whole stream (terms in order of first sight among the
batches it was given) and turns each batch into postings over its own term ids, sending back
only the terms it had not seen before. The parent maps each worker's ids onto the global
vocabulary in batch order: a term new to the whole stream is new to its worker too and is listed
in order of first sight in its batch, so term ids are given in order of first sight over the
whole stream, exactly as one process gives them, and the index does not depend on the number of
workers. At most two batches per worker are in flight, so a corpus streams through in bounded
memory.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import uuid
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from itertools import chain
from typing import Any, NamedTuple

import numpy as np

BATCH = 5_000
"""Texts per batch at most."""
BATCH_CHARS = 1_000_000
"""Characters per batch at most (a batch holds at least one text): long documents are spread
over the workers too, and 1M-character batches were the fastest of 1M, 2M and 4M on 16 cores."""
POOL_CHARS = 4_000_000
"""Characters below which a corpus is tokenized in this process (0.7 s of work at most): forking
workers, each analysing its words anew, saves too little below. Measured with cold analyzers on
synthetic passages (``benchmarks/bm25.py --start-up-only``): on 16 idle cores the workers took
1.13x the time of one process on 1M characters, 0.76x on 2M, 0.57x on 4M, 0.41x on 8M; on 2
cores 0.8x from 2M when idle, 1.3-1.6x up to 8M when other work kept the cores busy."""

Tokenize = Callable[[list[str], dict[str, Any]], tuple[list[str], np.ndarray, np.ndarray]]
"""``(texts, memo)`` -> (the terms first seen in this batch, in that order; every text's term
ids one text after another; how many terms each text has). Term ids are this process's, kept in
``memo`` (empty at the start of a stream, then handed back with each batch of the stream)."""


class Postings(NamedTuple):
    """The postings of consecutive documents, by term then document, stored compactly:
    ``terms`` (each once) has ``counts[i]`` postings each; per posting, its document's position
    less ``first`` and its term frequency, each in the narrowest unsigned integer type that holds
    them (3.6 bytes a posting on 2.7M passages, against 12 as three int32 columns)."""

    terms: np.ndarray
    counts: np.ndarray
    docs: np.ndarray
    tf: np.ndarray
    first: int


def _narrow(values: np.ndarray, largest: int) -> np.ndarray:
    """Non-negative ``values`` (none above ``largest``) as uint8, uint16 or uint32."""
    for kind in (np.uint8, np.uint16, np.uint32):
        if largest <= np.iinfo(kind).max:
            return values.astype(kind)
    raise OverflowError(f"{largest} does not fit in 32 bits")


def postings(tokens: np.ndarray, lengths: np.ndarray, first: int) -> Postings:
    """The postings of consecutive documents: ``tokens`` holds their term ids (below 2**32) one
    document after another, ``lengths`` how many each has, ``first`` the position of the first
    one."""
    count = len(lengths)
    doc = np.repeat(np.arange(count, dtype=np.int64), lengths)
    order = _by_term(tokens)  # stable: documents stay ascending within a term
    term, doc = tokens[order], doc[order]
    del order
    starts = np.flatnonzero(
        np.concatenate((term[:1] >= 0, (term[1:] != term[:-1]) | (doc[1:] != doc[:-1])))
    )
    tf = np.diff(starts, append=len(term))
    term, doc = term[starts], doc[starts]
    bounds = np.flatnonzero(np.concatenate((term[:1] >= 0, term[1:] != term[:-1])))
    return Postings(
        terms=term[bounds].astype(np.int32),
        counts=np.diff(bounds, append=len(term)),
        docs=_narrow(doc, count - 1),
        tf=_narrow(tf, int(tf.max(initial=0))),
        first=first,
    )


def _by_term(tokens: np.ndarray) -> np.ndarray:
    """The stable order of ``tokens`` by value: two passes of numpy's radix sort on 16-bit
    halves (three times faster than sorting 64-bit keys)."""
    values = tokens.astype(np.uint32, copy=False)
    order = np.argsort((values & 0xFFFF).astype(np.uint16), kind="stable")
    return order[np.argsort((values[order] >> 16).astype(np.uint16), kind="stable")]


def stream_postings(
    items: Iterable[tuple[str, str]], tokenize: Tokenize, vocab: dict[str, int], workers: int
) -> Iterator[tuple[list[str], Postings, np.ndarray]]:
    """Per batch of ``items`` (id, text), in order: the ids, their postings over the term ids of
    ``vocab`` (which grows), and each text's number of terms. ``tokenize`` must be a
    module-level function (it is sent to the workers by name). Worker processes start only for
    a corpus of at least :data:`POOL_CHARS` characters, no more of them than it has batches."""
    batches = _batches(iter(items))
    ahead: list[list[tuple[str, str]]] = []
    if workers > 1:  # read ahead: enough text for the workers, and a batch for each?
        size = 0
        for batch in batches:
            ahead.append(batch)
            size += sum(len(text) for _, text in batch)
            if size >= POOL_CHARS and len(ahead) >= workers:
                break
        workers = min(workers, len(ahead)) if size >= POOL_CHARS else 1
    session = uuid.uuid4().hex
    mapping = _Mapping(vocab)
    if workers <= 1:
        try:
            for batch in chain(ahead, batches):
                texts = [text for _, text in batch]
                yield mapping.apply(batch, _tokenized(tokenize, session, texts))
        finally:
            _MEMOS.pop(session, None)
        return
    with ProcessPoolExecutor(max_workers=workers, mp_context=_context()) as pool:
        pending: deque[tuple[list, Future]] = deque()
        for batch in chain(ahead, batches):
            texts = [text for _, text in batch]
            pending.append((batch, pool.submit(_tokenized, tokenize, session, texts)))
            if len(pending) >= 2 * workers:
                done, future = pending.popleft()
                yield mapping.apply(done, future.result())
        while pending:
            done, future = pending.popleft()
            yield mapping.apply(done, future.result())


_MEMOS: dict[str, dict[str, Any]] = {}
"""This process's tokenizer memo per stream (a worker serves one stream)."""


def _tokenized(tokenize: Tokenize, session: str, texts: list[str]) -> tuple:
    """A batch tokenized in this process: (the process, its new terms, the batch's postings
    over its term ids, each text's number of terms)."""
    memo = _MEMOS.setdefault(session, {})
    new, tokens, counts = tokenize(texts, memo)
    return os.getpid(), new, postings(tokens, counts, 0), counts


class _Mapping:
    """Each process's term ids onto the ids of ``vocab``, extended as batches come in order."""

    def __init__(self, vocab: dict[str, int]):
        self.vocab = vocab
        self.ids: dict[int, array] = {}  # per process: its term id -> global id
        self.documents = 0

    def apply(
        self, batch: list[tuple[str, str]], tokenized: tuple
    ) -> tuple[list[str], Postings, np.ndarray]:
        process, new, local, counts = tokenized
        ids = self.ids.setdefault(process, array("i"))
        vocab = self.vocab
        ids.extend([vocab.setdefault(term, len(vocab)) for term in new])
        terms = np.frombuffer(ids, dtype=np.int32)[local.terms]
        found = local._replace(terms=terms, first=self.documents)
        self.documents += len(counts)
        return [item_id for item_id, _ in batch], found, counts


def _context() -> multiprocessing.context.BaseContext:
    """Forked workers on Linux: they start at once and, unlike spawned ones, do not import the
    caller's script again (a script without an ``if __name__ == "__main__"`` guard would run
    twice); they run only the tokenizer, which shares no lock with the parent's threads."""
    return multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")


def _batches(stream: Iterator[tuple[str, str]]) -> Iterator[list[tuple[str, str]]]:
    """``stream`` in batches of at most :data:`BATCH` texts and :data:`BATCH_CHARS` characters
    (or one longer text)."""
    batch: list[tuple[str, str]] = []
    size = 0
    for item in stream:
        batch.append(item)
        size += len(item[1])
        if len(batch) >= BATCH or size >= BATCH_CHARS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch
