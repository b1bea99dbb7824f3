"""ConditionalQA built from the real v1.0 questions and the 11 pages of the DAPR dump sample.

``documents.json`` is not among the shared samples: it is rebuilt from the dump sample's pages
(whose chunks are the original HTML elements), each at its real position in the array (the
document id); the other positions hold empty pages, which the builder skips. The questions are
the real ``train.json`` / ``dev.json`` rows whose page is among those 11.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from dapr.data_loaders import conditionalqa as cqa

from dapr.datasets import read_dataset, write_dataset
from dapr.errors import DataError

URLS = {  # the page of each dump document, as the questions' evidences locate it
    "56": "https://www.gov.uk/mortgage-interest-run-on",
    "66": "https://www.gov.uk/apply-gender-recognition-certificate",
    "74": "https://www.gov.uk/applying-for-probate",
    "86": "https://www.gov.uk/apply-special-guardian",
    "89": "https://www.gov.uk/child-adoption",
    "105": "https://www.gov.uk/make-decisions-for-someone",
    "108": "https://www.gov.uk/how-to-annul-marriage",
    "323": "https://www.gov.uk/become-lorry-bus-driver",
    # no question of train/dev asks about these three: any distinct url will do
    "0": "https://www.gov.uk/child-tax-credit",
    "1": "https://www.gov.uk/working-tax-credit",
    "2": "https://www.gov.uk/manage-child-maintenance-case",
}


def dump_sample(samples: Path) -> tuple[dict[str, dict], dict[str, tuple[str, set[str]]]]:
    """The dump's documents by id, and its queries: id -> (text, judged chunk ids)."""
    folder = samples / "dapr-dump-sample" / "ConditionalQA"
    documents: dict[str, dict] = {}
    queries = {}
    for name in ("corpus", "train", "dev", "test"):
        for line in (folder / f"{name}.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if name == "corpus":
                documents[row["id"]] = row
                continue
            judged = {j["chunk"]["id"] for j in row["judged_chunks"] if j["judgement"] > 0}
            queries[row["query"]["id"]] = (row["query"]["text"], judged)
            for j in row["judged_chunks"]:
                documents.setdefault(j["belonging_doc"]["id"], j["belonging_doc"])
    return documents, queries


@pytest.fixture(scope="module")
def sample(samples: Path, tmp_path_factory: pytest.TempPathFactory):
    documents, queries = dump_sample(samples)
    source = tmp_path_factory.mktemp("conditionalqa")
    last = max(int(i) for i in documents)
    pages = [
        {"url": f"https://example.org/empty-{i}", "title": "", "contents": []}
        for i in range(last + 1)
    ]
    for doc_id, doc in documents.items():
        contents = [chunk["text"] for chunk in doc["chunks"]]
        pages[int(doc_id)] = {"url": URLS[doc_id], "title": doc["title"], "contents": contents}
    (source / "documents.json").write_text(json.dumps(pages), encoding="utf-8")
    questions = {}
    for name in ("train", "dev"):
        rows = json.loads((samples / "conditionalqa-v1_0" / f"{name}.json").read_text())
        questions[name] = [row for row in rows if row["url"] in URLS.values()]
        (source / f"{name}.json").write_text(json.dumps(questions[name]), encoding="utf-8")
    return {
        "source": source,
        "documents": documents,
        "queries": queries,
        "questions": questions,
        "plain": cqa.adapter.build(source),
        "tagged": cqa.adapter.build(source, tagged=True),
    }


def test_rebuilt_pages_hold_every_evidence(sample):
    for rows in sample["questions"].values():
        for row in rows:
            doc_id = next(i for i, url in URLS.items() if url == row["url"])
            texts = [c["text"] for c in sample["documents"][doc_id]["chunks"]]
            assert all(evidence in texts for evidence in row["evidences"])


def test_corpus_is_the_pages_with_positional_ids(sample):
    documents = list(sample["plain"].corpus)
    assert [d.id for d in documents] == sorted(sample["documents"], key=int)
    assert len(documents) == 11
    expected_passages = sum(len(d["chunks"]) for d in sample["documents"].values())
    assert sum(len(d.passages) for d in documents) == expected_passages == 1260
    for document in documents:
        dump = sample["documents"][document.id]
        assert document.title == dump["title"]
        assert [p.id for p in document.passages] == [c["id"] for c in dump["chunks"]]
        assert all(p.doc_id == document.id and p.is_candidate for p in document.passages)


def test_tagged_passages_equal_the_dump_and_plain_ones_lose_the_tags(sample):
    plain = {p.id: p.text for p in sample["plain"].corpus.passages()}
    tagged = {p.id: p.text for p in sample["tagged"].corpus.passages()}
    for doc in sample["documents"].values():
        for chunk in doc["chunks"]:
            assert tagged[chunk["id"]] == chunk["text"]
            assert plain[chunk["id"]] == re.sub("<[^>\n]*>", "", chunk["text"]).strip()
    assert tagged["0-0"] == "<h1>Overview</h1>" and plain["0-0"] == "Overview"
    assert plain["74-24"].startswith("You can apply to become the estate’s administrator")
    assert not any("<p>" in text or "</li>" in text for text in plain.values())


def test_split_sizes_follow_the_reference_rule(sample):
    with_evidence = {
        name: [row["id"] for row in rows if row["evidences"]]
        for name, rows in sample["questions"].items()
    }
    assert (len(with_evidence["train"]), len(with_evidence["dev"])) == (28, 6)
    splits = sample["plain"].splits
    assert list(splits["test"].queries) == with_evidence["dev"]
    n_test = len(with_evidence["dev"])
    drawn = random.Random(42).sample(range(len(with_evidence["train"])), n_test)
    assert list(splits["dev"].queries) == [with_evidence["train"][i] for i in drawn]
    assert sorted(splits["train"].queries) == sorted(
        set(with_evidence["train"]) - set(splits["dev"].queries)
    )
    assert [len(splits[s].queries) for s in ("train", "dev", "test")] == [22, 6, 6]
    for split in splits.values():
        assert split.queries.keys() == split.qrels.keys()


def test_queries_and_qrels(sample):
    rows = {row["id"]: row for rows in sample["questions"].values() for row in rows}
    splits = sample["plain"].splits
    queries = {qid: text for s in splits.values() for qid, text in s.queries.items()}
    qrels = {qid: judged for s in splits.values() for qid, judged in s.qrels.items()}
    for qid, text in queries.items():
        assert text == rows[qid]["scenario"] + " " + rows[qid]["question"]
        assert len(qrels[qid]) == len(set(rows[qid]["evidences"]))
        assert all(grade == 1 for grade in qrels[qid].values())
    assert qrels["train-0"] == {"74-24": 1, "74-25": 1, "74-27": 1, "74-31": 1}
    assert sum(len(j) for j in qrels.values()) == sum(
        len(set(row["evidences"])) for row in rows.values() if row["evidences"]
    )


def test_queries_and_qrels_agree_with_the_dump(sample):
    splits = sample["tagged"].splits
    queries = {qid: text for s in splits.values() for qid, text in s.queries.items()}
    qrels = {qid: judged for s in splits.values() for qid, judged in s.qrels.items()}
    shared = sorted(set(queries) & set(sample["queries"]))
    assert shared == [
        "dev-0", "dev-1", "dev-2", "train-0", "train-1", "train-107", "train-1159", "train-3",
        "train-473",
    ]  # fmt: skip
    for qid in shared:
        text, judged = sample["queries"][qid]
        assert queries[qid] == text
        assert set(qrels[qid]) == judged


def test_the_full_question_files_give_the_papers_dev_split(samples: Path):
    ids = {}
    for name in ("train", "dev"):
        rows = json.loads((samples / "conditionalqa-v1_0" / f"{name}.json").read_text())
        ids[name] = [row["id"] for row in rows if row["evidences"]]
    assert (len(ids["train"]), len(ids["dev"])) == (2246, 271)
    dev, train = cqa.split_by_number(ids["train"], len(ids["dev"]))
    assert len(dev) == 271 and len(train) == 2246 - 271
    assert dev[:3] == ["train-473", "train-107", "train-1159"]  # the dump's dev queries
    assert {"train-0", "train-1", "train-3"} <= set(train)  # the dump's train queries


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_round_trip(sample, tmp_path: Path, fmt: str):
    dataset = sample["plain"]
    write_dataset(dataset, tmp_path / "out", fmt)
    again = read_dataset(tmp_path / "out", "ConditionalQA")
    assert again.fingerprint == dataset.fingerprint
    assert list(again.corpus) == list(dataset.corpus)
    assert again.splits == dataset.splits


def test_build_is_deterministic(sample):
    assert cqa.adapter.build(sample["source"]).fingerprint == sample["plain"].fingerprint


# --- bad input --------------------------------------------------------------------------------


def copy_source(sample, tmp_path: Path) -> Path:
    for name in ("documents.json", "train.json", "dev.json"):
        (tmp_path / name).write_bytes((sample["source"] / name).read_bytes())
    return tmp_path


def test_missing_documents_file(sample, tmp_path: Path):
    source = copy_source(sample, tmp_path)
    (source / "documents.json").unlink()
    with pytest.raises(DataError, match=r"documents\.json: missing raw file of ConditionalQA"):
        cqa.adapter.build(source)


def test_malformed_json(sample, tmp_path: Path):
    source = copy_source(sample, tmp_path)
    (source / "train.json").write_text('[{"id": "train-0",', encoding="utf-8")
    with pytest.raises(DataError, match=r"train\.json: not valid JSON"):
        cqa.adapter.build(source)


def test_page_without_contents_field(sample, tmp_path: Path):
    source = copy_source(sample, tmp_path)
    pages = json.loads((source / "documents.json").read_text())
    del pages[3]["contents"]
    (source / "documents.json").write_text(json.dumps(pages))
    with pytest.raises(DataError, match=r"documents\.json: page 3: missing field 'contents'"):
        cqa.adapter.build(source)


def test_question_about_an_unknown_page(sample, tmp_path: Path):
    source = copy_source(sample, tmp_path)
    rows = json.loads((source / "dev.json").read_text())
    rows[0]["url"] = "https://www.gov.uk/nowhere"
    (source / "dev.json").write_text(json.dumps(rows))
    with pytest.raises(DataError, match=r"dev\.json: question 'dev-\d+': url .* is not a page"):
        cqa.adapter.build(source)


def test_evidence_that_is_no_element(sample, tmp_path: Path):
    source = copy_source(sample, tmp_path)
    rows = json.loads((source / "train.json").read_text())
    rows[0]["evidences"].append("<p>Not on the page.</p>")
    (source / "train.json").write_text(json.dumps(rows))
    with pytest.raises(DataError, match=r"train\.json: question 'train-0': evidence .* no element"):
        cqa.adapter.build(source)


def test_bad_options():
    with pytest.raises(DataError, match="unknown option 'tags'; valid options: tagged$"):
        cqa.adapter.check_options({"tags": True})
    with pytest.raises(DataError, match="option 'tagged' must be true or false, got \"yes\""):
        cqa.adapter.check_options({"tagged": "yes"})
