"""The code style is part of the test command: ``ruff check`` and ``ruff format --check`` over
the project pass, and each does catch what it is for (shown on a planted file)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TREES = ["dapr", "data_loaders", "tests", "benchmarks"]


def _ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "ruff", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module", autouse=True)
def ruff_installed() -> None:
    if _ruff("--version").returncode != 0:
        pytest.fail("ruff is missing: install the test extra (pip install -e '.[test]')")


def test_the_project_passes_ruff_check_and_format():
    checked = _ruff("check", *TREES)
    assert checked.returncode == 0, checked.stdout[-3000:]
    formatted = _ruff("format", "--check", *TREES)
    assert formatted.returncode == 0, formatted.stdout[-3000:]


def test_ruff_fails_a_planted_mistake(tmp_path):
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "bad.py").write_text("import os\nx = {'a':1}\n")
    assert "F401" in _ruff("check", "bad.py", cwd=tmp_path).stdout  # an unused import
    assert _ruff("format", "--check", "bad.py", cwd=tmp_path).returncode == 1  # unformatted
