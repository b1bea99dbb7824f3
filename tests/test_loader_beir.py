"""The beir adapter: a BEIR-format folder (here made from XQuAD English, and by hand)."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from dapr.data_loaders.beir import adapter

from dapr.datasets import load_dataset, read_dataset, write_dataset
from dapr.errors import DaprError, DataError

HEADER = "query-id\tcorpus-id\tscore\n"


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def write_qrels(path: Path, rows: list[tuple[str, str, int]], header: bool = True) -> None:
    path.parent.mkdir(exist_ok=True)
    lines = [f"{q}\t{c}\t{s}\n" for q, c, s in rows]
    path.write_text((HEADER if header else "") + "".join(lines), encoding="utf-8")


@pytest.fixture(scope="module")
def xquad_beir(xquad_en: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """XQuAD English as BEIR: a corpus entry per paragraph (titled by its article), questions of
    even articles judged in test.tsv, of odd ones in dev.tsv, plus one query never judged."""
    raw = json.loads(xquad_en.read_text(encoding="utf-8"))
    folder = tmp_path_factory.mktemp("xquad-beir")
    corpus, queries, test, dev = [], [], [], []
    for a, art in enumerate(raw["data"]):
        for p, paragraph in enumerate(art["paragraphs"]):
            cid = f"c{a}.{p}"
            corpus.append(
                {"_id": cid, "title": art["title"], "text": paragraph["context"],
                 "metadata": {"article": a}}
            )  # fmt: skip
            for qa in paragraph["qas"]:
                queries.append({"_id": qa["id"], "text": qa["question"]})
                (test if a % 2 == 0 else dev).append((qa["id"], cid, 1))
    queries.append({"_id": "unjudged", "text": "a query without judgements"})
    write_jsonl(folder / "corpus.jsonl", corpus)
    write_jsonl(folder / "queries.jsonl", queries)
    write_qrels(folder / "qrels" / "test.tsv", test)
    write_qrels(folder / "qrels" / "dev.tsv", dev)
    return folder


@pytest.fixture(scope="module")
def raw_counts(xquad_en: Path) -> dict[str, int]:
    raw = json.loads(xquad_en.read_text(encoding="utf-8"))
    arts = raw["data"]
    return {
        "articles": len(arts),
        "paragraphs": sum(len(a["paragraphs"]) for a in arts),
        "test": sum(len(p["qas"]) for a in arts[::2] for p in a["paragraphs"]),
        "dev": sum(len(p["qas"]) for a in arts[1::2] for p in a["paragraphs"]),
    }


def test_every_entry_is_its_own_document_by_default(
    xquad_beir: Path, raw_counts: dict[str, int]
) -> None:
    dataset = adapter.build(xquad_beir)
    documents = list(dataset.corpus)
    assert len(documents) == raw_counts["paragraphs"] == 240
    assert all(len(d.passages) == 1 and d.passages[0].id == d.id for d in documents)
    assert (documents[0].id, documents[0].title) == ("c0.0", "Super_Bowl_50")
    assert any("no document grouping" in note for note in dataset.notes)
    assert list(dataset.splits) == ["dev", "test"]
    assert len(dataset.split("test").queries) == raw_counts["test"]
    assert len(dataset.split("dev").queries) == raw_counts["dev"]
    assert raw_counts["test"] + raw_counts["dev"] == 1190
    assert dataset.split("test").qrels["56beb4343aeaaa14008c925b"] == {"c0.0": 1}
    assert all("unjudged" not in split.queries for split in dataset.splits.values())


def test_group_by_title_makes_a_document_per_article(
    xquad_beir: Path, raw_counts: dict[str, int]
) -> None:
    dataset = adapter.build(xquad_beir, group_by="title")
    documents = list(dataset.corpus)
    assert len(documents) == raw_counts["articles"] == 48
    assert sum(len(d.passages) for d in documents) == 240
    first = documents[0]
    assert (first.id, first.title) == ("Super_Bowl_50", "Super_Bowl_50")
    assert [(p.id, p.position) for p in first.passages] == [(f"c0.{i}", i) for i in range(5)]
    assert any("group_by=title" in note for note in dataset.notes)
    # qrels still name the entries, so they are unchanged
    assert dataset.splits == adapter.build(xquad_beir).splits


def test_group_by_a_metadata_field(xquad_beir: Path) -> None:
    documents = list(adapter.build(xquad_beir, group_by="article").corpus)
    assert [d.id for d in documents] == [str(a) for a in range(48)]
    assert documents[1].title == "Warsaw"
    assert adapter.build(xquad_beir, group_by="none").fingerprint == (
        adapter.build(xquad_beir).fingerprint
    )


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
@pytest.mark.parametrize("group_by", ["none", "title"])
def test_round_trip_through_the_hub_layout(
    xquad_beir: Path, tmp_path: Path, fmt: str, group_by: str
) -> None:
    dataset = adapter.build(xquad_beir, group_by=group_by)
    write_dataset(dataset, tmp_path / "out", fmt)
    back = read_dataset(tmp_path / "out", "beir")
    assert back.fingerprint == dataset.fingerprint
    assert list(back.corpus) == list(dataset.corpus)
    assert back.splits == dataset.splits
    assert back.notes == dataset.notes


def test_gzip_files_read_the_same(xquad_beir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "packed"
    shutil.copytree(xquad_beir, folder)
    for path in [folder / "corpus.jsonl", folder / "queries.jsonl", folder / "qrels" / "dev.tsv"]:
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes()))
        path.unlink()
    assert adapter.build(folder).fingerprint == adapter.build(xquad_beir).fingerprint


def test_registry_loads_it_from_a_path(xquad_beir: Path) -> None:
    dataset = load_dataset("beir", path=str(xquad_beir), group_by="title")
    assert len(list(dataset.corpus)) == 48
    with pytest.raises(DaprError, match="give its path"):
        load_dataset("beir")


@pytest.fixture
def small(tmp_path: Path) -> Path:
    folder = tmp_path / "small"
    folder.mkdir()
    write_jsonl(
        folder / "corpus.jsonl",
        [
            {"_id": "d1", "title": "One", "text": "first"},
            {"_id": "d2", "text": "no title"},
            {"_id": "d3", "title": None, "text": "null title", "metadata": {}},
        ],
    )
    write_jsonl(folder / "queries.jsonl", [{"_id": "q1", "text": "what"}])
    write_qrels(folder / "qrels" / "test.tsv", [("q1", "d1", 0), ("q1", "d2", 2), ("q1", "d1", 1)])
    return folder


def test_titles_are_optional_and_repeated_pairs_keep_the_higher_grade(small: Path) -> None:
    dataset = adapter.build(small, relevance_level=2, language="de")
    assert [(d.id, d.title) for d in dataset.corpus] == [("d1", "One"), ("d2", ""), ("d3", "")]
    assert dataset.split("test").qrels == {"q1": {"d1": 1, "d2": 2}}
    assert (dataset.relevance_level, dataset.language) == (2, "de")


def test_the_qrels_header_is_optional(small: Path) -> None:
    write_qrels(small / "qrels" / "test.tsv", [("q1", "d3", 1)], header=False)
    assert adapter.build(small).split("test").qrels == {"q1": {"d3": 1}}


def _corrupt(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


BAD = {
    "repeated _id": (
        "corpus.jsonl",
        '{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n',
        r"corpus\.jsonl:2: field '_id' 'a' repeats .*corpus\.jsonl:1",
    ),
    "invalid JSON": ("corpus.jsonl", '{"_id": "a", "text": "x"}\n{"_id"\n', r"corpus\.jsonl:2"),
    "no text": ("corpus.jsonl", '{"_id": "a"}\n', r"corpus\.jsonl:1: missing field 'text'"),
    "id not text": ("queries.jsonl", '{"_id": 5, "text": "x"}\n', r"queries\.jsonl:1: field '_id'"),
    "repeated query": (
        "queries.jsonl",
        '{"_id": "q1", "text": "x"}\n{"_id": "q1", "text": "y"}\n',
        r"queries\.jsonl:2: field '_id' 'q1' repeats",
    ),
    "unknown corpus-id": (
        "qrels/test.tsv",
        HEADER + "q1\td1\t1\nq1\tnope\t1\n",
        r"test\.tsv:3: corpus-id 'nope' is not in corpus\.jsonl",
    ),
    "unknown query-id": (
        "qrels/test.tsv",
        HEADER + "q9\td1\t1\n",
        r"test\.tsv:2: query-id 'q9' is not in queries\.jsonl",
    ),
    "two columns": ("qrels/test.tsv", HEADER + "q1\td1\n", r"test\.tsv:2: expected 3 tab-sep"),
    "score not integer": (
        "qrels/test.tsv",
        HEADER + "q1\td1\thigh\n",
        r"test\.tsv:2: field 'score' must be an integer",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_rows_name_file_and_line(small: Path, case: str) -> None:
    name, text, expected = BAD[case]
    _corrupt(small, name, text)
    with pytest.raises(DataError, match=expected) as caught:
        adapter.build(small)
    assert str(caught.value).startswith(str(small)) and "\n" not in str(caught.value)


def test_missing_files(small: Path, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not a directory"):
        adapter.build(tmp_path / "nowhere")
    shutil.rmtree(small / "qrels")
    with pytest.raises(DataError, match=r"small/qrels: no \{split\}\.tsv files"):
        adapter.build(small)
    (small / "queries.jsonl").unlink()
    with pytest.raises(DataError, match=r"small/queries\.jsonl: no such file"):
        adapter.build(small)


def test_plain_and_gzip_copies_together_are_refused(small: Path) -> None:
    (small / "corpus.jsonl.gz").write_bytes(gzip.compress((small / "corpus.jsonl").read_bytes()))
    with pytest.raises(DataError, match="has both corpus.jsonl and corpus.jsonl.gz"):
        adapter.build(small)


def test_a_broken_gzip_file_is_named(small: Path) -> None:
    (small / "corpus.jsonl").unlink()
    (small / "corpus.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match=r"corpus\.jsonl\.gz: not a complete gzip file"):
        adapter.build(small)


def test_grouping_needs_the_key_on_every_entry(small: Path) -> None:
    with pytest.raises(DataError, match=r"corpus\.jsonl:2: field 'title' is missing or empty"):
        adapter.build(small, group_by="title")
    with pytest.raises(DataError, match=r"corpus\.jsonl:1: field 'metadata.url' is missing"):
        adapter.build(small, group_by="url")


def test_bad_options(small: Path) -> None:
    with pytest.raises(DataError) as error:
        adapter.load(path=small, grouping="title")
    assert str(error.value) == (
        "dataset 'beir': unknown option 'grouping'; valid options: group_by, relevance_level, "
        "language"
    )
    with pytest.raises(DataError, match="'relevance_level' must be an integer, got \"high\""):
        adapter.load(path=small, relevance_level="high")
    with pytest.raises(DataError, match="option 'group_by' must be none, title or a metadata"):
        adapter.build(small, group_by=" ")
    with pytest.raises(DataError, match="option 'language' must be an ISO 639-1 code"):
        adapter.build(small, language="english")
