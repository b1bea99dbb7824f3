"""Type checking is part of the test command: mypy with the configuration in pyproject.toml
(``[tool.mypy]``: dapr/, strictness raised module by module) reports no error, it does catch a
wrong-typed call into dapr (shown on a planted module), and no error is silenced wholesale."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
PLANTED = """\
from dapr.fusion import Convex
from dapr.io import read_trec_run

Convex(alpha="0.3")
read_trec_run(42)
"""


def _mypy(*args: str, cache: Path) -> tuple[subprocess.CompletedProcess, float]:
    command = [sys.executable, "-m", "mypy", "--cache-dir", str(cache), *args]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    return done, time.perf_counter() - started


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One cache for the module: the planted check reuses what the full check analysed."""
    version = [sys.executable, "-m", "mypy", "--version"]
    if subprocess.run(version, capture_output=True, check=False).returncode:
        pytest.fail("mypy is missing: install the test extra (pip install -e '.[test]')")
    return tmp_path_factory.mktemp("mypy") / ".mypy_cache"


def test_dapr_passes_mypy(cache):
    done, seconds = _mypy(cache=cache)  # the files and options of pyproject.toml
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert done.stdout.startswith("Success: no issues found"), done.stdout
    print(f"mypy on dapr/: {seconds:.1f} s")


def test_mypy_fails_a_wrong_typed_call(cache, tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(PLANTED)
    done, _ = _mypy(str(planted), cache=cache)
    assert done.returncode == 1, done.stdout
    found = re.findall(r"planted\.py:(\d+): error: .*\[arg-type\]", done.stdout)
    assert found == ["4", "5"], done.stdout  # alpha is a float; a run file is a path


def test_nothing_is_silenced_wholesale():
    """No dapr module has its errors ignored, a missing import is ignored per package, and
    every ``# type: ignore`` names its error code and says why."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert "ignore_errors" not in config and "ignore_missing_imports" not in config
    for override in config.get("overrides", []):
        modules = (
            override["module"] if isinstance(override["module"], list) else [override["module"]]
        )
        assert "ignore_errors" not in override, modules
        if override.get("ignore_missing_imports"):
            assert not [m for m in modules if m == "dapr" or m.startswith("dapr.")], modules
    loose = []
    for path in sorted((ROOT / "dapr").rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if "type: ignore" in line and not re.search(r"type: ignore\[[\w,-]+\]\s+#\s*\S", line):
                loose.append(f"{path.relative_to(ROOT)}:{n}")
    assert loose == []
