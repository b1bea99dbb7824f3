"""The MIRACL adapter, built from the real topics and qrels with a corpus made of the dump sample.

The MIRACL corpus text is not among the samples. The sample corpus written here holds every
passage of the DAPR dump sample (``corpus.jsonl`` and the ``belonging_doc`` of each judged chunk,
all complete articles) as MIRACL JSON lines. ``dapr-raw-sample/MIRACL.examples.csv`` is not used:
its chunks are several MIRACL passages merged, so they cannot be put back under MIRACL ids.
Expected splits and qrels are computed here from the raw TSV files with plain Python.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest
from dapr.data_loaders import miracl

from dapr.errors import DataError

SAMPLE = "dapr-dump-sample/MIRACL"
RAW = "miracl-en"


def dump_documents(shared: Path) -> dict[str, dict]:
    """Every document of the dump sample by id: corpus documents, then judged chunks' documents."""
    docs: dict[str, dict] = {}
    for line in (shared / SAMPLE / "corpus.jsonl").read_text().splitlines():
        doc = json.loads(line)
        docs[doc["id"]] = doc
    for split in ("train", "dev", "test"):
        for line in (shared / SAMPLE / f"{split}.jsonl").read_text().splitlines():
            for judged in json.loads(line)["judged_chunks"]:
                docs.setdefault(judged["belonging_doc"]["id"], judged["belonging_doc"])
    return docs


def miracl_lines(doc: dict) -> list[str]:
    """The MIRACL corpus lines of a dump document (chunk ``A-k`` is passage ``A#k``)."""
    lines = []
    for chunk in doc["chunks"]:
        article, _, k = chunk["id"].rpartition("-")
        row = {"docid": f"{article}#{k}", "title": doc["title"], "text": chunk["text"]}
        lines.append(json.dumps(row, ensure_ascii=False))
    return lines


def article_of(line: str) -> str:
    return json.loads(line)["docid"].split("#")[0]


def write_source(root: Path, shards: dict[int, list[str]], tsv: dict[str, str]) -> Path:
    """A source directory: the four TSV files and all 66 shards (missing ones empty)."""
    (root / miracl.CORPUS_DIR).mkdir(parents=True)
    for name, text in tsv.items():
        (root / name).write_text(text, encoding="utf-8")
    for i in range(miracl.SHARDS):
        text = "".join(line + "\n" for line in shards.get(i, []))
        path = root / miracl.CORPUS_DIR / f"docs-{i}.jsonl.gz"
        path.write_bytes(gzip.compress(text.encode("utf-8")))
    return root


def real_tsv(shared: Path) -> dict[str, str]:
    names = [*miracl.TOPICS.values(), *miracl.QRELS.values()]
    return {name: (shared / RAW / name).read_text(encoding="utf-8") for name in names}


@pytest.fixture(scope="module")
def docs(samples: Path) -> dict[str, dict]:
    return dump_documents(samples)


@pytest.fixture(scope="module")
def source(tmp_path_factory, samples: Path, docs: dict[str, dict]) -> Path:
    """Shard 0 holds the first half of the articles, shard 1 the rest; one article is split
    across the two shards and one is written in reverse passage order."""
    lines = []
    for i, doc in enumerate(docs.values()):
        doc_lines = miracl_lines(doc)
        lines.extend(reversed(doc_lines) if i == 1 else doc_lines)
    middle = len(lines) // 2
    while article_of(lines[middle]) != article_of(lines[middle - 1]):
        middle += 1  # cut inside an article
    shards = {0: lines[:middle], 1: lines[middle:]}
    return write_source(tmp_path_factory.mktemp("miracl"), shards, real_tsv(samples))


@pytest.fixture(scope="module")
def built(source: Path):
    return miracl.adapter.build(source)


# --- expectations computed from the raw files --------------------------------------------------


def relevant(path: Path) -> dict[str, list[str]]:
    """Query id -> relevant passage ids, queries in the order of their first relevant row."""
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        qid, _, pid, grade = line.split("\t")
        if int(grade) > 0:
            out.setdefault(qid, []).append(pid)
    return out


@pytest.fixture(scope="module")
def expected(samples: Path, docs: dict[str, dict]) -> dict[str, dict[str, dict[str, int]]]:
    in_corpus = {c["id"].replace("-", "#") for d in docs.values() for c in d["chunks"]}
    test_rel = relevant(samples / RAW / miracl.QRELS["dev"])
    train_rel = relevant(samples / RAW / miracl.QRELS["train"])
    order = list(train_rel)
    drawn = random.Random(42).sample(range(len(order)), len(test_rel))
    dev_ids = [order[i] for i in drawn]
    train_ids = [q for q in order if q not in set(dev_ids)]

    def qrels(ids: list[str], rel: dict[str, list[str]]) -> dict[str, dict[str, int]]:
        out = {}
        for qid in ids:
            kept = {pid.replace("#", "-"): 1 for pid in rel[qid] if pid in in_corpus}
            if kept:
                out[qid] = kept
        return out

    return {
        "train": qrels(train_ids, train_rel),
        "dev": qrels(dev_ids, train_rel),
        "test": qrels(list(test_rel), test_rel),
    }


# --- the build from the sample ------------------------------------------------------------------


def test_raw_files_name_the_reference_urls():
    urls = {raw.path: raw.url for raw in miracl.adapter.raw_files}
    assert len(urls) == 4 + 66
    assert urls["miracl-corpus-v1.0-en/docs-65.jsonl.gz"] == (
        "https://huggingface.co/datasets/miracl/miracl-corpus/resolve/main/"
        "miracl-corpus-v1.0-en/docs-65.jsonl.gz"
    )
    assert urls["qrels.miracl-v1.0-en-train.tsv"] == (
        "https://huggingface.co/datasets/miracl/miracl/raw/main/miracl-v1.0-en/qrels/"
        "qrels.miracl-v1.0-en-train.tsv"
    )
    assert miracl.adapter.hub_repo == "UKPLab/dapr"


def test_splits_match_the_independent_computation(built, expected):
    assert set(built.splits) == {"train", "dev", "test"}
    for name, qrels in expected.items():
        assert built.splits[name].qrels == qrels, name
        assert set(built.splits[name].queries) == set(qrels)
    counts = {
        name: (len(s.queries), sum(len(j) for j in s.qrels.values()))
        for name, s in built.splits.items()
    }
    assert counts == {"train": (5, 11), "dev": (3, 7), "test": (4, 13)}
    assert built.relevance_level == 1
    assert {g for s in built.splits.values() for j in s.qrels.values() for g in j.values()} == {1}


def test_known_queries_and_judgements(built):
    test = built.splits["test"]
    assert test.queries["0"] == "Is Creole a pidgin of French?"
    # qrels row "0 Q0 1170520#2 0" (grade 0) is dropped; the four grade-1 rows are kept
    assert test.qrels["0"] == {"462221-4": 1, "29810-23": 1, "3716905-0": 1, "22399755-18": 1}
    assert built.splits["dev"].qrels["732"] == {"2955-0": 1, "2955-1": 1}
    assert built.splits["train"].queries["6"] == "Can you prevent traumatic brain injury?"


def test_dump_queries_fall_in_the_same_splits(built, samples: Path):
    for name in ("train", "dev", "test"):
        rows = (samples / SAMPLE / f"{name}.jsonl").read_text().splitlines()
        for row in map(json.loads, rows):
            qid = row["query"]["id"]
            assert built.splits[name].queries[qid] == row["query"]["text"]
            assert built.splits[name].qrels[qid] == {
                j["chunk"]["id"]: j["judgement"] for j in row["judged_chunks"]
            }


def test_documents_equal_the_dump(built, docs):
    documents = list(built.corpus)
    assert [d.id for d in documents] == list(docs)
    assert len(documents) == 24
    assert sum(len(d.passages) for d in documents) == 915
    for document in documents:
        dump = docs[document.id]
        assert document.title == dump["title"]
        assert [(p.id, p.text) for p in document.passages] == [
            (c["id"], c["text"]) for c in dump["chunks"]
        ]
        assert [p.position for p in document.passages] == list(range(len(document.passages)))
        assert all(p.doc_id == document.id and p.is_candidate for p in document.passages)
    anarchism = documents[0]
    assert (anarchism.id, anarchism.title, len(anarchism.passages)) == ("12", "Anarchism", 82)
    assert anarchism.passages[0].text.startswith("Anarchism is a political philosophy")


def test_qrels_point_into_the_corpus(built):
    ids = set(built.corpus.ids.passage_ids.tolist())
    for split in built.splits.values():
        assert all(judged.keys() <= ids for judged in split.qrels.values())


def test_dropped_judgements_are_noted(built):
    (note,) = built.notes
    assert note.startswith("10194 relevant judgements name passages that are not in the corpus")
    assert "(24 articles, 915 passages)" in note and "3650 queries" in note


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_hub_layout_round_trip(built, hub_round_trip, fmt: str):
    hub_round_trip(built, fmt)


def test_build_is_deterministic(built, source):
    assert miracl.adapter.build(source).fingerprint == built.fingerprint


# --- small made-up corpora: positions, order, errors -------------------------------------------

TOPICS = {
    miracl.TOPICS["dev"]: "1\tWhat is seven?\n2\tWhat is eight?\n",
    miracl.TOPICS["train"]: "3\tWhat is nine?\n4\tWhat is ten?\n",
}


def tiny(tmp_path: Path, shards: dict[int, list[str]], dev_qrels: str) -> Path:
    tsv = {
        **TOPICS,
        miracl.QRELS["dev"]: dev_qrels,
        miracl.QRELS["train"]: "3\tQ0\t9#0\t1\n4\tQ0\t9#0\t1\n",
    }
    return write_source(tmp_path, shards, tsv)


def line(pid: str, text: str, title: str = "T") -> str:
    return json.dumps({"docid": pid, "title": title, "text": text})


def test_positions_with_gaps_are_ranked_and_qrels_follow(tmp_path: Path):
    shards = {
        0: [line("7#5", "five", "Seven"), line("7#0", "zero", "Seven")],
        3: [line("7#2", "two", "Seven"), line("9#0", "nine", "Nine")],
    }
    source = tiny(tmp_path, shards, "1\tQ0\t7#5\t1\n1\tQ0\t7#0\t0\n2\tQ0\t7#2\t1\n2\tQ0\t8#0\t1\n")
    dataset = miracl.adapter.build(source)
    seven, nine = list(dataset.corpus)
    assert [(p.id, p.position, p.text) for p in seven.passages] == [
        ("7-0", 0, "zero"),
        ("7-1", 1, "two"),
        ("7-2", 2, "five"),
    ]
    assert seven.title == "Seven" and nine.passages[0].id == "9-0"
    # two test queries -> both train queries are drawn for dev; train is empty
    assert dataset.splits["test"].qrels == {"1": {"7-2": 1}, "2": {"7-1": 1}}
    assert dataset.splits["dev"].qrels == {"3": {"9-0": 1}, "4": {"9-0": 1}}
    assert dataset.splits["train"].queries == {}
    assert len(dataset.notes) == 1 and dataset.notes[0].startswith("1 relevant judgements")


def test_too_few_train_queries_for_the_held_out_dev(tmp_path: Path):
    source = tiny(tmp_path, {0: [line("9#0", "nine")]}, "1\tQ0\t9#0\t1\n2\tQ0\t9#0\t1\n")
    source.joinpath(miracl.QRELS["train"]).write_text("3\tQ0\t9#0\t1\n4\tQ0\t9#0\t0\n")
    with pytest.raises(DataError, match="has 1 queries with a relevant passage, fewer than the 2"):
        miracl.adapter.build(source)


def test_article_split_apart_is_an_error_naming_the_line(tmp_path: Path):
    shards = {0: [line("7#0", "a"), line("9#0", "b")], 1: [line("7#1", "c")]}
    source = tiny(tmp_path, shards, "1\tQ0\t7#0\t1\n")
    with pytest.raises(DataError, match=r"docs-1\.jsonl\.gz:1: passage of article '7'"):
        miracl.adapter.build(source)


def test_repeated_passage_is_an_error(tmp_path: Path):
    source = tiny(tmp_path, {0: [line("9#0", "a"), line("9#0", "b")]}, "1\tQ0\t9#0\t1\n")
    with pytest.raises(DataError, match="repeats a passage position"):
        miracl.adapter.build(source)


def test_missing_shard_names_the_file(tmp_path: Path):
    source = tiny(tmp_path, {0: [line("9#0", "a")]}, "1\tQ0\t9#0\t1\n")
    (source / miracl.CORPUS_DIR / "docs-40.jsonl.gz").unlink()
    with pytest.raises(DataError, match=r"docs-40\.jsonl\.gz: missing raw file of MIRACL"):
        miracl.adapter.build(source)


def test_malformed_corpus_line_names_shard_and_line(tmp_path: Path):
    source = tiny(tmp_path, {0: [line("9#0", "a"), "{not json"]}, "1\tQ0\t9#0\t1\n")
    with pytest.raises(DataError, match=r"docs-0\.jsonl\.gz:2: invalid JSON"):
        miracl.adapter.build(source)


def test_corpus_line_without_text_fails_when_read(tmp_path: Path):
    source = tiny(tmp_path, {0: [json.dumps({"docid": "9#0", "title": "T"})]}, "1\tQ0\t9#0\t1\n")
    dataset = miracl.adapter.build(source)
    with pytest.raises(DataError, match=r"docs-0\.jsonl\.gz:1: missing field 'text'"):
        list(dataset.corpus)


def test_malformed_passage_id_names_the_qrels_row(tmp_path: Path):
    source = tiny(tmp_path, {0: [line("9#0", "a")]}, "1\tQ0\t9#0\t1\n2\tQ0\t9-0\t1\n")
    with pytest.raises(DataError, match=r"qrels\.miracl-v1\.0-en-dev\.tsv:2: passage id '9-0'"):
        miracl.adapter.build(source)


def test_short_qrels_row_and_unknown_topic(tmp_path: Path):
    source = tiny(tmp_path, {0: [line("9#0", "a")]}, "1\tQ0\t9#0\n")
    with pytest.raises(DataError, match=r"en-dev\.tsv:1: expected 4 columns"):
        miracl.adapter.build(source)
    source.joinpath(miracl.QRELS["dev"]).write_text("5\tQ0\t9#0\t1\n")
    with pytest.raises(DataError, match=r"en-dev\.tsv:1: query '5' has no topic"):
        miracl.adapter.build(source)


def test_unknown_option_is_rejected():
    with pytest.raises(DataError, match="unknown option 'seed'; it takes no options"):
        miracl.adapter.check_options({"seed": 1})
