"""BM25 on Chinese text: jieba segmentation instead of whitespace/regex tokens."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from dapr.errors import DaprError
from dapr.retrievers.bm25 import BM25, _require_jieba, chinese_tokens

ITEMS = [
    ("sun", "太阳花喜温暖、阳光充足而干燥的环境,播种后约7～10天出苗,养护时保持土壤湿润。"),
    ("covid", "新型冠状病毒肺炎疫苗接种前,请如实告知医生近期的身体状况。"),
    ("stock", "今天股票市场大幅下跌,投资者纷纷抛售手中的股票。"),
    ("phone", "苹果公司发布了新款iPhone手机,售价比去年略高。"),
    ("tomato", "西红柿炒鸡蛋:先把鸡蛋炒熟盛出,再炒西红柿,最后一起翻炒。"),
]


def test_chinese_query_finds_its_passage_where_whitespace_tokens_fail(tmp_path):
    queries = {"sun": "太阳花怎么养", "virus": "病毒疫苗", "eggs": "鸡蛋的做法"}
    chinese = BM25(language="zh")
    chinese.index(ITEMS, tmp_path / "zh")
    ranked = chinese.search(queries, k=5).to_dict()
    assert next(iter(ranked["sun"])) == "sun"
    assert next(iter(ranked["virus"])) == "covid"  # 病毒 found inside 冠状病毒
    assert next(iter(ranked["eggs"])) == "tomato"
    # Lucene's English analyzer, by contrast, cuts Chinese into single characters
    assert BM25()._tokenize(["太阳花怎么养"]) == [["太", "阳", "花", "怎", "么", "养"]]


def test_tokens_are_lowercased_and_punctuation_dropped():
    jieba = _require_jieba()
    tokens = chinese_tokens("新型冠状病毒, iPhone 13！", jieba)
    assert {"新型", "冠状", "病毒", "冠状病毒", "iphone", "13"} <= set(tokens)
    assert all(any(c.isalnum() for c in t) for t in tokens)  # no ",", " ", "！"


def test_latin_words_match_case_blind_and_punctuation_matches_nothing(tmp_path):
    retriever = BM25(language="zh")
    retriever.index(ITEMS, tmp_path)
    queries = {"phone": "IPHONE", "marks": "，。！？", "none": "火星"}
    ranked = retriever.search(queries, k=5).to_dict()
    assert list(ranked["phone"]) == ["phone"]
    assert ranked["marks"] == {} and ranked["none"] == {}


def test_scores_follow_lucene_bm25_on_jieba_tokens(tmp_path):
    retriever = BM25(language="zh")
    retriever.index(ITEMS, tmp_path)
    run = retriever.search({"q": "股票"}, k=5).to_dict()
    jieba = _require_jieba()
    lengths = [len(chinese_tokens(text, jieba)) for _, text in ITEMS]
    tf = chinese_tokens(ITEMS[2][1], jieba).count("股票")
    idf = np.log(1 + (5 - 1 + 0.5) / (1 + 0.5))  # one passage of five holds 股票
    norm = 0.9 * (1 - 0.4 + 0.4 * lengths[2] / (sum(lengths) / 5))
    assert list(run["q"]) == ["stock"]
    assert run["q"]["stock"] == pytest.approx(idf * tf / (tf + norm), rel=1e-5)


def test_index_persists_and_remembers_its_language(tmp_path):
    first = BM25(language="zh")
    first.index(ITEMS, tmp_path)
    second = BM25(language="zh")
    second.load(tmp_path)
    query = {"q": "西红柿炒鸡蛋"}
    assert first.search(query, 3).to_dict() == second.search(query, 3).to_dict()
    with pytest.raises(DaprError, match="built for language 'zh', not 'en'"):
        BM25().load(tmp_path)


def test_english_stays_the_default(tmp_path):
    items = [("a", "The cat sat on the mat."), ("b", "Dogs run in the park.")]
    default, explicit = BM25(), BM25(language="en")
    default.index(items, tmp_path / "default")
    explicit.index(items, tmp_path / "explicit")
    assert default.language == "en" and BM25.version == "2"
    assert not (tmp_path / "default" / "language.json").exists()  # English stores as before
    query = {"q": "cats running"}
    assert default.search(query, 2).to_dict() == explicit.search(query, 2).to_dict()


def test_unknown_language_is_one_line_listing_the_supported():
    with pytest.raises(DaprError) as error:
        BM25(language="fr")
    assert str(error.value) == "retriever 'bm25': unknown language 'fr'; choose from: en, zh"


def test_jieba_start_up_is_silent():
    code = (
        "from dapr.retrievers.bm25 import BM25\n"
        "import tempfile, pathlib\n"
        "r = BM25(language='zh')\n"
        "r.index([('a', '太阳花怎么养')], pathlib.Path(tempfile.mkdtemp()))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
