"""The ``wiki-sample`` dataset: wikitext cleaning rules, queries and qrels, the split, the build."""

from __future__ import annotations

import bz2
import importlib.util
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("mwparserfromhell")

from dapr.data_loaders import wiki_sample as ws  # noqa: E402

from dapr.errors import DataError  # noqa: E402

PROSE = "This sentence is long enough to count as prose."
LEFTOVER_MARKUP = ("{{", "}}", "[[", "]]", "<ref", "{|", "|}", "'''", "''", "<!--")


def paragraphs(wikitext: str) -> list[str]:
    """The prose paragraphs of a wikitext fragment, all sections together."""
    return [p for section in ws.article_sections(wikitext) for p in section.paragraphs]


def one(wikitext: str) -> str:
    (paragraph,) = paragraphs(wikitext)
    return paragraph


# --- removal rules ---------------------------------------------------------------------------


def test_templates_are_dropped_with_their_arguments():
    text = (
        "{{Infobox country\n| name = Testland\n| capital = [[Capital City]]\n}}\n"
        "{{Use dmy dates|date=May 2020}}\n"
        "Testland is a {{nowrap|small {{lang|fr|pays}}}} country in the test region.{{cn}}"
    )
    assert one(text) == "Testland is a country in the test region."


def test_tables_are_dropped_and_end_the_paragraph():
    text = (
        f"{PROSE}\n"
        '{| class="wikitable"\n|+ A caption with enough words in it.\n|-\n'
        "! Header\n|-\n| A cell with many words in it too. || Another cell here.\n|}\n"
        "The prose after the table is a paragraph of its own."
    )
    assert paragraphs(text) == [PROSE, "The prose after the table is a paragraph of its own."]


def test_list_and_indented_lines_are_dropped():
    text = (
        "The schools of thought include the following ones.\n"
        "* A bulleted item that looks like a sentence of prose.\n"
        "# A numbered item that looks like a sentence of prose.\n"
        ": An indented line that looks like a sentence of prose.\n"
        "; A term line : with a definition that looks like prose.\n"
        "The prose after the list is a paragraph of its own."
    )
    assert paragraphs(text) == [
        "The schools of thought include the following ones.",
        "The prose after the list is a paragraph of its own.",
    ]


def test_html_lists_are_dropped():
    text = f"{PROSE}<ul><li>An item written as a full sentence of prose.</li></ul>"
    assert paragraphs(text) == [PROSE]


def test_references_are_dropped():
    text = (
        'The river is long.<ref name="len">{{cite book |title=Rivers |year=2000}}</ref> '
        'It floods every spring.<ref name="len" /><ref>Smith, p. 5.</ref>\n\n'
        "== References ==\n{{reflist}}\n<references />"
    )
    assert one(text) == "The river is long. It floods every spring."


def test_files_images_categories_and_interlanguage_links_are_dropped():
    text = (
        "[[File:Map.png|thumb|A caption that is a full sentence of prose.]]\n"
        "[[Image:Flag.svg|left|200px|Another caption, also a sentence.]]\n"
        "The town lies on the [[river]] bank.\n"
        "[[Category:Towns]]\n[[Category:Rivers|Town]]\n[[fr:Ville]]\n[[zh-min-nan:Siâⁿ]]"
    )
    assert one(text) == "The town lies on the river bank."


def test_link_text_is_kept():
    text = (
        "[[Paris]] is the [[Capital city|capital]] of [[France]]; its [[apple]]s, "
        "[[Seine (river)|]] and [[:Category:Cities|city list]] are known.\n"
        "See [[wikt:fleuve|fleuve]] and [https://example.org the example site] here. "
        "Bare [https://example.org/x] and https://example.org/y links vanish."
    )
    assert one(text) == (
        "Paris is the capital of France; its apples, Seine and city list are known. "
        "See fleuve and the example site here. Bare and links vanish."
    )


def test_formatting_is_removed_but_its_text_kept():
    text = (
        "'''Bold''' and ''italic'' and '''''both''''' and the students'''' work.<!-- hidden --> "
        '<b>Tagged</b> <span style="x">spans</span> and <sup>2</sup> stay&nbsp;here &amp; '
        "there&mdash;fine. A formula <math>x^2</math> is dropped.__NOTOC__"
    )
    assert one(text) == (
        "Bold and italic and both and the students' work. Tagged spans and 2 stay here & "
        "there\u2014fine. A formula is dropped."
    )


def test_whitespace_and_emptied_parentheses_are_tidied():
    text = "Alabama ({{IPAc-en|ˌ|æ|l}}) is a   state\nof the  United States {{efn|x}}."
    assert one(text) == "Alabama is a state of the United States."


def test_short_fragments_are_dropped():
    text = (
        f"Too short.\n\n{PROSE}\n\n"
        "A caption like line of words without any end\n\n"
        "The main kinds are as follows:\n\n"
        "Five words make a sentence."
    )
    assert paragraphs(text) == [PROSE, "Five words make a sentence."]


def test_back_matter_sections_are_dropped_with_their_subsections():
    text = (
        f"{PROSE}\n"
        "== See also ==\nA see also paragraph that is written as prose.\n"
        "=== Sub of see also ===\nA nested paragraph that is written as prose.\n"
        "== NOTES AND REFERENCES ==\nA notes paragraph that is written as prose.\n"
        "== External links: ==\nAn external paragraph that is written as prose.\n"
        "== Legacy ==\nThe legacy paragraph is content and is kept.\n"
        "== Further Reading ==\nA reading paragraph that is written as prose.\n"
    )
    assert paragraphs(text) == [PROSE, "The legacy paragraph is content and is kept."]


@pytest.mark.parametrize(
    "heading",
    ["References", "see also", "Bibliography", "Sources", "Citations", "Footnotes", "Notes"],
)
def test_dropped_headings(heading):
    assert ws.is_dropped_section(heading)
    assert not ws.is_dropped_section(f"{heading} of the war")


def test_leftover_markup_drops_the_paragraph():
    assert not ws.is_prose("An unclosed {{template is not a clean paragraph.")
    assert ws.is_prose(PROSE)


# --- documents, queries, qrels -----------------------------------------------------------------

ARTICLE = """{{Infobox thing}}
'''Thing''' is an example article used in the tests.

The lead has a second paragraph of prose.

== History ==
The history section has its first paragraph.

The history section has its second paragraph.

=== Early ''years'' ===
The early years are a subsection with prose.

== Works ==
* Only a list item lives in this section, nothing else.

=== Books ===
The books subsection has prose of its own.

== History ==
A second history heading repeats the same path.

== References ==
{{reflist}}
"""


def test_article_to_document_builds_passages_queries_and_qrels():
    document, queries, qrels = ws.article_to_document("7", "Thing", ARTICLE)
    assert document.id == "7" and document.title == "Thing"
    assert [(p.id, p.doc_id, p.position) for p in document.passages] == [
        (f"7-{i}", "7", i) for i in range(7)
    ]
    assert document.passages[0].text == "Thing is an example article used in the tests."
    assert queries == {
        "7/history": "Thing History",
        "7/history/early-years": "Thing Early years",
        "7/works/books": "Thing Books",
        "7/history-2": "Thing History",
    }
    assert qrels == {
        "7/history": {"7-2": 1, "7-3": 1},
        "7/history/early-years": {"7-4": 1},
        "7/works/books": {"7-5": 1},
        "7/history-2": {"7-6": 1},
    }


def test_lead_paragraphs_have_no_query():
    document, queries, qrels = ws.article_to_document("1", "Lead", PROSE)
    assert len(document.passages) == 1 and queries == {} and qrels == {}


def test_article_without_prose_has_no_passage():
    document, queries, _ = ws.article_to_document("2", "List", "* one\n* two\n{{navbox}}")
    assert document.passages == () and queries == {}


def test_slug():
    assert ws.slug("Early ''years'' (1900–1910)") == "early-years-1900-1910"
    assert ws.slug("Économie") == "économie"
    assert ws.slug("!!") == "section"


def test_split_is_deterministic_and_about_30_percent_dev():
    ids = [f"{d}/section-{s}" for d in range(200) for s in range(50)]
    splits = [ws.split_of(qid) for qid in ids]
    assert splits == [ws.split_of(qid) for qid in ids]
    assert set(splits) == {"dev", "test"}
    assert 0.28 < splits.count("dev") / len(ids) < 0.32
    assert ws.split_of("12/history") == ws.split_of("12/history")


# --- the export, the cache, errors -------------------------------------------------------------

NS = "http://www.mediawiki.org/xml/export-0.10/"


def write_export(path: Path, pages: list[tuple[str, str, str, str, bool]]) -> Path:
    """A bz2 MediaWiki export of ``(id, ns, title, wikitext, is_redirect)`` pages."""
    from xml.sax.saxutils import escape

    body = "".join(
        f"<page><title>{escape(title)}</title><ns>{ns}</ns><id>{pid}</id>"
        + ('<redirect title="Elsewhere" />' if redirect else "")
        + f'<revision><id>1</id><text xml:space="preserve">{escape(text)}</text></revision>'
        + "</page>"
        for pid, ns, title, text, redirect in pages
    )
    path.write_bytes(bz2.compress(f'<mediawiki xmlns="{NS}">{body}</mediawiki>'.encode()))
    return path


@pytest.fixture
def small_export(tmp_path: Path) -> Path:
    return write_export(
        tmp_path / "export.xml.bz2",
        [
            ("7", "0", "Thing", ARTICLE, False),
            ("8", "0", "Old name", "#REDIRECT [[Thing]]", True),
            ("9", "4", "Wikipedia:Policy", PROSE, False),
            ("10", "0", "List of things", "* one & two\n* three", False),
            ("11", "0", "Other <thing>", f"{PROSE}\n== Use ==\n{PROSE}", False),
        ],
    )


def test_read_pages_keeps_main_namespace_articles(small_export: Path):
    pages = list(ws.read_pages(small_export))
    assert [(pid, title) for pid, title, _ in pages] == [
        ("7", "Thing"),
        ("10", "List of things"),
        ("11", "Other <thing>"),
    ]
    assert pages[1][2] == "* one & two\n* three"


def test_build_skips_articles_without_passages(small_export: Path):
    dataset = ws.build(small_export)
    assert dataset.name == "wiki-sample"
    assert [d.id for d in dataset.corpus] == ["7", "11"]
    assert set(dataset.splits) == {"dev", "test"}
    queries = {
        qid: text for split in dataset.splits.values() for qid, text in split.queries.items()
    }
    assert queries["11/use"] == "Other <thing> Use"
    assert all(ws.split_of(qid) == name for name, s in dataset.splits.items() for qid in s.queries)


def test_load_caches_and_never_leaves_a_broken_cache(small_export, tmp_path, monkeypatch):
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(ws, "source_path", lambda: small_export)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(ws, "article_to_document", interrupted)
        with pytest.raises(KeyboardInterrupt):
            ws.adapter.load()
    assert not ws.adapter.prepared.exists()
    built = ws.adapter.load()
    assert ws.adapter.prepared == tmp_path / "home" / "datasets" / "wiki-sample-v1"
    assert ws.adapter.prepared.is_dir()
    monkeypatch.setattr(ws, "build", interrupted)
    assert ws.adapter.load().fingerprint == built.fingerprint


def test_missing_gensim_names_the_extra(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(DataError, match=r'pip install "dapr-ir\[wiki\]"'):
        ws.source_path()


def test_missing_export_is_a_data_error(monkeypatch, tmp_path):
    fake = SimpleNamespace(origin=str(tmp_path / "gensim" / "__init__.py"))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: fake)
    with pytest.raises(DataError, match="missing"):
        ws.source_path()


# --- the real build ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def real(tmp_path_factory):
    """The dataset built from gensim's export into a fresh ``DAPR_HOME``, with the build time."""
    home = tmp_path_factory.mktemp("dapr_home")
    built = []
    original_build = ws.build
    with pytest.MonkeyPatch.context() as m:
        m.setenv("DAPR_HOME", str(home))
        m.setattr(ws, "build", lambda: built.append(original_build()) or built[-1])
        start = time.perf_counter()
        dataset = ws.adapter.load()
        seconds = time.perf_counter() - start
    return SimpleNamespace(dataset=dataset, built=built[0], seconds=seconds, home=home)


def test_real_corpus_statistics(real):
    documents = list(real.dataset.corpus)
    passages = list(real.dataset.corpus.passages())
    assert 95 <= len(documents) <= 106
    assert 3000 <= len(passages) <= 8000
    assert len({p.id for p in passages}) == len(passages)
    for document in documents:
        assert document.passages
        assert [p.position for p in document.passages] == list(range(len(document.passages)))
        assert all(p.id == f"{document.id}-{p.position}" for p in document.passages)


def test_real_passages_have_no_markup_left(real):
    dirty = [
        (p.id, mark)
        for p in real.dataset.corpus.passages()
        for mark in LEFTOVER_MARKUP
        if mark in p.text
    ]
    assert dirty == []


def test_real_qrels_point_into_the_corpus(real):
    ids = set(real.dataset.corpus.ids.passage_ids.tolist())
    splits = real.dataset.splits
    assert set(splits) == {"dev", "test"}
    for split in splits.values():
        assert split.queries.keys() == split.qrels.keys()
        assert all(judged and judged.keys() <= ids for judged in split.qrels.values())
    dev, test = len(splits["dev"].queries), len(splits["test"].queries)
    assert dev + test >= 500
    assert 0.2 <= dev / (dev + test) <= 0.4


def test_real_cache_round_trips_and_is_read_without_parsing(real, monkeypatch):
    assert real.dataset.fingerprint == real.built.fingerprint

    def no_parsing(*args, **kwargs):
        raise AssertionError("the cached dataset was parsed again")

    monkeypatch.setenv("DAPR_HOME", str(real.home))
    monkeypatch.setattr(ws, "build", no_parsing)
    monkeypatch.setattr(ws, "_parse", no_parsing)
    start = time.perf_counter()
    again = ws.adapter.load()
    cached_seconds = time.perf_counter() - start
    assert again.fingerprint == real.dataset.fingerprint
    assert cached_seconds < real.seconds


def test_real_build_is_deterministic(real):
    assert ws.build().fingerprint == real.built.fingerprint
