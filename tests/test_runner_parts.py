import numpy as np

from dapr.data import Corpus, Dataset, Document, Passage, Run
from dapr.evaluation import document_qrels, evaluate, maxp
from dapr.experiment.chain import Chain, ContextStep
from dapr.experiment.runner import Outcome, Runner, doc_codes
from dapr.experiment.spec import Experiment
from dapr.store.cache import Cache

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
    # whole documents as the reference code indexes them: every passage, no title
    assert list(runner._items(outcome, "document", None, "s")) == [
        ("d1", "It was held there. Menu."),
        ("d2", "Four members."),
    ]


def test_document_qrels_take_the_best_passage_grade():
    qrels = {"q": {"d1-0": 1, "d1-1": 2, "d2-0": 0}, "r": {"unknown": 1}}
    assert document_qrels(qrels, DATASET.corpus.ids) == {"q": {"d1": 2, "d2": 0}, "r": {}}


def test_maxp_scores_each_document_by_its_best_passage():
    passages = Run.from_dict(
        {
            "q": {"d2-0": 0.9, "d1-1": 0.7, "d1-0": 0.4, "gone": 5.0},
            "r": {"d1-0": 0.2},
            "s": {},
        }
    )
    documents = maxp(passages, DATASET.corpus.ids)
    assert documents.to_dict() == {"q": {"d2": 0.9, "d1": 0.7}, "r": {"d1": 0.2}, "s": {}}
    qrels = document_qrels({"q": {"d1-0": 1}, "r": {"d2-0": 2}}, DATASET.corpus.ids)
    scores = evaluate(documents, qrels, ["MRR@10"]).per_query["MRR@10"]
    assert scores == {"q": 0.5, "r": 0.0}  # d1 is second for q; r never retrieves d2


def test_doc_codes_map_passages_to_document_run_codes():
    passages = Run.from_dict({"q": {"d2-0": 1.0, "d1-0": 0.5}})
    documents = Run.from_dict({"q": {"d2": 3.0}})
    codes = doc_codes(DATASET, passages, documents)
    assert codes.tolist() == [0, -1]  # d2-0 -> d2 (code 0); d1-0's document is not in the run
    assert codes.dtype == np.int64


def test_maxp_equals_a_plain_max_over_passages_on_random_runs():
    rng = np.random.default_rng(0)
    documents = [
        Document(f"d{d}", "", tuple(Passage(f"d{d}-{i}", f"d{d}", i, "x") for i in range(4)))
        for d in range(30)
    ]
    ids = Corpus(documents).ids
    passages = [p.id for doc in documents for p in doc.passages]
    run = {
        f"q{q}": {p: float(rng.integers(0, 20)) for p in rng.choice(passages, 40, replace=False)}
        for q in range(25)
    }
    expected = {}
    for qid, ranked in run.items():
        best: dict[str, float] = {}
        for passage, score in ranked.items():
            doc = passage.split("-")[0]
            best[doc] = max(score, best.get(doc, score))
        expected[qid] = best
    got = maxp(Run.from_dict(run), ids)
    assert got.to_dict() == expected
    for q in range(len(got)):  # rank order: score descending, ties by document code
        ids_, scores = got.ranking(q)
        assert list(scores) == sorted(scores, reverse=True)
