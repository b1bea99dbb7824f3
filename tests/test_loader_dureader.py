"""DuReader-retrieval built from small files in the release's JSON-lines format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dapr.datasets.adapter import adapter_of
from dapr.errors import DataError

PASSAGES = {
    "5bc347ff17d488f1704e2893c9e8ecfa": (
        "花卉名称:太阳花播种时间:春、夏、秋均可播种为一年生肉质草本植物。株高10～15cm。"
        "喜温暖、阳光充足而干燥的环境,极耐瘠薄,一般土壤均能适应,能自播繁衍。"
    ),
    "6e67389d07da8ce02ed97167d23baf9d": (
        "抹平容器中培养土平面,将剪来的太阳花嫩枝头插入竹筷戳成的洞中,深入培养土最多不超过2厘米。"
    ),
    "06031941b9613d2fde5cb309bbefaf88": (
        "iOS里,把一个页面链接分享给微信好友,好友在微信里打开这个链接,也就是打开了一个网页。"
    ),
    "58c00697311c9ad6eb384b6fca7bd12d": "北京是中华人民共和国的首都,也是全国的政治和文化中心。",
    "e06eb2750f5ed163eb85b6ef02b7c608": "西红柿炒鸡蛋的做法:先把鸡蛋打散炒熟盛出,再炒西红柿。",
    "aa425d7dcb409592527a22ce5eccd4d5": "",
}
TRAIN = [
    ("q-train-1", "微信分享链接打开app", ["06031941b9613d2fde5cb309bbefaf88"]),
    ("q-train-2", "西红柿炒鸡蛋怎么做", ["e06eb2750f5ed163eb85b6ef02b7c608"]),
]
Q_SUN, Q_CAPITAL, Q_TOMATO = (
    "edb58f525bd14724d6f490722fa8a657",
    "a451acd1e9836b04b16664e9f0c290e5",
    "0b8b0d0c5fd14a9b8d1b6c6d1f0b0e1a",
)
DEV = [
    (
        Q_SUN,
        "太阳花怎么养",
        ["5bc347ff17d488f1704e2893c9e8ecfa", "6e67389d07da8ce02ed97167d23baf9d"],
    ),
    (Q_CAPITAL, "中国的首都是哪里", ["58c00697311c9ad6eb384b6fca7bd12d"]),
    (Q_TOMATO, "番茄炒蛋的家常做法", ["e06eb2750f5ed163eb85b6ef02b7c608"]),
]
DEV_EN = [  # (qid, English question, answers or None: then taken from dev.json)
    (Q_SUN, "How to raise the sunflower?", None),
    (Q_CAPITAL, "What is the capital of China?", ["58c00697311c9ad6eb384b6fca7bd12d"]),
]
CMEDQA_PASSAGES = {
    "m1": "高血压患者应低盐饮食,规律服药,定期监测血压。",
    "m2": "感冒发烧可以多喝水,注意休息,必要时服用退烧药。",
    "m3": "糖尿病人要控制主食摄入,适量运动。",
}
CMEDQA_TEST = [("c1", "高血压平时要注意什么", ["m1"]), ("c2", "发烧了怎么办", ["m2", "m3"])]


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")


def _collection(path: Path, passages: dict[str, str]) -> None:
    rows = [{"paragraph_id": pid, "paragraph_text": text} for pid, text in passages.items()]
    _write_jsonl(path, rows)


def _queries(path: Path, records, passages: dict[str, str]) -> None:
    rows = []
    for qid, question, answers in records:
        row = {"question_id": qid, "question": question}
        if answers is not None:
            row["answer_paragraphs"] = [
                {"paragraph_id": pid, "paragraph_text": passages[pid]} for pid in answers
            ]
        rows.append(row)
    _write_jsonl(path, rows)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    root = tmp_path / "dureader_retrieval-data"
    _collection(root / "passage_collection.json", PASSAGES)
    _queries(root / "train.json", TRAIN, PASSAGES)
    _queries(root / "dev.json", DEV, PASSAGES)
    _queries(root / "dev_en.json", DEV_EN, PASSAGES)
    _collection(root / "cmedqa" / "passage_collection.json", CMEDQA_PASSAGES)
    _queries(root / "cmedqa" / "test.json", CMEDQA_TEST, CMEDQA_PASSAGES)
    return root


def _build(source: Path, **options):
    return adapter_of("DuReader-retrieval").build(source, **options)


def test_every_passage_is_its_own_untitled_document(source):
    dataset = _build(source)
    documents = list(dataset.corpus)
    assert [d.id for d in documents] == list(PASSAGES)
    for document in documents:
        assert document.title == ""
        assert len(document.passages) == 1
        passage = document.passages[0]
        assert (passage.id, passage.doc_id, passage.position) == (document.id, document.id, 0)
        assert passage.text == PASSAGES[document.id] and passage.is_candidate
    assert dataset.name == "DuReader-retrieval"
    assert dataset.language == "zh"
    assert dataset.relevance_level == 1
    assert any("no document grouping" in note for note in dataset.notes)
    assert any("dev-en" in note for note in dataset.notes)


def test_splits_queries_and_binary_qrels(source):
    dataset = _build(source)
    assert list(dataset.splits) == ["train", "dev", "dev-en"]
    for name, records in (("train", TRAIN), ("dev", DEV)):
        split = dataset.split(name)
        assert split.queries == {qid: question for qid, question, _ in records}
        assert split.qrels == {qid: dict.fromkeys(answers, 1) for qid, _, answers in records}
    dev = dataset.split("dev")
    assert sum(map(len, dev.qrels.values())) == 4
    assert dev.qrels[Q_SUN] == {
        "5bc347ff17d488f1704e2893c9e8ecfa": 1,
        "6e67389d07da8ce02ed97167d23baf9d": 1,
    }
    english = dataset.split("dev-en")
    assert english.queries == {qid: question for qid, question, _ in DEV_EN}
    # the record without answer_paragraphs takes the dev judgements of its question id
    assert english.qrels == {qid: dev.qrels[qid] for qid, _, _ in DEV_EN}


def test_optional_files_only_add_splits(source):
    (source / "train.json").unlink()
    (source / "dev_en.json").unlink()
    dataset = _build(source)
    assert list(dataset.splits) == ["dev"]
    assert not any("dev-en" in note for note in dataset.notes)


def test_out_of_domain_subset_has_its_own_corpus(source):
    dataset = _build(source, subset="cmedqa")
    assert dataset.name == "DuReader-retrieval-cmedqa"
    assert [d.id for d in dataset.corpus] == list(CMEDQA_PASSAGES)
    assert list(dataset.splits) == ["test"]
    test = dataset.split("test")
    assert test.queries == {qid: question for qid, question, _ in CMEDQA_TEST}
    assert test.qrels == {"c1": {"m1": 1}, "c2": {"m2": 1, "m3": 1}}
    assert any("cMedQA" in note for note in dataset.notes)
    assert any("no document grouping" in note for note in dataset.notes)
    with pytest.raises(DataError, match=r"ccovid/passage_collection\.json: missing raw file"):
        _build(source, subset="ccovid")


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_hub_round_trip_is_identical(source, hub_round_trip, fmt):
    dataset = _build(source)
    again = hub_round_trip(dataset, fmt, "DuReader-retrieval")
    assert (again.notes, again.language, again.relevance_level) == (dataset.notes, "zh", 1)


def test_missing_and_malformed_files_name_the_file(source):
    (source / "dev.json").unlink()
    with pytest.raises(DataError, match=r"dev\.json: missing raw file of DuReader-retrieval"):
        _build(source)
    with (source / "train.json").open("a", encoding="utf-8") as handle:
        handle.write('{"question_id": "q9", "question": \n')
    _queries(source / "dev.json", DEV, PASSAGES)
    with pytest.raises(DataError, match=r"train\.json:3: invalid JSON"):
        _build(source)


def test_bad_records_name_file_line_and_field(source):
    rows = [{"question_id": "x", "question": "问题"}]  # no answer_paragraphs in dev.json
    _write_jsonl(source / "dev.json", rows)
    with pytest.raises(DataError, match=r"dev\.json:1: missing field 'answer_paragraphs'"):
        _build(source)
    rows = [{"question_id": "x y", "question": "问题", "answer_paragraphs": []}]
    _write_jsonl(source / "dev.json", rows)
    with pytest.raises(DataError, match=r"dev\.json:1: field 'question_id' is 'x y'"):
        _build(source)


def test_unknown_answer_paragraph_names_the_judging_line(source):
    records = [*DEV, ("q-new", "不存在的段落", ["ffffffffffffffffffffffffffffffff"])]
    _queries(source / "dev.json", records, {**PASSAGES, "ffffffffffffffffffffffffffffffff": "x"})
    with pytest.raises(
        DataError,
        match=r"dev\.json:4: passage 'ffffffffffffffffffffffffffffffff' is not in .*"
        r"passage_collection\.json",
    ):
        _build(source)


def test_repeated_passage_id_names_both_lines(source):
    duplicated = list(PASSAGES.items()) + [("58c00697311c9ad6eb384b6fca7bd12d", "重复的段落")]
    rows = [{"paragraph_id": pid, "paragraph_text": text} for pid, text in duplicated]
    _write_jsonl(source / "passage_collection.json", rows)
    with pytest.raises(DataError, match=r"passage_collection\.json:7: passage id .* repeats .*:4"):
        _build(source)


def test_options_are_checked():
    adapter = adapter_of("DuReader-retrieval")
    with pytest.raises(DataError, match=r"unknown option 'lang'; valid options: subset$"):
        adapter.check_options({"lang": "zh"})
    with pytest.raises(DataError, match=r"'subset' must be one of main, cmedqa, ccovid, got"):
        adapter.check_options({"subset": "medical"})
