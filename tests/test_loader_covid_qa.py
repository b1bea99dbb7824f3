"""COVID-QA: whole articles cut into paragraphs, questions judged by their answer offsets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dapr.data_loaders.covid_qa import adapter, paragraph_spans, split_by_article, windows

from dapr.cli import main
from dapr.datasets import load_dataset
from dapr.errors import DaprError, DataError


@pytest.fixture(scope="module")
def source(covid_qa_file: Path) -> Path:
    return covid_qa_file


@pytest.fixture(scope="module")
def raw(source: Path) -> dict:
    return json.loads(source.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def dataset(source: Path):
    return adapter.build(source)


def test_counts_of_the_real_file(dataset, raw: dict) -> None:
    documents = list(dataset.corpus)
    assert len(documents) == len(raw["data"]) == 98
    assert sum(len(d.passages) for d in documents) == 3108
    assert list(dataset.splits) == ["test"]
    test = dataset.split("test")
    assert len(test.queries) == len(test.qrels) == 1380
    assert sum(len(j) > 1 for j in test.qrels.values()) == 6  # answers across a boundary
    assert dataset.notes[1:] == (
        "6 answers cross a passage boundary and judge every passage they touch",
        "38 answer offsets corrected to the nearest occurrence of the answer text",
    )
    assert max(len(p.text.split()) for d in documents for p in d.passages) <= 350
    first = documents[0]
    assert first.id == "630" and first.title.startswith("Functional Genetic Variants in DC-SIGNR")
    assert first.passages[0].text == "https://www.ncbi.nlm.nih.gov/pmc/articles/PMC2752805/"


def test_every_judged_passage_holds_its_answer(dataset, raw: dict) -> None:
    text = {p.id: p.text for p in dataset.corpus.passages()}
    test = dataset.split("test")
    for article in raw["data"]:
        (paragraph,) = article["paragraphs"]
        for qa in paragraph["qas"]:
            qid = str(qa["id"])
            assert test.queries[qid] == qa["question"].strip()
            judged = sorted(test.qrels[qid], key=lambda p: int(p.rsplit("-", 1)[1]))
            assert all(p.startswith(f"{paragraph['document_id']}-") for p in judged)
            answer = " ".join(qa["answers"][0]["text"].split())
            assert answer in " ".join(text[p] for p in judged)
            if len(judged) == 1:
                assert answer in text[judged[0]]


def test_splits_by_article_keep_test_articles_out_of_training(source: Path) -> None:
    dataset = adapter.build(source, train_articles=0.5, dev_articles=0.1)
    assert list(dataset.splits) == ["train", "dev", "test"]
    doc_of = {p.id: p.doc_id for p in dataset.corpus.passages()}
    articles = {
        name: {doc_of[p] for judged in split.qrels.values() for p in judged}
        for name, split in dataset.splits.items()
    }
    assert {name: len(split.queries) for name, split in dataset.splits.items()} == {
        "train": 846,
        "dev": 84,
        "test": 450,
    }
    assert {name: len(docs) for name, docs in articles.items()} == {
        "train": 55,
        "dev": 8,
        "test": 35,
    }
    assert not articles["train"] & articles["test"] and not articles["dev"] & articles["test"]
    assert not articles["train"] & articles["dev"]
    # splitting again is stable, and a built copy is split as a fresh build is
    again = split_by_article(dataset, 0.5, 0.1)
    assert again.fingerprint == dataset.fingerprint
    assert split_by_article(adapter.build(source), 0.5, 0.1).fingerprint == dataset.fingerprint


def test_windows_cut_at_sentence_ends_then_at_words() -> None:
    text = "One two three. Four five six. Seven eight nine ten eleven. End two"
    cut = windows(text, (0, len(text)), 6)
    assert [text[s:e] for s, e in cut] == [
        "One two three. Four five six.",
        "Seven eight nine ten eleven.",
        "End two",
    ]
    long = " ".join(f"w{i}" for i in range(7)) + "."
    assert [long[s:e] for s, e in windows(long, (0, len(long)), 3)] == [
        "w0 w1 w2",
        "w3 w4 w5",
        "w6.",
    ]
    body = "Title\n\n  first\nline \n \n\nsecond\n\n"
    assert [body[s:e] for s, e in paragraph_spans(body, 5)] == ["first\nline", "second"]


def test_data_build_then_stats_prints_its_table(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.setenv("DAPR_HOME", str(tmp_path))
    with pytest.raises(DaprError, match="not fetched yet; run `dapr data build COVID-QA --down"):
        load_dataset("COVID-QA")
    assert main(["data", "build", "COVID-QA", "--source", str(source.parent)]) == 0
    capsys.readouterr()
    assert main(["data", "stats", "COVID-QA"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("dataset            COVID-QA (en)\ndocuments          98\n")
    assert "passages           3,108" in out and "test               1,380 queries" in out
    split = load_dataset("COVID-QA", train_articles=0.5)
    assert {name: len(s.queries) for name, s in split.splits.items()} == {
        "train": 846,
        "test": 534,
    }


def _file(tmp_path: Path, qas: list, context: str = "Title\n\nBody text.") -> Path:
    path = tmp_path / "bad.json"
    data = {"data": [{"paragraphs": [{"context": context, "document_id": 1, "qas": qas}]}]}
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


BAD = {
    "no answer_start": (
        [{"id": 1, "question": "q", "answers": [{"text": "Body"}]}],
        "",
        "missing field 'answer_start'",
    ),
    "offset outside": (
        [{"id": 1, "question": "q", "answers": [{"text": "Body", "answer_start": 99}]}],
        "",
        "answer_start 99 is outside the context",
    ),
    "text not in context": (
        [{"id": 1, "question": "q", "answers": [{"text": "Nope", "answer_start": 7}]}],
        "",
        'answer text "Nope" is not in the context',
    ),
    "id a list": (
        [{"id": [1], "question": "q", "answers": []}],
        "",
        "field 'id' must be a string or an integer",
    ),
    "blank context": ([], " \n ", "field 'context' is blank"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_files_name_the_file_and_place(tmp_path: Path, case: str) -> None:
    qas, context, expected = BAD[case]
    path = _file(tmp_path, qas, context or "Title\n\nBody text.")
    with pytest.raises(DataError, match=expected) as caught:
        adapter.build(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: data[0].paragraphs[0]") and "\n" not in message


def test_bad_options(source: Path) -> None:
    with pytest.raises(DataError, match="option 'train_articles' must be a share in"):
        adapter.load(path=source, train_articles=1.0)
    with pytest.raises(DataError, match="keep it below 1"):
        adapter.load(path=source, train_articles=0.6, dev_articles=0.4)
    with pytest.raises(DataError, match="option 'max_words' must be a positive integer"):
        adapter.load(path=source, max_words=0)
    with pytest.raises(DataError, match="unknown option 'dev_share'"):
        adapter.load(path=source, dev_share=0.1)
