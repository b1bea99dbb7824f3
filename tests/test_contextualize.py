"""The contextualization pipeline: chains, the per-document store, worker processes, the cost."""

import json
import os
import sqlite3
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dapr import registry
from dapr.cli import main
from dapr.contextualizers.precomputed import Precomputed
from dapr.data import Document, Passage
from dapr.errors import DaprError
from dapr.experiment import contextualize
from dapr.experiment.chain import WARM_UP, Chain, ContextStep
from dapr.experiment.contextualize import CHUNK, Cost, contextualize_corpus
from dapr.experiment.pools import ProcessPool
from dapr.store.contexts import ContextStore


class Shout:
    """Upper-cases every passage; counts its calls (in this process)."""

    version = "1"
    parallel = False
    calls = 0

    def contextualize(self, document):
        Shout.calls += document.id != WARM_UP.id
        return [p.text.upper() for p in document.passages]


class Tag:
    """Appends the id of the process that computed it: shows where the work ran."""

    version = "1"
    parallel = True

    def contextualize(self, document):
        return [f"{p.text} <{os.getpid()}>" for p in document.passages]


class Broken:
    version = "1"
    parallel = False

    def contextualize(self, document):
        return ["only one"]


class SlowStart:
    """Takes a second to load its model at first use, then no time at all."""

    version = "1"
    parallel = False

    def __init__(self):
        self.loaded = False

    def contextualize(self, document):
        if not self.loaded:
            time.sleep(1.0)
            self.loaded = True
        return [p.text for p in document.passages]


TEST_STEPS = {"shout": Shout, "tag": Tag, "broken": Broken, "slow-start": SlowStart}


@pytest.fixture(autouse=True, scope="module")
def _registered():
    for name, component in TEST_STEPS.items():
        registry.contextualizers.add(name, component)
    yield
    for name in TEST_STEPS:
        registry.contextualizers.remove(name)


def _doc(n: int, passages: int = 2) -> Document:
    return Document(
        f"d{n}",
        f"Title {n}",
        tuple(Passage(f"d{n}-{i}", f"d{n}", i, f"text {n} {i}") for i in range(passages)),
    )


def _run(documents, steps, root, workers=1):
    chain = Chain([ContextStep(s) if isinstance(s, str) else s for s in steps])
    cost = Cost(chain.label)
    out = [texts for _, texts in contextualize_corpus(documents, chain, root, cost, workers)]
    return out, cost


def test_steps_apply_in_order(tmp_path):
    title_then_shout, _ = _run([_doc(1)], ["title", "shout"], tmp_path)
    shout_then_title, _ = _run([_doc(1)], ["shout", "title"], tmp_path)
    assert title_then_shout == [["TITLE 1 TEXT 1 0", "TITLE 1 TEXT 1 1"]]
    assert shout_then_title == [["Title 1 TEXT 1 0", "Title 1 TEXT 1 1"]]


def test_store_serves_documents_already_done_and_computes_only_changed_ones(tmp_path):
    documents = [_doc(n) for n in range(5)]
    Shout.calls = 0
    first, cost = _run(documents, ["shout"], tmp_path)
    assert Shout.calls == 5 and cost.computed == 5 and cost.documents == 5
    again, cost = _run(documents, ["shout"], tmp_path)
    assert again == first and Shout.calls == 5 and cost.computed == 0
    assert cost.words == 5 * 2 * 3 and cost.seconds > 0  # the recorded times come back
    changed = [*documents[:4], _doc(99)]
    _, cost = _run(changed, ["shout"], tmp_path)
    assert Shout.calls == 6 and cost.computed == 1


def test_an_interrupted_pass_resumes_without_redoing_work(tmp_path):
    documents = [_doc(n) for n in range(3 * CHUNK)]
    chain = Chain([ContextStep("shout")])
    Shout.calls = 0
    stream = contextualize_corpus(documents, chain, tmp_path, Cost("shout"))
    for _ in range(CHUNK + 3):  # stop in the middle of the second chunk
        next(stream)
    stream.close()
    store = ContextStore.for_step(tmp_path, chain.identity()[0]).path
    stored = sqlite3.connect(store).execute("SELECT COUNT(*) FROM documents").fetchone()[0]
    assert stored == Shout.calls == 2 * CHUNK
    out, cost = _run(documents, ["shout"], tmp_path)
    assert cost.computed == CHUNK and Shout.calls == 3 * CHUNK
    assert out[0] == ["TEXT 0 0", "TEXT 0 1"] and len(out) == 3 * CHUNK


def test_a_chain_reuses_what_its_steps_computed_in_other_chains(tmp_path):
    documents = [_doc(n) for n in range(4)]
    Shout.calls = 0
    alone, cost = _run(documents, ["shout"], tmp_path)
    assert Shout.calls == 4 and cost.computed == 4
    titled, cost = _run(documents, ["shout", "title"], tmp_path)
    assert Shout.calls == 4 and cost.computed == 4  # only the title step ran
    assert titled[0] == [f"Title 0 {t}" for t in alone[0]]
    _, cost = _run(documents, ["shout", "title"], tmp_path)
    assert cost.computed == 0 and cost.seconds > 0
    _, cost = _run(documents, ["title"], tmp_path)
    assert cost.computed == 4  # title now reads the passages as they are: new input


def test_worker_processes_give_the_same_texts_in_corpus_order(monkeypatch, tmp_path):
    monkeypatch.setattr(contextualize, "POOL_WORDS", 0)
    documents = [_doc(n) for n in range(3 * CHUNK)]
    parallel, cost = _run(documents, ["tag", "title"], tmp_path / "a", workers=2)
    assert cost.workers == 2 and cost.computed == len(documents)
    pids = {text.rsplit("<", 1)[1] for texts in parallel for text in texts}
    assert f"{os.getpid()}>" not in pids  # computed in the workers, not here
    strip = [[t.rsplit(" <", 1)[0] for t in texts] for texts in parallel]
    assert strip == [[f"Title {n} text {n} {i}" for i in range(2)] for n in range(3 * CHUNK)]


def _where(texts: list[list[str]]) -> tuple[list[list[str]], set[str]]:
    """Texts of :class:`Tag` without the process ids, and those ids."""
    pids = {text.rsplit("<", 1)[1].rstrip(">") for texts in texts for text in texts}
    return [[t.rsplit(" <", 1)[0] for t in texts] for texts in texts], pids


def test_a_small_corpus_is_contextualized_without_worker_processes(monkeypatch, tmp_path):
    """Three chunks of a step asking for workers, far fewer words than the threshold: computed
    here, the texts those of the workers."""
    documents = [_doc(n) for n in range(3 * CHUNK)]
    monkeypatch.setattr(contextualize, "POOL_WORDS", 0)
    pooled, _ = _run(documents, ["tag", "title"], tmp_path / "pooled", workers=2)
    monkeypatch.undo()

    def refuse(*_):
        raise AssertionError("worker processes started for a small corpus")

    monkeypatch.setattr(ProcessPool, "submit", refuse)
    here, cost = _run(documents, ["tag", "title"], tmp_path / "here", workers=16)
    assert cost.workers == 1 and cost.computed == len(documents)
    assert _where(here)[1] == {str(os.getpid())} and str(os.getpid()) not in _where(pooled)[1]
    assert _where(here)[0] == _where(pooled)[0]
    monkeypatch.setattr(contextualize, "POOL_WORDS", 0)  # one chunk: one worker would not help
    alone, cost = _run(documents[:CHUNK], ["tag"], tmp_path / "alone", workers=16)
    assert cost.workers == 1 and _where(alone)[1] == {str(os.getpid())}


def test_workers_start_at_the_threshold_also_after_reading_ahead(monkeypatch, tmp_path):
    documents = [_doc(n) for n in range(3 * CHUNK)]  # 6 words each
    total = 6 * len(documents)
    monkeypatch.setattr(contextualize, "POOL_WORDS", total + 1)
    below, cost = _run(documents, ["tag"], tmp_path / "below", workers=2)
    assert cost.workers == 1 and _where(below)[1] == {str(os.getpid())}
    monkeypatch.setattr(contextualize, "POOL_WORDS", total)
    at, cost = _run(documents, ["tag"], tmp_path / "at", workers=2)
    assert cost.workers == 2 and str(os.getpid()) not in _where(at)[1]
    # read ahead one chunk at most: the first two chunks here, the third in a worker
    monkeypatch.setattr(contextualize, "POOL_WORDS", 6 * 2 * CHUNK + 1)
    monkeypatch.setattr(contextualize, "AHEAD", 1)
    mixed, cost = _run(documents, ["tag"], tmp_path / "mixed", workers=2)
    places = [_where([texts])[1] for texts in mixed]
    assert places[: 2 * CHUNK] == [{str(os.getpid())}] * (2 * CHUNK)
    assert str(os.getpid()) not in set().union(*places[2 * CHUNK :]) and cost.workers == 1
    assert _where(below)[0] == _where(at)[0] == _where(mixed)[0]


def test_loading_a_model_is_not_timed_as_work(tmp_path):
    _, cost = _run([_doc(n) for n in range(3)], ["slow-start"], tmp_path)
    assert cost.wall_seconds >= 1.0 and cost.seconds < 0.5 and cost.computed == 3


def test_a_step_returning_the_wrong_number_of_texts_is_named(tmp_path):
    with pytest.raises(
        DaprError,
        match="contextualizer 'broken' returned 1 values for document "
        "'d1' of 2 passages; it must return one string per passage",
    ):
        _run([_doc(1)], ["broken"], tmp_path)


def test_the_same_document_twice_is_computed_once(tmp_path):
    Shout.calls = 0
    out, cost = _run([_doc(1), _doc(1)], ["shout"], tmp_path)
    assert out[0] == out[1] and Shout.calls == 1 and cost.computed == 1 and cost.documents == 2


def test_cost_speed_and_estimate():
    cost = Cost("x", documents=10, words=5000, seconds=2.0, corpus_words=50_000)
    assert cost.words_per_second == 2500
    assert cost.estimated_seconds == pytest.approx(20.0)
    assert cost.as_dict()["estimated_process_hours"] == round(20 / 3600, 4)


# ----------------------------------------------------------------------------- precomputed


def _published(root, keyphrases_rows=None, coref_rows=None):
    if keyphrases_rows is not None:
        (root / "keyphrases").mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(keyphrases_rows), root / "keyphrases/test-0000.parquet")
    if coref_rows is not None:
        (root / "corpus_coref").mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(coref_rows), root / "corpus_coref/test-0000.parquet")
    return root


def test_precomputed_keyphrases_and_coref(tmp_path):
    root = _published(
        tmp_path / "ds",
        [
            {"doc_id": "d1", "keyphrases": ["half moon", "putney"]},
            {"doc_id": "d2", "keyphrases": ["venue", "music"]},
        ],
        [
            {"_id": "d1-0", "text": "The venue (The Half Moon) opened."},
            {"_id": "d1-1", "text": "It (The Half Moon) closed."},
        ],
    )
    keyphrases = Precomputed("keyphrases", str(root))
    assert keyphrases.contextualize(_doc(1)) == [
        "half moon putney text 1 0",
        "half moon putney text 1 1",
    ]
    joined = Precomputed("keyphrases", str(root), separator="; ")
    assert joined.contextualize(_doc(2, 1)) == ["venue; music text 2 0"]
    coref = Precomputed("coref", str(root))
    assert coref.contextualize(_doc(1)) == [
        "The venue (The Half Moon) opened.",
        "It (The Half Moon) closed.",
    ]
    with pytest.raises(DaprError, match=r"no row for passage 'd2-0' \(document 'd2'\)"):
        coref.contextualize(_doc(2, 1))


def test_precomputed_keyphrases_as_one_string_in_json_lines(tmp_path):
    (tmp_path / "keyphrases").mkdir()
    (tmp_path / "keyphrases" / "all.jsonl").write_text('{"_id": "d1", "doc_summary": "a b"}\n')
    assert Precomputed("keyphrases", str(tmp_path)).contextualize(_doc(1, 1)) == ["a b text 1 0"]


def test_precomputed_reports_a_missing_table_and_bad_rows(tmp_path):
    with pytest.raises(DaprError, match="no published corpus_coref table; fetch the dataset"):
        Precomputed("coref", str(tmp_path)).contextualize(_doc(1))
    root = _published(tmp_path / "bad", [{"doc_id": "d1", "phrases": ["x"]}])
    with pytest.raises(DaprError, match=r"test-0000.parquet: row 1: a keyphrases row needs"):
        Precomputed("keyphrases", str(root)).contextualize(_doc(1))
    with pytest.raises(DaprError, match="kind 'summary' is not one of: keyphrases, coref"):
        Precomputed("summary")


# ----------------------------------------------------------------------------- run and CLI


def test_a_run_writes_the_cost_beside_the_results_and_reuses_the_store(
    wiki_slice, tmp_path, capsys
):
    dataset, _ = wiki_slice
    experiment = tmp_path / "ctx.yaml"
    experiment.write_text(
        f"dataset: {dataset}\nretrievers:\n"
        "  titled: {name: bm25, contextualizer: [shout, {name: title}]}\n"
    )
    assert main(["run", str(experiment), "--out", str(tmp_path / "out")]) == 0
    table = (tmp_path / "out" / "contextualization.md").read_text().splitlines()
    assert table[0].startswith("| approach | system | speed (words/s) | total latency |")
    assert table[0].endswith("| nDCG@10 |")
    first = table[2].split(" | ")
    assert first[:2] == ["| shout + title", "titled"] and first[5] == "12"  # computed now
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    recorded = metrics["contextualization"]["titled"]
    assert recorded["documents"] == 12 and recorded["words_per_second"] > 0
    assert first[-1].rstrip(" |") == f"{metrics['systems']['titled']['mean']['nDCG@10']:.4f}"

    new_index = ["--set", "retrievers.titled.args.k1=1.2", "--out", str(tmp_path / "b")]
    assert main(["run", str(experiment), *new_index]) == 0
    again = (tmp_path / "b" / "contextualization.md").read_text().splitlines()[2].split(" | ")
    assert again[5] == "0"  # a new index, built from the stored texts
    assert again[2] == first[2]  # at the speed recorded when they were computed
    capsys.readouterr()


def test_cli_contextualize_estimates_the_whole_corpus_from_a_sample(wiki_slice, capsys):
    dataset, _ = wiki_slice
    assert main(["contextualize", str(dataset), "-c", "shout", "--sample", "3"]) == 0
    row = capsys.readouterr().out.splitlines()[2].split(" | ")
    assert row[0] == "| shout" and row[3].endswith("(estimated)") and row[4] == "3"
    assert main(["contextualize", str(dataset), "-c", "{name: shout}", "-c", "title"]) == 0
    row = capsys.readouterr().out.splitlines()[2].split(" | ")
    assert row[0] == "| shout + title" and "estimated" not in row[3] and row[4] == "12"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-c", "nope"], "unknown contextualizer 'nope'"),
        (["-c", "{name: title, args: {x: 1}}"], "unknown key 'steps[0].args.x'"),
        (["-c", "title", "--sample", "0"], "--sample must be a positive integer, got 0"),
    ],
)
def test_cli_contextualize_bad_input(wiki_slice, capsys, argv, message):
    dataset, _ = wiki_slice
    assert main(["contextualize", str(dataset), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_cost_table_figures_stay_sensible():
    """A pass too quick to time (titles) shows a bound, not millions of words per second, and
    the workers are those that got work, not those asked for."""
    from dapr.experiment.summary import cost_rows

    quick = Cost("title", documents=100, words=41_000, seconds=0.001, workers=2)
    slow = Cost("keyphrases", documents=100, words=41_000, seconds=10.0, workers=2)
    rows = cost_rows({"quick": quick, "slow": slow}, of="dataset")
    assert rows[0]["speed (words/s)"] == "> 820,000 (under 0.05 s in all)"
    assert rows[1]["speed (words/s)"] == "4,100.0"


def test_workers_are_those_that_got_work(monkeypatch, tmp_path):
    monkeypatch.setattr(contextualize, "POOL_WORDS", 0)
    documents = [
        Document(f"d{i}", "T", (Passage(f"d{i}-0", f"d{i}", 0, "a b c"),)) for i in range(CHUNK + 1)
    ]
    chain = Chain([ContextStep("tag")])  # parallel: worker processes, two chunks
    cost = Cost(chain.label)
    texts = list(contextualize_corpus(documents, chain, tmp_path, cost, workers=50))
    assert len(texts) == CHUNK + 1 and f"<{os.getpid()}>" not in texts[0][1][0]  # in a worker
    assert cost.workers == 2
