"""dapr.io: the hub layout, the DAPR dump, TREC files, error messages and atomic writes."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from dapr.data import Corpus, Dataset, Document, Passage, Run, Split
from dapr.datasets import read_dataset, write_dataset
from dapr.datasets.dump import read_dump
from dapr.errors import DataError
from dapr.io import read_trec_qrels, read_trec_run, write_trec_qrels, write_trec_run
from dapr.io import rows as io

DUMPS = ["ConditionalQA", "Genomics", "MIRACL", "NaturalQuestions"]
FORMATS = ["jsonl", "parquet"]


@pytest.fixture(scope="module")
def dumps(samples: Path) -> Path:
    """The DAPR dump samples shipped in tests/fixtures."""
    return samples / "dapr-dump-sample"


# --------------------------------------------------------------------------- helpers


def json_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def write_lines(path: Path, rows: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def count_dump(folder: Path) -> dict:
    """Documents, passages, and per split queries and judgements, straight from the JSON."""
    chunks_of = {row["id"]: len(row["chunks"]) for row in json_lines(folder / "corpus.jsonl")}
    splits = {}
    for split in ("train", "dev", "test"):
        if not (folder / f"{split}.jsonl").exists():
            continue
        queries, pairs = set(), set()
        for row in json_lines(folder / f"{split}.jsonl"):
            queries.add(row["query"]["id"])
            for judged in row["judged_chunks"]:
                pairs.add((row["query"]["id"], judged["chunk"]["id"]))
                doc = judged["belonging_doc"]
                chunks_of.setdefault(doc["id"], len(doc["chunks"]))
        splits[split] = (len(queries), len(pairs))
    return {"documents": len(chunks_of), "passages": sum(chunks_of.values()), "splits": splits}


def assert_same(a: Dataset, b: Dataset) -> None:
    assert list(a.corpus) == list(b.corpus)
    assert list(a.splits) == list(b.splits)
    for name in a.splits:
        assert a.splits[name].queries == b.splits[name].queries
        assert a.splits[name].qrels == b.splits[name].qrels
    assert a.fingerprint == b.fingerprint


def document(doc_id: str, title: str, texts: list[str], candidates: str = "") -> Document:
    passages = tuple(
        Passage(f"{doc_id}-{i}", doc_id, i, text, not candidates or str(i) in candidates)
        for i, text in enumerate(texts)
    )
    return Document(doc_id, title, passages)


def small_dataset() -> Dataset:
    docs = [
        document("d1", "Über title", ["first é", "second\nline", "third"], candidates="02"),
        document("d2", "Other", ["only"]),
    ]
    splits = {
        "train": Split({"q1": "what?", "q2": "who?"}, {"q1": {"d1-0": 1, "d2-0": 2}}),
        "test": Split({"q3": "why?"}, {"q3": {"d1-2": 0}}),
    }
    return Dataset("small", Corpus(docs), splits)


def load_all(path: Path) -> Dataset:
    """Read a dataset and pull its lazy corpus too, so corpus errors surface."""
    dataset = read_dataset(path)
    list(dataset.corpus)
    return dataset


def assert_one_line(error: pytest.ExceptionInfo, *parts: str) -> None:
    message = str(error.value)
    assert "\n" not in message
    for part in parts:
        assert part in message, (part, message)


# --------------------------------------------------------------------------- the dump samples


@pytest.mark.parametrize("name", DUMPS)
def test_dump_sample_counts(dumps: Path, name: str) -> None:
    folder = dumps / name
    expected = count_dump(folder)
    dataset = read_dataset(folder)
    documents = list(dataset.corpus)
    assert dataset.name == name
    assert len(documents) == expected["documents"]
    assert len({d.id for d in documents}) == expected["documents"]
    assert sum(len(d.passages) for d in documents) == expected["passages"]
    assert list(dataset.splits) == list(expected["splits"])
    for split, (n_queries, n_judgements) in expected["splits"].items():
        assert len(dataset.split(split).queries) == n_queries
        assert sum(map(len, dataset.split(split).qrels.values())) == n_judgements
    corpus_only = len(json_lines(folder / "corpus.jsonl"))
    assert [d.id for d in documents[:corpus_only]] == [
        row["id"] for row in json_lines(folder / "corpus.jsonl")
    ]


def test_dump_passages_keep_chunk_order_and_text(dumps: Path) -> None:
    folder = dumps / "Genomics"
    first = json_lines(folder / "corpus.jsonl")[0]
    doc = next(iter(read_dump(folder).corpus))
    assert doc.id == first["id"] and doc.title == first["title"]
    assert [(p.id, p.position, p.text) for p in doc.passages] == [
        (c["id"], i, c["text"]) for i, c in enumerate(first["chunks"])
    ]
    assert all(p.doc_id == doc.id and p.is_candidate for p in doc.passages)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", DUMPS)
def test_dump_sample_round_trip(dumps: Path, tmp_path: Path, name: str, fmt: str) -> None:
    original = read_dataset(dumps / name)
    write_dataset(original, tmp_path / name, fmt)
    assert (tmp_path / name / f"corpus.{fmt}").is_file()
    for split in original.splits:
        assert (tmp_path / name / "queries" / f"{split}.{fmt}").is_file()
        assert (tmp_path / name / "qrels" / f"{split}.{fmt}").is_file()
    assert_same(read_dataset(tmp_path / name), original)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_dump_candidates_belonging_docs_and_merged_rows(tmp_path: Path) -> None:
    def chunks(doc_id: str, n: int) -> list[dict]:
        return [{"id": f"{doc_id}-{i}", "text": f"{doc_id} text {i}"} for i in range(n)]

    def judged(chunk: str, grade: int, doc_id: str, n: int) -> dict:
        doc = {"id": doc_id, "title": doc_id.upper(), "chunks": chunks(doc_id, n)}
        return {"chunk": {"id": chunk, "text": "t"}, "judgement": grade, "belonging_doc": doc}

    corpus = [
        {"id": "a", "title": "A", "chunks": chunks("a", 3), "candidate_chunk_ids": ["a-1"]},
        {"id": "b", "title": "B", "chunks": chunks("b", 2), "candidate_chunk_ids": None},
        {"id": "c", "title": "C", "chunks": chunks("c", 1)},
    ]
    write_lines(tmp_path / "corpus.jsonl", corpus)
    write_lines(
        tmp_path / "train.jsonl",
        [
            {"query": {"id": "q", "text": "Q"}, "judged_chunks": [judged("x-1", 2, "x", 2)]},
            {"query": {"id": "q", "text": "Q"}, "judged_chunks": [judged("a-1", 2, "a", 3)]},
            {"query": {"id": "q", "text": "Q"}, "judged_chunks": [judged("x-1", 1, "x", 2)]},
        ],
    )
    write_lines(
        tmp_path / "test.jsonl",
        [
            {
                "query": {"id": "r", "text": "R"},
                "judged_chunks": [judged("y-0", 1, "y", 1), judged("x-0", 0, "x", 2)],
            },
            {"query": {"id": "s", "text": "S"}, "judged_chunks": []},
        ],
    )
    dataset = read_dataset(tmp_path, name="custom")
    docs = list(dataset.corpus)
    assert dataset.name == "custom"
    assert [d.id for d in docs] == ["a", "b", "c", "x", "y"]
    assert [p.is_candidate for p in docs[0].passages] == [False, True, False]
    assert all(p.is_candidate for d in docs[1:] for p in d.passages)
    assert docs[3].title == "X" and [p.position for p in docs[3].passages] == [0, 1]
    assert list(dataset.splits) == ["train", "test"]
    assert dataset.split("train").queries == {"q": "Q"}
    assert dataset.split("train").qrels == {"q": {"x-1": 2, "a-1": 2}}
    assert dataset.split("test").queries == {"r": "R", "s": "S"}
    assert dataset.split("test").qrels == {"r": {"y-0": 1, "x-0": 0}}
    for fmt in FORMATS:
        write_dataset(dataset, tmp_path / fmt, fmt)
        assert_same(read_dataset(tmp_path / fmt), dataset)


def test_corpus_is_lazy_and_rereads_its_file(tmp_path: Path) -> None:
    write_dataset(small_dataset(), tmp_path / "ds")
    dataset = read_dataset(tmp_path / "ds")
    assert [d.id for d in dataset.corpus] == ["d1", "d2"]
    row = {"_id": "d3-0", "text": "t", "title": "T", "doc_id": "d3", "paragraph_no": 0}
    with (tmp_path / "ds" / "corpus.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(row) + "\n")
    assert [d.id for d in dataset.corpus] == ["d1", "d2", "d3"]
    with (tmp_path / "ds" / "corpus.jsonl").open("a", encoding="utf-8") as handle:
        handle.write("{broken\n")
    lazy = read_dataset(tmp_path / "ds")  # the corpus is not read yet
    with pytest.raises(DataError) as error:
        list(lazy.corpus)
    assert_one_line(error, "corpus.jsonl:6", "invalid JSON")


@pytest.mark.parametrize("fmt", FORMATS)
def test_hub_round_trip_keeps_flags_unicode_and_order(tmp_path: Path, fmt: str) -> None:
    original = small_dataset()
    write_dataset(original, tmp_path / "out", fmt)
    again = read_dataset(tmp_path / "out")
    assert again.name == "out"
    assert_same(again, original)
    rows = (
        json_lines(tmp_path / "out" / "corpus.jsonl")
        if fmt == "jsonl"
        else pq.read_table(tmp_path / "out" / "corpus.parquet").to_pylist()
    )
    assert rows[1] == {
        "_id": "d1-1",
        "text": "second\nline",
        "title": "Über title",
        "doc_id": "d1",
        "paragraph_no": 1,
        "total_paragraphs": 3,
        "is_candidate": False,
    }


def test_parquet_corpus_is_written_in_row_groups(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(io, "_BATCH_ROWS", 2)
    write_dataset(small_dataset(), tmp_path / "out", "parquet")
    assert pq.ParquetFile(tmp_path / "out" / "corpus.parquet").num_row_groups == 2
    assert_same(read_dataset(tmp_path / "out"), small_dataset())


# --------------------------------------------------------------------------- atomic writes


def failing_corpus() -> Corpus:
    def documents() -> Iterator[Document]:
        yield document("ok", "Ok", ["fine"])
        raise RuntimeError("disk on fire")

    return Corpus(documents)


@pytest.mark.parametrize("fmt", FORMATS)
def test_failed_write_leaves_nothing(tmp_path: Path, fmt: str) -> None:
    broken = Dataset("broken", failing_corpus(), {"test": Split({"q": "Q"}, {})})
    with pytest.raises(RuntimeError, match="disk on fire"):
        write_dataset(broken, tmp_path / "out", fmt)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_failed_write_keeps_the_existing_dataset(tmp_path: Path, fmt: str) -> None:
    write_dataset(small_dataset(), tmp_path / "out", fmt)
    with pytest.raises(RuntimeError):
        write_dataset(Dataset("broken", failing_corpus()), tmp_path / "out", fmt)
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert_same(read_dataset(tmp_path / "out"), small_dataset())


def test_write_replaces_an_existing_dataset(dumps: Path, tmp_path: Path) -> None:
    write_dataset(small_dataset(), tmp_path / "out", "parquet")
    dump = read_dataset(dumps / "Genomics")
    write_dataset(dump, tmp_path / "out", "jsonl")
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert not (tmp_path / "out" / "corpus.parquet").exists()
    assert_same(read_dataset(tmp_path / "out"), dump)


def test_failed_trec_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "qrels.txt"
    write_trec_qrels({"q": {"d": 1}}, path)
    with pytest.raises(DataError) as error:
        write_trec_qrels({"q": {"d": 1}, "r": {"e": 1.5}}, path)  # type: ignore[dict-item]
    assert_one_line(error, "qrels.txt", "grade")
    with pytest.raises(DataError) as error:
        write_trec_run(Run.from_dict({"q": {"bad id": 1.0}}), tmp_path / "run.trec", "sys")
    assert_one_line(error, "run.trec", "'bad id'")
    nan = Run.from_dict({"q": {"a": 2.0}, "r": {"b": 1.0, "c": float("nan")}})
    with pytest.raises(DataError) as error:
        write_trec_run(nan, tmp_path / "run.trec", "sys")
    assert_one_line(error, "run.trec", "'sys'", "item 'c' of query 'r'", "nan", "finite")
    assert [p.name for p in tmp_path.iterdir()] == ["qrels.txt"]
    assert read_trec_qrels(path) == {"q": {"d": 1}}


def test_write_refuses_bad_documents(tmp_path: Path) -> None:
    empty = Dataset("e", Corpus([Document("d", "T", ())]))
    with pytest.raises(DataError, match="'d' has no passages"):
        write_dataset(empty, tmp_path / "out")
    moved = Dataset("m", Corpus([Document("d", "T", (Passage("p", "d", 1, "x"),))]))
    with pytest.raises(DataError, match="position 1"):
        write_dataset(moved, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- TREC files


def assert_same_run(a: Run, b: Run) -> None:
    assert a.queries.tolist() == b.queries.tolist()
    assert np.array_equal(a.offsets, b.offsets)
    for q in range(len(a)):
        a_ids, a_scores = a.ranking(q)
        b_ids, b_scores = b.ranking(q)
        assert a_scores.tolist() == b_scores.tolist()  # same ranks up to tied items
        assert dict(zip(a_ids.tolist(), a_scores.tolist())) == dict(
            zip(b_ids.tolist(), b_scores.tolist())
        )


def test_trec_run_round_trip_with_ties(tmp_path: Path) -> None:
    vocab = np.array(["z", "y", "x", "w"], dtype=object)
    run = Run.from_lists(
        ["q1", "q2", "q0"],
        [np.array([2, 1]), np.array([1, 0, 3]), np.array([3])],
        [np.array([2.0, 1.0]), np.array([0.1 + 0.2, 0.1 + 0.2, -1e-300]), np.array([7.0])],
        vocab,
    )
    write_trec_run(run, tmp_path / "run.trec", "bm25")
    lines = (tmp_path / "run.trec").read_text().splitlines()
    assert lines[:3] == [
        "q1 Q0 x 1 2 bm25",
        "q1 Q0 y 2 1 bm25",
        "q2 Q0 z 1 0.30000000000000004 bm25",
    ]
    assert [line.split()[3] for line in lines] == ["1", "2", "1", "2", "3", "1"]
    back = read_trec_run(tmp_path / "run.trec")
    assert_same_run(back, run)
    assert list(back.to_dict()["q2"])[2] == "w"


def test_trec_run_round_trip_random(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    vocab = np.array([f"p{i}" for i in rng.permutation(500)], dtype=object)
    items = [rng.choice(500, size=rng.integers(1, 40), replace=False) for _ in range(200)]
    scores = [np.round(rng.normal(size=len(i)), 1) for i in items]  # many ties
    run = Run.from_lists([f"q{i}" for i in rng.permutation(200)], items, scores, vocab)
    write_trec_run(run, tmp_path / "run.trec", "sys")
    assert_same_run(read_trec_run(tmp_path / "run.trec"), run)


def test_trec_run_reads_any_whitespace_and_order(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    path.write_text("b Q0 d2 2 1.5 s\na Q0 d1 1 3 s\n\nb\tQ0  d3 1\t2.5 s \nb Q0 d4 3 2.5 s\n")
    run = read_trec_run(path)
    assert run.queries.tolist() == ["b", "a"]
    assert run.to_dict() == {"b": {"d3": 2.5, "d4": 2.5, "d2": 1.5}, "a": {"d1": 3.0}}
    assert list(run.to_dict()["b"]) == ["d4", "d3", "d2"]  # the tie as trec_eval ranks it


def test_trec_empty_run(tmp_path: Path) -> None:
    empty = Run.from_dict({})
    write_trec_run(empty, tmp_path / "run.trec", "sys")
    assert (tmp_path / "run.trec").read_text() == ""
    assert len(read_trec_run(tmp_path / "run.trec")) == 0


def test_trec_qrels_round_trip(tmp_path: Path) -> None:
    qrels = {"q2": {"b": 2, "a": 0, "c": -1}, "q1": {"z": 1}}
    write_trec_qrels(qrels, tmp_path / "qrels.txt")
    assert (tmp_path / "qrels.txt").read_text().splitlines()[0] == "q2 0 b 2"
    back = read_trec_qrels(tmp_path / "qrels.txt")
    assert back == qrels
    assert list(back) == ["q2", "q1"] and list(back["q2"]) == ["b", "a", "c"]


def test_whitespace_pattern_matches_str_split() -> None:
    chars = [chr(c) for c in range(0x3100)]  # str.isspace() is false above U+3000
    matched = pc.match_substring_regex(pa.array(chars), io._BLANK_OR_SPACE).to_pylist()
    assert {c for c, hit in zip(chars, matched, strict=True) if hit} == {
        c for c in chars if c.isspace()
    }


# --------------------------------------------------------------------------- errors


def hub(tmp_path: Path, fmt: str = "jsonl") -> Path:
    write_dataset(small_dataset(), tmp_path / "ds", fmt)
    return tmp_path / "ds"


def edit_lines(path: Path, number: int, change: Callable[[dict], object]) -> None:
    rows = json_lines(path)
    rows[number - 1] = change(rows[number - 1])
    write_lines(path, rows)


def without(key: str) -> Callable[[dict], dict]:
    return lambda row: {k: v for k, v in row.items() if k != key}


def setting(key: str, value: object) -> Callable[[dict], dict]:
    return lambda row: {**row, key: value}


HUB_JSONL_ERRORS = [
    ("corpus.jsonl", 2, without("doc_id"), ["corpus.jsonl:2", "missing field 'doc_id'"]),
    ("corpus.jsonl", 3, setting("paragraph_no", "2"), ["corpus.jsonl:3", "'paragraph_no'"]),
    ("corpus.jsonl", 3, setting("paragraph_no", 5), ["corpus.jsonl:3", "'paragraph_no'"]),
    ("corpus.jsonl", 2, setting("title", "T"), ["corpus.jsonl:2", "'title'"]),
    ("corpus.jsonl", 4, setting("total_paragraphs", 2), ["corpus.jsonl:4", "'total_paragraphs'"]),
    ("corpus.jsonl", 2, setting("is_candidate", "yes"), ["corpus.jsonl:2", "'is_candidate'"]),
    ("corpus.jsonl", 1, lambda row: [row], ["corpus.jsonl:1", "JSON object"]),
    ("queries/train.jsonl", 2, without("text"), ["train.jsonl:2", "missing field 'text'"]),
    ("qrels/train.jsonl", 1, setting("score", 1.5), ["train.jsonl:1", "'score'", "integer"]),
    ("qrels/train.jsonl", 2, setting("score", True), ["train.jsonl:2", "'score'"]),
    ("qrels/test.jsonl", 1, without("corpus_id"), ["test.jsonl:1", "'corpus_id'"]),
]


@pytest.mark.parametrize(("file", "line", "change", "parts"), HUB_JSONL_ERRORS)
def test_hub_jsonl_errors(tmp_path: Path, file: str, line: int, change, parts) -> None:
    root = hub(tmp_path)
    edit_lines(root / file, line, change)
    with pytest.raises(DataError) as error:
        load_all(root)
    assert_one_line(error, *parts)


def test_hub_corpus_order_errors(tmp_path: Path) -> None:
    root = hub(tmp_path)
    corpus = root / "corpus.jsonl"
    lines = corpus.read_text(encoding="utf-8").splitlines()
    corpus.write_text("\n".join([*lines[:2], '{"_id": ', *lines[2:]]) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as error:
        load_all(root)
    assert_one_line(error, "corpus.jsonl:3", "invalid JSON")
    corpus.write_text("\n".join([lines[1], lines[0], *lines[2:]]) + "\n", encoding="utf-8")
    with pytest.raises(DataError) as error:
        load_all(root)
    assert_one_line(error, "corpus.jsonl:2", "'paragraph_no'")
    rows = [
        {"_id": f"{doc}-{n}", "text": "t", "title": "T", "doc_id": doc, "paragraph_no": n}
        for doc, n in [("a", 0), ("b", 0), ("a", 1)]
    ]
    write_lines(corpus, rows)
    with pytest.raises(DataError) as error:
        load_all(root)
    assert_one_line(error, "corpus.jsonl:3", "'doc_id'", "contiguous")


def test_published_hub_layout_sharded_one_based_with_qrels_all(tmp_path: Path) -> None:
    """The layout of UKPLab/dapr on the hub: corpus/NNNN.parquet shards and qrels/all."""
    root = hub(tmp_path, "parquet")
    expected = read_dataset(root)
    fingerprint = expected.fingerprint  # read before the corpus file moves
    table = pq.read_table(root / "corpus.parquet")
    one_based = table.set_column(
        table.schema.get_field_index("paragraph_no"),
        "paragraph_no",
        pc.add(table.column("paragraph_no"), 1),
    )
    (root / "corpus").mkdir()
    middle = len(one_based) // 2  # a document may continue into the next shard
    pq.write_table(one_based.slice(0, middle), root / "corpus" / "0000.parquet")
    pq.write_table(one_based.slice(middle), root / "corpus" / "0001.parquet")
    (root / "corpus.parquet").unlink()
    all_qrels = pa.concat_tables(pq.read_table(f) for f in sorted((root / "qrels").iterdir()))
    pq.write_table(all_qrels, root / "qrels" / "all.parquet")
    published = load_all(root)
    assert set(published.splits) == set(expected.splits)
    assert published.fingerprint == fingerprint


def test_hub_parquet_errors(tmp_path: Path) -> None:
    root = hub(tmp_path, "parquet")
    qrels = pa.table({"query_id": ["q1"], "corpus_id": ["d1-0"], "score": [1.0]})
    pq.write_table(qrels, root / "qrels" / "train.parquet")
    with pytest.raises(DataError) as error:
        load_all(root)
    assert_one_line(error, "train.parquet: row 1", "'score'")
    corpus = pq.read_table(root / "corpus.parquet").drop_columns(["doc_id"])
    pq.write_table(corpus, root / "corpus.parquet")
    with pytest.raises(DataError) as error:
        load_all(root)
    assert_one_line(error, "corpus.parquet", "'doc_id'")
    (root / "corpus.parquet").write_text("not parquet")
    with pytest.raises(DataError) as error:
        load_all(root)
    assert_one_line(error, "corpus.parquet", "parquet")


def test_hub_qrels_without_queries(tmp_path: Path) -> None:
    root = hub(tmp_path)
    (root / "queries" / "test.jsonl").unlink()
    with pytest.raises(DataError) as error:
        read_dataset(root)
    assert_one_line(error, "test.jsonl", "queries")


def dump_folder(tmp_path: Path) -> Path:
    doc = {"id": "a", "title": "A", "chunks": [{"id": "a-0", "text": "x"}]}
    other = {"id": "b", "title": "B", "chunks": [{"id": "b-0", "text": "y"}]}
    write_lines(tmp_path / "corpus.jsonl", [doc, other])
    judged = {"chunk": {"id": "a-0", "text": "x"}, "judgement": 1, "belonging_doc": doc}
    write_lines(
        tmp_path / "dev.jsonl",
        [
            {"query": {"id": "q", "text": "Q"}, "judged_chunks": [judged]},
            {"query": {"id": "r", "text": "R"}, "judged_chunks": [judged, judged]},
        ],
    )
    return tmp_path


def edit_judged(change: Callable[[dict], object]) -> Callable[[dict], dict]:
    """A change to the second judged chunk of a split row."""

    def edit(row: dict) -> dict:
        first, second = row["judged_chunks"]
        return {**row, "judged_chunks": [first, change(second)]}

    return edit


DUMP_ERRORS = [
    ("corpus.jsonl", 2, without("chunks"), ["corpus.jsonl:2", "missing field 'chunks'"]),
    ("corpus.jsonl", 2, setting("id", "a"), ["corpus.jsonl:2", "'id'"]),
    (
        "corpus.jsonl",
        1,
        setting("candidate_chunk_ids", ["a-9"]),
        ["corpus.jsonl:1", "'candidate_chunk_ids'"],
    ),
    ("corpus.jsonl", 1, setting("chunks", [{"id": "a-0"}]), ["corpus.jsonl:1", "chunks[0].text"]),
    ("dev.jsonl", 2, without("query"), ["dev.jsonl:2", "missing field 'query'"]),
    ("dev.jsonl", 1, setting("query", {"id": "q", "text": 3}), ["dev.jsonl:1", "'query.text'"]),
    (
        "dev.jsonl",
        2,
        edit_judged(setting("judgement", "1")),
        ["dev.jsonl:2", "'judged_chunks[1].judgement'", "integer"],
    ),
    (
        "dev.jsonl",
        2,
        edit_judged(without("belonging_doc")),
        ["dev.jsonl:2", "'judged_chunks[1].belonging_doc'"],
    ),
    (
        "dev.jsonl",
        2,
        edit_judged(setting("belonging_doc", {"id": "n", "title": "N", "chunks": [{"text": ""}]})),
        ["dev.jsonl:2", "'judged_chunks[1].belonging_doc.chunks[0].id'"],
    ),
]


@pytest.mark.parametrize(("file", "line", "change", "parts"), DUMP_ERRORS)
def test_dump_errors(tmp_path: Path, file: str, line: int, change, parts) -> None:
    root = dump_folder(tmp_path)
    assert [d.id for d in load_all(root).corpus] == ["a", "b"]
    edit_lines(root / file, line, change)
    with pytest.raises(DataError) as error:
        load_all(root)
    assert_one_line(error, *parts)


def test_not_a_dataset_directory(tmp_path: Path) -> None:
    with pytest.raises(DataError) as error:
        read_dataset(tmp_path)
    assert_one_line(error, str(tmp_path), "corpus.jsonl")
    write_lines(tmp_path / "corpus.jsonl", [{"name": "x"}])
    with pytest.raises(DataError) as error:
        read_dataset(tmp_path)
    assert_one_line(error, "corpus.jsonl:1", "'_id'", "'chunks'")
    with pytest.raises(DataError) as error:
        read_dataset(tmp_path / "missing")
    assert_one_line(error, "missing", "not a directory")


TREC_RUN_ERRORS = [
    ("q Q0 d 1 1.0 s\nq Q0 e 2 0.5\n", ["run.trec:2", "6 columns", "qid Q0 docid"]),
    ("q Q0 d 1 high s\n", ["run.trec:1", "'score'"]),
    ("q Q0 d first 1.0 s\n", ["run.trec:1", "'rank'"]),
    ("q Q0 d 1 1.0 s\nr Q0 d 1 1.0 s\nq Q0 d 2 0.5 s\n", ["run.trec:3", "'docid'", "twice"]),
]


@pytest.mark.parametrize(("text", "parts"), TREC_RUN_ERRORS)
def test_trec_run_errors(tmp_path: Path, text: str, parts: list[str]) -> None:
    (tmp_path / "run.trec").write_text(text)
    with pytest.raises(DataError) as error:
        read_trec_run(tmp_path / "run.trec")
    assert_one_line(error, *parts)


TREC_QRELS_ERRORS = [
    ("q 0 d 1\nq 0 e 1.5\n", ["qrels.txt:2", "'grade'", "integer"]),
    ("q 0 d\n", ["qrels.txt:1", "4 columns", "qid 0 docid grade"]),
]


@pytest.mark.parametrize(("text", "parts"), TREC_QRELS_ERRORS)
def test_trec_qrels_errors(tmp_path: Path, text: str, parts: list[str]) -> None:
    (tmp_path / "qrels.txt").write_text(text)
    with pytest.raises(DataError) as error:
        read_trec_qrels(tmp_path / "qrels.txt")
    assert_one_line(error, *parts)


def test_missing_trec_file(tmp_path: Path) -> None:
    with pytest.raises(DataError) as error:
        read_trec_run(tmp_path / "nope.trec")
    assert_one_line(error, "nope.trec", "no such file")


def test_gzip_rows_read_like_plain_ones_and_truncation_is_named(tmp_path):
    import gzip

    from dapr.io.rows import jsonl_rows

    plain = b'{"a": 1}\n\n{"b": 2}\n'
    (tmp_path / "r.jsonl").write_bytes(plain)
    (tmp_path / "r.jsonl.gz").write_bytes(gzip.compress(plain))
    assert list(jsonl_rows(tmp_path / "r.jsonl.gz")) == list(jsonl_rows(tmp_path / "r.jsonl"))
    (tmp_path / "cut.jsonl.gz").write_bytes(gzip.compress(plain)[:-6])
    with pytest.raises(DataError, match=r"cut.jsonl.gz: not a complete gzip file"):
        list(jsonl_rows(tmp_path / "cut.jsonl.gz"))


def test_two_writers_of_one_directory_swap_it_in_turn(tmp_path, monkeypatch):
    """Both finish at the same instant (they meet inside the swap unless it is locked): each
    replaces the directory whole, neither fails, and no lock file is left."""
    import threading

    from dapr.io import files

    out = tmp_path / "results"
    meet = threading.Barrier(2)
    rename = os.rename
    waited: set[int] = set()

    def meeting_rename(source, target):  # each writer's first rename waits for the other's
        if threading.get_ident() not in waited:
            waited.add(threading.get_ident())
            with contextlib.suppress(threading.BrokenBarrierError):
                meet.wait(timeout=1)  # unlocked, both have seen no ``out`` by now
        rename(source, target)

    monkeypatch.setattr(files.os, "rename", meeting_rename)
    failures = []

    def write(text: str) -> None:
        try:
            with files.atomic_directory(out) as scratch:
                (scratch / "metrics.json").write_text(text)
        except OSError as error:
            failures.append(error)

    threads = [threading.Thread(target=write, args=(t,)) for t in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert failures == []
    assert (out / "metrics.json").read_text() in ("a", "b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]
