"""Prepend the document title: the simplest document context, as in the DAPR paper."""

from __future__ import annotations

from dapr.data import Document


class Title:
    """Each passage becomes ``"{title} {passage text}"``."""

    version = "1"

    def contextualize(self, document: Document) -> list[str]:
        return [f"{document.title} {p.text}" for p in document.passages]
