"""T2Ranking built from small files in the published tab-separated format."""

from __future__ import annotations

from pathlib import Path

import pytest

from dapr.data import Run
from dapr.datasets.adapter import adapter_of
from dapr.errors import DataError
from dapr.evaluation import evaluate

PASSAGES = {
    "0": "蜂巢快递柜取件时验证码输错了,可以在微信小程序里重新获取取件码。",
    "1": "产后腹部松弛是因为怀孕时腹直肌被拉伸,坚持做产后修复运动可以慢慢恢复。",
    "2": "判断鱼卵是否存活:活的鱼卵晶莹透亮,死的鱼卵发白浑浊。",
    "3": "杜仲泡水喝有补肝肾、强筋骨的功效,但不宜长期大量饮用。",
    "4": "皮蛋性寒,脾胃虚寒的人不宜多吃。",
    "5": "月有阴晴圆缺,此事古难全,比喻人生总有悲欢离合。",
    "6": "东北名酒有玉泉酒、老龙口、榆树钱等白酒品牌。",
    "7": "",
}
TRAIN_QUERIES = {"50000": "杜仲泡水喝的功效与作用", "50001": "皮蛋是寒性的食物吗"}
DEV_QUERIES = {
    "0": "蜂巢取快递验证码摁错怎么办",
    "1": "生产过后怎么还有一层肚子",
    "3": "怎么判断鱼卵是否活着",
}
TRAIN_QRELS = [("50000", "3", 3), ("50000", "4", 0), ("50001", "4", 2), ("50001", "5", 1)]
DEV_QRELS = [
    ("0", "0", 3),
    ("0", "6", 1),
    ("0", "7", 0),
    ("1", "1", 2),
    ("1", "5", 1),
    ("1", "2", 0),
    ("3", "2", 1),
]
RETRIEVAL_DEV = [("0", "0"), ("1", "1"), ("3", "2")]  # ("3", "2") is graded 1 above: raised to 2


def _write(path: Path, lines: list[str], header: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(line + "\n" for line in ([header] if header else []) + lines)
    path.write_text(text, encoding="utf-8")


@pytest.fixture
def source(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    _write(data / "collection.tsv", [f"{p}\t{t}" for p, t in PASSAGES.items()], "pid\ttext")
    _write(data / "queries.train.tsv", [f"{q}\t{t}" for q, t in TRAIN_QUERIES.items()], "qid\ttext")
    _write(data / "queries.dev.tsv", [f"{q}\t{t}" for q, t in DEV_QUERIES.items()])  # no header
    _write(data / "qrels.train.tsv", [f"{q}\t0\t{p}\t{g}" for q, p, g in TRAIN_QRELS])
    _write(
        data / "qrels.dev.tsv", [f"{q}\t0\t{p}\t{g}" for q, p, g in DEV_QRELS], "qid\t-\tpid\trel"
    )
    return data


def _build(source: Path, **options):
    return adapter_of("T2Ranking").build(source, **options)


def _graded(rows) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for qid, pid, grade in rows:
        qrels.setdefault(qid, {})[pid] = grade
    return qrels


def test_every_passage_is_its_own_untitled_document(source):
    dataset = _build(source)
    documents = list(dataset.corpus)
    assert [d.id for d in documents] == list(PASSAGES)  # the header line is not a passage
    for document in documents:
        (passage,) = document.passages
        assert document.title == ""
        assert (passage.id, passage.doc_id, passage.position) == (document.id, document.id, 0)
        assert passage.text == PASSAGES[document.id]
    assert dataset.name == "T2Ranking" and dataset.language == "zh"
    assert dataset.relevance_level == 2
    assert any("no document grouping" in note for note in dataset.notes)
    assert any("grades 2 and 3 count as relevant" in note for note in dataset.notes)


def test_splits_keep_the_four_grades(source):
    dataset = _build(source)
    assert list(dataset.splits) == ["train", "dev"]  # no test files given
    train, dev = dataset.split("train"), dataset.split("dev")
    assert train.queries == TRAIN_QUERIES and dev.queries == DEV_QUERIES
    assert train.qrels == _graded(TRAIN_QRELS)
    assert dev.qrels == _graded(DEV_QRELS)
    assert sorted({g for j in dev.qrels.values() for g in j.values()}) == [0, 1, 2, 3]
    assert sum(map(len, dev.qrels.values())) == len(DEV_QRELS) == 7


def test_retrieval_qrels_raise_listed_pairs_to_grade_two(source):
    _write(source / "qrels.retrieval.dev.tsv", [f"{q}\t{p}" for q, p in RETRIEVAL_DEV], "qid\tpid")
    dev = _build(source).split("dev")
    expected = _graded(DEV_QRELS)
    expected["3"]["2"] = 2
    assert dev.qrels == expected
    note = "qrels.retrieval.dev.tsv lists as relevant 1 pair(s) that qrels.dev.tsv grades below"
    assert any(n.startswith(note) for n in _build(source).notes)


def test_test_split_needs_queries_and_qrels(source):
    _write(source / "queries.test.tsv", ["15\t西安发源地的卡没用完"], "qid\ttext")
    assert "test" not in _build(source).splits
    _write(source / "qrels.test.tsv", ["15\t0\t6\t2"])
    test = _build(source).split("test")
    assert test.queries == {"15": "西安发源地的卡没用完"} and test.qrels == {"15": {"6": 2}}


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_hub_round_trip_is_identical(source, hub_round_trip, fmt):
    dataset = _build(source)
    again = hub_round_trip(dataset, fmt, "T2Ranking")
    assert (again.relevance_level, again.language, again.notes) == (2, "zh", dataset.notes)


def test_grade_one_counts_for_ndcg_but_not_recall_or_mrr(source):
    dataset = _build(source)
    qrels = {"1": dataset.split("dev").qrels["1"]}  # passage 1 graded 2, passage 5 graded 1
    run = Run.from_dict({"1": {"5": 2.0, "1": 1.0}})  # the grade-1 passage ranked first
    metrics = ("R@1", "MRR@10", "nDCG@1")
    strict = evaluate(run, qrels, metrics, relevance_level=dataset.relevance_level).means
    assert strict["R@1"] == 0.0  # grade 1 is not relevant at level 2
    assert strict["MRR@10"] == pytest.approx(0.5)  # the first relevant item is at rank 2
    assert strict["nDCG@1"] == pytest.approx(1 / 2)  # gain 1 at rank 1 of an ideal gain 2
    lenient = evaluate(run, qrels, metrics, relevance_level=1).means
    assert (lenient["R@1"], lenient["MRR@10"]) == (pytest.approx(0.5), pytest.approx(1.0))
    assert lenient["nDCG@1"] == pytest.approx(strict["nDCG@1"])


def test_missing_file_names_it(source):
    (source / "qrels.dev.tsv").unlink()
    with pytest.raises(DataError, match=r"qrels\.dev\.tsv: missing raw file of T2Ranking"):
        _build(source)


@pytest.mark.parametrize(
    ("file", "line", "message"),
    [
        ("qrels.dev.tsv", "0\t0\t1\t4", r"qrels\.dev\.tsv:9: grade '4' is not one of 0, 1, 2, 3"),
        ("qrels.dev.tsv", "0\t0\t1", r"qrels\.dev\.tsv:9: 3 fields, expected 4"),
        ("qrels.dev.tsv", "99\t0\t1\t2", r"qrels\.dev\.tsv:9: query '99' is not in the queries"),
        ("qrels.dev.tsv", "0\t0\t42\t2", r"qrels\.dev\.tsv:9: passage '42' is not in .*collection"),
        ("queries.dev.tsv", "7", r"queries\.dev\.tsv:4: 1 tab-separated fields, expected 2"),
        ("collection.tsv", "3\t重复", r"collection\.tsv:10: passage id '3' repeats .*:5"),
    ],
)
def test_malformed_lines_name_file_and_line(source, file, line, message):
    with (source / file).open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")
    with pytest.raises(DataError, match=message):
        _build(source)


def test_options_are_rejected():
    with pytest.raises(DataError, match="unknown option 'subset'; it takes no options"):
        adapter_of("T2Ranking").check_options({"subset": "main"})
