"""The architecture holds: the import-linter layer contract (pyproject.toml), the installed
package layout, capability Protocols instead of attribute probes, and modules that fit in a head."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _installed_layout(tmp: Path) -> Path:
    """The package as a wheel installs it: data_loaders/ inside dapr/ as dapr.data_loaders."""
    shutil.copytree(ROOT / "dapr", tmp / "dapr", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(
        ROOT / "data_loaders",
        tmp / "dapr" / "data_loaders",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    return tmp


def _lint(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT_IMPORTS), str(tree / "pyproject.toml"), "--no-cache"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def layout(tmp_path_factory) -> Path:
    return _installed_layout(tmp_path_factory.mktemp("installed"))


def test_the_layer_contract_holds(layout):
    done = _lint(layout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 4 kept, 0 broken." in done.stdout


@pytest.mark.parametrize(
    ("module", "upward", "contract"),
    [
        ("data.py", "from dapr.experiment import runner", "Layers by data flow"),
        ("store/cache.py", "import dapr.retrievers.bm25", "Layers by data flow"),
        ("data_loaders/nq.py", "from dapr.contextualizers import title", "Layers by data flow"),
        ("fusion.py", "from dapr import registry", "Components do not look each other up"),
        ("io/trec.py", "import torch", "Core starts without neural stacks"),
        (
            "contextualizers/mentions.py",
            "from dapr.contextualizers import coref",
            "No import cycles",
        ),
        ("experiment/spec.py", "from dapr.experiment import validate", "No import cycles"),
    ],
)
def test_an_import_against_the_contract_breaks_it(layout, tmp_path, module, upward, contract):
    tree = _installed_layout(tmp_path)
    path = tree / "dapr" / module
    path.write_text(path.read_text() + f"\n{upward}  # deliberately against the contract\n")
    done = _lint(tree)
    assert done.returncode == 1, done.stdout + done.stderr
    broken = re.search(r"Contracts: (\d+) kept, (\d+) broken", done.stdout)
    assert broken and int(broken.group(2)) >= 1, done.stdout  # an upward import is a cycle too
    assert re.search(re.escape(contract) + r".* BROKEN", done.stdout), done.stdout


def test_a_new_top_level_module_must_be_placed_in_a_layer(layout, tmp_path):
    tree = _installed_layout(tmp_path)
    (tree / "dapr" / "helpers.py").write_text('"""Not in any layer."""\n')
    done = _lint(tree)
    assert done.returncode == 1 and "dapr.helpers" in done.stdout, done.stdout


def test_data_loaders_install_under_dapr_and_every_package_is_listed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setuptools = config["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"dapr": "dapr", "dapr.data_loaders": "data_loaders"}
    on_disk = {
        ".".join(("dapr", *p.parent.relative_to(ROOT / "dapr").parts)).rstrip(".")
        for p in (ROOT / "dapr").rglob("__init__.py")
    } | {"dapr.data_loaders"}
    assert set(setuptools["packages"]) == on_disk
    groups = config["project"]["entry-points"]
    assert all(v.startswith("dapr.data_loaders.") for v in groups["dapr.datasets"].values())
    import dapr.data_loaders.nq as nq

    assert Path(nq.__file__).resolve() == ROOT / "data_loaders" / "nq.py"


def test_data_loaders_is_not_a_top_level_module_of_the_installation():
    done = subprocess.run(
        [sys.executable, "-c", "import importlib.util as u; print(u.find_spec('data_loaders'))"],
        cwd="/",
        capture_output=True,
        text=True,
    )
    assert done.stdout.strip() == "None", done.stdout + done.stderr


def _python_files() -> list[Path]:
    return sorted([*(ROOT / "dapr").rglob("*.py"), *(ROOT / "data_loaders").glob("*.py")])


def test_no_capability_probes_in_the_orchestration():
    """experiment/ asks for an optional ability with isinstance against a Protocol of
    dapr.interfaces, never with getattr/hasattr on a component."""
    probes = []
    for path in (ROOT / "dapr" / "experiment").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and isinstance(node.args[1], ast.Constant)  # a named attribute: a probe
            ):
                probes.append(f"{path.name}:{node.lineno}")
    assert probes == [], f"attribute probes left: {probes}"


def test_modules_fit_in_a_head():
    too_long = {
        str(p.relative_to(ROOT)): n
        for p in _python_files()
        if (n := len(p.read_text().splitlines())) > 440
    }
    assert too_long == {}
