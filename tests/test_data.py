import numpy as np
import pytest

from dapr.contextualizers.title import Title
from dapr.data import Corpus, Dataset, Document, Passage, Run, Split
from dapr.errors import DaprError


def _doc(doc_id: str, title: str, *texts: str) -> Document:
    passages = tuple(Passage(f"{doc_id}-{i}", doc_id, i, t) for i, t in enumerate(texts))
    return Document(doc_id, title, passages)


DOCS = [
    _doc("d1", "Venue", "It was held there.", "Tickets sold out."),
    _doc("d2", "Band", "Four members."),
]


def test_run_orders_by_score_then_descending_id_and_round_trips():
    run = Run.from_dict({"q1": {"x": 0.5, "y": 0.9, "z": 0.5}, "q2": {}, "q3": {"x": 1.0}})
    assert run.to_dict() == {"q1": {"y": 0.9, "x": 0.5, "z": 0.5}, "q2": {}, "q3": {"x": 1.0}}
    assert list(run.to_dict()["q1"]) == ["y", "z", "x"]  # tie x/z: descending id, as trec_eval
    assert run.offsets.tolist() == [0, 3, 3, 4]
    top = run.top(1)
    assert top.to_dict() == {"q1": {"y": 0.9}, "q2": {}, "q3": {"x": 1.0}}


def test_run_save_load(tmp_path):
    run = Run.from_dict({"q1": {"x": 0.5, "y": 0.9}, "q2": {"z": -1.0}})
    run.save(tmp_path / "run.npz")
    loaded = Run.load(tmp_path / "run.npz")
    assert loaded.to_dict() == run.to_dict()
    assert loaded.scores.dtype == np.float64


def test_a_run_holds_only_the_ids_it_ranks(tmp_path):
    # a retriever's vocabulary is its whole index: the run keeps the ranked ids, in and on disk
    every = np.array([f"p{i}" for i in range(1000)], dtype=np.dtypes.StringDType())
    items = [np.array([7, 3, 999]), np.array([3]), np.array([], dtype=np.int64)]
    scores = [np.array([1.0, 2.0, 1.0]), np.array([0.5]), np.array([])]
    run = Run.from_lists(["q1", "q2", "q3"], items, scores, every)
    assert sorted(run.vocab.tolist()) == ["p3", "p7", "p999"]
    expected = {"q1": {"p3": 2.0, "p999": 1.0, "p7": 1.0}, "q2": {"p3": 0.5}, "q3": {}}
    assert run.to_dict() == expected
    assert list(run.to_dict()["q1"]) == ["p3", "p999", "p7"]  # the tie by descending id
    wide = Run(
        run.queries, run.offsets, run.items + 2, run.scores, np.array(["a", "b", *run.vocab])
    )
    assert wide.compact().to_dict() == expected and len(wide.compact().vocab) == 3
    wide.save(tmp_path / "run.npz")
    with np.load(tmp_path / "run.npz") as stored:
        assert len(stored["vocab"]) == 3
    assert Run.load(tmp_path / "run.npz").to_dict() == expected


def test_corpus_streams_from_a_function_every_pass():
    calls = []

    def source():
        calls.append(1)
        yield from DOCS

    corpus = Corpus(source)
    assert [p.id for p in corpus.passages()] == ["d1-0", "d1-1", "d2-0"]
    assert [d.id for d in corpus] == ["d1", "d2"]
    assert len(calls) == 2
    ids = corpus.ids
    assert ids.doc_ids[ids.doc_of].tolist() == ["d1", "d1", "d2"]


def test_fingerprints_are_stable_and_content_sensitive():
    same = Corpus(list(DOCS)).fingerprint
    assert Corpus(DOCS).fingerprint == same
    changed = [DOCS[0], _doc("d2", "Band", "Five members.")]
    assert Corpus(changed).fingerprint != same
    split = Split({"q": "where"}, {"q": {"d1-0": 1}})
    a = Dataset("x", Corpus(DOCS), {"test": split})
    b = Dataset("x", Corpus(DOCS), {"test": Split({"q": "where"}, {"q": {"d1-0": 2}})})
    assert a.fingerprint != b.fingerprint
    assert a.fingerprint == Dataset("y", Corpus(DOCS), {"test": split}).fingerprint


def test_missing_split_is_a_clear_error():
    with pytest.raises(DaprError, match="has no split 'dev'; choose from: test"):
        Dataset("x", Corpus(DOCS), {"test": Split({}, {})}).split("dev")


def test_document_text_and_title_context():
    # a whole document as the reference gives it to document-level retrievers: no title
    assert DOCS[0].text == "It was held there. Tickets sold out."
    assert Title().contextualize(DOCS[0]) == ["Venue It was held there.", "Venue Tickets sold out."]
