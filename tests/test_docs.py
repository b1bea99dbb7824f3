"""The documentation: the site builds with ``mkdocs build --strict`` (a broken link fails it), its
generated references list every registered component and every key of the experiment schema,
and every code block of ``docs/`` and ``README.md`` works.

A code block is checked by its language, unless the line before it is an
``<!-- illustrative: REASON -->`` marker (then it only has to parse):

- ``python``: run in a fresh process, in a temporary folder with a temporary ``DAPR_HOME``;
- ``yaml``: loaded through the experiment schema (:func:`dapr.experiment.config.load_grid`), a
  fragment (a ``fusion:`` or ``sweep:`` block alone) on top of a small wiki-sample experiment,
  and each of its variants too;
- ``bash``: each ``dapr`` command is parsed by dapr's own argument parser, the experiment file of
  ``dapr run``, ``dapr train`` and ``dapr check`` is loaded with its ``--set`` and ``--variant``,
  and the cheap commands (:data:`EXECUTED`) run on wiki-sample; any other ``dapr`` command is not
  run, so its block must be marked illustrative. ``pip install`` must name existing extras,
  ``make`` a target of the Makefile, ``python`` a script of the repository;
- ``toml`` parses; ``text`` is a diagram; ``mermaid`` is a diagram the site draws (its structure:
  tests/test_explanations.py); ``bibtex`` is the paper's citation (tests/test_citation.py).

A table of figures is the render of a results file (tests/test_results_tables.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_hooks"))

import reference  # noqa: E402  (docs/_hooks/reference.py, the site's generator)

PAGES = sorted(  # results/ holds files that runs wrote, shown where a page names them
    p for p in (ROOT / "docs").rglob("*.md") if not {"_hooks", "results"} & set(p.parts)
)
FILES = [ROOT / "README.md", *PAGES]

FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
ILLUSTRATIVE = re.compile(r"^<!-- illustrative: (\S.*\S) -->$")
LANGUAGES = {"bash", "yaml", "python", "toml", "text", "mermaid", "bibtex"}

EXECUTED = (("--version",), ("plugins",), ("data", "stats"), ("data", "list"))
EXECUTED += (("data", "export"), ("cache",), ("overlap",))
"""Commands cheap enough to run on wiki-sample for every block that shows them."""

BASE = {
    "dataset": "wiki-sample",
    "retrievers": {
        "bm25": {"name": "bm25"},
        "bm25-document": {"name": "bm25", "level": "document"},
        "dense": {"name": "dense"},
    },
    "fusion": {
        "rank-fusion": {
            "name": "convex",
            "document": "bm25-document",
            "passage": "dense",
            "args": {"alpha": 0.3},
        }
    },
}
"""The experiment a YAML fragment of the docs is laid on (its systems are the ones the pages'
fragments name)."""


@dataclasses.dataclass
class Block:
    path: Path
    line: int
    language: str
    code: str
    illustrative: str | None

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    found = []
    for match in FENCE.finditer(text):
        before = [line for line in text[: match.start()].splitlines() if line.strip()]
        marker = ILLUSTRATIVE.match(before[-1].strip()) if before else None
        line = text.count("\n", 0, match.start()) + 1
        language = {"sh": "bash", "shell": "bash", "yml": "yaml", "py": "python"}.get(
            match.group(1), match.group(1)
        )
        found.append(Block(path, line, language, match.group(2), marker and marker.group(1)))
    return found


ALL_BLOCKS = [b for path in FILES for b in blocks(path)]


# -- the site -------------------------------------------------------------------------------


def _mkdocs(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict"]  # not -q: it hides warnings
    command += ["-f", str(config), "-d", str(site)]
    return subprocess.run(command, capture_output=True, text=True, env=env, check=False)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mkdocs", reason="install the docs extra (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    built = _mkdocs(ROOT / "mkdocs.yml", out)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return out


def test_site_builds_strict_with_every_page(site: Path):
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)

    def pages(nav: object) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        if isinstance(nav, dict):
            return [p for v in nav.values() for p in pages(v)]
        return [p for item in nav for p in pages(item)]

    in_nav = set(pages(config["nav"]))
    notebooks = (ROOT / "docs").rglob("*.ipynb")  # the tutorials (tests/test_notebooks.py)
    in_docs = {str(p.relative_to(ROOT / "docs")) for p in [*PAGES, *notebooks]}
    assert in_nav == in_docs, "a page is not in nav"
    for page in in_nav:
        stem = page.rsplit(".", 1)[0]
        built = site / ("index.html" if page == "index.md" else stem + "/index.html")
        assert built.is_file(), page
    api = (site / "api" / "index.html").read_text()
    assert 'id="dapr.interfaces.Retriever"' in api and 'id="dapr.registry.Registry"' in api
    assert (site / "figures" / "alpha_sweep.png").is_file()


def test_a_broken_link_fails_the_build(tmp_path: Path):
    pytest.importorskip("mkdocs", reason="install the docs extra (pip install -e '.[docs]')")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    config = (ROOT / "mkdocs.yml").read_text()
    (tmp_path / "mkdocs.yml").write_text(config.replace("paths: [.]", f"paths: [{ROOT}]"))
    index = tmp_path / "docs" / "index.md"
    index.write_text(index.read_text() + "\nSee [the missing page](missing.md).\n")
    built = _mkdocs(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert built.returncode != 0
    assert "missing.md" in built.stdout + built.stderr


# -- the generated references ---------------------------------------------------------------


@pytest.mark.parametrize("kind", ["retrievers", "contextualizers", "fusers", "datasets", "metrics"])
def test_component_pages_list_every_registered_component(kind: str, site: Path):
    from dapr import registry
    from dapr.interfaces import HasPresets

    found = getattr(registry, kind)
    page = reference.components(kind)
    html = "datasets" if kind == "datasets" else f"components/{kind}"
    built = (site / html / "index.html").read_text()
    for name in found.names():
        assert f"### `{name}`" in page, name
        assert f"<code>{name}</code>" in built, name
        component = found.get(name)
        if kind in ("retrievers", "contextualizers", "fusers"):
            for arg in reference._parameters(component):
                if arg.kind not in (arg.VAR_KEYWORD, arg.VAR_POSITIONAL):
                    assert f"| `{arg.name}` |" in page, f"{name}.{arg.name}"
        if isinstance(component, HasPresets):
            for preset in component.presets:
                assert f"| `{preset}` |" in page, f"{name} preset {preset}"
        if kind == "datasets" and hasattr(component, "options"):
            for option in component.options():
                assert f"| `{option}` |" in page, f"{name} build option {option}"


def test_experiment_reference_lists_every_schema_key(site: Path):
    from dapr.experiment import spec

    schema = {
        obj
        for obj in vars(spec).values()
        if dataclasses.is_dataclass(obj) and obj.__module__ == spec.__name__
    }
    assert schema == set(reference.sections().values()), "a section of spec.py is not documented"
    page = reference.experiment()
    built = (site / "experiments" / "index.html").read_text()
    for where, section in reference.sections().items():
        part = page.split(f"### `{where}`", 1)[1].split("\n### ", 1)[0]
        for key in spec._accepted(section):
            assert f"| `{key}` |" in part, f"{where}: {key}"
            assert f"<code>{key}</code>" in built, key
    assert "| `variants` |" in page


def test_each_reference_marker_names_a_part():
    for page in PAGES:
        for name in reference.MARKER.findall(page.read_text()):
            assert name in reference.PARTS, f"{page}: reference part {name!r}"


def test_no_built_page_shows_a_raw_rest_role_or_table(site: Path):
    """Docstrings are reST-flavoured; the site shows their roles as code
    (docs/_hooks/docstrings.py) and has no reST table (a paragraph of ``====`` in Markdown)."""
    role = re.compile(r":(?:py:)?[a-z]+:(?:<code>|`)")
    for page in site.rglob("*.html"):
        text = page.read_text()
        assert not role.search(text), f"{page.relative_to(site)}: {role.search(text)}"
        assert not re.search(r"^={5,}\s+={5,}", text, re.MULTILINE), page.relative_to(site)


def test_api_page_shows_every_public_name(site: Path):
    """Each name tests/test_api_page.py finds public has its anchor on the built API page, and
    no docstring there shows a reST literal-block marker (``::``) raw."""
    from test_api_page import public_names

    api = (site / "api" / "index.html").read_text()
    anchors = set(re.findall(r'id="([^"]+)"', api))
    missing = [name for name, path, _ in public_names() if not {name, path} & anchors]
    assert missing == [], f"not on the built API page: {missing}"
    assert not re.search(r"<p>[^<]*::</p>", api), "a docstring's :: block: make it a ``` fence"


# -- the code blocks ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working folder and a DAPR_HOME of its own for the blocks that run."""
    root = tmp_path_factory.mktemp("docs-blocks")
    (root / "work").mkdir()
    (root / "home").mkdir()
    return root


def test_every_block_has_a_known_language():
    unknown = [f"{b} ({b.language or 'none'})" for b in ALL_BLOCKS if b.language not in LANGUAGES]
    assert unknown == [], f"fence these as one of {sorted(LANGUAGES)}"


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.language == "python"], ids=str)
def test_python_block(block: Block, sandbox: Path):
    compile(block.code, str(block), "exec")
    if block.illustrative:
        return
    env = {**os.environ, "DAPR_HOME": str(sandbox / "home"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", block.code],
        cwd=sandbox / "work",
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{block}:\n{done.stderr[-3000:]}"


def _experiment(raw: dict) -> dict:
    if not isinstance(raw, dict) or ("dataset" in raw and "retrievers" in raw):
        return raw
    out = {**BASE, **raw}
    if "retrievers" in raw and "fusion" not in raw:
        out.pop("fusion")
    return out


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.language == "yaml"], ids=str)
def test_yaml_block(block: Block, tmp_path: Path):
    from dapr.experiment import config

    raw = yaml.safe_load(block.code)
    if block.illustrative:
        return
    path = tmp_path / f"{block.path.stem}.yaml"
    path.write_text(yaml.safe_dump(_experiment(raw), sort_keys=False))
    assert config.load_grid(path)
    for variant in raw.get("variants", {}):
        assert config.load_grid(path, variant=variant)


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.language == "toml"], ids=str)
def test_toml_block(block: Block):
    tomllib.loads(block.code)


def _commands(code: str) -> list[list[str]]:
    lines = code.replace("\\\n", " ").splitlines()
    return [argv for argv in (shlex.split(line, comments=True) for line in lines) if argv]


def _dapr(argv: list[str], block: Block, sandbox: Path, monkeypatch) -> None:
    from dapr.cli import main, parser
    from dapr.experiment import config

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args = parser().parse_args(argv)
    except SystemExit as exit_:
        if exit_.code == 0 and argv == ["--version"]:
            return
        pytest.fail(f"{block}: dapr {shlex.join(argv)}: {err.getvalue().strip()}")
    if argv[0] in ("run", "train", "check") and (ROOT / args.file).is_file():
        config.load_grid(ROOT / args.file, args.overrides, args.variant)
    elif argv[0] in ("run", "train", "check") and not block.illustrative:
        pytest.fail(f"{block}: {args.file} is not a file of the repository")
    elif any(tuple(argv[: len(e)]) == e for e in EXECUTED) and not block.illustrative:
        monkeypatch.chdir(sandbox / "work")
        monkeypatch.setenv("DAPR_HOME", str(sandbox / "home"))
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
        assert code == 0, f"{block}: dapr {shlex.join(argv)}: {err.getvalue()[-2000:]}"
    elif not block.illustrative:
        pytest.fail(
            f"{block}: `dapr {shlex.join(argv)}` is not run by this test: mark the block "
            "<!-- illustrative: REASON -->, or add the command to EXECUTED if it is cheap"
        )


def _extras() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return set(project["optional-dependencies"])


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.language == "bash"], ids=str)
def test_shell_block(block: Block, sandbox: Path, monkeypatch):
    for argv in _commands(block.code):
        program, rest = argv[0], argv[1:]
        if program == "dapr":
            _dapr(rest, block, sandbox, monkeypatch)
        elif program == "pip" and rest[:2] == ["install", "-e"]:
            extras = re.fullmatch(r"\.\[([\w,-]+)\]", rest[2])
            assert extras and set(extras.group(1).split(",")) <= _extras(), f"{block}: {rest[2]}"
            if "-c" in rest:
                assert (ROOT / rest[rest.index("-c") + 1]).is_file(), block
        elif program == "make":
            assert (ROOT / "Makefile").is_file(), f"{block}: there is no Makefile"
            makefile = (ROOT / "Makefile").read_text()
            for target in rest:
                assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"{block}: {target}"
        elif program == "python" and rest and rest[0].endswith(".py"):
            assert (ROOT / rest[0]).is_file(), f"{block}: {rest[0]}"
        elif program in ("pytest", "mkdocs"):
            continue
        elif not block.illustrative:
            pytest.fail(f"{block}: `{shlex.join(argv)}` not checked: mark it illustrative")


def test_illustrative_blocks_give_a_reason():
    for path in FILES:
        for line in path.read_text().splitlines():
            if "illustrative" in line and line.startswith("<!--"):
                assert ILLUSTRATIVE.match(line.strip()), f"{path}: {line}"
