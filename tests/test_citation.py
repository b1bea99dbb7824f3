"""How to cite: CITATION.cff (Citation File Format 1.2.0) and the BibTeX of the README and the
site's home page say the same about the DAPR paper."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIBTEX = re.compile(r"^```bibtex\n(.*?)^```$", re.MULTILINE | re.DOTALL)
FIELD = re.compile(r'^\s*(\w+)\s*=\s*"(.*)",?$', re.MULTILINE)


def _cff() -> dict:
    return yaml.safe_load((ROOT / "CITATION.cff").read_text())


def _bibtex(path: Path) -> str:
    (entry,) = BIBTEX.findall(path.read_text())
    return entry


def test_citation_cff_has_the_required_keys():
    cff = _cff()
    assert cff["cff-version"] == "1.2.0"
    for key in ("message", "title", "authors"):
        assert cff[key], key
    assert all({"name"} <= set(a) or {"family-names"} <= set(a) for a in cff["authors"])
    paper = cff["preferred-citation"]
    for key in ("type", "title", "authors", "year", "doi", "url"):
        assert paper[key], key
    assert paper["type"] == "conference-paper"
    assert re.fullmatch(r"10\.\d{4,9}/\S+", paper["doi"])


def test_readme_and_home_page_give_the_same_bibtex_as_citation_cff():
    entry = _bibtex(ROOT / "README.md")
    assert _bibtex(ROOT / "docs" / "index.md") == entry
    assert re.match(r"@inproceedings\{[\w-]+,\n", entry) and entry.rstrip().endswith("}")
    fields = dict(FIELD.findall(entry))
    paper = _cff()["preferred-citation"]
    assert fields["title"].replace("{", "").replace("}", "") == paper["title"]
    authors = [f"{a['family-names']}, {a['given-names']}" for a in paper["authors"]]
    assert fields["author"].split(" and ") == authors
    assert fields["year"] == str(paper["year"])
    assert fields["doi"] == paper["doi"] and fields["url"] == paper["url"]
    assert fields["pages"] == f"{paper['start']}--{paper['end']}"
    assert fields["booktitle"] == paper["collection-title"]
    assert fields["publisher"] == paper["publisher"]["name"]
