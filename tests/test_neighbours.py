"""The `neighbours` contextualizer: a passage between its neighbours in the document."""

from __future__ import annotations

import pytest

from dapr import registry
from dapr.data import Document, Passage
from dapr.errors import DaprError

DOCUMENT = Document(
    "d",
    "Title",
    tuple(
        Passage(f"d-{i}", "d", i, text)
        for i, text in enumerate(["one two three", "four five", "six", "seven eight nine ten"])
    ),
)


def neighbours(**args):
    return registry.contextualizers.get("neighbours")(**args)


def test_neighbours_at_the_edges_of_the_document():
    assert neighbours(max_words=None).contextualize(DOCUMENT) == [
        "one two three four five",
        "one two three four five six",
        "four five six seven eight nine ten",
        "six seven eight nine ten",
    ]
    assert neighbours(before=2, after=0, max_words=None).contextualize(DOCUMENT) == [
        "one two three",
        "one two three four five",
        "one two three four five six",
        "four five six seven eight nine ten",
    ]
    only = Document("o", "T", (Passage("o-0", "o", 0, "alone here"),))
    assert neighbours(before=3, after=3).contextualize(only) == ["alone here"]


def test_each_side_keeps_the_words_nearest_the_passage():
    got = neighbours(before=2, after=2, max_words=2).contextualize(DOCUMENT)
    assert got[2] == "four five six seven eight"  # "one two three" and "nine ten" cut
    assert got[0] == "one two three four five"
    assert neighbours(max_words=0).contextualize(DOCUMENT) == [p.text for p in DOCUMENT.passages]
    for text, passage in zip(
        neighbours(before=3, after=3, max_words=1).contextualize(DOCUMENT), DOCUMENT.passages
    ):
        assert len(text.split()) <= len(passage.text.split()) + 2


@pytest.mark.parametrize("args", [{"before": -1}, {"after": 1.5}, {"max_words": "ten"}])
def test_bad_settings_are_one_line(args):
    with pytest.raises(DaprError, match="neighbours: "):
        neighbours(**args)
