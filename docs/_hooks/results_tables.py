"""Every table of figures in README.md and docs/, rendered from one results file.

A page shows a results table with a marker line and the table right below it::

    <!-- results: FILE [table=NAME] [rows="A; B"] [columns="X; Y"] -->
    | ... the render ... |

FILE is under ``docs/results/``: a benchmark's JSON (:func:`load_json`: stamped with the command,
date, commit and hardware that produced it, ``"source": "measured"``, or ``"transcribed"`` from
figures recorded earlier by the commit it names), a run's ``summary.md`` as ``dapr run`` wrote it,
or the cross-encoder sweep's JSON lines. ``table`` picks one of the file's tables (a summary's
tables are ``1``, ``2`` ...), ``rows`` keeps the rows whose first cell is listed (in that order),
``columns`` the columns whose header is listed.

The site renders the table under each marker when it is built (:func:`on_page_markdown`, a
mkdocs hook), followed by its provenance; README.md is read raw on GitHub, so the tables are
written in place: ``python docs/_hooks/results_tables.py --write`` regenerates every marked table
of README.md and docs/, ``--check`` lists those that differ from their render
(tests/test_results_tables.py fails on them).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from dapr.errors import DaprError

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
MARKER = re.compile(r"^<!-- results: (\S.*?) -->$")
STAMP = ("command", "date", "commit", "hardware", "source")
"""What every JSON results file records about how its figures were produced."""
SOURCES = ("measured", "transcribed")
ALIGN = {(False, True): "r", (True, True): "c"}
"""A rule cell's alignment by its colons (left, right); anything else is ``l``."""


class ResultsError(DaprError):
    """A marker or a results file that cannot be rendered: one line naming it and the fix."""


def pages(root: Path = ROOT) -> list[Path]:
    """README.md and the site's pages (results files and hooks are not pages)."""
    docs = root / "docs"
    found = [p for p in docs.rglob("*.md") if not {"_hooks", "results"} & set(p.parts)]
    return [root / "README.md", *sorted(found)]


def parse_marker(line: str) -> dict[str, Any] | None:
    """The marker's file and options, or None when ``line`` is not a results marker."""
    found = MARKER.match(line.strip())
    if found is None:
        return None
    words = shlex.split(found.group(1))
    spec: dict[str, Any] = {"file": words[0], "table": None, "rows": None, "columns": None}
    for word in words[1:]:
        key, _, value = word.partition("=")
        if key not in ("table", "rows", "columns") or not value:
            raise ResultsError(
                f'{line.strip()}: unknown option {word!r}; use table=NAME, rows="A; B", '
                'columns="X; Y"'
            )
        spec[key] = value if key == "table" else [v.strip() for v in value.split(";")]
    return spec


def split_row(line: str) -> list[str]:
    """The cells of a markdown table row (``\\|`` inside a cell stays in it)."""
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [c.strip() for c in cells]


def parse_tables(text: str) -> list[dict[str, Any]]:
    """The markdown tables of ``text``: columns, alignment (``l``/``r``/``c``) and rows."""
    tables, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        rule = lines[i + 1] if i + 1 < len(lines) else ""
        if lines[i].startswith("|") and re.match(r"^\|[\s:|-]+$", rule):
            block = []
            while i < len(lines) and lines[i].startswith("|"):
                block.append(lines[i])
                i += 1
            align = "".join(ALIGN.get((c[:1] == ":", c[-1:] == ":"), "l") for c in split_row(rule))
            rows = [split_row(r) for r in block[2:]]
            tables.append({"columns": split_row(block[0]), "align": align, "rows": rows})
        else:
            i += 1
    return tables


def table_lines(table: dict[str, Any]) -> list[str]:
    """A table as markdown lines."""
    rule = {"l": "---", "r": "---:", "c": ":---:"}
    columns, align = table["columns"], table.get("align") or "l" * len(table["columns"])
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(rule[a] for a in align) + "|"]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in table["rows"]]


def load_json(path: Path) -> dict[str, Any]:
    """A JSON results file, its stamp checked: ``tables`` maps a name to columns, ``align``
    (one of ``l``/``r``/``c`` per column) and rows of cells as shown."""
    try:
        found = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ResultsError(
            f"docs/results/{path.name}: not JSON ({error}); rewrite it with its benchmark's --json"
        ) from None
    missing = [key for key in STAMP if not found.get(key)]
    if missing or found["source"] not in SOURCES or not found.get("tables"):
        raise ResultsError(
            f"docs/results/{path.name}: give it {', '.join(missing or ['tables'])} "
            f"(source one of {', '.join(SOURCES)}), as benchmarks/results_json.py writes them"
        )
    for name, table in found["tables"].items():
        width = len(table["columns"])
        widths = {len(table.get("align", "l" * width)), *(len(r) for r in table["rows"])}
        if widths != {width}:
            raise ResultsError(
                f"docs/results/{path.name}: table {name!r}: give every row and align "
                f"{width} cells, one per column"
            )
    return found


def _sweep(path: Path) -> dict[str, dict[str, Any]]:
    """The cross-encoder sweep's JSON lines as its script renders them, and their first stages."""
    import importlib.util

    script = ROOT / "benchmarks" / "cross_encoder_sweep.py"
    spec = importlib.util.spec_from_file_location("sweep", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    first = {r["max_words"]: r for r in lines}
    stages = {
        "columns": ["passage words", "first stage", "test questions", "DE MRR@10", "BM25 MRR@10"],
        "align": "rlrrr",
        "rows": [
            [str(w), f"untrained DE, top {r['depth']}", str(r["questions"])]
            + [f"{r['mrr_de']:.4f}", f"{r['mrr_bm25']:.4f}"]
            for w, r in sorted(first.items())
        ],
    }
    return {"sweep": parse_tables(module.table(lines))[0], "first-stage": stages}


def tables_of(name: str) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The tables of results file ``name`` by name, and its stamp (empty for a run's summary)."""
    path = RESULTS / name
    if not path.is_file():
        raise ResultsError(f"docs/results/{name}: no such results file; write it or fix the marker")
    if path.suffix == ".json":
        found = load_json(path)
        return found["tables"], found
    if path.suffix == ".md":
        return {str(i): t for i, t in enumerate(parse_tables(path.read_text()), 1)}, {}
    if path.suffix == ".jsonl" and name.startswith("cross-encoder-sweep"):
        return _sweep(path), {}
    raise ResultsError(f"docs/results/{name}: no renderer for this kind of file (.json, .md)")


def select(spec: dict[str, Any]) -> dict[str, Any]:
    """The table a marker asks for, its rows and columns selected."""
    tables, _ = tables_of(spec["file"])
    name = spec["table"] or next(iter(tables))
    if name not in tables:
        listed = ", ".join(tables)
        raise ResultsError(f"docs/results/{spec['file']}: no table {name!r}; choose from: {listed}")
    table = dict(tables[name])
    if spec["rows"]:
        by_label = {row[0]: row for row in table["rows"]}
        unknown = [r for r in spec["rows"] if r not in by_label]
        if unknown:
            raise ResultsError(
                f"docs/results/{spec['file']}: no row {unknown[0]!r} in table {name!r}; "
                "name rows by their first cell"
            )
        table["rows"] = [by_label[r] for r in spec["rows"]]
    if spec["columns"]:
        unknown = [c for c in spec["columns"] if c not in table["columns"]]
        if unknown:
            raise ResultsError(
                f"docs/results/{spec['file']}: no column {unknown[0]!r} in table {name!r}; "
                "name columns by their header"
            )
        keep = [table["columns"].index(c) for c in spec["columns"]]
        align = table.get("align") or "l" * len(table["columns"])
        table = {
            "columns": [table["columns"][i] for i in keep],
            "align": "".join(align[i] for i in keep),
            "rows": [[row[i] for i in keep] for row in table["rows"]],
        }
    return table


def render(spec: dict[str, Any]) -> list[str]:
    """The markdown lines of the table a marker asks for."""
    return table_lines(select(spec))


def provenance(spec: dict[str, Any]) -> str:
    """One line saying where a rendered table's figures come from (the site shows it)."""
    _, stamp = tables_of(spec["file"])
    where = f"`docs/results/{spec['file']}`"
    if not stamp:
        return f"Source: {where}, as the run wrote it."
    how = stamp["source"]
    if how == "transcribed":
        how = "transcribed from the commit that recorded them"
    return (
        f"Source: {where} ({how}): `{stamp['command']}`, {stamp['date']}, commit "
        f"{stamp['commit'][:7]}, {stamp['hardware']}."
    )


def blocks(text: str) -> list[tuple[int, int, dict[str, Any]]]:
    """Each marker of ``text``: its line number, the end of the table below it (the lines
    starting with ``|`` right after it; none yet: the next line) and its options."""
    lines, found = text.splitlines(), []
    for i, line in enumerate(lines):
        spec = parse_marker(line)
        if spec is not None:
            end = i + 1
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            found.append((i, end, spec))
    return found


def rewrite(text: str, site: bool = False) -> str:
    """``text`` with the table under each marker replaced by its render (``site``: and its
    provenance below it, for the built page)."""
    lines = text.splitlines()
    for i, end, spec in reversed(blocks(text)):
        rendered = render(spec)
        if site:
            rendered += ["", f"*{provenance(spec)}*"]
        lines[i + 1 : end] = rendered
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def stale(root: Path = ROOT) -> list[str]:
    """``PATH:LINE FILE`` for each marked table that differs from its render."""
    differ = []
    for path in pages(root):
        text = path.read_text()
        lines = text.splitlines()
        for i, end, spec in blocks(text):
            if lines[i + 1 : end] != render(spec):
                differ.append(f"{path.relative_to(root)}:{i + 1} {spec['file']}")
    return differ


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """The mkdocs hook: each marked table rendered from its results file, with its source."""
    return rewrite(markdown, site=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="regenerate the tables in place")
    action.add_argument("--check", action="store_true", help="list the tables that differ")
    args = parser.parse_args(argv)
    try:
        if args.write:
            for path in pages():
                text = path.read_text()
                if rewrite(text) != text:
                    path.write_text(rewrite(text))
                    print(f"rewrote {path.relative_to(ROOT)}")
            return 0
        differ = stale()
    except ResultsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for line in differ:
        print(f"{line}: differs from its render; run python docs/_hooks/results_tables.py --write")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
