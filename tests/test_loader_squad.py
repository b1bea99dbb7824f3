"""The squad adapter: a SQuAD-format JSON file (XQuAD English) as a dataset."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from dapr.data_loaders.squad import adapter

from dapr.datasets import load_dataset, read_dataset, write_dataset
from dapr.errors import DaprError, DataError

QUESTION = "56beb4343aeaaa14008c925b"


@pytest.fixture(scope="module")
def xquad(xquad_en: Path) -> Path:
    return xquad_en


@pytest.fixture(scope="module")
def raw(xquad: Path) -> dict:
    return json.loads(xquad.read_text(encoding="utf-8"))


def write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def article(title: str, *paragraphs: tuple[str, list[dict]]) -> dict:
    return {"title": title, "paragraphs": [{"context": c, "qas": q} for c, q in paragraphs]}


def test_xquad_counts_match_the_raw_file(xquad: Path, raw: dict) -> None:
    articles = raw["data"]
    paragraphs = [p for a in articles for p in a["paragraphs"]]
    questions = [q for p in paragraphs for q in p["qas"]]
    assert (len(articles), len(paragraphs), len(questions)) == (48, 240, 1190)

    dataset = adapter.build(xquad)
    documents = list(dataset.corpus)
    assert len(documents) == len(articles)
    assert sum(len(d.passages) for d in documents) == len(paragraphs)
    assert list(dataset.splits) == ["test"]
    test = dataset.split("test")
    assert len(test.queries) == len(test.qrels) == len(questions)
    assert all(len(judged) == 1 and set(judged.values()) == {1} for judged in test.qrels.values())
    assert dataset.name == "squad" and dataset.language == "en"


def test_documents_passages_and_queries_follow_the_articles(xquad: Path, raw: dict) -> None:
    dataset = adapter.build(xquad)
    documents = list(dataset.corpus)
    assert [d.id for d in documents] == [a["title"] for a in raw["data"]]  # no spaces in XQuAD
    first = documents[0]
    assert (first.id, first.title) == ("Super_Bowl_50", "Super Bowl 50")
    assert [p.id for p in first.passages] == [f"Super_Bowl_50-{i}" for i in range(5)]
    assert first.passages[0].text == raw["data"][0]["paragraphs"][0]["context"]
    test = dataset.split("test")
    assert test.queries[QUESTION] == "How many points did the Panthers defense surrender?"
    assert test.qrels[QUESTION] == {"Super_Bowl_50-0": 1}
    # every question's judged passage holds its answers, and is the paragraph it came from
    text = {p.id: p.text for p in dataset.corpus.passages()}
    for art in raw["data"]:
        for i, paragraph in enumerate(art["paragraphs"]):
            for qa in paragraph["qas"]:
                (judged,) = test.qrels[qa["id"]]
                assert judged == f"{art['title']}-{i}"
                assert all(ans["text"] in text[judged] for ans in qa["answers"])
                assert test.queries[qa["id"]] == qa["question"].strip()


def test_dev_share_moves_a_stable_hash_selected_share(xquad: Path, raw: dict) -> None:
    ids = [q["id"] for a in raw["data"] for p in a["paragraphs"] for q in p["qas"]]
    expected_dev = {
        qid
        for qid in ids
        if int.from_bytes(hashlib.sha256(qid.encode()).digest()[:8], "big") < 0.25 * 2**64
    }
    dataset = adapter.build(xquad, dev_share=0.25)
    assert list(dataset.splits) == ["dev", "test"]
    dev, test = dataset.split("dev"), dataset.split("test")
    assert set(dev.queries) == expected_dev
    assert set(test.queries) == set(ids) - expected_dev
    assert 200 < len(dev.queries) < 400  # about a quarter of 1,190
    assert adapter.build(xquad, dev_share=0.25).fingerprint == dataset.fingerprint
    assert adapter.build(xquad).fingerprint != dataset.fingerprint


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_round_trip_through_the_hub_layout(xquad: Path, tmp_path: Path, fmt: str) -> None:
    dataset = adapter.build(xquad, dev_share=0.2)
    write_dataset(dataset, tmp_path / "out", fmt)
    back = read_dataset(tmp_path / "out", "squad")
    assert back.fingerprint == dataset.fingerprint
    assert list(back.corpus) == list(dataset.corpus)
    assert back.splits == dataset.splits
    assert back.notes == dataset.notes


def test_registry_loads_it_from_a_path(xquad: Path) -> None:
    dataset = load_dataset("squad", path=str(xquad), language="en")
    assert len(dataset.split("test").queries) == 1190
    assert load_dataset("squad", path=xquad, dev_share=0.5).splits.keys() == {
        "dev",
        "test",
    }


def test_load_without_path_explains_the_path_argument() -> None:
    with pytest.raises(DaprError, match="give its path") as caught:
        load_dataset("squad")
    message = str(caught.value)
    assert "\n" not in message and "dataset_args: {path: ...}" in message


def test_load_without_path_reads_a_built_copy(
    xquad: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DAPR_HOME", str(tmp_path))
    dataset = adapter.build(xquad)
    write_dataset(dataset, adapter.prepared)
    assert load_dataset("squad").fingerprint == dataset.fingerprint


def test_squad2_unanswerable_and_empty_questions_are_skipped(tmp_path: Path) -> None:
    qas = [
        {"id": "q1", "question": "Who? ", "answers": [{"text": "A", "answer_start": 0}]},
        {"id": "q2", "question": "Why?", "answers": [], "is_impossible": True},
        {"id": "q3", "question": "  ", "answers": []},
    ]
    data = {
        "version": "v2.0",
        "data": [
            article("New York City", ("A b c.", qas), ("Second paragraph.", [])),
            article(
                "Empty",
            ),
        ],
    }
    dataset = adapter.build(write_json(tmp_path / "v2.json", data))
    (document,) = dataset.corpus
    assert (document.id, document.title) == ("New_York_City", "New York City")
    assert [p.id for p in document.passages] == ["New_York_City-0", "New_York_City-1"]
    assert dataset.split("test").queries == {"q1": "Who?"}
    assert dataset.split("test").qrels == {"q1": {"New_York_City-0": 1}}
    assert any("1 unanswerable" in note for note in dataset.notes)
    assert any("1 questions with an empty text" in note for note in dataset.notes)
    assert any("1 articles without paragraphs" in note for note in dataset.notes)


BAD_FILES = {
    "no data": ({"version": "1"}, "missing field 'data'"),
    "no title": ({"data": [{"paragraphs": []}]}, r"data\[0\]: missing field 'title'"),
    "no question": (
        {"data": [article("T", ("c", [{"id": "q"}]))]},
        r"data\[0\]\.paragraphs\[0\]\.qas\[0\]: missing field 'question'",
    ),
    "context not text": (
        {"data": [{"title": "T", "paragraphs": [{"context": 3, "qas": []}]}]},
        "field 'context' must be a string",
    ),
    "repeated id": (
        {"data": [article("T", ("c", [{"id": "q", "question": "a"}] * 2))]},
        r"qas\[1\]: field 'id' 'q' repeats .*qas\[0\]",
    ),
    "repeated title": (
        {"data": [article("A B", ("c", [])), article("A_B", ("d", []))]},
        r"data\[1\]: title 'A_B' gives doc id 'A_B', as .*data\[0\] does",
    ),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_files_name_the_file_and_place(tmp_path: Path, case: str) -> None:
    data, expected = BAD_FILES[case]
    path = write_json(tmp_path / "bad.json", data)
    with pytest.raises(DataError, match=expected) as caught:
        adapter.build(path)
    assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)


def test_unreadable_inputs(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="missing.json: no such file"):
        adapter.build(tmp_path / "missing.json")
    with pytest.raises(DataError, match="is a directory"):
        adapter.build(tmp_path)
    broken = tmp_path / "broken.json"
    broken.write_text('{"data": [\n{"title": }]}', encoding="utf-8")
    with pytest.raises(DataError, match=r"broken\.json:2: invalid JSON"):
        adapter.build(broken)
    latin = tmp_path / "latin.json"
    latin.write_bytes('{"data": [{"title": "café", "paragraphs": []}]}'.encode("latin-1"))
    with pytest.raises(DataError, match=r"latin\.json: not UTF-8"):
        adapter.build(latin)


def test_bad_options(xquad: Path) -> None:
    with pytest.raises(DataError, match="unknown option 'dev'; valid options: dev_share, language"):
        adapter.load(path=xquad, dev=0.1)
    for bad in ("a", True):
        with pytest.raises(DataError, match="option 'dev_share' must be a number, got"):
            adapter.load(path=xquad, dev_share=bad)
    for bad in (1.5, -0.1, 2):
        with pytest.raises(DataError, match="option 'dev_share' must be a number from 0 to 1"):
            adapter.load(path=xquad, dev_share=bad)
    with pytest.raises(DataError, match="option 'language' must be an ISO 639-1 code"):
        adapter.load(path=xquad, language="english")


def test_an_experiment_file_gives_the_path_in_dataset_args(xquad: Path, tmp_path: Path) -> None:
    from dapr.experiment.config import load

    experiment = tmp_path / "exp.yaml"
    experiment.write_text(
        f"dataset: squad\ndataset_args: {{path: {json.dumps(str(xquad))}, dev_share: 0.1}}\n"
        "retrievers: {bm25: {name: bm25}}\n",
        encoding="utf-8",
    )
    exp = load(experiment)
    dataset = load_dataset(exp.dataset, **exp.dataset_args)
    assert sum(len(s.queries) for s in dataset.splits.values()) == 1190
