"""Shared fixtures: no test touches the network or the user's own cache."""

from __future__ import annotations

import lzma
import os
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# torch's OpenMP threads sleep while they wait instead of spinning: on a busy machine (the suite
# beside other work, or beside its own worker processes) spinning threads burnt 2-6x the CPU time
# of the work, in this process and in the children that inherit the setting
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

if TYPE_CHECKING:
    from dapr.data import Dataset, Split

SHARED_DATA = Path(
    os.environ.get("DAPR_TEST_SHARED_DATA")
    or Path(__file__).resolve().parents[2] / "shared" / "data"
)
"""The real data samples beside the project (``../shared/data``), which CI has and a user's clone
does not; ``DAPR_TEST_SHARED_DATA`` points elsewhere (a missing folder: the suite as a user's
clone runs it)."""
REQUIRE_SHARED = "DAPR_TEST_REQUIRE_SHARED"
"""Set to 1 (``.ci/run`` does), a test that needs the shared samples fails where they are
missing instead of being skipped."""
FIXTURES = Path(__file__).resolve().parent / "fixtures"
"""Small real samples shipped with the tests, each with its licence (tests/fixtures/README.md)."""


@pytest.fixture(autouse=True, scope="session")
def dapr_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every test session gets its own DAPR_HOME, so caches never leak between runs."""
    home = tmp_path_factory.mktemp("dapr_home")
    previous = os.environ.get("DAPR_HOME")
    os.environ["DAPR_HOME"] = str(home)
    yield home
    if previous is None:
        os.environ.pop("DAPR_HOME", None)
    else:
        os.environ["DAPR_HOME"] = previous


def _missing(reason: str) -> NoReturn:
    """Skips the test with one line, or fails it when ``DAPR_TEST_REQUIRE_SHARED=1`` (CI)."""
    if os.environ.get(REQUIRE_SHARED) == "1":
        pytest.fail(f"{reason}; {REQUIRE_SHARED}=1 requires them", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The whole shared folder, for the tests that compare the shipped samples with it; where it
    is missing, the test is skipped with one line naming the folder (failed instead when
    ``DAPR_TEST_REQUIRE_SHARED=1``, as in CI). Tests take real data from ``samples``."""
    if not SHARED_DATA.is_dir():
        _missing(f"needs the real data samples in {SHARED_DATA} (../shared/data), missing here")
    return SHARED_DATA


@pytest.fixture(scope="session")
def shared_file() -> Callable[[str, str], Path]:
    """``shared_file(relative, why)``: a file of the shared samples that tests/fixtures does not
    ship (``why`` says why); where it is missing, the test is skipped with one line naming it
    (failed instead when ``DAPR_TEST_REQUIRE_SHARED=1``, as in CI)."""

    def need(relative: str, why: str) -> Path:
        path = SHARED_DATA / relative
        if not path.is_file():
            _missing(f"needs {relative} of the real data samples ({why}), not in {SHARED_DATA}")
        return path

    return need


@pytest.fixture(scope="session")
def samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real samples shipped in tests/fixtures, laid out as ``../shared/data`` is (``.xz``
    files decompressed): every clone has them, so no test skips for them."""
    root = tmp_path_factory.mktemp("samples")
    for path in sorted(FIXTURES.rglob("*")):
        if not path.is_file():
            continue
        target = root / path.relative_to(FIXTURES)
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".xz":
            target.with_suffix("").write_bytes(lzma.decompress(path.read_bytes()))
        else:
            shutil.copyfile(path, target)
    return root


@pytest.fixture(scope="session")
def covid_qa_file(samples: Path) -> Path:
    """COVID-QA's published file (Apache-2.0), shipped xz-compressed in tests/fixtures."""
    return samples / "covid-qa" / "covid-qa.json"


@pytest.fixture(scope="session")
def xquad_en(samples: Path) -> Path:
    """XQuAD's English file (CC BY-SA 4.0), shipped in tests/fixtures: no test skips for it."""
    return samples / "xquad" / "xquad.en.json"


@pytest.fixture
def hub_round_trip(tmp_path: Path) -> Callable[..., Dataset]:
    """Writes a dataset in the hub layout, reads it back and checks that nothing changed
    (fingerprint, corpus, queries and qrels of every split); returns what was read."""

    from dapr.datasets import read_dataset, write_dataset  # after the offline settings above

    def round_trip(dataset: Dataset, fmt: str, name: str | None = None) -> Dataset:
        out = tmp_path / f"hub-{fmt}"
        write_dataset(dataset, out, fmt)
        again = read_dataset(out, name)
        assert again.fingerprint == dataset.fingerprint
        assert list(again.corpus) == list(dataset.corpus)
        assert {n: (s.queries, s.qrels) for n, s in again.splits.items()} == {
            n: (s.queries, s.qrels) for n, s in dataset.splits.items()
        }
        return again

    return round_trip


@pytest.fixture(scope="session")
def wiki_slice(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Split]:
    """The 12 shortest articles of wiki-sample and the test queries judged inside them,
    written as a dataset directory."""
    from dapr.data_loaders.wiki_sample import adapter as wiki_sample

    from dapr.data import Corpus, Dataset, Split
    from dapr.datasets import write_dataset

    wiki = wiki_sample.load()
    documents = sorted(wiki.corpus, key=lambda d: len(d.passages))[:12]
    inside = {p.id for d in documents for p in d.passages}
    test = wiki.split("test")
    kept = [q for q, judged in test.qrels.items() if judged.keys() <= inside]
    split = Split({q: test.queries[q] for q in kept}, {q: test.qrels[q] for q in kept})
    assert len(kept) >= 5
    path = tmp_path_factory.mktemp("data") / "wiki-slice"
    write_dataset(Dataset("wiki-slice", Corpus(documents), {"test": split}), path)
    return path, split


@pytest.fixture
def torch_extensions(pytestconfig: pytest.Config, tmp_path: Path, monkeypatch) -> Path:
    """Where colbert-ai compiles its C++ search extensions (minutes): pytest's cache when it is
    enabled, so that later runs and tests reuse them."""
    cache = getattr(pytestconfig, "cache", None)
    built = cache.mkdir("torch_extensions") if cache else tmp_path / "torch_extensions"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(built))
    return built


def write_shortest_wiki(folder: Path, count: int, name: str, min_queries: int = 0) -> Path:
    """The ``count`` shortest articles of wiki-sample with the dev and test queries judged in
    them, written as dataset ``name`` under ``folder``."""
    from dapr.data_loaders.wiki_sample import adapter

    from dapr.data import Corpus, Dataset, Split
    from dapr.datasets import write_dataset

    wiki = adapter.load()
    documents = sorted(wiki.corpus, key=lambda d: len(d.passages))[:count]
    inside = {p.id for d in documents for p in d.passages}
    splits = {}
    for split_name in ("dev", "test"):
        split = wiki.split(split_name)
        kept = [q for q, judged in split.qrels.items() if judged.keys() <= inside]
        splits[split_name] = Split(
            {q: split.queries[q] for q in kept}, {q: split.qrels[q] for q in kept}
        )
        assert len(kept) >= min_queries
    path = folder / name
    write_dataset(Dataset(name, Corpus(documents), splits), path)
    return path


@pytest.fixture(scope="session")
def wiki_splits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 40 shortest articles of wiki-sample with the dev and test queries judged in them."""
    return write_shortest_wiki(tmp_path_factory.mktemp("data"), 40, "wiki-splits", 10)


@pytest.fixture(autouse=True, scope="module")
def _jvm_keeps_its_fault_handler():
    """Once Lucene's JVM runs in the test process, a module that replaces its SIGSEGV handler
    (Ray's init and shutdown do) fails here, and the handler is put back: left replaced, the
    JVM's next deliberate fault killed the suite modules later, with no message (exit 139)."""
    jnius_config = sys.modules.get("jnius_config")
    if os.name != "posix" or not getattr(jnius_config, "vm_running", False):
        yield
        return
    from dapr import fault_signals

    before = fault_signals.handler(signal.SIGSEGV)
    with fault_signals.kept():
        yield
        after = fault_signals.handler(signal.SIGSEGV)
    assert after == before, (
        "this module replaced the running JVM's SIGSEGV handler: wrap the call that did "
        "(ray.init, ray.shutdown) in dapr.fault_signals.kept()"
    )


@pytest.fixture(scope="module")
def local_ray():
    """A real local Ray of 2 CPUs for the tests of one module."""
    ray = pytest.importorskip("ray")
    from dapr import fault_signals
    from dapr.ray_actors import stop_ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    with fault_signals.kept():  # the JVM of the Lucene tests keeps its SIGSEGV handler
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    stop_ray()


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory) -> Path:
    """A 2-layer BERT with a vocabulary of wiki-sample, saved as a sentence-transformers model."""
    from sentence_transformers import SentenceTransformer, models
    from tiny_models import tiny_bert

    from dapr.datasets import load_dataset

    wiki = load_dataset("wiki-sample")
    texts = [p.text for d in wiki.corpus for p in d.passages]
    texts += [d.title for d in wiki.corpus] + list(wiki.split("test").queries.values())
    root = tmp_path_factory.mktemp("tiny-encoder")
    bert = tiny_bert(root / "bert", texts, hidden=32)
    transformer = models.Transformer(str(bert), max_seq_length=64)
    pooling = models.Pooling(transformer.get_word_embedding_dimension(), "mean")
    SentenceTransformer(modules=[transformer, pooling], device="cpu").save(str(root / "model"))
    return root / "model"
