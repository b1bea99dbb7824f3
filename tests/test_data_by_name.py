"""COVID-QA and XQuAD by name: `dapr data build NAME --download` fetches the published file
(served here by a local HTTP server: resumed after a cut, refused on a wrong SHA-256) into
$DAPR_HOME/raw/NAME, and an experiment naming the dataset builds from it with its options."""

from __future__ import annotations

import http.server
import threading
from dataclasses import replace

import pytest
from dapr.data_loaders import covid_qa, squad

from dapr.cli import main
from dapr.datasets import load_dataset


class _Handler(http.server.BaseHTTPRequestHandler):
    """Serves ``server.payload`` with ``Range``; the first response may be cut short."""

    def do_GET(self):  # noqa: N802 (http.server's naming)
        start = (
            int(self.headers["Range"].split("=")[1].rstrip("-")) if "Range" in self.headers else 0
        )
        body = self.server.payload[start:]
        self.server.requests.append(start)
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        cut, self.server.cut_after = self.server.cut_after, None
        self.wfile.write(body[:cut] if cut else body)
        if cut:
            self.wfile.flush()
            self.connection.shutdown(2)

    def log_message(self, *args):
        pass


@pytest.fixture
def serve(monkeypatch, tmp_path):
    """``serve(adapter, payload, cut_after)``: the adapter's file comes from a local server."""
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    servers = []

    def start(adapter, payload: bytes, cut_after: int | None = None) -> http.server.HTTPServer:
        httpd = http.server.HTTPServer(("127.0.0.1", 0), _Handler)
        httpd.payload, httpd.requests, httpd.cut_after = payload, [], cut_after
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        (raw,) = adapter.raw_files
        url = f"http://127.0.0.1:{httpd.server_address[1]}/{raw.path}"
        monkeypatch.setattr(adapter, "raw_files", (replace(raw, url=url),))
        return httpd

    yield start
    for httpd in servers:
        httpd.shutdown()


def test_xquad_is_fetched_by_name_resumed_after_a_cut_and_checked(serve, xquad_en, capsys):
    httpd = serve(squad.xquad, xquad_en.read_bytes(), cut_after=200_000)
    assert main(["data", "build", "XQuAD", "--download"]) == 2
    assert "rerun to resume" in capsys.readouterr().err
    assert main(["data", "build", "XQuAD", "--download"]) == 0
    assert httpd.requests == [0, 200_000]  # the rerun asked only for the rest
    raw = squad.xquad.raw / "xquad.en.json"
    assert raw.read_bytes() == xquad_en.read_bytes()  # and its SHA-256 was the pinned one
    dataset = load_dataset("XQuAD")  # the prepared copy
    assert dataset.name == "XQuAD" and len(dataset.split("test").queries) == 1190
    dev = load_dataset("XQuAD", dev_share=0.5)  # options: built again from the fetched file
    assert len(dev.split("dev").queries) + len(dev.split("test").queries) == 1190


def test_a_wrong_checksum_is_refused_in_one_line_and_keeps_nothing(serve, xquad_en, capsys):
    changed = bytearray(xquad_en.read_bytes())
    changed[100] ^= 1
    serve(squad.xquad, bytes(changed))
    assert main(["data", "build", "XQuAD", "--download"]) == 2
    downloading, line = capsys.readouterr().err.splitlines()  # the progress line, the error
    assert downloading.startswith("downloading http://127.0.0.1:")
    assert "does not match the expected e4c57d1c" in line and line.startswith("dapr: error: ")
    assert list(squad.xquad.raw.iterdir()) == [] and not squad.xquad.cached()


def test_covid_qa_by_name_builds_with_each_experiments_options(serve, covid_qa_file, capsys):
    serve(covid_qa.adapter, covid_qa_file.read_bytes())
    assert main(["data", "build", "COVID-QA", "--download"]) == 0
    assert f"into {covid_qa.adapter.prepared}" in capsys.readouterr().out
    assert len(load_dataset("COVID-QA").split("test").queries) == 1380
    # what the recipes' covid-qa variants ask for, with no path
    recipe = load_dataset("COVID-QA", train_articles=0.6, dev_articles=0.1, max_words=80)
    assert recipe.corpus.fingerprint != load_dataset("COVID-QA").corpus.fingerprint
    assert sum(len(s.queries) for s in recipe.splits.values()) == 1380


def test_xquad_builds_from_a_local_source_file_or_folder(xquad_en, tmp_path, monkeypatch):
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    by_file = squad.xquad.load(path=xquad_en)
    by_folder = squad.xquad.load(path=xquad_en.parent)
    assert (
        by_file.fingerprint
        == by_folder.fingerprint
        == squad.adapter.load(path=xquad_en).fingerprint
    )
    assert main(["data", "build", "XQuAD", "--source", str(xquad_en.parent)]) == 0
    assert load_dataset("XQuAD").fingerprint == by_file.fingerprint


def test_a_dataset_named_but_not_fetched_says_how_to_fetch_it(tmp_path, monkeypatch):
    from dapr.errors import DaprError

    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    for name in ("COVID-QA", "XQuAD"):
        with pytest.raises(DaprError, match=f"run `dapr data build {name} --download` once"):
            load_dataset(name)


def test_a_local_source_that_is_the_pinned_release_serves_loads_with_options(
    xquad_en, tmp_path, monkeypatch, capsys
):
    """Built from --source, the pinned file is kept (checked by SHA-256) where --download puts
    it, so that an experiment's options build from it offline; a changed copy is not kept."""
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    assert main(["data", "build", "XQuAD", "--source", str(xquad_en)]) == 0
    assert f"kept a verified copy of its raw files in {squad.xquad.raw}" in capsys.readouterr().out
    assert (squad.xquad.raw / "xquad.en.json").read_bytes() == xquad_en.read_bytes()
    split = load_dataset("XQuAD", dev_share=0.5)  # before: "not fetched yet"
    assert len(split.split("dev").queries) + len(split.split("test").queries) == 1190

    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "other"))
    changed = tmp_path / "mine" / "xquad.en.json"
    changed.parent.mkdir()
    changed.write_bytes(xquad_en.read_bytes().replace(b"Panthers", b"Panther5", 1))
    assert main(["data", "build", "XQuAD", "--source", str(changed)]) == 0
    assert "is not the pinned release of XQuAD" in capsys.readouterr().out
    assert not squad.xquad.raw.exists()
