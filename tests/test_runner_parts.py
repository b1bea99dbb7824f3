import numpy as np

from dapr.contextualizers.pipeline import Chain, ContextStep
from dapr.data import Corpus, Dataset, Document, Passage, Run
from dapr.experiment.cache import Cache
from dapr.experiment.config import Experiment
from dapr.experiment.runner import Outcome, Runner, _document_qrels, doc_codes

DOCS = [
    Document(
        "d1",
        "Venue",
        (Passage("d1-0", "d1", 0, "It was held there."), Passage("d1-1", "d1", 1, "Menu.", False)),
    ),
    Document("d2", "Band", (Passage("d2-0", "d2", 0, "Four members."),)),
]
DATASET = Dataset("toy", Corpus(DOCS))


def test_only_candidate_passages_are_indexed_with_their_context(tmp_path):
    experiment = Experiment("e", "toy")
    runner, outcome = Runner(experiment, Cache(tmp_path)), Outcome(experiment, DATASET)
    assert list(runner._items(outcome, "passage", None, "s")) == [
        ("d1-0", "It was held there."),
        ("d2-0", "Four members."),
    ]
    titled = list(runner._items(outcome, "passage", Chain([ContextStep("title")]), "s"))
    assert titled[0] == ("d1-0", "Venue It was held there.")
    assert outcome.costs["s"].documents == 2 and outcome.costs["s"].words == 7
    assert list(runner._items(outcome, "document", None, "s")) == [
        ("d1", "Venue It was held there. Menu."),
        ("d2", "Band Four members."),
    ]


def test_document_qrels_take_the_best_passage_grade():
    qrels = {"q": {"d1-0": 1, "d1-1": 2, "d2-0": 0}, "r": {"unknown": 1}}
    assert _document_qrels(DATASET, qrels) == {"q": {"d1": 2, "d2": 0}, "r": {}}


def test_doc_codes_map_passages_to_document_run_codes():
    passages = Run.from_dict({"q": {"d2-0": 1.0, "d1-0": 0.5}})
    documents = Run.from_dict({"q": {"d2": 3.0}})
    codes = doc_codes(DATASET, passages, documents)
    assert codes.tolist() == [0, -1]  # d2-0 -> d2 (code 0); d1-0's document is not in the run
    assert codes.dtype == np.int64
