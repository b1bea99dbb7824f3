"""BM25 (bm25s backend) indexes built in bounded memory (``index_memory``) are the same files, byte
for byte, at any budget, and the same as the in-memory build that came before (its SHA-256s,
recorded from that code on the fixed synthetic corpora below); the build's peak stays under its
budget on a corpus whose score matrix alone is larger; the budget is no part of the cache key."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from dapr.datasets import load_dataset
from dapr.errors import DaprError
from dapr.experiment import plan
from dapr.experiment.spec import RetrieverSpec
from dapr.retrievers.bm25 import BM25
from dapr.retrievers.support import postings, spill

REFERENCE = {
    # SHA-256 of the index files' SHA-256s (see digest), as the in-memory build of the code
    # before index_memory wrote them for synthetic(count) and documents(synthetic(count))
    "passages 3000": "3b3c5fb903db735c5d587d764146548e9be0e2f73845975458927236c59ce548",
    "documents 3000": "52d4d92fb3296c9f6ec3a649f440cf405a756f53ff4584adeceb3c2693331cf0",
    "empty": "9273f2b213f84a39b2b27e82a48740eff36f83cc5da52b5ae8544962b3d20c15",
    "passages 200000": "dbcf8c29201ceef3c36c1960c53942d86f248fedfe1e1a6bd8e421fdeade3ea4",
    "documents 200000": "03c3e652ad22cdee9c10694e651c8062a5f620c72ecb40d4ed6906336441b7c4",
}
TINY = 1
"""A budget of one byte: every batch's ids a run of their own, ranges of the fewest terms."""
LETTERS = np.array(list("abcdefghijklmnopqrstuvwxyz"))


def synthetic(count: int, seed: int = 0, words: int = 5_000) -> list[tuple[str, str]]:
    """``count`` passages of 0-39 Zipf-distributed pseudo-words, ids in shuffled order."""
    rng = np.random.default_rng(seed)
    spell = rng.integers(0, 26, (words, 8))
    sizes = rng.integers(2, 9, words)
    vocab = np.array(["".join(LETTERS[s[:n]]) for s, n in zip(spell, sizes)], dtype=object)
    cdf = np.cumsum(1 / np.arange(1, words + 1))
    cdf /= cdf[-1]
    lengths = rng.integers(0, 40, count)
    codes = np.minimum(np.searchsorted(cdf, rng.random(int(lengths.sum()))), words - 1)
    tokens = vocab[codes].tolist()
    bounds = np.concatenate(([0], np.cumsum(lengths))).tolist()
    order = rng.permutation(count).tolist()
    return [(f"p{order[i]}", " ".join(tokens[bounds[i] : bounds[i + 1]])) for i in range(count)]


def documents(passages: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Every seven passages joined into one document."""
    texts = [text for _, text in passages]
    return [(f"d{i}", " ".join(texts[i : i + 7])) for i in range(0, len(texts), 7)]


def digest(store: Path) -> str:
    """One SHA-256 over the name and SHA-256 of every file of an index."""
    files = sorted(p for p in store.rglob("*") if p.is_file())
    lines = "".join(
        f"{p.relative_to(store)} {hashlib.sha256(p.read_bytes()).hexdigest()}\n" for p in files
    )
    return hashlib.sha256(lines.encode()).hexdigest()


def build(items: list[tuple[str, str]], store: Path, **kwargs) -> str:
    BM25(**kwargs).index(iter(items), store)
    assert not list(store.glob(".spill-*"))  # the spilled postings and ids went with the build
    return digest(store)


@pytest.fixture(scope="module")
def passages_3000() -> list[tuple[str, str]]:
    return synthetic(3000)


def test_a_tiny_budget_writes_the_files_of_the_build_before_it(
    passages_3000, monkeypatch, tmp_path
):
    """Many batches tokenized by worker processes (terms out of order), each batch's ids a run
    of their own, ranges of a few terms and terms longer than a range: the same bytes."""
    ranges: list[int] = []
    real = spill._ranges
    monkeypatch.setattr(spill, "_ranges", lambda *a: ranges.append(len(real(*a)) - 1) or real(*a))
    default = build(passages_3000, tmp_path / "default", threads=1)
    monkeypatch.setattr(postings, "BATCH", 250)
    monkeypatch.setattr(postings, "POOL_CHARS", 0)
    tiny = build(passages_3000, tmp_path / "tiny", threads=2, index_memory=TINY)
    assert default == tiny == REFERENCE["passages 3000"]
    assert ranges[0] == 1 and ranges[1] > 20  # the default's one range; the tiny budget's many
    assert len(list(tmp_path.glob("tiny/*"))) == 2  # ids.json and bm25s/ only


@pytest.mark.parametrize("name", ["documents 3000", "empty"])
def test_documents_and_an_empty_corpus_at_a_tiny_budget(name, passages_3000, tmp_path):
    items = documents(passages_3000) if name != "empty" else []
    default = build(items, tmp_path / "default")
    assert build(items, tmp_path / "tiny", index_memory=TINY) == default == REFERENCE[name]


@pytest.mark.parametrize("level", ["passage", "document"])
def test_wiki_sample_at_a_small_budget(level, tmp_path, monkeypatch):
    wiki = load_dataset("wiki-sample")
    if level == "passage":
        items = [(p.id, p.text) for p in wiki.corpus.passages()]
    else:
        items = [(d.id, d.text) for d in wiki.corpus]
    default = build(items, tmp_path / "default")
    monkeypatch.setattr(postings, "BATCH", 400)
    small = BM25(index_memory="1.1MB")  # ids in runs of about 2,000, about ten ranges of terms
    small.index(iter(items), tmp_path / "small")
    assert digest(tmp_path / "small") == default
    queries = {q: text for q, text in list(wiki.split("test").queries.items())[:20]}
    loaded = BM25()
    loaded.load(tmp_path / "default")
    assert small.search(queries, 10).to_dict() == loaded.search(queries, 10).to_dict()


@pytest.mark.slow
def test_a_200k_synthetic_corpus_at_a_small_budget(tmp_path):
    """Passages and documents of 200,000 passages at 20 MB: ids in runs of about 40,000, a few
    ranges of terms (about 15 s on two idle cores)."""
    items = synthetic(200_000)
    assert build(items, tmp_path / "p", index_memory="20MB") == REFERENCE["passages 200000"]
    at_20mb = build(documents(items), tmp_path / "d", index_memory="20MB")
    assert at_20mb == REFERENCE["documents 200000"]


MEASURE = textwrap.dedent(
    """
    import json, sys, tempfile
    from pathlib import Path
    import numpy as np
    from dapr.retrievers.bm25 import BM25
    from dapr.retrievers.support import postings

    count, budget = int(sys.argv[1]), sys.argv[2]
    rng = np.random.default_rng(0)
    words = np.array([f"w{i}x" for i in range(5000)], dtype=object)
    cdf = np.cumsum(1 / np.arange(1, 5001))
    cdf /= cdf[-1]

    def texts(count):  # a hundred at a time: the corpus is never held
        for start in range(0, count, 100):
            lengths = rng.integers(0, 200, 100)
            codes = np.searchsorted(cdf, rng.random(int(lengths.sum())))
            tokens = words[np.minimum(codes, 4999)].tolist()
            ends = np.cumsum(lengths).tolist()
            for i, end in enumerate(ends):
                yield f"p{start + i}", " ".join(tokens[end - lengths[i] : end])

    def status(field):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024

    postings.BATCH = 500  # the tokenizer's batches small beside the budget
    with tempfile.TemporaryDirectory() as folder:
        BM25(threads=1, index_memory=budget).index(texts(300), Path(folder) / "warm-up")
        Path("/proc/self/clear_refs").write_text("5")  # the peak (VmHWM) from here
        before = status("VmRSS")
        BM25(threads=1, index_memory=budget).index(texts(count), Path(folder) / "index")
        peak = status("VmHWM") - before
        matrix = [Path(folder, "index", "bm25s", f"{n}.csc.index.npy") for n in ("data", "indices")]
        size = sum(path.stat().st_size for path in matrix)
    print(json.dumps({"peak": peak, "matrix": size}))
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="reads the peak resident set from /proc")
def test_the_build_stays_under_its_budget():
    """40,000 passages of 100 words on average, one process, a 16 MB budget: the score matrix
    alone (22 MB), which the in-memory build held with every posting and id (its peak grew by
    29 MB on this corpus), is larger than the budget; this build's peak grows by less (13 MB
    here, as on twice the passages)."""
    budget = 16_000_000
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, "40000", str(budget)],
        capture_output=True,
        text=True,
        check=True,
    )
    measured = json.loads(done.stdout)
    assert measured["matrix"] > budget
    assert measured["peak"] < budget, measured


def test_the_budget_is_no_part_of_the_cache_key():
    wiki = load_dataset("wiki-sample")
    keys = {
        plan.index_key(plan.retrieval(RetrieverSpec("bm25", args=args), wiki).made_by, wiki)
        for args in ({}, {"index_memory": "200MB"}, {"index_memory": 1})
    }
    assert len(keys) == 1


def test_index_memory_reads_sizes_and_refuses_others_in_one_line():
    assert BM25(index_memory="200MB")._memory == 200_000_000
    assert BM25(index_memory="1.5 GiB")._memory == 3 * 2**29
    assert BM25(index_memory=4096)._memory == 4096
    for bad in ("lots", "0", "-1GB", "12 parsecs", 0, True):
        with pytest.raises(DaprError, match=r"^retriever 'bm25': index_memory .* not a size;"):
            BM25(index_memory=bad)


def test_a_build_that_fails_leaves_nothing_spilled(tmp_path):
    def items():
        yield "a", "the cat sat on the mat"
        raise RuntimeError("the corpus broke off")

    with pytest.raises(RuntimeError, match="broke off"):
        BM25().index(items(), tmp_path / "index")
    assert list((tmp_path / "index").iterdir()) == []


def _mapped_kb(name: str) -> int:
    """Resident KB of this process's mappings of files named ``name`` (``/proc/self/smaps``)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        first = line.split(maxsplit=1)[0] if line.strip() else ""
        if "-" in first and set(first) <= set("0123456789abcdef-"):  # a mapping's first line
            inside = line.rstrip().endswith(name)
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads Linux's smaps")
def test_a_search_over_an_index_past_its_budget_lets_go_of_the_pages_it_mapped(
    passages_3000, tmp_path
):
    """Past ``index_memory`` a search drops its mappings of the score matrix (the file's pages
    stay cached), with the same run; within it the pages stay mapped."""
    from dapr.retrievers import bm25

    BM25().index(iter(passages_3000), tmp_path / "index")
    queries = {f"q{i}": text for i, (_, text) in enumerate(passages_3000[:40]) if text}
    runs, mapped = {}, {}
    for budget in ("1GB", TINY):
        retriever = BM25(index_memory=budget)
        retriever.load(tmp_path / "index")
        runs[budget] = retriever.search(queries, 100).to_dict()
        mapped[budget] = _mapped_kb("data.csc.index.npy")
        del retriever
    assert runs["1GB"] == runs[TINY]
    assert mapped["1GB"] > 0 and mapped[TINY] == 0, mapped
    assert len(queries) > bm25.RELEASE_EVERY  # released within the search too, not only after
