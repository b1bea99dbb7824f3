"""The explanation pages: their mermaid diagrams hold together (the site draws them in the browser,
so nothing else would notice a typo), and every link into the glossary lands on a term."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(p for p in (ROOT / "docs").rglob("*.md") if "_hooks" not in p.parts)
FILES = [ROOT / "README.md", *PAGES]

MERMAID = re.compile(r"^```mermaid[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
KINDS = ("flowchart", "graph", "sequenceDiagram", "stateDiagram-v2", "classDiagram", "pie")
DIRECTIONS = {"TB", "TD", "BT", "RL", "LR"}
QUOTED = re.compile(r'"[^"\n]*"')
ARROW = re.compile(
    r"\s*(?:--\s[^>]*?\s-->|-\.\s[^>]*?\s\.->|(?:-->|-\.->|==>|---)(?:\|[^|]*\|)?)\s*"
)
NODE = re.compile(r"^([A-Za-z_][\w]*)\s*(.*)$")
SHAPE = re.compile(
    r"^(\(\[|\[\(|\(\(|\[\[|\{\{|\[|\(|\{|>)(?:Q)(\]\)|\)\]|\)\)|\]\]|\}\}|\]|\)|\})$"
)


def diagrams(path: Path) -> list[tuple[str, str]]:
    """``(where, source)`` of each mermaid block of a page."""
    text = path.read_text()
    return [
        (f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}", m.group(1))
        for m in MERMAID.finditer(text)
    ]


def problems(source: str) -> list[str]:
    """What is wrong with a mermaid diagram, structurally: an unknown diagram type, an edge to a
    node never defined with a label (mermaid would draw its id silently), a node drawn but never
    connected, a stray quote or bracket, a semicolon inside a label, an unclosed subgraph."""
    lines = [line.strip() for line in source.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("%%")]
    if not lines:
        return ["empty diagram"]
    head = lines[0].split()
    if head[0] not in KINDS:
        return [f"unknown diagram type {head[0]!r} (one of {', '.join(KINDS)})"]
    if head[0] not in ("flowchart", "graph"):
        return []  # only the type is checked for the other kinds
    if len(head) != 2 or head[1] not in DIRECTIONS:
        return [f"{lines[0]!r}: a flowchart names its direction ({', '.join(sorted(DIRECTIONS))})"]
    found: list[str] = []
    defined: set[str] = set()
    groups: set[str] = set()  # subgraphs: edges may name them, they need none
    used: set[str] = set()
    depth = 0
    for line in lines[1:]:
        if ";" in line:  # ends a statement, even inside a label
            found.append(f"{line!r}: a ';' ends a mermaid statement, write a comma")
            continue
        bare = QUOTED.sub("Q", line)
        if '"' in bare:
            found.append(f"{line!r}: an unpaired quote")
            continue
        if bare.startswith("subgraph "):
            depth += 1
            match = NODE.match(bare[len("subgraph ") :])
            if match is None or (match.group(2) and SHAPE.match(match.group(2)) is None):
                found.append(f'{line!r}: write subgraph ID ["title"]')
            else:
                groups.add(match.group(1))
            continue
        if bare == "end":
            depth -= 1
            if depth < 0:
                found.append("an 'end' without its subgraph")
            continue
        if bare.startswith(("direction ", "classDef ", "class ", "style ", "linkStyle ", "click ")):
            continue
        ends = ARROW.split(bare)
        for end in ends:
            match = NODE.match(end)
            if match is None:
                found.append(f"{line!r}: {end!r} is not a node")
                continue
            name, shape = match.groups()
            if shape:
                if SHAPE.match(shape) is None:
                    found.append(f"{line!r}: {name} has a malformed shape or an unquoted label")
                    continue
                defined.add(name)
            if len(ends) > 1:
                used.add(name)
    if depth > 0:
        found.append("a subgraph without its 'end'")
    undefined = used - defined - groups
    found += [f"edge to {name!r}, which is never defined" for name in sorted(undefined)]
    found += [f"node {name!r} is never connected" for name in sorted(defined - used)]
    return found


ALL = [d for path in FILES for d in diagrams(path)]


def test_the_explanation_pages_have_their_diagrams():
    pages = {where.split(":")[0] for where, _ in ALL}
    assert {"docs/concepts.md", "docs/architecture.md"} <= pages
    assert len(ALL) >= 4  # data flow, fusion vs hierarchical, a cache entry, a run's lifecycle


@pytest.mark.parametrize(("where", "source"), ALL, ids=[where for where, _ in ALL])
def test_each_diagram_holds_together(where: str, source: str):
    assert problems(source) == [], where


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ('flowchart LR\n  a["A"] --> b\n', "edge to 'b', which is never defined"),
        ('flowchart LR\n  a["A"]\n  b["B"]\n  a --> b\n  c["C"]\n', "node 'c' is never"),
        ('flowchart LR\n  a["A] --> b["B"]\n', "an unpaired quote"),
        ('flowchart LR\n  a["A; B"] --> b["B"]\n', "ends a mermaid statement"),
        ('flowchart LR\n  a["A"] --> b["x "y" z"]\n', "malformed shape"),
        ('flowchart LR\n  a[A (1)] --> b["B"]\n', "malformed shape"),
        ('flowchart\n  a["A"] --> b["B"]\n', "names its direction"),
        ("flowchat LR\n  a --> b\n", "unknown diagram type"),
        ('flowchart LR\n  subgraph s ["S"]\n  a["A"] --> b["B"]\n', "without its 'end'"),
    ],
)
def test_a_broken_diagram_is_caught(source: str, problem: str):
    found = problems(source)
    assert any(problem in p for p in found), found


def test_a_well_formed_diagram_passes():
    source = """flowchart TB
        q(["query"])
        subgraph s ["two steps"]
            direction TB
            a["A<br/>(one)"] -- yes --> b{"B?"}
            b -. no .-> c[("C")]
        end
        q --> a
        c -->|back| q
        s --> q
    """
    assert problems(source) == []


def test_the_site_draws_mermaid_blocks_as_diagrams():
    """mkdocs.yml's superfences turn a mermaid block into the ``<pre class="mermaid">`` that
    Material's script draws, not into highlighted code."""
    import markdown
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor(
        "tag:yaml.org,2002:python/name:", lambda loader, suffix, node: suffix
    )
    Loader.add_constructor("!ENV", lambda loader, node: None)  # mkdocs' environment tag
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)
    extensions = [e for e in config["markdown_extensions"] if isinstance(e, dict)]
    fences = next(e["pymdownx.superfences"] for e in extensions if "pymdownx.superfences" in e)
    (fence,) = [f for f in fences["custom_fences"] if f["name"] == "mermaid"]
    assert fence["format"] == "pymdownx.superfences.fence_code_format"
    module, _, name = fence["format"].rpartition(".")
    fence = {**fence, "format": getattr(__import__(module, fromlist=[name]), name)}
    where, source = ALL[0]
    html = markdown.markdown(
        f"```mermaid\n{source}```\n",
        extensions=["pymdownx.superfences"],
        extension_configs={"pymdownx.superfences": {"custom_fences": [fence]}},
    )
    assert html.startswith('<pre class="mermaid"><code>flowchart'), (where, html[:200])


# -- the glossary ---------------------------------------------------------------------------

LINK = re.compile(r"\]\(((?:\.\./|docs/)*glossary\.md)#([^)\s]+)\)")


def test_every_link_into_the_glossary_lands_on_a_term():
    from markdown.extensions.toc import slugify

    glossary = (ROOT / "docs" / "glossary.md").read_text()
    terms = {
        slugify(line.lstrip("#").strip(), "-")
        for line in glossary.splitlines()
        if line.startswith("#")
    }
    links = [(path, anchor) for path in FILES for _, anchor in LINK.findall(path.read_text())]
    assert links, "no page links a glossary term"
    missing = [
        f"{path.relative_to(ROOT)}: #{anchor}" for path, anchor in links if anchor not in terms
    ]
    assert missing == [], f"glossary terms: {sorted(terms)}"
