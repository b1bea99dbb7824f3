"""Corpus ids: one pass for the fingerprint and the id arrays, compact arrays, lookups by hash."""

import json
import os
import pickle
import subprocess
import sys
import tracemalloc
import weakref
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dapr import ids as ids_module
from dapr.data import Corpus, Document, Passage, Run
from dapr.errors import DaprError, DataError
from dapr.evaluation import document_qrels, maxp
from dapr.experiment.runner import doc_codes
from dapr.ids import CorpusIds, IdIndex, read_id_list


def _doc(doc_id: str, *texts: str) -> Document:
    passages = tuple(Passage(f"{doc_id}-{i}", doc_id, i, t) for i, t in enumerate(texts))
    return Document(doc_id, doc_id.upper(), passages)


class Counted:
    """A corpus source that counts its passes."""

    def __init__(self, documents: list[Document]):
        self.documents, self.passes = documents, 0

    def __call__(self):
        self.passes += 1
        yield from self.documents


def test_fingerprint_is_the_one_it_always_was():
    # computed by the two-pass implementation this replaced: cached keys stay valid
    docs = [
        Document(
            "d1",
            "Venue",
            (
                Passage("d1-0", "d1", 0, "It was held there."),
                Passage("d1-1", "d1", 1, "Tickets sold out.", False),
            ),
        ),
        Document("d2", "Bänd", (Passage("d2-0", "d2", 0, "Four members — ü."),)),
    ]
    assert Corpus(docs).fingerprint == "b32f5ae6c677f237"


@pytest.mark.parametrize("first", ["fingerprint", "ids"])
def test_one_pass_gives_fingerprint_and_ids(first):
    source = Counted([_doc("a", "x", "y"), _doc("b", "z"), _doc("c")])
    corpus = Corpus(source)
    getattr(corpus, first)
    ids, fingerprint = corpus.ids, corpus.fingerprint
    assert source.passes == 1
    assert fingerprint == Corpus(source.documents).fingerprint
    assert ids.passage_ids.tolist() == ["a-0", "a-1", "b-0"]
    assert ids.doc_ids.tolist() == ["a", "b", "c"]
    assert ids.doc_of.tolist() == [0, 0, 1] and ids.doc_of.dtype == np.int64


def test_ids_are_not_object_arrays_on_numpy_2():
    if not hasattr(np.dtypes, "StringDType"):
        pytest.skip("numpy < 2 has no StringDType; ids are object arrays there")
    ids = Corpus([_doc("a", "x")]).ids
    assert ids.passage_ids.dtype == np.dtypes.StringDType()
    assert ids.doc_ids.dtype == np.dtypes.StringDType()


@pytest.mark.parametrize(
    ("documents", "message"),
    [
        # the first id (in corpus order) seen before: b-0 (4th passage) before a-0 (5th)
        (
            [
                Document("a", "", (Passage("a-0", "a", 0, "x"), Passage("b-0", "a", 1, "x"))),
                Document("b", "", (Passage("c-0", "b", 0, "x"), Passage("b-0", "b", 1, "x"))),
                Document("c", "", (Passage("a-0", "c", 0, "x"),)),
            ],
            "passage id 'b-0' is used twice in the corpus; give every passage a unique id",
        ),
        (
            [_doc("a", "x"), _doc("b", "y"), Document("a", "", (Passage("z", "a", 0, "w"),))],
            "document id 'a' is used twice in the corpus; give every document a unique id",
        ),
    ],
)
def test_duplicate_ids_name_the_first_repeat(documents, message):
    corpus = Corpus(documents)
    assert len(corpus.fingerprint) == 16  # the fingerprint does not judge ids
    with pytest.raises(DaprError) as error:
        _ = corpus.ids
    assert str(error.value) == message


def test_lookups_match_a_dictionary_on_a_random_corpus():
    rng = np.random.default_rng(7)
    documents = [
        _doc(f"doc{d}", *["t"] * int(rng.integers(1, 6))) for d in rng.permutation(300).tolist()
    ]
    ids = Corpus(documents).ids
    doc_of = {p.id: d for d, doc in enumerate(documents) for p in doc.passages}
    position = {p.id: i for i, p in enumerate(p for doc in documents for p in doc.passages)}
    known = list(doc_of)
    needles = [known[i] for i in rng.integers(0, len(known), 500)] + ["nope", "doc1-99", ""]
    rng.shuffle(needles)
    assert ids.passage_codes(needles).tolist() == [position.get(n, -1) for n in needles]
    assert ids.document_of(np.array(needles, dtype=object)).tolist() == [
        doc_of.get(n, -1) for n in needles
    ]
    doc_position = {doc.id: d for d, doc in enumerate(documents)}
    doc_needles = ["doc5", "missing", "doc299", "doc5"]
    expected = [doc_position.get(n, -1) for n in doc_needles]
    assert ids.document_codes(doc_needles).tolist() == expected
    assert ids.passage_codes([]).tolist() == []


class Colliding(str):
    """A string whose hash is shared with every other Colliding."""

    def __hash__(self) -> int:
        return 7


def test_lookups_and_repeats_are_exact_when_hashes_collide():
    values = np.array([Colliding(v) for v in ["a", "b", "c", "b"]], dtype=object)
    index = IdIndex(values)
    needles = np.array([Colliding(v) for v in ["c", "a", "zz", "b"]], dtype=object)
    assert index.locate(needles).tolist() == [2, 0, -1, 1]  # b: its first position
    assert index.first_repeat() == "b"
    assert IdIndex(values[:3]).first_repeat() is None  # same hash, different strings


def test_hand_made_corpus_ids_of_object_arrays_work():
    ids = CorpusIds(
        passage_ids=np.array(["A-0", "B-0", "A-1"], dtype=object),
        doc_ids=np.array(["A", "B"], dtype=object),
        doc_of=np.array([0, 1, 0]),
    )
    assert ids.document_of(["A-1", "B-0", "C-0"]).tolist() == [0, 1, -1]


_PICKLED_ELSEWHERE = """
import pickle, sys
corpus = pickle.load(open(sys.argv[1], "rb"))
print(corpus.ids.document_of(["b-1", "a-0", "x"]).tolist(), corpus.ids.passage_codes(["b-0"]))
"""


def test_ids_pickled_into_a_process_with_another_hash_seed(tmp_path):
    # Python's string hashes differ between processes: a carried index must not be trusted
    made = tmp_path / "corpus.pkl"
    for n, built in enumerate(["fingerprint", "ids"]):
        script = (
            "import pickle, sys\nfrom dapr.data import Corpus, Document, Passage\n"
            "docs = [Document(d, '', tuple(Passage(f'{d}-{i}', d, i, 't') for i in range(2)))"
            " for d in 'ab']\n"
            f"corpus = Corpus(docs)\ncorpus.{built}\n"
            "pickle.dump(corpus, open(sys.argv[1], 'wb'))\n"
        )
        env = {**os.environ, "PYTHONHASHSEED": str(1 + n)}
        subprocess.run([sys.executable, "-c", script, made], check=True, env=env)
        out = subprocess.run(
            [sys.executable, "-c", _PICKLED_ELSEWHERE, made],
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "99"},
        ).stdout
        assert out.strip() == "[1, 0, -1] [2]", built
    corpus = Corpus([_doc("a", "x")])
    assert corpus.ids.passage_codes(["a-0"]).tolist() == [0]
    assert pickle.loads(pickle.dumps(corpus)).ids.passage_codes(["a-0"]).tolist() == [0]


def test_runner_and_evaluation_helpers_agree_with_dictionaries():
    rng = np.random.default_rng(3)
    documents = [_doc(f"d{d}", *["t"] * (1 + d % 4)) for d in range(60)]
    dataset_ids = Corpus(documents).ids
    owner = {p.id: doc.id for doc in documents for p in doc.passages}
    passages = [*owner, "ghost-0"]
    run = {
        f"q{q}": {p: float(rng.integers(0, 9)) for p in rng.choice(passages, 30, replace=False)}
        for q in range(8)
    }
    passage_run = Run.from_dict(run)
    document_run = Run.from_dict({"q0": {"d3": 1.0, "d7": 0.5, "zz": 0.2}})

    dataset = SimpleNamespace(corpus=SimpleNamespace(ids=dataset_ids))
    code = {d: i for i, d in enumerate(document_run.vocab.tolist())}
    expected = [code.get(owner.get(p), -1) for p in passage_run.vocab.tolist()]
    assert doc_codes(dataset, passage_run, document_run).tolist() == expected
    best: dict[str, dict[str, float]] = {}
    for q, ranked in run.items():
        docs = best[q] = {}
        for p, score in ranked.items():
            if p in owner:
                docs[owner[p]] = max(score, docs.get(owner[p], score))
    assert maxp(passage_run, dataset_ids).to_dict() == best
    qrels = {"q0": {"d1-0": 1, "d1-1": 2, "ghost-0": 1}, "q1": {"d2-0": 0}}
    assert document_qrels(qrels, dataset_ids) == {"q0": {"d1": 2}, "q1": {"d2": 0}}


@settings(max_examples=60, deadline=None)
@given(
    ids=st.lists(st.text(st.sampled_from('ab", \\\né[]\u2028'), max_size=6), max_size=30),
    block=st.integers(1, 40),
    ascii=st.booleans(),
)
def test_id_lists_read_a_block_at_a_time_as_json_reads_them(tmp_path_factory, ids, block, ascii):
    # quotes, separators and backslashes inside ids; blocks cutting them anywhere
    path = tmp_path_factory.mktemp("ids") / "ids.json"
    path.write_text(json.dumps(ids, ensure_ascii=ascii), encoding="utf-8")
    previous, ids_module._TEXT = ids_module._TEXT, block
    try:
        assert read_id_list(path).tolist() == ids
        assert read_id_list(path, len(ids)).tolist() == ids
    finally:
        ids_module._TEXT = previous


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{}", "not a JSON list of ids"),
        ('["a", 2]', "an id is not a string"),
        ('["a", "b', "Unterminated string"),
        ('["a", "b"]', "2 ids for 3 items"),
    ],
)
def test_a_damaged_id_list_is_named_with_its_fix(tmp_path, text, message):
    (tmp_path / "ids.json").write_text(text)
    with pytest.raises(DataError, match=message) as error:
        read_id_list(tmp_path / "ids.json", 3 if "items" in message else None)
    assert str(error.value).startswith(str(tmp_path / "ids.json"))
    assert str(error.value).endswith("delete the index to rebuild it")


def test_an_id_list_is_read_without_a_python_string_per_id(tmp_path, monkeypatch):
    monkeypatch.setattr(ids_module, "_TEXT", 1 << 16)
    ids = [f"doc{i}-{i % 97}" for i in range(300_000)]
    (tmp_path / "ids.json").write_text(json.dumps(ids))
    tracemalloc.start()
    try:
        loaded = read_id_list(tmp_path / "ids.json", len(ids))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert loaded.tolist() == ids
    # json.loads holds some 70 bytes an id; the array 16 (StringDType) or 8 + a string each
    per_id = 24 if loaded.dtype.kind == "T" else 90
    assert peak < per_id * len(ids), peak / len(ids)


def test_a_full_read_keeps_one_copy_of_the_hashes_and_joins_chunks_one_at_a_time(monkeypatch):
    handed: list = []
    real = IdIndex.__init__

    def watched(self, ids, hashes=None):
        handed.append(None if hashes is None else weakref.ref(hashes))
        real(self, ids, hashes)

    monkeypatch.setattr(IdIndex, "__init__", watched)
    monkeypatch.setattr(ids_module, "_CHUNK", 7)

    class Record:
        """Sees, when it is written, whether the hashes the indexes sorted are still held."""

        alive: list[bool] = []

        def recall(self):
            return None

        def keep(self, fingerprint, ids):
            self.alive = [ref() is not None for ref in handed if ref is not None]

    documents = [_doc(f"d{d}", *(f"t{i}" for i in range(5))) for d in range(9)]
    record = Record()
    ids = Corpus(Counted(documents), record).ids
    assert ids.passage_codes(["d8-4", "d0-0"]).tolist() == [44, 0]
    # both indexes took the pass's hashes, and by the time the record is written the unsorted
    # ones are gone: each index's sorted copy is the only one (8 bytes an id, 260 MB at
    # MIRACL's 32.8 million passages)
    assert len(handed) == 2 and record.alive == [False, False]
    column = ids_module.IdColumn()
    for i in range(20):
        column.add(str(i))
    joined, hashes = column.finish()
    assert joined.tolist() == [str(i) for i in range(20)] and len(hashes) == 20
    assert column._ids == [] and column._hashes == []  # the chunks are let go of
