"""Coreference mentions and how they annotate passages, whatever backend found them.

A :class:`Mention` is a character span of one passage of a document. :func:`annotate` writes
each cluster's antecedent after the mentions in other passages that need it ("the venue (The
Half Moon)"); :func:`windows`, :func:`merge_clusters`, :func:`to_mentions` and :func:`tokenize`
carry clusters found on overlapping token windows back to passages.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from dapr.errors import DaprError

_PRONOUN_GROUPS = (
    "i me my mine myself",
    "you your yours yourself yourselves",
    "he him his himself she her hers herself it its itself one",
    "we us our ours ourselves they them their theirs themselves",
    "this that these those who whom whose which",
)
PRONOUNS = frozenset(word for group in _PRONOUN_GROUPS for word in group.split())
"""Mention texts that never serve as the antecedent written into a passage."""


class Mention(NamedTuple):
    """Characters ``[start, end)`` of passage ``passage`` (its index in the document)."""

    passage: int
    start: int
    end: int


# ---------------------------------------------------------------- annotation (any backend)


def annotate(passages: Sequence[str], clusters: Iterable[Sequence[Mention]]) -> list[str]:
    """Each passage with ``" (antecedent)"`` after every mention whose cluster reaches into an
    earlier passage (the rules are in the module docstring)."""
    return [
        apply_insertions(text, inserted)
        for text, inserted in zip(passages, insertions(passages, clusters), strict=True)
    ]


def insertions(
    passages: Sequence[str], clusters: Iterable[Sequence[Mention]]
) -> list[list[tuple[int, str]]]:
    """Per passage, the ``(character offset, inserted text)`` pairs :func:`annotate` applies,
    by increasing offset."""
    chosen: list[dict[int, tuple[int, str]]] = [{} for _ in passages]
    for cluster in clusters:
        mentions = sorted({_checked(Mention(*m), passages) for m in cluster})
        named = [m for m in mentions if _text(passages, m).casefold() not in PRONOUNS]
        if len(mentions) < 2 or not named:
            continue
        antecedent = named[0]
        name = _text(passages, antecedent)
        for mention in mentions:
            if mention.passage == mentions[0].passage:
                continue  # no mention of the cluster in an earlier passage
            if (mention.passage, mention.start) < (antecedent.passage, antecedent.end):
                continue  # the antecedent does not precede it
            if _same_name(_text(passages, mention), name):
                continue
            length = mention.end - mention.start
            current = chosen[mention.passage].get(mention.end)
            if current is None or length > current[0]:
                chosen[mention.passage][mention.end] = (length, f" ({name})")
    return [sorted((end, text) for end, (_, text) in found.items()) for found in chosen]


def apply_insertions(text: str, inserted: Sequence[tuple[int, str]]) -> str:
    """``text`` with each ``(offset, addition)`` inserted at its offset (offsets ascending)."""
    pieces, last = [], 0
    for offset, addition in inserted:
        pieces += [text[last:offset], addition]
        last = offset
    pieces.append(text[last:])
    return "".join(pieces)


def _checked(mention: Mention, passages: Sequence[str]) -> Mention:
    passage, start, end = mention
    if not 0 <= passage < len(passages) or not 0 <= start < end <= len(passages[passage]):
        raise DaprError(
            f"coref: mention {tuple(mention)} is not inside a passage of this {len(passages)}-"
            "passage document; a mention is (passage index, start char, end char), start < end"
        )
    return mention


def _same_name(a: str, b: str) -> bool:
    """Equal texts, ignoring case, a leading article and a trailing possessive."""
    return _bare(a) == _bare(b)


def _bare(text: str) -> str:
    text = re.sub(r"^(?:the|a|an)\s+", "", text.casefold())
    return re.sub(r"(?:'s|\u2019s|'|\u2019)$", "", text)


def _text(passages: Sequence[str], mention: Mention) -> str:
    """The mention's text with its whitespace collapsed to single spaces."""
    return " ".join(passages[mention.passage][mention.start : mention.end].split())


# ------------------------------------------------------------ windows and token spans


def windows(n: int, size: int, overlap: int) -> list[tuple[int, int]]:
    """Token ranges ``[start, end)`` covering ``n`` tokens: ``size`` long (fewer only when
    ``n < size``), each starting ``size - overlap`` after the previous one; the last window
    ends at ``n`` and may overlap its predecessor by more."""
    if n <= 0:
        return []
    out, start = [], 0
    while start + size < n:
        out.append((start, start + size))
        start += size - overlap
    out.append((max(0, n - size), n))
    return out


def merge_clusters(
    predictions: Iterable[tuple[int, Sequence[Sequence[tuple[int, int]]]]],
) -> list[list[tuple[int, int]]]:
    """Clusters of document token spans ``[start, end)`` from per-window predictions
    ``(window start, clusters of window-relative spans)``: clusters sharing a span are one."""
    parent: dict[tuple[int, int], tuple[int, int]] = {}

    def root(span: tuple[int, int]) -> tuple[int, int]:
        parent.setdefault(span, span)
        while parent[span] != span:
            parent[span] = parent[parent[span]]
            span = parent[span]
        return span

    for offset, clusters in predictions:
        for cluster in clusters:
            spans = [(offset + s, offset + e) for s, e in cluster]
            for span in spans:
                parent[root(span)] = root(spans[0])
    groups: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for span in sorted(parent):
        groups.setdefault(root(span), []).append(span)
    return [spans for spans in groups.values() if len(spans) > 1]


def to_mentions(
    tokens: Sequence[Mention], clusters: Iterable[Sequence[tuple[int, int]]]
) -> list[list[Mention]]:
    """Token-span clusters as character mentions; ``tokens[i]`` is where token ``i`` lies. A
    span running across two passages is dropped (a mention lies inside one passage)."""
    out = []
    for cluster in clusters:
        mentions = []
        for start, end in cluster:
            first, last = tokens[start], tokens[end - 1]
            if first.passage == last.passage:
                mentions.append(Mention(first.passage, first.start, last.end))
        if len(mentions) > 1:
            out.append(mentions)
    return out


def tokenize(tokenizer: Any, passages: Sequence[str]) -> list[Mention]:
    """Where every non-whitespace token of the passages lies, in document order."""
    return [
        Mention(p, token.idx, token.idx + len(token.text))
        for p, doc in enumerate(tokenizer.pipe(passages))
        for token in doc
        if not token.is_space
    ]
