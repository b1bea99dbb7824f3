"""Where an MS MARCO QnA passage lies in its source document: fuzzy location (up to
``MAX_EDITS`` edits), which of overlapping located passages give way, and the document cut into
passages at the located spans."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MAX_EDITS = 5
SPLIT_NAMES = ("train", "dev", "test")  # codes 0, 1, 2: a higher code wins an overlap
TRAIN_SPLIT, DEV_SPLIT, TEST_SPLIT = 0, 1, 2
SHORT_PASSAGE = 60
"""Shorter passages are searched with ``regex`` over the whole document (pieces too short)."""


# --------------------------------------------------------------------------- locating


def locate(passage: str, document: str, max_edits: int = MAX_EDITS) -> tuple[int, int] | None:
    """The span of ``passage`` in ``document``: the first exact occurrence, else the span that
    ``regex.search("(passage){e<=max_edits}", document)`` returns (the leftmost start within
    ``max_edits`` edits), else None."""
    found = document.find(passage)
    if found != -1:
        return found, found + len(passage)
    if max_edits <= 0:
        return None
    if len(passage) < max(SHORT_PASSAGE, 4 * (max_edits + 1)):
        match = _fuzzy_pattern(passage, max_edits).search(document)
        return match.span() if match is not None else None
    for lo, hi in _candidate_starts(passage, document, max_edits):
        start, ends = _leftmost_start(passage, document, lo, hi, max_edits)
        if start is None:
            continue
        if start > 0:
            return _span_at(passage, document, start, ends, max_edits)
        # regex never opens a match at the search's first position with an inserted
        # character, so at the document's start its own search decides
        span = _regex_span(passage, document, 0, hi, max_edits)
        if span is not None:
            return span
    return None


def _fuzzy_pattern(passage: str, max_edits: int) -> Any:
    import regex

    return regex.compile(f"({regex.escape(passage)}){{e<={max_edits}}}")


def _candidate_starts(passage: str, document: str, k: int) -> list[tuple[int, int]]:
    """Merged ranges of starts a match within ``k`` edits can have: such a match holds one of
    ``k + 1`` disjoint pieces of the passage verbatim, which pins its start to within ``k``."""
    m, pieces = len(passage), k + 1
    ranges = []
    for i in range(pieces):
        offset, end = m * i // pieces, m * (i + 1) // pieces
        piece = passage[offset:end]
        at = document.find(piece)
        while at != -1:
            ranges.append((max(0, at - offset - k), max(0, at - offset + k)))
            at = document.find(piece, at + 1)
    ranges.sort()
    merged: list[tuple[int, int]] = []
    for lo, hi in ranges:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _ends_within(passage: str, document: str, start: int, k: int) -> list[int]:
    """Every end ``e`` with Levenshtein(passage, document[start:e]) <= ``k``."""
    from rapidfuzz.distance import Levenshtein

    m, n = len(passage), len(document)
    # an end within k edits puts document[start:start + m] within 2k: one call rules most out
    if Levenshtein.distance(passage, document[start : start + m], score_cutoff=2 * k) > 2 * k:
        return []
    ends = []
    for end in range(start + max(0, m - k), min(n, start + m + k) + 1):
        if Levenshtein.distance(passage, document[start:end], score_cutoff=k) <= k:
            ends.append(end)
    return ends


def _leftmost_start(
    passage: str, document: str, lo: int, hi: int, k: int
) -> tuple[int | None, list[int]]:
    """The first start in ``lo..hi`` with an end within ``k`` edits, and its valid ends."""
    for start in range(lo, min(hi, len(document)) + 1):
        ends = _ends_within(passage, document, start, k)
        if ends:
            return start, ends
    return None, []


def _span_at(passage: str, document: str, start: int, ends: list[int], k: int) -> tuple[int, int]:
    """The span ``regex`` matches from ``start`` (> 0): the only valid end, or its pick."""
    if len(ends) == 1:
        return start, ends[0]
    span = _regex_span(passage, document, start - 1, start, k)
    if span is None or span[0] != start:  # not expected: take the reference's whole search
        return _fuzzy_pattern(passage, k).search(document).span()
    return span


def _regex_span(passage: str, document: str, pos: int, last: int, k: int) -> tuple[int, int] | None:
    """What ``regex`` finds searching from ``pos`` if it starts by ``last``: the text up to
    ``endpos`` covers every match starting by ``last``, so the answer is the whole search's."""
    endpos = min(len(document), last + len(passage) + 2 * k + 2)
    match = _fuzzy_pattern(passage, k).search(document, pos, endpos)
    return match.span() if match is not None and match.start() <= last else None


# --------------------------------------------------------------------------- splits


def overlap_losers(spans: list[tuple[int, int, int, int]]) -> list[int]:
    """Keys of the spans to drop so that none overlap, ``spans`` being ``(start, end, split,
    key)`` of one document: the higher split wins, and between two train spans the one
    starting later (ties: the later key) wins."""
    ordered = sorted(spans)
    losers = []
    current = ordered[0] if ordered else None
    for following in ordered[1:]:
        if current[1] <= following[0]:
            current = following
            continue
        if current[2] > TRAIN_SPLIT and current[2] >= following[2]:
            losers.append(following[3])
        else:
            losers.append(current[3])
            current = following
    return losers


def cut(body: str, spans: Iterable[tuple[int, int]]) -> list[tuple[str, bool, int]]:
    """``body`` cut into the sorted, non-overlapping ``spans`` (candidates) and the text between
    them: ``(text, is_candidate, index of the span or -1)`` in reading order."""
    pieces: list[tuple[str, bool, int]] = []
    begin = 0
    for i, (start, end) in enumerate(spans):
        if start > begin:
            pieces.append((body[begin:start], False, -1))
        pieces.append((body[start:end], True, i))
        begin = end
    if begin < len(body):
        pieces.append((body[begin:], False, -1))
    return pieces
