"""The samples shipped under tests/fixtures are the published files, and the shared samples are
skipped with one named line where missing (failed instead where CI requires them)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dapr.datasets.download import file_sha256

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def listed() -> dict[str, tuple[str, str]]:
    """File -> (SHA-256, licence file) of every row of tests/fixtures/README.md's table."""
    table = (FIXTURES / "README.md").read_text()
    rows = re.findall(r"^\| `([^`]+)` \|.*\| ([0-9a-f]{64}) \| .*\(`([^`]+)`\) \|$", table, re.M)
    return {name: (digest, licence) for name, digest, licence in rows}


def test_every_shipped_file_is_listed_with_its_published_sha256_and_licence():
    rows = listed()
    files = {str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*") if p.is_file()}
    licences = {licence for _, licence in rows.values()}
    assert rows and files == {"README.md", *rows, *licences}
    for name, (digest, _) in rows.items():
        assert file_sha256(FIXTURES / name) == digest, name
    assert sum((FIXTURES / name).stat().st_size for name in files) < 1_000_000  # small


def test_the_xquad_fixture_is_the_shared_copy_and_the_adapter_pins_its_hash(shared_data):
    from dapr.data_loaders.squad import XQUAD_SHA256

    assert file_sha256(FIXTURES / "xquad" / "xquad.en.json") == XQUAD_SHA256
    assert file_sha256(shared_data / "xquad" / "xquad.en.json") == XQUAD_SHA256


PROBE = """
def test_probe(shared_data):
    assert shared_data.is_dir()
"""


@pytest.mark.parametrize("require", ["", "1"])
def test_missing_shared_samples_skip_with_one_named_line_or_fail_where_required(require, tmp_path):
    """A clone without ../shared skips (the reason names the folder); CI's variable fails."""
    (tmp_path / "test_probe.py").write_text(PROBE)
    (tmp_path / "conftest.py").write_text((Path(__file__).parent / "conftest.py").read_text())
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
    if require:
        assert done.returncode == 1 and "1 error" in out, out  # fails at the fixture
        assert (
            f"needs the real data samples in {missing}" in out
            and "DAPR_TEST_REQUIRE_SHARED=1" in out
        )
    else:
        assert done.returncode == 0 and "1 skipped" in out, out
        assert f"SKIPPED [1] test_probe.py:2: needs the real data samples in {missing}" in out
