"""The ``keyphrases`` contextualizer: TopicRank natively and through pke, and their parity."""

from __future__ import annotations

import json
import pickle
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("spacy")
pytest.importorskip("pke")

from dapr.contextualizers import topicrank as tr  # noqa: E402
from dapr.contextualizers import topicrank_spacy  # noqa: E402
from dapr.contextualizers.keyphrases import (  # noqa: E402
    Keyphrases,
    NativeTopicRank,
    PkeTopicRank,
)
from dapr.data import Document, Passage  # noqa: E402
from dapr.errors import DaprError  # noqa: E402

WIKI_WORDS = 45_000
"""Words of the shortest wiki-sample articles added to XQuAD's for the parity test (with XQuAD,
about 45 s of pke on one core)."""


def document(doc_id: str, title: str, paragraphs: list[str]) -> Document:
    passages = tuple(Passage(f"{doc_id}-{i}", doc_id, i, text) for i, text in enumerate(paragraphs))
    return Document(doc_id, title, passages)


def xquad_documents(path: Path) -> list[Document]:
    """The 48 XQuAD articles (English), an article's paragraphs as its passages."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return [
        document(f"xquad-{i}", a["title"], [p["context"] for p in a["paragraphs"]])
        for i, a in enumerate(data["data"])
    ]


def wiki_documents(words: int) -> list[Document]:
    """The shortest wiki-sample articles, up to ``words`` whitespace words in all."""
    pytest.importorskip("gensim")
    from dapr.datasets import load_dataset

    chosen, total = [], 0
    for doc in sorted(load_dataset("wiki-sample").corpus, key=lambda d: len(d.text)):
        total += len(doc.text.split())
        if total > words:
            break
        chosen.append(doc)
    return chosen


@pytest.fixture(scope="module")
def native() -> NativeTopicRank:
    return NativeTopicRank()


@pytest.fixture(scope="module")
def reference() -> PkeTopicRank:
    return PkeTopicRank()


@pytest.fixture(scope="module")
def xquad(xquad_en: Path) -> list[Document]:
    return xquad_documents(xquad_en)


def pke_extractor(text: str, nlp=None):
    """pke's TopicRank after the reference's calls, up to candidate weighting."""
    import pke

    extractor = pke.unsupervised.TopicRank()
    extractor.load_document(input=text, language="en", spacy_model=nlp)
    extractor.candidate_selection()
    return extractor


# --- the algorithm on hand-made input ---------------------------------------------------------


def tagged(sentences: list[list[tuple[str, str]]]) -> tuple[list[str], list[str], list[int]]:
    words = [w for s in sentences for w, _ in s]
    pos = [p for s in sentences for _, p in s]
    ids = [i for i, s in enumerate(sentences) for _ in s]
    return words, pos, ids


def test_the_phrase_every_sentence_is_about_ranks_first():
    sentences = [
        [("Solar", "ADJ"), ("panels", "NOUN"), ("convert", "VERB"), ("light", "NOUN")],
        [("Solar", "ADJ"), ("panels", "NOUN"), ("need", "VERB"), ("sun", "NOUN")],
        [("Cheap", "ADJ"), ("solar", "ADJ"), ("panel", "NOUN"), ("arrays", "NOUN")],
        [("Rain", "NOUN"), ("cleans", "VERB"), ("solar", "ADJ"), ("panels", "NOUN")],
    ]
    ranked = tr.topicrank(*tagged(sentences), n=10)
    phrases = [p for p, _ in ranked]
    # "cheap solar panel arrays" shares 2 of 4 stems with "solar panels": one topic, whose
    # first occurring candidate represents it
    assert phrases[0] == "solar panels"
    assert "cheap solar panel arrays" not in phrases
    assert sorted(phrases) == ["light", "rain", "solar panels", "sun"]
    assert sum(score for _, score in ranked) == pytest.approx(1.0)


def test_candidate_filters_follow_pke():
    sentences = [
        [("Quantum", "ADJ"), ("computing", "NOUN"), (".", "PUNCT")],
        [("Several", "ADJ"), ("qubits", "NOUN"), (".", "PUNCT")],  # a stop word
        [("X", "NOUN"), ("rays", "NOUN"), (".", "PUNCT")],  # a one-character word
        [("AI", "PROPN"), (".", "PUNCT")],  # under 3 characters
        [("C++", "PROPN"), ("code", "NOUN"), (".", "PUNCT")],  # not alphanumeric
        [("state-of-the-art", "ADJ"), ("lasers", "NOUN"), (".", "PUNCT")],  # hyphens are fine
        [("big", "ADJ"), ("red", "ADJ"), ("old", "ADJ"), ("wooden", "ADJ"), ("farm", "NOUN")]
        + [("house", "NOUN")],  # over 5 words
        [("big", "ADJ"), ("red", "ADJ"), ("old", "ADJ"), ("wood", "NOUN"), ("barn", "NOUN")],
        [("a", "DET"), ("barn", "NOUN"), ("owl", "NOUN"), ("sits", "VERB")],
    ]
    words, pos, ids = tagged(sentences)
    kept = tr.select_candidates(words, np.array([p in tr.VALID_POS for p in pos]), np.array(ids))
    assert sorted(kept.phrases) == [
        "barn owl",
        "big red old wood barn",
        "quantum computing",
        "state-of-the-art lasers",
    ]
    assert len(kept.offsets) == 4  # one occurrence each


def test_runs_stop_at_sentence_ends():
    words = ["Neural", "networks", "Deep", "learning"]
    pos = ["ADJ", "NOUN", "ADJ", "NOUN"]
    one = tr.select_candidates(words, np.ones(4, bool), np.array([0, 0, 0, 0]))
    two = tr.select_candidates(words, np.ones(4, bool), np.array([0, 0, 1, 1]))
    assert one.phrases == ["neural networks deep learning"]
    assert sorted(two.phrases) == ["deep learning", "neural networks"]
    assert tr.topicrank(words, pos, [0, 0, 1, 1], n=1)[0][1] == pytest.approx(0.5)


def test_gap_weights_match_pkes_definition():
    offsets = np.array([0, 4, 9, 10])  # starts of occurrences
    lengths = np.array([2, 3, 1, 2])
    topics = np.array([0, 1, 0, 2])
    weights = tr.topic_graph(offsets, lengths, topics, 3)
    # gaps: 0->4: 4 - 1 = 3; 4->9: 9 - 6 = 3; 0->10: 9; 4->10: 10 - 6 = 4; 9->10: 1
    expected = np.array([[0, 1 / 3 + 1 / 3, 1 / 9 + 1], [2 / 3, 0, 1 / 4], [1 / 9 + 1, 1 / 4, 0]])
    np.testing.assert_allclose(weights, expected, rtol=1e-12)
    # an occurrence starting inside an earlier one counts as a gap of 1
    overlapping = tr.topic_graph(np.array([0, 1]), np.array([3, 1]), np.array([0, 1]), 2)
    np.testing.assert_allclose(overlapping, [[0, 1], [1, 0]])


def test_pagerank_equals_networkx_on_a_random_weighted_graph():
    nx = pytest.importorskip("networkx")
    rng = np.random.default_rng(7)
    n = 40
    weights = np.triu(rng.random((n, n)) * (rng.random((n, n)) < 0.2), 1)
    weights[:, 5] = weights[5, :] = 0.0  # an isolated (dangling) node
    weights += weights.T
    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    for i, j in zip(*np.nonzero(np.triu(weights))):
        graph.add_edge(int(i), int(j), weight=float(weights[i, j]))
    expected = nx.pagerank(graph, alpha=0.85, weight="weight")
    ours = tr.pagerank(weights)
    np.testing.assert_allclose(ours, [expected[i] for i in range(n)], rtol=1e-12, atol=1e-15)
    assert tr.pagerank(np.zeros((1, 1))) == pytest.approx([1.0])


# --- the spaCy side ---------------------------------------------------------------------------


def test_hyphen_keeping_infixes_are_pkes():
    from pke.readers import infix_re

    assert topicrank_spacy.pke_infixes().pattern == infix_re.pattern


def test_native_reads_the_parse_pke_reads(native, reference, xquad):
    """Same words, coarse tags and sentences as pke's reader gets from its full pipeline."""
    for doc in xquad[:4]:
        text = "\n".join(p.text for p in doc.passages)
        full = reference.nlp(text)
        words, valid, sentences = topicrank_spacy.read_doc(
            native.parse(text), native.rules, native.stop_chars
        )
        assert len(words) == len(full)
        pos = [t.pos_ or t.tag_ for t in full]
        assert valid.tolist() == [p in tr.VALID_POS for p in pos]
        assert [w for w in words if w is not None] == [t.text for t, v in zip(full, valid) if v]
        spacy_ids = np.cumsum([t.is_sent_start for t in full]) - 1
        assert sentences.tolist() == spacy_ids.tolist()
    assert native.rules is not None
    assert "attribute_ruler" not in native.nlp.pipe_names  # replaced by its compiled rules


def test_topics_graph_and_candidates_equal_pkes(native, reference, xquad):
    doc = xquad[0]
    text = "\n".join(p.text for p in doc.passages)
    extractor = pke_extractor(text, reference.nlp)
    extractor.topic_clustering(threshold=0.74, method="average")
    extractor.build_topic_graph()

    words, valid, sentences = topicrank_spacy.read_doc(
        native.parse(text), native.rules, native.stop_chars
    )
    candidates = tr.select_candidates(words, valid, sentences)
    keys = [" ".join(s) for s in candidates.stems]
    assert keys == sorted(extractor.candidates)
    for c, key in enumerate(keys):
        assert candidates.offsets[candidates.owner == c].tolist() == (
            extractor.candidates[key].offsets
        )
    topics = tr.topic_clusters(candidates.stems)
    ours = [[keys[c] for c in np.flatnonzero(topics == t)] for t in range(topics.max() + 1)]
    assert ours == extractor.topics
    assert len(ours) > 20

    lengths = np.array([len(s) for s in candidates.stems])[candidates.owner]
    weights = tr.topic_graph(candidates.offsets, lengths, topics[candidates.owner], len(ours))
    theirs = np.zeros_like(weights)
    for i, j, w in extractor.graph.edges(data="weight"):
        theirs[i, j] = theirs[j, i] = w
    np.testing.assert_allclose(weights, theirs, rtol=1e-12)


# --- the contextualizer -----------------------------------------------------------------------

SOLAR = document(
    "solar",
    "Solar power",
    [
        "Solar panels convert sunlight into electricity. Solar panels are cheap.",
        "Many homes install solar panels on the roof.",
        "The electricity from solar panels feeds the grid.",
    ],
)


def test_contextualize_prefixes_the_joined_keyphrases():
    keyphrases = Keyphrases(n=3)
    phrases = keyphrases.keyphrases(SOLAR)
    assert phrases[0] == "solar panels"
    assert len(phrases) == 3
    texts = keyphrases.contextualize(SOLAR)
    assert len(texts) == len(SOLAR.passages)
    for text, passage in zip(texts, SOLAR.passages):
        assert text == f"{' '.join(phrases)} {passage.text}"  # as the reference joins them
    custom = Keyphrases(n=2, separator=" | ").contextualize(SOLAR)
    assert custom[1] == f"{phrases[0]} | {phrases[1]} {SOLAR.passages[1].text}"


def test_without_keyphrases_the_passages_are_unchanged():
    plain = document("plain", "Nothing", ["It is what it is.", "And so it goes."])
    texts = [p.text for p in plain.passages]
    assert Keyphrases().keyphrases(plain) == []
    assert Keyphrases().contextualize(plain) == texts
    assert Keyphrases(n=0).contextualize(SOLAR) == [p.text for p in SOLAR.passages]
    assert Keyphrases().contextualize(document("empty", "", [""])) == [""]


def test_the_text_is_cut_like_the_reference():
    keyphrases = Keyphrases(max_chars=40)
    assert keyphrases.text(SOLAR) == "\n".join(p.text for p in SOLAR.passages)[:40]


def test_pke_backend_equals_pke_run_as_the_reference_runs_it(xquad):
    """The reference lets pke load the first English spaCy model itself for every document."""
    ours = Keyphrases(backend="pke")
    for doc in [SOLAR, *xquad[:2]]:
        extractor = pke_extractor("\n".join(p.text for p in doc.passages)[:65536])
        extractor.candidate_weighting()
        best = sorted(extractor.get_n_best(n=10), key=lambda pair: pair[1], reverse=True)
        assert ours.keyphrases(doc) == [phrase for phrase, _ in best]


def test_unknown_backend_and_bad_arguments_are_one_line_errors():
    with pytest.raises(DaprError, match="unknown backend 'rake'; choose from: native, pke") as e:
        Keyphrases(backend="rake")
    assert "\n" not in str(e.value)
    with pytest.raises(DaprError, match="n \\(-1\\) must be >= 0"):
        Keyphrases(n=-1)


def test_missing_pke_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pke", None)
    with pytest.raises(DaprError, match='pip install "dapr-ir\\[context\\]"'):
        Keyphrases(backend="pke").keyphrases(SOLAR)


def test_identity_and_pickling():
    keyphrases = Keyphrases()
    identity = keyphrases.identity()
    assert identity["backend"] == "native"
    assert identity["n"] == 10
    assert identity["separator"] == " "
    assert identity["max_chars"] == 65536
    assert identity["spacy_model"] == "en_core_web_sm"
    assert identity["spacy_model_version"] == "3.8.0"
    assert Keyphrases(backend="pke").identity()["pke"] == "2.0.0"
    keyphrases.keyphrases(SOLAR)
    copy = pickle.loads(pickle.dumps(keyphrases))
    assert copy._extractor is None
    assert Keyphrases.parallel is True
    assert copy.contextualize(SOLAR) == keyphrases.contextualize(SOLAR)


# --- parity on real documents -----------------------------------------------------------------


def test_native_agrees_with_pke_on_real_documents(native, reference, xquad):
    documents = xquad + wiki_documents(WIKI_WORDS)
    assert len(documents) >= 50
    overlaps, exact, pke_seconds = [], 0, 0.0
    for doc in documents:
        text = "\n".join(p.text for p in doc.passages)[:65536]
        start = time.perf_counter()
        theirs = reference(text, 10)
        pke_seconds += time.perf_counter() - start
        ours = native(text, 10)
        overlaps.append(len(set(ours) & set(theirs)) / max(1, len(theirs)))
        exact += ours == theirs
    mean = float(np.mean(overlaps))
    print(
        f"\nkeyphrase parity on {len(documents)} documents: mean top-10 overlap {mean:.4f}, "
        f"identical lists {exact}/{len(documents)} ({pke_seconds:.0f}s of pke)"
    )
    assert mean >= 0.8
