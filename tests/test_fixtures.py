"""The samples shipped under tests/fixtures are the published files (and the shared copies, where
those are present), and what is not shipped is skipped with one named line where missing (failed
instead where CI requires it)."""

from __future__ import annotations

import hashlib
import lzma
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dapr.datasets.download import file_sha256

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def listed() -> dict[str, tuple[str, list[str]]]:
    """File -> (SHA-256 of its content, licence files) of every row of the README's table."""
    table = (FIXTURES / "README.md").read_text()
    rows = re.findall(r"^\| `([^`]+)` \|.*\| ([0-9a-f]{64}) \| [^|]*\(([^|]+)\) \|$", table, re.M)
    return {name: (digest, re.findall(r"`([^`]+)`", licences)) for name, digest, licences in rows}


def content(path: Path) -> bytes:
    """The published bytes of a shipped file: an ``.xz`` one decompressed."""
    data = path.read_bytes()
    return lzma.decompress(data) if path.suffix == ".xz" else data


def test_every_shipped_file_is_listed_with_its_published_sha256_and_licence():
    rows = listed()
    files = {str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*") if p.is_file()}
    licences = {licence for _, names in rows.values() for licence in names}
    assert rows and files == {"README.md", *rows, *licences}
    for name, (digest, names) in rows.items():
        assert hashlib.sha256(content(FIXTURES / name)).hexdigest() == digest, name
        assert names and all(n.split("/")[0] == name.split("/")[0] for n in names)  # beside it
        assert name.endswith(".xz") == (len(content(FIXTURES / name)) > 64 * 1024), name
    assert sum((FIXTURES / name).stat().st_size for name in files) < 2_500_000  # small


def test_the_samples_fixture_lays_out_every_published_file(samples):
    laid_out = {str(p.relative_to(samples)) for p in samples.rglob("*") if p.is_file()}
    shipped = {str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*") if p.is_file()}
    assert laid_out == {name.removesuffix(".xz") for name in shipped}
    for name, (digest, _) in listed().items():
        assert file_sha256(samples / name.removesuffix(".xz")) == digest, name


def test_the_adapters_pin_the_shipped_files_hashes():
    from dapr.data_loaders.covid_qa import SHA256
    from dapr.data_loaders.squad import XQUAD_SHA256

    rows = listed()
    assert rows["xquad/xquad.en.json.xz"][0] == XQUAD_SHA256
    assert rows["covid-qa/covid-qa.json.xz"][0] == SHA256


def test_every_shipped_file_is_the_shared_copy_byte_for_byte(shared_data):
    for name, (digest, _) in listed().items():
        assert file_sha256(shared_data / name.removesuffix(".xz")) == digest, name


PROBE = """
def test_probe(shared_data):
    assert shared_data.is_dir()


def test_file(shared_file):
    assert shared_file("genomics-2007/gold.tsv", "not shipped").is_file()


def test_shipped(covid_qa_file):
    assert covid_qa_file.stat().st_size > 0
"""


@pytest.mark.parametrize("require", ["", "1"])
def test_missing_shared_samples_skip_with_one_named_line_or_fail_where_required(require, tmp_path):
    """A clone without ../shared skips (the reason names the folder, or the file a test needs)
    and runs what the shipped samples serve; CI's variable fails instead of skipping."""
    (tmp_path / "test_probe.py").write_text(PROBE)
    (tmp_path / "conftest.py").write_text((Path(__file__).parent / "conftest.py").read_text())
    (tmp_path / "fixtures").symlink_to(FIXTURES)
    missing = tmp_path / "no-shared"
    env = {**os.environ, "DAPR_TEST_SHARED_DATA": str(missing), "DAPR_TEST_REQUIRE_SHARED": require}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "-q", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout
    file_line = (
        f"needs genomics-2007/gold.tsv of the real data samples (not shipped), not in {missing}"
    )
    if require:
        assert done.returncode == 1 and "1 failed, 1 passed, 1 error" in out, out
        assert f"needs the real data samples in {missing}" in out  # fails at the fixture
        assert f"{file_line}; DAPR_TEST_REQUIRE_SHARED=1 requires them" in out
    else:
        assert done.returncode == 0 and "1 passed, 2 skipped" in out, out
        assert f"SKIPPED [1] test_probe.py:2: needs the real data samples in {missing}" in out
        assert re.search(rf"SKIPPED \[1\] \S+:\d+: {re.escape(file_line)}\n", out)
