"""The text-folder adapter: .txt/.md documents with separate queries and qrels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dapr.data_loaders.text_folder import adapter

from dapr.datasets import load_dataset, read_dataset, write_dataset
from dapr.errors import DaprError, DataError


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    write(docs / "guide.md", "# The Guide #\n\nFirst paragraph\nwraps here.\n\n## Part\n\nLast.\n")
    write(docs / "plain.txt", "\n\nOne.\n  \nTwo   words.\r\n\r\nThree.")
    write(docs / "sub" / "meeting notes.md", "Notes\n=====\nfirst line after the rule\n")
    write(docs / "sub" / "untitled.md", "No heading here.\n\n#hashtag is not a heading\n")
    write(docs / "empty.txt", "\n \n")
    write(docs / "title-only.md", "# Only a title\n")
    write(docs / ".hidden" / "secret.txt", "never read")
    write(docs / "readme.rst", "not a document")
    return docs


def test_documents_and_passages(folder: Path) -> None:
    dataset = adapter.build(folder)
    got = [(d.id, d.title, [p.text for p in d.passages]) for d in dataset.corpus]
    assert got == [
        ("guide", "The Guide", ["First paragraph wraps here.", "## Part", "Last."]),
        ("plain", "plain", ["One.", "Two words.", "Three."]),
        ("sub/meeting_notes", "Notes", ["first line after the rule"]),
        ("sub/untitled", "untitled", ["No heading here.", "#hashtag is not a heading"]),
    ]
    guide = next(iter(dataset.corpus))
    assert [(p.id, p.doc_id, p.position) for p in guide.passages] == [
        ("guide-0", "guide", 0),
        ("guide-1", "guide", 1),
        ("guide-2", "guide", 2),
    ]
    assert dataset.splits == {}
    assert any("2 files without text skipped" in note for note in dataset.notes)


def test_queries_tsv_with_trec_qrels(folder: Path, tmp_path: Path) -> None:
    queries = write(
        tmp_path / "q.tsv", "q1\twhat is the guide\nq2\t  how many words \nq3\tunused\n"
    )
    qrels = write(tmp_path / "qrels.txt", "q1 0 guide-0 1\nq2 0 plain-1 2\nq2 0 plain-2 0\n")
    dataset = adapter.build(folder, queries=str(queries), qrels=str(qrels), split="dev")
    assert list(dataset.splits) == ["dev"]
    dev = dataset.split("dev")
    assert dev.queries == {"q1": "what is the guide", "q2": "how many words"}
    assert dev.qrels == {"q1": {"guide-0": 1}, "q2": {"plain-1": 2, "plain-2": 0}}
    assert any("1 queries without judgements" in note for note in dataset.notes)


def test_queries_jsonl_with_beir_qrels(folder: Path, tmp_path: Path) -> None:
    queries = write(tmp_path / "q.jsonl", json.dumps({"_id": "q1", "text": "notes"}) + "\n")
    qrels = write(
        tmp_path / "qrels.tsv", "query-id\tcorpus-id\tscore\nq1\tsub/meeting_notes-0\t1\n"
    )
    test = adapter.build(folder, queries=queries, qrels=qrels).split("test")
    assert test.queries == {"q1": "notes"}
    assert test.qrels == {"q1": {"sub/meeting_notes-0": 1}}


@pytest.fixture(scope="module")
def xquad_folder(xquad_en: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """XQuAD English written as one markdown file per article, queries TSV and TREC qrels."""
    raw = json.loads(xquad_en.read_text(encoding="utf-8"))
    root = tmp_path_factory.mktemp("xquad-text")
    queries, qrels, texts = [], [], []
    for a, art in enumerate(raw["data"]):
        doc_id = f"{a:02d}-{art['title']}"
        contexts = [p["context"] for p in art["paragraphs"]]
        write(root / "docs" / f"{doc_id}.md", f"# {art['title']}\n\n" + "\n\n".join(contexts))
        for p, paragraph in enumerate(art["paragraphs"]):
            texts.append(" ".join(paragraph["context"].split()))
            for qa in paragraph["qas"]:
                queries.append(f"{qa['id']}\t{qa['question']}\n")
                qrels.append(f"{qa['id']} 0 {doc_id}-{p} 1\n")
    return {
        "docs": root / "docs",
        "queries": write(root / "queries.tsv", "".join(queries)),
        "qrels": write(root / "qrels.txt", "".join(qrels)),
        "articles": len(raw["data"]),
        "texts": texts,
        "questions": len(queries),
    }


def test_xquad_as_markdown_files(xquad_folder: dict) -> None:
    dataset = adapter.build(
        xquad_folder["docs"], queries=xquad_folder["queries"], qrels=xquad_folder["qrels"]
    )
    documents = list(dataset.corpus)
    assert len(documents) == xquad_folder["articles"] == 48
    assert [p.text for p in dataset.corpus.passages()] == xquad_folder["texts"]
    assert len(xquad_folder["texts"]) == 240
    assert (documents[0].id, documents[0].title) == ("00-Super_Bowl_50", "Super_Bowl_50")
    test = dataset.split("test")
    assert len(test.queries) == xquad_folder["questions"] == 1190
    assert test.qrels["56beb4343aeaaa14008c925b"] == {"00-Super_Bowl_50-0": 1}


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_round_trip_through_the_hub_layout(xquad_folder: dict, tmp_path: Path, fmt: str) -> None:
    dataset = adapter.build(
        xquad_folder["docs"], queries=xquad_folder["queries"], qrels=xquad_folder["qrels"]
    )
    write_dataset(dataset, tmp_path / "out", fmt)
    back = read_dataset(tmp_path / "out", "text-folder")
    assert back.fingerprint == dataset.fingerprint
    assert list(back.corpus) == list(dataset.corpus)
    assert back.splits == dataset.splits
    assert back.notes == dataset.notes


def test_registry_loads_it_from_a_path(xquad_folder: dict) -> None:
    dataset = load_dataset(
        "text-folder",
        path=str(xquad_folder["docs"]),
        queries=str(xquad_folder["queries"]),
        qrels=str(xquad_folder["qrels"]),
    )
    assert len(dataset.split("test").queries) == 1190
    with pytest.raises(DaprError, match="give its path"):
        load_dataset("text-folder")


def test_folder_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="nowhere: not a directory"):
        adapter.build(tmp_path / "nowhere")
    empty = tmp_path / "empty"
    write(empty / "notes.rst", "not a document")
    with pytest.raises(DataError, match=r"empty: no \.txt or \.md files"):
        adapter.build(empty)
    write(empty / "blank.txt", "\n")
    with pytest.raises(DataError, match="none of its 1 files has any text"):
        adapter.build(empty)


def test_a_non_utf8_file_is_named(folder: Path) -> None:
    (folder / "latin.txt").write_bytes("First.\n\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin\.txt:3: not UTF-8 text") as caught:
        adapter.build(folder)
    assert "\n" not in str(caught.value)


def test_two_files_giving_one_doc_id(folder: Path) -> None:
    write(folder / "guide.txt", "Another guide.")
    with pytest.raises(DataError, match=r"guide\.txt: gives doc id 'guide', as .*guide\.md does"):
        adapter.build(folder)


@pytest.fixture
def judged(folder: Path, tmp_path: Path) -> dict:
    return {
        "queries": write(tmp_path / "q.tsv", "q1\tguide\nq2\tplain\n"),
        "qrels": write(tmp_path / "qrels.txt", "q1 0 guide-0 1\n"),
    }


BAD_QRELS = {
    "unknown passage": ("q1 0 guide-0 1\nq1 0 guide-9 1\n", r"qrels\.txt:2: passage 'guide-9'"),
    "a document id": ("q1 0 plain 1\n", r"qrels\.txt:1: passage 'plain' .* is a document"),
    "unknown query": ("q1 0 guide-0 1\n\nq7 0 guide-0 1\n", r"qrels\.txt:3: query 'q7' is not in"),
    "three columns": ("q1 guide-0 1\n", r"qrels\.txt:1: expected 4 columns"),
    "grade not integer": ("q1 0 guide-0 yes\n", r"qrels\.txt:1: field 'grade' must be an integer"),
    "BEIR row too short": ("q1\tguide-0\t1\nq2\tplain-0\n", r"qrels\.txt:2: expected 3 tab-sep"),
}


@pytest.mark.parametrize("case", list(BAD_QRELS))
def test_bad_qrels_name_file_line_and_id(judged: dict, folder: Path, case: str) -> None:
    text, expected = BAD_QRELS[case]
    write(judged["qrels"], text)
    with pytest.raises(DataError, match=expected) as caught:
        adapter.build(folder, **judged)
    assert str(caught.value).startswith(str(judged["qrels"]))
    assert "\n" not in str(caught.value)


BAD_QUERIES = {
    "no tab": ("q1 guide\n", r"q\.tsv:1: no tab between query id and text"),
    "repeated id": ("q1\tguide\nq1\tagain\n", r"q\.tsv:2: query id 'q1' repeats .*q\.tsv:1"),
    "empty text": ("q1\t \n", r"q\.tsv:1: query 'q1' has an empty text"),
    "empty id": ("\tguide\n", r"q\.tsv:1: the query id is empty"),
}


@pytest.mark.parametrize("case", list(BAD_QUERIES))
def test_bad_queries_name_file_and_line(judged: dict, folder: Path, case: str) -> None:
    text, expected = BAD_QUERIES[case]
    write(judged["queries"], text)
    with pytest.raises(DataError, match=expected):
        adapter.build(folder, **judged)


def test_bad_options(folder: Path, judged: dict, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="option 'queries' needs option 'qrels' too"):
        adapter.build(folder, queries=judged["queries"])
    with pytest.raises(DataError, match=r"missing\.tsv: no such file"):
        adapter.build(folder, queries=tmp_path / "missing.tsv", qrels=judged["qrels"])
    with pytest.raises(DataError, match="unknown option 'topics'; valid options: queries, qrels"):
        adapter.load(path=folder, topics="x")
    with pytest.raises(DataError, match="option 'qrels' must be a path, got 3"):
        adapter.load(path=folder, queries=judged["queries"], qrels=3)
    with pytest.raises(DataError, match="option 'split' must be a plain name .*, got \"../x\""):
        adapter.build(folder, split="../x", **judged)
