"""Query / gold-passage Jaccard similarity (Table 5) on a hand-made dataset."""

from __future__ import annotations

import math

import pytest

from dapr.analysis.overlap import gold_overlap, jaccard, overlap_table, tokens
from dapr.contextualizers.title import Title
from dapr.data import Corpus, Dataset, Document, Passage, Split
from dapr.errors import DataError


def test_tokens_are_lowercased_unicode_word_sets():
    expected = {"the", "cat", "café", "au", "lait", "42"}
    assert tokens("The cat, the CAT; Café-au-lait 42!") == expected
    assert tokens("  ...  ") == frozenset()


def test_jaccard_by_hand():
    assert jaccard({"a", "b"}, {"b", "c"}) == pytest.approx(1 / 3)
    assert jaccard({"a"}, {"a"}) == 1.0
    assert jaccard({"a"}, set()) == 0.0
    assert jaccard(set(), set()) == 0.0


def dataset() -> Dataset:
    d1 = Document(
        "d1",
        "Red Fox",
        (
            Passage("d1-0", "d1", 0, "The fox hunts at night."),
            Passage("d1-1", "d1", 1, "It eats mice."),
        ),
    )
    d2 = Document("d2", "Owl", (Passage("d2-0", "d2", 0, "Owls hunt mice."),))
    queries = {"q1": "what does the red fox eat", "q2": "owl hunt", "q3": "nothing relevant"}
    qrels = {
        "q1": {"d1-0": 1, "d1-1": 2, "d2-0": 0},  # d2-0 is judged irrelevant
        "q2": {"d2-0": 1},
        "q3": {"d1-0": 0},  # no relevant passage: no pair
    }
    return Dataset("toy", Corpus([d1, d2]), {"test": Split(queries, qrels)})


# q1 = {what, does, the, red, fox, eat} (6 tokens)
# d1-0 = {the, fox, hunts, at, night}: shared {the, fox}; union 9 -> 2/9
# d1-1 = {it, eats, mice}: shared {}; union 9 -> 0
# q2 = {owl, hunt}; d2-0 = {owls, hunt, mice}: shared {hunt}; union 4 -> 1/4
WITHOUT = (2 / 9 + 0 + 1 / 4) / 3
# with titles: "red fox" joins d1's passages, "owl" d2's
# d1-0 + {red}: shared {the, fox, red}; union 9 -> 3/9
# d1-1 + {red, fox}: shared {red, fox}; union 9 -> 2/9
# d2-0 + {owl}: shared {owl, hunt}; union 4 -> 2/4
WITH = (3 / 9 + 2 / 9 + 2 / 4) / 3


def test_gold_overlap_by_hand():
    data = dataset()
    without = gold_overlap(data, "test", with_title=False)
    assert without.mean == pytest.approx(WITHOUT)
    assert (without.pairs, without.queries) == (3, 2)
    assert gold_overlap(data, "test", with_title=True).mean == pytest.approx(WITH)
    table = overlap_table(data, "test")
    assert table[False] == without
    assert table[True].mean == pytest.approx(WITH)


def test_relevance_level_selects_the_pairs():
    data = dataset()
    data.relevance_level = 2  # only (q1, d1-1) is left
    stats = gold_overlap(data, "test", with_title=True)
    assert stats.mean == pytest.approx(2 / 9)
    assert (stats.pairs, stats.queries) == (1, 1)


def test_title_text_is_the_title_contextualizers():
    data = dataset()
    document = next(iter(data.corpus))
    query = tokens(data.split("test").queries["q1"])
    expected = [jaccard(query, tokens(t)) for t in Title().contextualize(document)]
    assert expected == pytest.approx([3 / 9, 2 / 9])


def test_no_pairs_and_missing_passages():
    data = dataset()
    data.splits["test"] = Split({"q": "x"}, {"q": {"d1-0": 0}})
    stats = gold_overlap(data, "test", with_title=False)
    assert math.isnan(stats.mean) and stats.pairs == 0
    data.splits["test"] = Split({"q": "x"}, {"q": {"d7-3": 1}})
    with pytest.raises(DataError, match="query 'q' judges passage 'd7-3'"):
        gold_overlap(data, "test", with_title=False)
    data.splits["test"] = Split({}, {"q": {"d1-0": 1}})
    with pytest.raises(DataError, match="qrels judge query 'q', which has no text"):
        gold_overlap(data, "test", with_title=False)
