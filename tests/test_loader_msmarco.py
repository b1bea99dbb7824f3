"""MSMARCO built from the raw sample: QnA passages located in their documents, cut, split.

Expected values are computed here from the raw files with plain Python: ``json.load``, a dict of
documents, and the reference builder's own matcher (``str.find``, else ``regex`` over the whole
document), then its split and overlap rules written out again in a few lines.
"""

from __future__ import annotations

import ast
import csv
import gzip
import json
import random
import shutil
from pathlib import Path

import pytest

regex = pytest.importorskip("regex")
pytest.importorskip("ijson")
pytest.importorskip("rapidfuzz")

from dapr.data_loaders import msmarco  # noqa: E402
from rapidfuzz.distance import Levenshtein  # noqa: E402

from dapr.data import Dataset  # noqa: E402
from dapr.datasets import read_dataset, write_dataset  # noqa: E402
from dapr.errors import DataError  # noqa: E402

FILES = ("msmarco-docs.tsv", "train_v2.1.json", "dev_v2.1.json")
TEST_QIDS = {"1101058", "1054707", "1010040"}  # the three queries of dev_v2.1.json


@pytest.fixture(scope="module")
def source(samples: Path) -> Path:
    return samples / "dapr-raw-sample" / "MSMARCO"


@pytest.fixture(scope="module")
def built(source: Path) -> Dataset:
    return msmarco.adapter.build(source)


# --- an independent construction -------------------------------------------------------------


def reference_span(passage: str, body: str) -> tuple[int, int] | None:
    found = body.find(passage)
    if found != -1:
        return found, found + len(passage)
    match = regex.compile("(%s){e<=5}" % regex.escape(passage)).search(body)  # noqa: UP031
    return match.span() if match else None


@pytest.fixture(scope="module")
def expected(source: Path) -> dict:
    docs = {}
    for line in (source / "msmarco-docs.tsv").read_text(encoding="utf-8").splitlines():
        doc_id, url, title, body = line.split("\t")
        docs.setdefault(url, (doc_id, title, body.strip()))
    records = {}  # file -> [(qid, query, selected, url, span)] deduplicated by (url, span)
    with_doc = 0
    for name in ("train", "dev"):
        qna = json.loads((source / f"{name}_v2.1.json").read_text(encoding="utf-8"))
        seen, kept = set(), []
        for row, passages in qna["passages"].items():
            for p in passages:
                if p["url"] not in docs:
                    continue
                with_doc += 1
                span = reference_span(p["passage_text"], docs[p["url"]][2])
                if span and (p["url"], span) not in seen:
                    seen.add((p["url"], span))
                    qid, query = str(qna["query_id"][row]), qna["query"][row]
                    kept.append((qid, query, p["is_selected"], p["url"], span))
        records[name] = kept
    test = [r for r in records["dev"] if r[2]]
    pool = [r for r in records["train"] if r[2]]
    sampled = random.Random(42).sample(pool, min(len(test), len(pool)))
    dev_qids = {r[0] for r in sampled}
    split_of = {"test": 2, "dev": 1, "train": 0}
    spans = {}  # url -> [(start, end, split code, record)]
    for r in records["train"]:
        code = split_of["dev"] if r[2] and r[0] in dev_qids else split_of["train"]
        spans.setdefault(r[3], []).append((*r[4], code, r))
    for r in test:
        spans.setdefault(r[3], []).append((*r[4], split_of["test"], r))
    survivors = {url: survive(found) for url, found in spans.items()}
    located = sum(len(v) for v in records.values())
    return {"docs": docs, "survivors": survivors, "dev_qids": dev_qids, "with_doc": with_doc,
            "located": located, "test": test}  # fmt: skip


def survive(found: list) -> list:
    """The reference's overlap rule: test > dev > train, the later of two train spans wins."""
    found = sorted(found, key=lambda x: (x[0], x[1]))
    dropped, current = [], found[0]
    for following in found[1:]:
        if current[1] <= following[0]:
            current = following
        elif current[2] == 2 or (current[2] == 1 and following[2] < 2):
            dropped.append(following)
        else:
            dropped.append(current)
            current = following
    return [x for x in found if x not in dropped]


# --- the build against it --------------------------------------------------------------------


def test_counts_match_an_independent_construction(built: Dataset, expected: dict):
    documents = list(built.corpus)
    assert len(documents) == len(expected["survivors"]) == 9
    assert expected["with_doc"] == 35 and expected["located"] == 27
    assert "located 27 of 35 QnA passages" in built.notes[1]
    by_id = {doc_id: url for url, (doc_id, _, _) in expected["docs"].items()}
    for document in documents:
        url = by_id[document.id]
        _, title, body = expected["docs"][url]
        assert document.title == title
        assert "".join(p.text for p in document.passages) == body
        candidates = [p.text for p in document.passages if p.is_candidate]
        spans = expected["survivors"][url]
        assert candidates == [body[s:e] for s, e, *_ in spans]
        assert all(p.id == f"{document.id}-{i}" for i, p in enumerate(document.passages))
    survivors = sum(len(spans) for spans in expected["survivors"].values())
    assert sum(p.is_candidate for p in built.corpus.passages()) == survivors == 19
    bounds = {
        url: [0, *(x for s, e, *_ in spans for x in (s, e)), len(expected["docs"][url][2])]
        for url, spans in expected["survivors"].items()
    }
    gaps = sum(b > a for ends in bounds.values() for a, b in zip(ends[::2], ends[1::2]))
    assert sum(not p.is_candidate for p in built.corpus.passages()) == gaps == 26


def test_splits_and_qrels(built: Dataset, expected: dict):
    assert set(built.splits) == {"train", "dev", "test"}
    assert set(built.splits["test"].queries) == TEST_QIDS
    assert set(built.splits["dev"].queries) == expected["dev_qids"]
    assert len(expected["dev_qids"]) == 3 and len(built.splits["train"].queries) == 3
    texts = {p.id: p.text for p in built.corpus.passages()}
    positives = {
        r[0]: expected["docs"][r[3]][2][slice(*r[4])]
        for spans in expected["survivors"].values()
        for *_, r in spans
        if r[2]
    }
    for split in built.splits.values():
        assert set(split.qrels) == set(split.queries)
        for qid, judged in split.qrels.items():
            assert list(judged.values()) == [1]
            assert texts[next(iter(judged))] == positives[qid]
    assert built.splits["test"].queries["1101058"] == "dr. chad reade phone number"
    assert built.splits["test"].qrels["1101058"] == {"D1077101-1": 1}
    assert texts["D1077101-1"].startswith("Having more than 11 years of diverse experiences")


def test_a_passage_a_few_edits_away_is_located(built: Dataset, source: Path):
    qna = json.loads((source / "train_v2.1.json").read_text(encoding="utf-8"))
    (selected,) = [p for p in qna["passages"]["214889"] if p["is_selected"]]
    text = next(p.text for p in built.corpus.passages() if p.id == "D709449-1")
    assert selected["passage_text"] not in text
    assert Levenshtein.distance(selected["passage_text"], text) == 5
    split = next(s for s in built.splits.values() if "644752" in s.qrels)
    assert split.qrels["644752"] == {"D709449-1": 1}


def test_more_than_five_edits_is_dropped(tmp_path: Path):
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
    body = "Intro text. " + words * 3 + "Middle part. " + words.upper() * 2 + "The end."
    near = (words * 3).replace("bravo", "brovo", 1).replace("golf", "gulf", 1)
    far = (words.upper() * 2).replace("A", "x", 6)
    (tmp_path / "msmarco-docs.tsv").write_text(f"D1\thttp://a\tTitle A\t{body}\n")
    passages = [
        {"is_selected": 1, "passage_text": near.strip(), "url": "http://a"},
        {"is_selected": 1, "passage_text": far.strip(), "url": "http://a"},
        {"is_selected": 1, "passage_text": "elsewhere", "url": "http://not-in-docs"},
    ]
    qna = {"query": {"0": "q"}, "query_id": {"0": 7}, "passages": {"0": passages}}
    (tmp_path / "train_v2.1.json").write_text(json.dumps(qna))
    (tmp_path / "dev_v2.1.json").write_text(json.dumps({"query": {}, "passages": {}}))
    assert Levenshtein.distance(far.strip(), words.upper().strip() * 2) > 5
    ds = msmarco.adapter.build(tmp_path)
    (document,) = list(ds.corpus)
    candidates = [p for p in document.passages if p.is_candidate]
    # like the reference's regex, the match starts as early as the 5 edits allow
    start, end = reference_span(near.strip(), body)
    assert [p.text for p in candidates] == [body[start:end]] == [f"t. {(words * 3).strip()}"]
    assert ds.splits["train"].qrels == {"7": {candidates[0].id: 1}}
    assert "located 1 of 2 QnA passages" in ds.notes[1]


def test_paper_rule_uses_the_passage_ranking_dev_queries(source: Path, tmp_path: Path):
    for name in FILES:
        (tmp_path / name).symlink_to(source / name)
    (tmp_path / "qrels.dev.small.tsv").write_text("1101058\t0\t7\t1\n1054707\t0\t8\t1\n")
    ds = msmarco.adapter.build(tmp_path)
    assert set(ds.splits["test"].queries) == {"1101058", "1054707"}
    assert set(ds.splits["dev"].queries) == {"1010040"}  # min(2 test pairs, 1 left) sampled
    assert len(ds.splits["train"].queries) == 6
    assert "split rule 'paper'" in ds.notes[0]
    with pytest.raises(DataError, match="split=paper needs"):
        msmarco.adapter.build(source, split="paper")


def test_gzipped_raw_files_give_the_same_dataset(built: Dataset, source: Path, tmp_path: Path):
    for name in FILES:
        with gzip.open(tmp_path / f"{name}.gz", "wb") as out:
            out.write((source / name).read_bytes())
    msmarco.adapter.require(tmp_path)
    assert msmarco.adapter.build(tmp_path).fingerprint == built.fingerprint


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_written_and_read_back_identical(built: Dataset, tmp_path: Path, fmt: str):
    write_dataset(built, tmp_path / "out", fmt)
    back = read_dataset(tmp_path / "out")
    assert back.fingerprint == built.fingerprint
    assert list(back.corpus) == list(built.corpus)
    assert back.splits == built.splits and back.notes == built.notes


def test_ids_follow_the_reference_examples(built: Dataset, samples: Path):
    """The examples come from an older token-window build of other documents and queries, so
    nothing overlaps to compare; their ids follow the same doc-position scheme as ours."""
    path = samples / "dapr-raw-sample" / "MSMARCO.examples.csv"
    with path.open(encoding="utf-8") as handle:
        examples = list(csv.DictReader(handle))
    ours = {p.doc_id for p in built.corpus.passages()}
    assert not ours & {row["doc_id"] for row in examples}
    for row in examples:
        chunks = ast.literal_eval(row["chunks"])
        ids = ast.literal_eval(row["chunk_ids"])
        assert ids == [f"{row['doc_id']}-{i}" for i in range(len(chunks))]
        assert chunks[ids.index(row["positive_chunk_id"])] == row["positive_chunk"]


def test_corpus_spill_is_removed_with_the_corpus(source: Path, tmp_path: Path):
    ds = msmarco.adapter.build(source, work_dir=str(tmp_path))
    (work,) = list(tmp_path.iterdir())
    assert len(list(ds.corpus)) == 9 and (work / "corpus.jsonl.gz").is_file()
    del ds
    import gc

    gc.collect()
    assert not work.exists()


# --- bad input -------------------------------------------------------------------------------


def copy_sample(source: Path, target: Path) -> Path:
    for name in FILES:
        shutil.copy(source / name, target / name)
    return target


def test_missing_file_names_it(source: Path, tmp_path: Path):
    copy_sample(source, tmp_path).joinpath("dev_v2.1.json").unlink()
    with pytest.raises(DataError, match=r"dev_v2\.1\.json: missing raw file of MSMARCO"):
        msmarco.adapter.build(tmp_path)


def test_truncated_json_names_the_file(source: Path, tmp_path: Path):
    path = copy_sample(source, tmp_path) / "train_v2.1.json"
    path.write_bytes(path.read_bytes()[:5000])
    work = tmp_path / "work"
    with pytest.raises(DataError, match=r"train_v2\.1\.json: not valid JSON"):
        msmarco.adapter.build(tmp_path, work_dir=str(work))
    assert work.is_dir() and not list(work.iterdir())  # nothing half-built is left


def test_bad_passage_names_file_row_and_field(source: Path, tmp_path: Path):
    path = copy_sample(source, tmp_path) / "dev_v2.1.json"
    qna = json.loads(path.read_text(encoding="utf-8"))
    del qna["passages"]["19088"][1]["url"]
    path.write_text(json.dumps(qna))
    with pytest.raises(
        DataError, match=r"dev_v2\.1\.json: row '19088': field 'passages\[1\]\.url'"
    ):
        msmarco.adapter.build(tmp_path)


def test_missing_query_names_the_row(source: Path, tmp_path: Path):
    path = copy_sample(source, tmp_path) / "dev_v2.1.json"
    qna = json.loads(path.read_text(encoding="utf-8"))
    del qna["query_id"]["1182"]
    path.write_text(json.dumps(qna))
    with pytest.raises(DataError, match=r"dev_v2\.1\.json: row '1182' has passages but no"):
        msmarco.adapter.build(tmp_path)


def test_bad_docs_line_names_file_and_line(source: Path, tmp_path: Path):
    path = copy_sample(source, tmp_path) / "msmarco-docs.tsv"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[2] = lines[2].replace("\t", " ", 1)
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(DataError, match=r"msmarco-docs\.tsv:3: expected 4 tab-separated"):
        msmarco.adapter.build(tmp_path)


def test_unknown_option_lists_the_valid_ones(source: Path):
    with pytest.raises(DataError) as error:
        msmarco.adapter.check_options({"tagged": True})
    assert str(error.value) == (
        "dataset 'MSMARCO': unknown option 'tagged'; valid options: split, max_edits, seed, "
        "work_dir"
    )
    with pytest.raises(DataError, match="option 'split' must be one of auto, paper, qna"):
        msmarco.adapter.check_options({"split": "random"})
    assert msmarco.adapter.check_options({"work_dir": "/tmp/x"}) == {"work_dir": Path("/tmp/x")}
    with pytest.raises(DataError, match="option 'max_edits' must be a non-negative integer"):
        msmarco.adapter.build(source, max_edits=-1)


def test_qna_file_without_columns_names_the_file(source: Path, tmp_path: Path):
    path = copy_sample(source, tmp_path) / "train_v2.1.json"
    path.write_text(json.dumps([{"query": "q", "passages": []}]))
    with pytest.raises(DataError, match=r"train_v2\.1\.json: no 'passages' column found"):
        msmarco.adapter.build(tmp_path)
