"""The adapter contract, resumable downloads, the published hub copy, and `dapr data ...`."""

from __future__ import annotations

import hashlib
import http.server
import threading
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dapr import registry
from dapr.cli import main
from dapr.data import Corpus, Dataset, Document, Passage, Split
from dapr.datasets import load_dataset, read_dataset, write_dataset
from dapr.datasets.adapter import Adapter, RawFile
from dapr.datasets.download import fetch
from dapr.datasets.published import fetch_published, read_card
from dapr.errors import DaprError, DataError
from dapr.experiment.runner import with_language

# --------------------------------------------------------------------------- a tiny adapter


class Tiny(Adapter):
    """Documents from ``docs.tsv`` (doc id, title, paragraphs joined by " | ")."""

    name = "tiny-test"
    origin = "a test adapter"
    raw_files = (RawFile("docs.tsv", url="http://127.0.0.1:9/docs.tsv"),)

    def build(self, source: Path, *, upper: bool = False) -> Dataset:
        documents = []
        for line in (source / "docs.tsv").read_text().splitlines():
            doc_id, title, body = line.split("\t")
            texts = [t.upper() if upper else t for t in body.split(" | ")]
            passages = tuple(Passage(f"{doc_id}-{i}", doc_id, i, t) for i, t in enumerate(texts))
            documents.append(Document(doc_id, title, passages))
        split = Split({"q1": "where"}, {"q1": {"a-1": 1}})
        return Dataset(self.name, Corpus(documents), {"test": split})


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    adapter = Tiny()
    registry.datasets.add(adapter.name, adapter)
    yield adapter
    registry.datasets._extra.pop(adapter.name)


def test_build_writes_the_prepared_copy_that_load_reads(tiny, tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "docs.tsv").write_text("a\tAlpha\tone | two\nb\tBeta\tthree\n")
    assert not tiny.cached()
    assert main(["data", "build", "tiny-test", "--source", str(raw), "--set", "upper=true"]) == 0
    assert tiny.cached()
    loaded = load_dataset("tiny-test")
    assert [p.text for p in loaded.corpus.passages()] == ["ONE", "TWO", "THREE"]
    assert loaded.split("test").qrels == {"q1": {"a-1": 1}}
    assert main(["data", "list"]) == 0
    listing = capsys.readouterr().out
    assert any(line.split()[:2] == ["tiny-test", "cached"] for line in listing.splitlines())


def test_missing_raw_file_names_its_url(tiny, tmp_path, capsys):
    (tmp_path / "raw").mkdir()
    assert main(["data", "build", "tiny-test", "--source", str(tmp_path / "raw")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "docs.tsv: missing raw file of tiny-test" in err
    assert "http://127.0.0.1:9/docs.tsv" in err and "--download" in err
    assert not tiny.cached()


def test_unknown_build_option_and_bad_assignment(tiny, tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "docs.tsv").write_text("a\tAlpha\tone\n")
    assert main(["data", "build", "tiny-test", "--source", str(raw), "--set", "upper"]) == 2
    assert "write it as key=value" in capsys.readouterr().err
    assert not tiny.cached()


def test_a_failing_build_leaves_no_output(tiny, tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "docs.tsv").write_text("a\tAlpha\tone\nb\tBeta\tthree\nb\tBeta\tagain\n")
    out = tmp_path / "out"

    def broken_build(source, **options):
        def documents():
            yield Document("a", "A", (Passage("a-0", "a", 0, "x"),))
            raise DataError(f"{source / 'docs.tsv'}:3: duplicate document 'b'; drop it")

        return Dataset("tiny-test", Corpus(documents), {})

    tiny.build = broken_build
    assert main(["data", "build", "tiny-test", "--source", str(raw), "--out", str(out)]) == 2
    assert "docs.tsv:3: duplicate document" in capsys.readouterr().err
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [raw]  # no hidden temporary directory either


def test_not_built_and_not_published_says_how_to_build(tiny):
    with pytest.raises(DaprError, match="dapr data build tiny-test --source DIR"):
        load_dataset("tiny-test")


def test_load_options_are_rejected(tiny):
    with pytest.raises(DaprError, match="takes no options when loaded"):
        tiny.load(upper=True)


def test_an_unknown_build_option_is_one_line_exit_2(tiny, tmp_path, capsys):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "docs.tsv").write_text("a\tAlpha\tone\n")
    assert main(["data", "build", "tiny-test", "--source", str(raw), "--set", "nope=1"]) == 2
    assert capsys.readouterr().err == (
        "dapr: error: dataset 'tiny-test': unknown option 'nope'; valid options: upper\n"
    )
    assert main(["data", "build", "tiny-test", "--source", str(raw), "--set", "upper=3"]) == 2
    assert capsys.readouterr().err == (
        "dapr: error: dataset 'tiny-test': option 'upper' must be true or false, got 3\n"
    )
    assert not tiny.cached()


def test_a_loader_function_is_not_buildable(capsys, tmp_path):
    registry.datasets.add("plain-fn", lambda: None)
    try:
        assert main(["data", "build", "plain-fn", "--source", str(tmp_path)]) == 2
    finally:
        registry.datasets._extra.pop("plain-fn")
    assert "loader function, not an adapter" in capsys.readouterr().err


# --------------------------------------------------------------------------- build options


class Knobs(Adapter):
    """An adapter with one option of every kind the check knows."""

    name = "knobs"

    def build(
        self,
        source: Path,
        *,
        tagged: bool = False,
        depth: int = 1,
        share: float = 0.5,
        label: str = "x",
        mode: Literal["fast", "exact"] = "fast",
        extra: Path | None = None,
    ) -> Dataset:
        raise AssertionError("never built here")


def _error(adapter: Adapter, options: dict[str, Any]) -> str:
    with pytest.raises(DataError) as error:
        adapter.check_options(options)
    return str(error.value)


def test_options_are_the_keyword_parameters_of_build():
    options = Knobs().options()
    assert list(options) == ["tagged", "depth", "share", "label", "mode", "extra"]
    assert options["mode"].annotation == Literal["fast", "exact"]
    assert options["extra"].annotation == Path | None
    assert options["depth"].default == 1


def test_an_unknown_option_names_the_valid_ones():
    assert _error(Knobs(), {"tagged": True, "nope": 1}) == (
        "dataset 'knobs': unknown option 'nope'; valid options: tagged, depth, share, label, "
        "mode, extra"
    )


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("tagged", 1, "option 'tagged' must be true or false, got 1"),
        ("tagged", "yes", "option 'tagged' must be true or false, got \"yes\""),
        ("depth", True, "option 'depth' must be an integer, got true"),
        ("depth", 1.5, "option 'depth' must be an integer, got 1.5"),
        ("share", False, "option 'share' must be a number, got false"),
        ("share", "half", "option 'share' must be a number, got \"half\""),
        ("label", 3, "option 'label' must be a text, got 3"),
        ("mode", "slow", "option 'mode' must be one of fast, exact, got \"slow\""),
        ("mode", None, "option 'mode' must be one of fast, exact, got null"),
        ("extra", 3, "option 'extra' must be a path, got 3"),
        ("extra", "", "option 'extra' must be a path, got \"\""),
    ],
)
def test_a_wrong_value_names_the_option_and_the_kind(key, value, message):
    assert _error(Knobs(), {key: value}) == f"dataset 'knobs': {message}"


def test_good_values_pass_converted():
    given = {"tagged": True, "depth": 0, "share": 1, "mode": "exact", "extra": "out"}
    checked = Knobs().check_options(given)
    assert checked == {
        "tagged": True,
        "depth": 0,
        "share": 1.0,
        "mode": "exact",
        "extra": Path("out"),
    }
    assert isinstance(checked["share"], float)
    assert Knobs().check_options({"extra": None, "label": ""}) == {"extra": None, "label": ""}
    assert Knobs().check_options({}) == {}


def test_an_adapter_without_options_says_so():
    class Plain(Adapter):
        name = "plain"

        def build(self, source: Path) -> Dataset:
            raise AssertionError("never built here")

    for adapter in (Plain(), Adapter()):
        assert adapter.options() == {}
        assert adapter.check_options({}) == {}
        assert _error(adapter, {"seed": 1}).endswith("unknown option 'seed'; it takes no options")


def test_required_and_open_ended_options():
    class Picky(Adapter):
        name = "picky"

        def build(self, source: Path, *, key: str, **more: Any) -> Dataset:
            raise AssertionError("never built here")

    assert _error(Picky(), {}) == "dataset 'picky': option 'key' is required; give key=VALUE"
    assert Picky().check_options({"key": "k", "other": [1]}) == {"key": "k", "other": [1]}


# --------------------------------------------------------------------------- downloads


class _RangeHandler(http.server.BaseHTTPRequestHandler):
    """Serves ``self.server.payload``; honours ``Range``; can cut a response short."""

    def do_GET(self):  # noqa: N802 (http.server's naming)
        payload: bytes = self.server.payload
        start = 0
        if self.headers.get("Range"):
            start = int(self.headers["Range"].split("=")[1].rstrip("-"))
        body = payload[start:]
        self.server.requests.append(start)
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        cut = self.server.cut_after
        if cut is not None:
            self.server.cut_after = None
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.connection.shutdown(2)  # the connection drops mid-transfer
            return
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _RangeHandler)
    httpd.payload = bytes(range(256)) * 4096  # 1 MiB
    httpd.requests = []
    httpd.cut_after = None
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()


def _url(httpd) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}/file.bin"


def test_download_resumes_and_verifies(server, tmp_path):
    target = tmp_path / "raw" / "file.bin"
    digest = hashlib.sha256(server.payload).hexdigest()
    server.cut_after = 300_000
    with pytest.raises(DaprError, match="rerun to resume"):
        fetch(_url(server), target, digest, quiet=True)
    part = target.with_name("file.bin.part")
    assert not target.exists() and part.stat().st_size == 300_000
    fetch(_url(server), target, digest, quiet=True)
    assert server.requests == [0, 300_000]  # the second request asked only for the rest
    assert target.read_bytes() == server.payload and not part.exists()
    fetch(_url(server), target, digest, quiet=True)  # present: no request at all
    assert server.requests == [0, 300_000]


def test_download_with_a_wrong_checksum_keeps_nothing(server, tmp_path):
    target = tmp_path / "file.bin"
    with pytest.raises(DaprError, match="does not match the expected"):
        fetch(_url(server), target, "0" * 64, quiet=True)
    assert list(tmp_path.iterdir()) == []


def test_require_downloads_missing_files(server, tmp_path):
    adapter = Tiny()
    adapter.raw_files = (RawFile("sub/docs.tsv", url=_url(server)),)
    adapter.require(tmp_path, download=True)
    assert (tmp_path / "sub" / "docs.tsv").read_bytes() == server.payload


# --------------------------------------------------------------------------- the published copy

CARD = """---
license: apache-2.0
configs:
- config_name: Toy-corpus
  data_files:
  - split: test
    path: Toy/corpus/*.parquet
- config_name: Toy-queries
  data_files:
  - split: dev
    path: Toy/queries/dev.parquet
  - split: test
    path: Toy/queries/test.parquet
- config_name: Toy-qrels
  data_files:
  - split: dev
    path: Toy/qrels/dev.parquet
  - split: test
    path: Toy/qrels/test.parquet
- config_name: Toy-keyphrases
  data_files: Toy/keyphrases/*.parquet
---
# DAPR
"""


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


@pytest.fixture
def snapshot(tmp_path) -> Path:
    """A local copy of a hub repository as `huggingface-cli download` leaves it."""
    root = tmp_path / "snapshot"
    root.mkdir()
    (root / "README.md").write_text(CARD)

    def row(doc, n, total, text, title):
        return {
            "_id": f"{doc}-{n}",
            "text": text,
            "title": title,
            "doc_id": doc,
            "paragraph_no": n + 1,  # published 1-based
            "total_paragraphs": total,
            "is_candidate": True,
        }

    _write(
        root / "Toy/corpus/0000.parquet", [row("d1", 0, 2, "a b", "T1"), row("d1", 1, 2, "c", "T1")]
    )
    _write(root / "Toy/corpus/0001.parquet", [row("d2", 0, 1, "e f", "T2")])
    for split, qid, item in (("dev", "q1", "d1-1"), ("test", "q2", "d2-0")):
        _write(root / f"Toy/queries/{split}.parquet", [{"_id": qid, "text": f"query {qid}"}])
        _write(
            root / f"Toy/qrels/{split}.parquet",
            [{"query_id": qid, "corpus_id": item, "score": 1}],
        )
    _write(root / "Toy/keyphrases/0000.parquet", [{"doc_id": "d1", "keyphrases": "a; b"}])
    return root


def test_card_configs_are_read_in_every_form(snapshot):
    configs = read_card(snapshot / "README.md")
    assert configs["Toy-corpus"] == {"test": ["Toy/corpus/*.parquet"]}
    assert configs["Toy-keyphrases"] == {"train": ["Toy/keyphrases/*.parquet"]}
    assert set(configs["Toy-qrels"]) == {"dev", "test"}


def test_published_copy_becomes_a_dataset(snapshot, tmp_path):
    out = fetch_published("Toy", tmp_path / "Toy", snapshot=snapshot)
    dataset = read_dataset(out)
    documents = list(dataset.corpus)
    assert [(d.id, d.title, [p.text for p in d.passages]) for d in documents] == [
        ("d1", "T1", ["a b", "c"]),
        ("d2", "T2", ["e f"]),
    ]
    assert [p.position for p in documents[0].passages] == [0, 1]
    assert dataset.split("dev").qrels == {"q1": {"d1-1": 1}}
    assert dataset.split("test").queries == {"q2": "query q2"}
    assert (out / "keyphrases" / "train-0000.parquet").is_file()


def test_fetch_from_a_local_copy_through_the_cli(snapshot, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))

    class Toy(Adapter):
        name = "Toy"
        origin = "test"
        hub_repo = "UKPLab/dapr"

    registry.datasets.add("Toy", Toy())
    try:
        assert main(["data", "fetch", "Toy", "--from", str(snapshot)]) == 0
        assert load_dataset("Toy").split("test").qrels == {"q2": {"d2-0": 1}}
    finally:
        registry.datasets._extra.pop("Toy")


def test_offline_without_a_copy_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    class Toy(Adapter):
        name = "Toy"
        origin = "test"
        hub_repo = "UKPLab/dapr"

    with pytest.raises(DaprError) as error:
        Toy().load()
    message = str(error.value)
    assert "\n" not in message
    assert f"dataset 'Toy' is not in {tmp_path / 'home' / 'datasets' / 'Toy'}" in message
    assert "huggingface-cli download UKPLab/dapr --repo-type dataset" in message
    assert "dapr data fetch Toy --from DIR" in message
    assert not (tmp_path / "home" / "datasets" / "Toy").exists()


def test_missing_config_names_the_ones_the_card_has(snapshot, tmp_path):
    with pytest.raises(DataError, match="lists no config 'Nope-corpus'; it has: Toy-corpus"):
        fetch_published("Nope", tmp_path / "Nope", snapshot=snapshot)
    assert not (tmp_path / "Nope").exists()


# --------------------------------------------------------------------------- dataset metadata


def test_labels_language_relevance_level_and_notes_round_trip(tmp_path):
    docs = [Document("d", "T", (Passage("d-0", "d", 0, "x"),))]
    dataset = Dataset(
        "m",
        Corpus(docs),
        {"test": Split({"q": "x", "r": "y"}, {"q": {"d-0": 3}})},
        labels={"q": ("CR", "MT"), "r": ("AC",)},
        relevance_level=2,
        notes=("every passage is its own document",),
        language="zh",
    )
    for fmt in ("jsonl", "parquet"):
        write_dataset(dataset, tmp_path / fmt, fmt)
        back = read_dataset(tmp_path / fmt, "m")
        assert back.labels == dataset.labels
        assert (back.relevance_level, back.notes, back.language) == (2, dataset.notes, "zh")
        assert back.fingerprint == dataset.fingerprint
    plain = Dataset("m", Corpus(docs), dataset.splits)
    assert plain.fingerprint != dataset.fingerprint
    write_dataset(plain, tmp_path / "plain")
    assert not (tmp_path / "plain" / "meta.json").exists()


def test_bad_meta_json_is_named(tmp_path):
    docs = [Document("d", "T", (Passage("d-0", "d", 0, "x"),))]
    write_dataset(Dataset("m", Corpus(docs), {}, relevance_level=2), tmp_path / "m")
    (tmp_path / "m" / "meta.json").write_text('{"relevance_level": "two"}')
    with pytest.raises(DataError, match="meta.json.*relevance_level"):
        read_dataset(tmp_path / "m")


A_PASSAGES = tuple(Passage(f"a-{i}", "a", i, "w " * (i + 1)) for i in range(3))


def test_stats_table_one_columns(tmp_path, capsys):
    docs = [
        Document(
            "a", "Alpha title", tuple(Passage(f"a-{i}", "a", i, "w " * (i + 1)) for i in range(3))
        ),
        Document("b", "Beta", (Passage("b-0", "b", 0, "one two three four"),)),
    ]
    splits = {
        "train": Split({"q1": "x y"}, {"q1": {"a-2": 1, "a-0": 0}}),
        "test": Split({"q2": "x y z w", "q3": "v"}, {"q2": {"b-0": 2}, "q3": {"a-1": 1}}),
    }
    write_dataset(Dataset("s", Corpus(docs), splits, labels={"q2": ("MT",)}), tmp_path / "s")
    assert main(["data", "stats", str(tmp_path / "s"), "--json"]) == 0
    import json

    stats = json.loads(capsys.readouterr().out)
    assert stats["documents"] == 2 and stats["passages"] == 4
    assert stats["passages_per_document"]["mean"] == 2.0
    assert stats["passage_length"]["mean"] == 2.5  # (1 + 2 + 3 + 4) / 4
    assert stats["title_length"]["mean"] == 1.5
    assert stats["relevance_scale"] == "0-2"
    # relevant passages a-2, b-0, a-1 sit at positions 2, 0, 1
    assert stats["relevant_passage_depth"]["mean"] == 1.0
    assert stats["relevant_passage_depth"]["std"] == pytest.approx(0.82, abs=0.01)
    assert stats["splits"]["train"]["judgements_per_query"] == 2.0
    assert stats["splits"]["test"]["queries"] == 2
    assert stats["splits"]["test"]["query_length"] == 2.5
    assert stats["labels"] == {"MT": 1}


# --------------------------------------------------------------------------- runner wiring


def test_the_dataset_language_reaches_retrievers_that_take_one():
    class Takes:
        def __init__(self, language: str = "en"):
            pass

    class Ignores:
        def __init__(self, k1: float = 0.9):
            pass

    assert with_language(Takes, {}, "zh") == {"language": "zh"}
    assert with_language(Takes, {"language": "en"}, "zh") == {"language": "en"}
    assert with_language(Takes, {}, "en") == {}
    assert with_language(Ignores, {"k1": 1.0}, "zh") == {"k1": 1.0}


def test_load_downloads_once_into_the_prepared_copy(snapshot, tmp_path, monkeypatch):
    from dapr.datasets import published

    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    asked: list[list[str]] = []

    def fake_download(patterns, repo, dataset):  # what snapshot_download leaves on disk
        asked.append(patterns)
        return snapshot

    monkeypatch.setattr(published, "_download", fake_download)

    class Toy(Adapter):
        name = "Toy"
        origin = "test"
        hub_repo = "UKPLab/dapr"

    first = Toy().load()
    assert ["Toy/corpus/*.parquet"] in asked and ["Toy/keyphrases/*.parquet"] in asked
    assert first.split("dev").qrels == {"q1": {"d1-1": 1}}
    count = len(asked)
    assert Toy().load().fingerprint == first.fingerprint
    assert len(asked) == count
