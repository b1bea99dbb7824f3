"""NaturalQuestions built from the real NQ-retrieval sample (3 dev and 6 train records).

The sample's records are real lines of the original files, but not at their original line
numbers, so record ids differ from the DAPR dump sample's (``dev-0`` here is ``dev-2`` there);
the comparison with the dump matches documents by title and queries by text.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import shutil
from pathlib import Path

import pytest
from dapr.data_loaders import nq

from dapr.datasets import read_dataset, write_dataset
from dapr.errors import DataError


def round_trip(text: str) -> str:
    """What a RoBERTa encode/decode with cleaned-up tokenization spaces does to ``text``."""
    text = re.sub(r" (?=[.?!,])", "", text).replace(" ' ", "'")
    return re.sub(r" (?=n't|'m|'s|'ve|'re)", "", text)


def raw_records(folder: Path) -> dict[str, list[dict]]:
    return {
        split: [json.loads(line) for line in (folder / f"{split}.tsv").read_text().splitlines()]
        for split in ("dev", "train")
    }


def texts_of(row: dict) -> list[str]:
    return [c for c, kind in zip(row["candidates"], row["passage_types"]) if kind == "text"]


def positives_of(row: dict) -> set[int]:
    texts = [i for i, kind in enumerate(row["passage_types"]) if kind == "text"]
    return {texts.index(a) for a in row["long_answers"] if row["passage_types"][a] == "text"}


def dump_sample(samples: Path) -> tuple[dict[str, dict], dict[str, set[str]]]:
    """The dump's documents by title and its queries' judged positions by query text."""
    folder = samples / "dapr-dump-sample" / "NaturalQuestions"
    documents, judged = {}, {}
    for name in ("corpus", "train", "dev", "test"):
        for line in (folder / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if name == "corpus":
                documents[row["title"]] = row
                continue
            judged[row["query"]["text"]] = {
                j["chunk"]["id"].rsplit("-", 1)[1] for j in row["judged_chunks"]
            }
            for j in row["judged_chunks"]:
                documents.setdefault(j["belonging_doc"]["title"], j["belonging_doc"])
    return documents, judged


@pytest.fixture(scope="module")
def folder(samples: Path) -> Path:
    return samples / "dapr-raw-sample" / "NaturalQuestions"


@pytest.fixture(scope="module")
def built(folder: Path):
    return nq.adapter.build(folder)


def test_documents_are_the_first_record_of_each_title(folder: Path, built):
    raw = raw_records(folder)
    titles, expected = set(), []
    for split in ("dev", "train"):
        for n, row in enumerate(raw[split]):
            if not any(texts_of(row)):
                continue
            if split == "dev" and not any(texts_of(row)[i] for i in positives_of(row)):
                continue
            if row["title"].lower() not in titles:
                titles.add(row["title"].lower())
                expected.append((f"{split}-{n}", row["title"], len(texts_of(row))))
    documents = list(built.corpus)
    assert [(d.id, d.title, len(d.passages)) for d in documents] == expected
    assert len(documents) == 9
    assert sum(len(d.passages) for d in documents) == 298
    for document in documents:
        assert [p.id for p in document.passages] == [
            f"{document.id}-{i}" for i in range(len(document.passages))
        ]


def test_passages_equal_the_dump(samples: Path, built):
    dump, _ = dump_sample(samples)
    compared = 0
    for document in built.corpus:
        if document.title in dump:
            chunks = [c["text"] for c in dump[document.title]["chunks"]]
            assert [p.text for p in document.passages] == chunks
            compared += 1
    assert compared == 6


def test_clean_spaces_matches_the_tokenizer_round_trip(folder: Path, built):
    raw = raw_records(folder)
    verbatim = nq.adapter.build(folder, clean_spaces=False)
    texts = {p.id: p.text for p in built.corpus.passages()}
    for p in verbatim.corpus.passages():
        split, n = p.doc_id.split("-")
        assert p.text == texts_of(raw[split][int(n)])[p.position]
        assert texts[p.id] == round_trip(p.text)
    changed = {p.id for p in verbatim.corpus.passages() if texts[p.id] != p.text}
    assert changed == {"dev-0-2", "train-0-25", "train-0-36", "train-0-80", "train-0-110"}
    assert "The reporting of'minority interest'" in texts["dev-0-2"]  # as the dump has it
    assert "would be in the eight.[citation needed]" in texts["train-0-36"]
    assert "leaving the field... A massive" in texts["train-0-110"]


def test_splits_follow_the_reference_rule(folder: Path, built):
    raw = raw_records(folder)
    splits = built.splits
    assert list(splits["test"].queries) == ["dev-0", "dev-1", "dev-2"]
    candidates = [f"train-{n}" for n in range(len(raw["train"]))]  # all are documents here
    drawn = random.Random(42).sample(range(len(candidates)), 3)
    assert list(splits["dev"].queries) == [candidates[i] for i in drawn]
    assert list(splits["dev"].queries) == ["train-5", "train-0", "train-4"]
    assert list(splits["train"].queries) == ["train-1", "train-2", "train-3"]
    for name, split in splits.items():
        for qid, text in split.queries.items():
            row = raw[qid.split("-")[0]][int(qid.split("-")[1])]
            assert text == row["question"]
            assert split.qrels[qid] == {f"{qid}-{i}": 1 for i in positives_of(row)}, name
    assert splits["test"].qrels["dev-0"] == {"dev-0-0": 1, "dev-0-1": 1}
    assert splits["test"].qrels["dev-1"] == {"dev-1-0": 1}  # its table long answer is dropped
    assert built.notes == ()


def test_qrels_agree_with_the_dump(samples: Path, built):
    _, judged = dump_sample(samples)
    compared = 0
    for split in built.splits.values():
        for qid, text in split.queries.items():
            if text in judged:
                assert {item.rsplit("-", 1)[1] for item in split.qrels[qid]} == judged[text]
                compared += 1
    assert compared == 6


def test_gzip_files_give_the_same_dataset(folder: Path, built, tmp_path: Path):
    for split in ("dev", "train"):
        with gzip.open(tmp_path / f"{split}.jsonl.gz", "wb") as out:
            out.write((folder / f"{split}.tsv").read_bytes())
    assert nq.adapter.build(tmp_path).fingerprint == built.fingerprint


def test_corpus_is_streamed_from_the_raw_files(folder: Path, tmp_path: Path):
    for split in ("dev", "train"):
        shutil.copy(folder / f"{split}.tsv", tmp_path / f"{split}.jsonl")
    dataset = nq.adapter.build(tmp_path)
    assert len(list(dataset.corpus)) == len(list(dataset.corpus)) == 9
    (tmp_path / "train.jsonl").unlink()
    with pytest.raises(DataError, match=r"train\.jsonl: no such file"):
        list(dataset.corpus)


def test_repeated_titles_are_judged_on_the_titles_document(folder: Path, tmp_path: Path):
    raw = raw_records(folder)
    wool = dict(raw["train"][2], question="how much wool does a sheep give")
    jack = dict(raw["train"][1], question="who was jack scott")
    jack["candidates"] = list(jack["candidates"])
    first_text = jack["passage_types"].index("text")
    jack["candidates"][first_text] += " Edited."
    flag = dict(raw["train"][5], question="what do the stars on the flag mean")
    lines = [json.dumps(row) for row in (*raw["train"], wool, jack, flag)]
    (tmp_path / "train.tsv").write_text("\n".join(lines) + "\n")
    shutil.copy(folder / "dev.tsv", tmp_path / "dev.tsv")
    dataset = nq.adapter.build(tmp_path)
    assert len(list(dataset.corpus)) == 9  # no new document
    train = dataset.splits["train"]
    assert list(train.queries) == ["train-1", "train-2", "train-3", "train-6"]
    assert train.qrels["train-6"] == {f"train-2-{i}": 1 for i in positives_of(wool)}
    assert dataset.notes == (
        "train queries dropped: 1 (their page repeats an earlier title with other passages, "
        "so their relevant passages are not in the corpus)",
    )


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_round_trip(built, tmp_path: Path, fmt: str):
    write_dataset(built, tmp_path / "out", fmt)
    again = read_dataset(tmp_path / "out", "NaturalQuestions")
    assert again.fingerprint == built.fingerprint
    assert list(again.corpus) == list(built.corpus)
    assert again.splits == built.splits


def test_require_accepts_every_raw_name(folder: Path, tmp_path: Path):
    nq.adapter.require(folder)
    shutil.copy(folder / "dev.tsv", tmp_path / "dev.jsonl")
    with pytest.raises(DataError, match=r"train\.jsonl\.gz: missing raw file of NaturalQuestions"):
        nq.adapter.require(tmp_path)


# --- bad input --------------------------------------------------------------------------------


def write_source(folder: Path, tmp_path: Path, train_lines: list[str]) -> Path:
    shutil.copy(folder / "dev.tsv", tmp_path / "dev.tsv")
    (tmp_path / "train.tsv").write_text("\n".join(train_lines) + "\n")
    return tmp_path


def test_missing_file(folder: Path, tmp_path: Path):
    shutil.copy(folder / "train.tsv", tmp_path / "train.tsv")
    with pytest.raises(DataError, match=r"dev\.jsonl\.gz: missing raw file"):
        nq.adapter.build(tmp_path)


def test_malformed_line(folder: Path, tmp_path: Path):
    lines = (folder / "train.tsv").read_text().splitlines()
    source = write_source(folder, tmp_path, [*lines[:2], '{"question": "x",', *lines[2:]])
    with pytest.raises(DataError, match=r"train\.tsv:3: invalid JSON"):
        nq.adapter.build(source)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"passage_types": ["text"]}, r"train\.tsv:2: field 'passage_types' has 1 entries"),
        ({"long_answers": [10_000]}, r"train\.tsv:2: field 'long_answers' holds 10000"),
        ({"title": None}, r"train\.tsv:2: field 'title' must be a string"),
        ({"question": ...}, r"train\.tsv:2: missing field 'question'"),
    ],
)
def test_bad_fields(folder: Path, tmp_path: Path, change: dict, message: str):
    rows = raw_records(folder)["train"]
    for key, value in change.items():
        if value is ...:
            del rows[1][key]
        else:
            rows[1][key] = value
    source = write_source(folder, tmp_path, [json.dumps(row) for row in rows])
    with pytest.raises(DataError, match=message):
        nq.adapter.build(source)


def test_bad_options():
    with pytest.raises(DataError, match="unknown option 'tagged'; valid options: clean_spaces$"):
        nq.adapter.check_options({"tagged": True})
    with pytest.raises(DataError, match="option 'clean_spaces' must be true or false, got"):
        nq.adapter.check_options({"clean_spaces": "no"})
