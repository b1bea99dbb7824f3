"""The README's two commands: ``make run`` and ``make test`` set up what they need (a virtual
environment when missing, the install only when pyproject.toml or constraints.txt changed: the
``tour`` extra for the quick tour, every extra for the suite) and then run the quick tour or the
suite; CI (.ci/run) is ``make test``. Shown by make's dry runs
(nothing is installed) and, for the exit status CI reads, on a stand-in environment."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INSTALL = 'pip install -e ".[all]" -c constraints.txt'
TOUR = 'pip install -e ".[tour]" -c constraints.txt'

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _make(*args: str, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess:
    command = ["make", "--no-print-directory", *args]
    environment = {**os.environ, **env}
    return subprocess.run(
        command, cwd=cwd, env=environment, capture_output=True, text=True, check=False
    )


def _stand_in(venv: Path, installed: bool, stamp: str = ".installed", after: float = 3600) -> None:
    """A virtual environment that is this test run's own Python (bin/activate puts its bin on
    PATH), marked installed (or not): ``stamp`` (``.installed``: every extra, ``.installed-tour``:
    the tour's) dated ``after`` seconds after pyproject.toml and constraints.txt last changed."""
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    bin_dir = Path(sys.executable).parent
    (venv / "bin" / "activate").write_text(f'PATH="{bin_dir}:$PATH"; export PATH\n')
    if installed:
        _stamp(venv / stamp, after)


def _stamp(path: Path, after: float) -> None:
    """An install's stamp, dated ``after`` seconds after (negative: before) the last change."""
    path.touch()
    changed = max((ROOT / name).stat().st_mtime for name in ("pyproject.toml", "constraints.txt"))
    os.utime(path, (changed + after, changed + after))


def test_a_fresh_machine_gets_a_venv_the_install_then_the_command(tmp_path):
    venv = tmp_path / "venv"
    run = _make("-n", "run", f"VENV={venv}")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    creates = lines.index(f"python3 -m venv {venv}")
    installs = next(i for i, line in enumerate(lines) if TOUR in line)  # the tour's extra only
    runs = next(
        i for i, line in enumerate(lines) if "dapr run experiments/rank_fusion.yaml" in line
    )
    assert creates < installs < runs and INSTALL not in run.stdout
    test = _make("-n", "test", f"VENV={venv}")
    assert test.returncode == 0, test.stderr
    assert f"python3 -m venv {venv}" in test.stdout and INSTALL in test.stdout
    assert TOUR not in test.stdout
    assert "pytest" in test.stdout.splitlines()[-3]


def test_an_installed_venv_is_not_installed_again_until_pyproject_changes(tmp_path):
    venv = tmp_path / "venv"
    _stand_in(venv, installed=True)
    for target in ("run", "test"):
        done = _make("-n", target, f"VENV={venv}")
        assert done.returncode == 0, done.stderr
        assert "venv" not in done.stdout.replace(str(venv), "VENV") and INSTALL not in done.stdout
    changed = _make("-n", "-W", "pyproject.toml", "test", f"VENV={venv}")  # as if just edited
    assert INSTALL in changed.stdout and "-m venv" not in changed.stdout


def test_the_tour_installs_its_extra_unless_a_full_install_is_up_to_date(tmp_path):
    toured = tmp_path / "toured"
    _stand_in(toured, installed=True, stamp=".installed-tour")
    run = _make("-n", "run", f"VENV={toured}")
    assert run.returncode == 0 and "pip install" not in run.stdout, run.stdout + run.stderr
    test = _make("-n", "test", f"VENV={toured}")  # the suite needs every extra
    assert INSTALL in test.stdout and TOUR not in test.stdout, test.stdout
    stale = tmp_path / "stale"  # both installs older than pyproject.toml: the tour's alone
    _stand_in(stale, installed=True, after=-3600)
    _stamp(stale / ".installed-tour", -3600)
    run = _make("-n", "run", f"VENV={stale}")
    assert TOUR in run.stdout and INSTALL not in run.stdout, run.stdout + run.stderr


def test_make_test_keeps_the_exit_status_of_pytest(tmp_path):
    """make exits 2 on any failure; PYTEST_STATUS keeps pytest's own (5: no tests collected)."""
    venv, status = tmp_path / "venv", tmp_path / "status"
    _stand_in(venv, installed=True)
    args = "-q -p no:cacheprovider tests/test_make.py -k no_such_test"
    done = _make("test", f"VENV={venv}", f"ARGS={args}", f"PYTEST_STATUS={status}")
    assert done.returncode == 2 and status.read_text().strip() == "5", done.stdout + done.stderr


def test_ci_runs_make_test():
    ci = (ROOT / ".ci" / "run").read_text()
    commands = [line.strip() for line in ci.splitlines() if not line.lstrip().startswith("#")]
    assert any(line.startswith("make test") for line in commands)
    assert not [line for line in commands if re.match(r"(pytest|pip install)(\s|$)", line)]
    assert "apt-get install -y -qq chromium" in ci  # the HTML report test's browser
    assert "collected no tests" in ci  # pytest's exit 5 has its own message
    # CI has ../shared: a test needing it fails there rather than skip (tests/conftest.py)
    assert "export DAPR_TEST_REQUIRE_SHARED=1" in commands
    assert 'os.environ.get(REQUIRE_SHARED) == "1"' in (ROOT / "tests" / "conftest.py").read_text()


@pytest.mark.skipif(shutil.which("chromium") is None, reason="CI would install chromium")
def test_ci_reports_a_suite_that_collected_nothing(tmp_path):
    venv = tmp_path / "venv"
    _stand_in(venv, installed=True)
    environment = {
        **os.environ,
        "VENV": str(venv),
        "ARGS": "-q -p no:cacheprovider tests/test_make.py -k no_such_test",
    }
    done = subprocess.run(
        [str(ROOT / ".ci" / "run")], env=environment, capture_output=True, text=True, check=False
    )
    assert done.returncode == 5, done.stdout + done.stderr
    assert "CI: pytest collected no tests" in done.stderr


def test_pre_commit_runs_the_checks_of_the_test_command_offline():
    """.pre-commit-config.yaml: ruff check, ruff format --check, mypy and import-linter as local
    hooks on the project's .venv (nothing fetched when a hook runs)."""
    import yaml

    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    assert [repo["repo"] for repo in config["repos"]] == ["local"]
    hooks = {hook["id"]: hook for hook in config["repos"][0]["hooks"]}
    assert list(hooks) == ["ruff-check", "ruff-format", "mypy", "import-linter"]
    assert {hook["language"] for hook in hooks.values()} == {"system"}
    assert all(hook["entry"].startswith(".venv/bin/") for hook in hooks.values())
    assert "ruff format --check" in hooks["ruff-format"]["entry"]
    assert "test_the_layer_contract_holds" in hooks["import-linter"]["entry"]
