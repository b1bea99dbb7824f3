"""NQ-hard over NaturalQuestions built from the raw sample, with hand-made label files.

The sample's NaturalQuestions test split holds dev-0 (relevant dev-0-0, dev-0-1), dev-1
(dev-1-0) and dev-2 (dev-2-0).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dapr.data_loaders import nq, nq_hard

from dapr.datasets import read_dataset, write_dataset
from dapr.errors import DataError

LABELS_TSV = (
    "query_id\tcorpus_id\tcategories\n"
    "dev-0\tdev-0-1\tMHR, CR\n"
    "dev-2\tdev-2-0\tacronym\n"
    "dev-2\tdev-2-0\tMain Topic\n"
)
EXPECTED_LABELS = {"dev-0": ("CR", "MHR"), "dev-2": ("MT", "AC")}
EXPECTED_QRELS = {"dev-0": {"dev-0-1": 1}, "dev-2": {"dev-2-0": 1}}


@pytest.fixture(scope="module")
def nq_sample(samples: Path):
    return nq.adapter.build(samples / "dapr-raw-sample" / "NaturalQuestions")


@pytest.fixture(scope="module")
def nq_dir(nq_sample, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("nq") / "NaturalQuestions"
    write_dataset(nq_sample, out, "jsonl")
    return out


def labels_dir(tmp_path: Path, name: str, text: str) -> Path:
    (tmp_path / "labels").mkdir(exist_ok=True)
    (tmp_path / "labels" / name).write_text(text, encoding="utf-8")
    return tmp_path / "labels"


def test_tsv_labels_restrict_queries_and_qrels(nq_dir: Path, nq_sample, tmp_path: Path):
    source = labels_dir(tmp_path, "nq-hard.tsv", LABELS_TSV)
    dataset = nq_hard.adapter.build(source, nq=str(nq_dir))
    assert dataset.name == "NQ-hard"
    assert list(dataset.splits) == ["test"]
    test = dataset.splits["test"]
    assert test.queries == {
        "dev-0": "what is non controlling interest on balance sheet",
        "dev-2": "who sings love will keep us alive by the eagles",
    }
    assert test.qrels == EXPECTED_QRELS  # dev-0-0 is relevant in NQ but not labelled hard
    assert nq_sample.splits["test"].qrels["dev-0"] == {"dev-0-0": 1, "dev-0-1": 1}
    assert dataset.labels == EXPECTED_LABELS
    assert dataset.corpus.fingerprint == nq_sample.corpus.fingerprint
    assert dataset.notes == (
        "queries: the 2 NQ-hard queries of NaturalQuestions test (2 judged pairs); "
        "corpus: all of NaturalQuestions",
    )


def test_flag_columns_in_json_lines_give_the_same_dataset(nq_dir: Path, tmp_path: Path):
    rows = [
        {"qid": "dev-0", "passage_id": "dev-0-1", "is_cr": True, "MHR": 1, "main-topic": False},
        {"qid": "dev-2", "passage_id": "dev-2-0", "acronym": "yes", "main-topic": "true"},
    ]
    source = labels_dir(tmp_path, "labels.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    dataset = nq_hard.adapter.build(source, nq=str(nq_dir))
    assert dataset.labels == EXPECTED_LABELS
    assert dataset.splits["test"].qrels == EXPECTED_QRELS


def test_hub_like_rows(nq_sample):
    rows = [
        {"query_id": "dev-2", "corpus_id": "dev-2-0", "categories": ["AC", "MT"], "url": "u"},
        {"query_id": "dev-0", "corpus_id": "dev-0-1", "categories": "['CR', 'MHR']", "url": "u"},
    ]
    dataset = nq_hard.from_labels(nq_sample, rows)
    assert dataset.labels == EXPECTED_LABELS
    assert list(dataset.splits["test"].queries) == ["dev-0", "dev-2"]  # in NQ's order
    assert dataset.splits["test"].qrels == EXPECTED_QRELS


def test_a_row_may_list_several_passages(nq_sample):
    rows = [{"query-id": "dev-0", "corpus-ids": ["dev-0-0", "dev-0-1"], "Category": "MT|AC"}]
    dataset = nq_hard.from_labels(nq_sample, rows)
    assert dataset.labels == {"dev-0": ("MT", "AC")}
    assert dataset.splits["test"].qrels == {"dev-0": {"dev-0-0": 1, "dev-0-1": 1}}


def test_parquet_labels_and_labels_without_passage_column(nq_dir: Path, tmp_path: Path):
    table = pa.table({"_id": ["dev-0", "dev-1"], "type": [["CR"], ["coreference resolution"]]})
    (tmp_path / "labels").mkdir()
    pq.write_table(table, tmp_path / "labels" / "0000.parquet")
    dataset = nq_hard.adapter.build(tmp_path / "labels", nq=str(nq_dir))
    assert dataset.labels == {"dev-0": ("CR",), "dev-1": ("CR",)}
    # without a passage column every relevant passage of a labelled query is kept
    assert dataset.splits["test"].qrels == {
        "dev-0": {"dev-0-0": 1, "dev-0-1": 1},
        "dev-1": {"dev-1-0": 1},
    }


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_round_trip_keeps_the_labels(nq_dir: Path, tmp_path: Path, fmt: str):
    dataset = nq_hard.adapter.build(labels_dir(tmp_path, "l.tsv", LABELS_TSV), nq=str(nq_dir))
    write_dataset(dataset, tmp_path / "out", fmt)
    again = read_dataset(tmp_path / "out", "NQ-hard")
    assert again.fingerprint == dataset.fingerprint
    assert again.labels == EXPECTED_LABELS
    assert again.splits == dataset.splits
    assert list(again.corpus) == list(dataset.corpus)


def test_default_nq_is_the_prepared_copy(nq_sample, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    write_dataset(nq_sample, nq.adapter.prepared, "parquet")
    dataset = nq_hard.adapter.build(labels_dir(tmp_path, "l.tsv", LABELS_TSV))
    assert dataset.labels == EXPECTED_LABELS


# --- bad input --------------------------------------------------------------------------------


def test_columns_that_do_not_fit_are_listed(nq_sample, nq_dir: Path, tmp_path: Path):
    with pytest.raises(DataError, match=r"nq-hard: columns 'question', 'answer' do not fit"):
        nq_hard.from_labels(nq_sample, [{"question": "dev-0", "answer": "CR"}])
    table = pa.table({"qid": ["dev-0"], "passage_id": ["dev-0-1"], "score": [1]})
    (tmp_path / "labels").mkdir()
    pq.write_table(table, tmp_path / "labels" / "0000.parquet")
    with pytest.raises(DataError, match=r"0000\.parquet: columns 'qid', 'passage_id', 'score'"):
        nq_hard.adapter.build(tmp_path / "labels", nq=str(nq_dir))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("qid\tpid\tcategory\ndev-9\tdev-9-0\tCR\n", r"l\.tsv:2: query 'dev-9' is no judged test"),
        ("qid\tpid\tcategory\ndev-0\tdev-0-2\tCR\n", r"l\.tsv:2: passage 'dev-0-2' is not rel"),
        ("qid\tpid\tcategory\n\ndev-0\tdev-0-1\tSC\n", r"l\.tsv:3: .* unknown category 'SC'"),
        ("qid\tpid\tcategory\ndev-0\tdev-0-1\n", r"l\.tsv:2: 2 columns but the header has 3"),
        ("qid\tpid\tCR\ndev-0\tdev-0-1\tmaybe\n", r"l\.tsv:2: field 'CR' must be true or false"),
    ],
)
def test_bad_rows_name_file_and_line(nq_dir: Path, tmp_path: Path, text: str, message: str):
    with pytest.raises(DataError, match=message):
        nq_hard.adapter.build(labels_dir(tmp_path, "l.tsv", text), nq=str(nq_dir))


def test_missing_labels_and_bad_options(nq_dir: Path, tmp_path: Path):
    with pytest.raises(DataError, match=r"empty: no label file"):
        (tmp_path / "empty").mkdir()
        nq_hard.adapter.build(tmp_path / "empty", nq=str(nq_dir))
    source = labels_dir(tmp_path, "l.tsv", LABELS_TSV)
    with pytest.raises(DataError, match="unknown option 'corpus'; valid options: nq$"):
        nq_hard.adapter.check_options({"corpus": "x"})
    with pytest.raises(DataError, match="option 'nq' must be a path, got 3"):
        nq_hard.adapter.check_options({"nq": 3})
    with pytest.raises(DataError, match=r"missing: not a directory"):
        nq_hard.adapter.build(source, nq=str(tmp_path / "missing"))


def test_load_fetches_the_hub_labels_over_the_prepared_nq(
    nq_sample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """No NQ-hard copy yet: NaturalQuestions' prepared copy + the hub config ``nq-hard``."""
    from dapr.datasets import published

    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    write_dataset(nq_sample, nq.adapter.prepared)
    hub = tmp_path / "hub"
    (hub / "NaturalQuestions" / "nq-hard").mkdir(parents=True)
    (hub / "README.md").write_text(
        "---\nconfigs:\n- config_name: nq-hard\n  data_files:\n  - split: test\n"
        "    path: NaturalQuestions/nq-hard/*.parquet\n---\n"
    )
    rows = [
        {"query_id": "dev-0", "corpus_id": "dev-0-1", "categories": ["MHR", "CR"]},
        {"query_id": "dev-2", "corpus_id": "dev-2-0", "categories": ["AC", "MT"]},
    ]
    pq.write_table(pa.Table.from_pylist(rows), hub / "NaturalQuestions/nq-hard/0000.parquet")
    downloads: list[list[str]] = []

    def fake_download(patterns, repo, dataset):  # what snapshot_download leaves on disk
        downloads.append(patterns)
        return hub

    monkeypatch.setattr(published, "_download", fake_download)
    dataset = nq_hard.adapter.load()
    assert downloads == [["README.md"], ["NaturalQuestions/nq-hard/*.parquet"]]
    assert dataset.labels == EXPECTED_LABELS
    assert dataset.splits["test"].qrels == EXPECTED_QRELS
    assert nq_hard.adapter.cached()
    assert nq_hard.adapter.load().fingerprint == dataset.fingerprint
    assert len(downloads) == 2  # the second load reads the prepared copy
