"""Neighbouring passages: the plainest document context, the text around a passage."""

from __future__ import annotations

from typing import Annotated

from dapr.data import Document
from dapr.errors import DaprError
from dapr.ranges import Range


class Neighbours:
    """Each passage between the ``before`` passages that precede it and the ``after`` passages
    that follow it in its document (fewer at the document's edges), each side cut to the
    ``max_words`` words nearest the passage: ``"{previous} {passage} {next}"``.

    :param before: Passages before it that are prepended.
    :param after: Passages after it that are appended.
    :param max_words: Words of context kept on each side, those nearest the passage (None: all).
    """

    version = "1"

    def __init__(
        self,
        before: Annotated[int, Range(0)] = 1,
        after: Annotated[int, Range(0)] = 1,
        max_words: Annotated[int | None, Range(0)] = 100,
    ) -> None:
        for name, value in (("before", before), ("after", after), ("max_words", max_words)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise DaprError(f"neighbours: {name} must be a whole number >= 0, got {value!r}")
            if value is not None and value < 0:
                raise DaprError(f"neighbours: {name} must be >= 0, got {value}")
        self.before = before
        self.after = after
        self.max_words = max_words

    def contextualize(self, document: Document) -> list[str]:
        words = [p.text.split() for p in document.passages]
        texts = []
        for n, passage in enumerate(document.passages):
            previous = [w for ws in words[max(0, n - self.before) : n] for w in ws]
            following = [w for ws in words[n + 1 : n + 1 + self.after] for w in ws]
            if self.max_words is not None:
                previous = previous[len(previous) - self.max_words :] if self.max_words else []
                following = following[: self.max_words]
            parts = (" ".join(previous), passage.text, " ".join(following))
            texts.append(" ".join(part for part in parts if part))
        return texts
