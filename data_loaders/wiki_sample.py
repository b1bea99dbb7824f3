"""``wiki-sample``: a small passage-retrieval dataset built from real Wikipedia articles.

The source is the MediaWiki XML export that the ``gensim`` package ships as test data
(``enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2``, about 106 articles).
It is found through the installed package (``pip install "dapr-ir[wiki]"``) and never downloaded.
The text is Wikipedia's, licensed CC BY-SA: it is never part of dapr, only built into the local
cache ``$DAPR_HOME/datasets/wiki-sample-v1`` at first use; later loads read the cache.

Corpus: one document per main-namespace (ns 0), non-redirect article; its id is the page id, its
title the page title; articles left without a passage (disambiguation pages, mostly) are skipped.
Passages are the article's paragraphs of running prose (blocks separated by blank lines), ids
``f"{doc_id}-{position}"``, markup removed by :func:`wikitext_to_text` with mwparserfromhell:

* dropped with their content: templates (infoboxes, citations, hatnotes, ``{{convert}}``...),
  template arguments, comments, tables, list and indented lines (``* # : ;``), HTML lists,
  horizontal rules, file/image/media, category and interlanguage links, external links without a
  label, bare URLs, and the tags in :data:`DROPPED_TAGS` (``<ref>``, ``<gallery>``, ``<math>``,
  ``<pre>``, ``<timeline>``...: notes, captions, formulas and code rather than prose);
* kept as their visible text: wikilinks (label, else target), labelled external links, the
  content of any other tag (``<b>``, ``<span>``, ``<sup>``, ``<blockquote>``...), decoded HTML
  entities; bold/italic quotes are removed and whitespace is collapsed;
* dropped paragraphs: fewer than :data:`MIN_WORDS` words, no sentence end (``.``, ``!``, ``?``),
  or any markup left over (the parser gave up on malformed wikitext);
* dropped sections, with all their subsections: the back matter in :data:`DROPPED_SECTIONS`
  (References, Notes, See also, External links, Further reading, Bibliography, Sources, ...).

Queries follow TREC Complex Answer Retrieval: one per section (any heading level) with at least
one kept paragraph directly under it, text ``f"{title} {heading}"``, relevant (grade 1) the
paragraphs directly under that heading. A parent section's query does not include its
subsections' paragraphs (those have their own queries), so every passage is judged for at most
one query. Lead paragraphs have no query. Query ids are ``f"{doc_id}/{heading path slug}"``.
Queries go to ``dev`` (about 30%) or ``test`` by a SHA-256 of the query id; ``train_articles``
(a dataset argument) moves the queries of that share of the articles into a ``train`` split.

For speed the wikitext is parsed with ``skip_style_tags=True`` (bold/italic parsing is the slow
part of mwparserfromhell); the ``''``/``'''`` quotes are then removed from the text.
"""

from __future__ import annotations

import bz2
import hashlib
import importlib.util
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from dapr.data import Corpus, Dataset, Document, Passage, Qrels, Queries, Split
from dapr.datasets.adapter import Adapter
from dapr.errors import DataError
from dapr.paths import home

if TYPE_CHECKING:
    from collections.abc import Iterable

    from mwparserfromhell.nodes import Node, Tag, Wikilink
    from mwparserfromhell.wikicode import Wikicode

NAME = "wiki-sample"
VERSION = "v1"
SOURCE = "test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
"""The export's path inside the installed gensim package."""
EXPORT_NS = "{http://www.mediawiki.org/xml/export-0.10/}"

MIN_WORDS = 5
"""Shorter paragraphs are captions, labels or leftovers, not prose."""
DEV_SHARE = 0.3

DROPPED_SECTIONS = frozenset(
    {
        "references",
        "notes",
        "see also",
        "external links",
        "further reading",
        "bibliography",
        "sources",
        "citations",
        "footnotes",
        "notes and references",
        "references and notes",
        "notes and citations",
        "references and sources",
        "sources and references",
        "works cited",
        "cited works",
        "general references",
        "external links and references",
    }
)
"""Back-matter headings (compared lower-cased, whitespace collapsed, trailing colon removed)."""

DROPPED_TAGS = frozenset(
    {
        # notes and media
        "ref", "references", "gallery", "imagemap", "timeline", "graph", "mapframe", "maplink",
        "score", "hiero", "inputbox", "categorytree", "templatedata", "includeonly", "noinclude",
        # formulas and code
        "math", "chem", "ce", "pre", "source", "syntaxhighlight",
        # tables, lists, rules
        "table", "tr", "td", "th", "caption", "ul", "ol", "li", "dl", "dt", "dd", "hr",
    }
)  # fmt: skip
"""Tags dropped with their content; every other tag keeps its content's text."""
INLINE_TAGS = frozenset({"ref", "math", "chem", "ce", "hiero", "includeonly", "noinclude"})
"""Dropped tags that sit inside a sentence; the others end the paragraph."""

BLOCK_TAGS = frozenset({"p", "div", "blockquote", "center", "poem"})
"""Kept tags whose content stands as its own paragraph."""

HIDDEN_LINK_PREFIXES = frozenset({"file", "image", "media", "category"})
_LANGUAGE_PREFIX = re.compile(r"[a-z]{2,3}(-[a-z]+)*|simple")
_LIST_MARK = "\x00"  # stands for a list marker until list lines are dropped
_PARAGRAPH_BREAK = "\n\n"
_LEFTOVER_MARKUP = ("{{", "}}", "[[", "]]", "{|", "|}", "<ref", "</", "/>", "''")


@dataclass(frozen=True)
class Section:
    """The kept paragraphs directly under one heading path (``()`` for the lead)."""

    path: tuple[str, ...]
    paragraphs: tuple[str, ...]


# --- wikitext -> text ----------------------------------------------------------------------


def _parse(wikitext: str) -> Wikicode:
    try:
        import mwparserfromhell
    except ImportError as e:
        raise DataError(
            f'dataset {NAME!r} needs mwparserfromhell: pip install "dapr-ir[wiki]"'
        ) from e
    return mwparserfromhell.parse(wikitext, skip_style_tags=True)


def wikitext_to_text(wikitext: str) -> str:
    """Visible text, paragraphs apart by blank lines, list lines marked for
    :func:`text_to_paragraphs` to drop."""
    return _render(_parse(wikitext).nodes)


def _render(nodes: Iterable[Node]) -> str:
    return "".join(_render_node(node) for node in nodes)


def _render_node(node: Node) -> str:
    from mwparserfromhell import nodes as n

    if isinstance(node, n.Text):
        return node.value
    if isinstance(node, n.Wikilink):
        return _render_wikilink(node)
    if isinstance(node, n.ExternalLink):
        return _render(node.title.nodes) if node.title is not None and node.brackets else ""
    if isinstance(node, n.Tag):
        return _render_tag(node)
    if isinstance(node, n.HTMLEntity):
        return node.normalize()
    if isinstance(node, n.Heading):
        return _PARAGRAPH_BREAK + _render(node.title.nodes) + _PARAGRAPH_BREAK
    return ""  # templates, template arguments, comments


def _render_wikilink(link: Wikilink) -> str:
    target = str(link.title).strip()
    if _is_hidden_link(target):
        return ""
    if link.text is not None and str(link.text).strip():
        return _render(link.text.nodes)
    visible = _render(link.title.nodes).strip().lstrip(":")
    if link.text is not None:  # the pipe trick: [[Paris (band)|]] shows "Paris"
        visible = re.sub(r"\s*\([^()]*\)$", "", visible.split(":", 1)[-1])
    return visible


def _is_hidden_link(target: str) -> bool:
    """Files, images, categories and interlanguage links do not show as text in place."""
    if target.startswith(":") or ":" not in target:
        return False
    prefix = target.split(":", 1)[0].strip()
    return prefix.lower() in HIDDEN_LINK_PREFIXES or _LANGUAGE_PREFIX.fullmatch(prefix) is not None


def _render_tag(tag: Tag) -> str:
    name = str(tag.tag).strip().lower()
    if name in ("li", "dt", "dd") and tag.wiki_markup:
        return _LIST_MARK
    if name in DROPPED_TAGS:
        return "" if name in INLINE_TAGS else _PARAGRAPH_BREAK
    if name == "br":
        return " "
    text = _render(tag.contents.nodes) if tag.contents is not None else ""
    return _PARAGRAPH_BREAK + text + _PARAGRAPH_BREAK if name in BLOCK_TAGS else text


# --- text -> paragraphs --------------------------------------------------------------------


def text_to_paragraphs(text: str) -> list[str]:
    """Prose paragraphs of rendered text: list lines dropped, blocks cleaned and filtered."""
    lines = ["" if _LIST_MARK in line else line for line in text.split("\n")]
    blocks = re.split(r"\n\s*\n", "\n".join(lines))
    paragraphs = (clean_paragraph(block) for block in blocks)
    return [p for p in paragraphs if is_prose(p)]


def clean_paragraph(text: str) -> str:
    """One line of text: quotes and magic words removed, whitespace and punctuation tidied."""
    text = re.sub(r"'{2,}", _drop_quote_run, text)
    text = re.sub(r"__[A-Z]+__", "", text)
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r"\(\s*[,;:]?\s*\)", "", text)  # parentheses emptied by dropped templates
    text = re.sub(r"\(\s*[,;:]\s*", "(", text)
    text = re.sub(r"\s+([,.;:!?)])", r"\1", text)
    text = re.sub(r"\(\s+", "(", text)
    return re.sub(r" {2,}", " ", text).strip()


def _drop_quote_run(match: re.Match[str]) -> str:
    """``''`` italic, ``'''`` bold, ``'''''`` both; a 4-run is an apostrophe then bold."""
    run = len(match.group())
    return "'" if run == 4 else "'" * max(run - 5, 0)


def is_prose(paragraph: str) -> bool:
    """At least :data:`MIN_WORDS` words, a sentence end, and no markup left over."""
    return (
        len(paragraph.split()) >= MIN_WORDS
        and re.search(r"[.!?]['\")\]]*(\s|$)", paragraph) is not None
        and not any(mark in paragraph for mark in _LEFTOVER_MARKUP)
    )


# --- article -> sections -> document, queries, qrels ---------------------------------------


def article_sections(wikitext: str) -> list[Section]:
    """The article's sections in order, back matter and sections without prose left out."""
    from mwparserfromhell.nodes import Heading

    sections: list[Section] = []
    stack: list[tuple[int, str]] = []  # (level, heading) of the open sections
    body: list[Node] = []

    def close() -> None:
        path = tuple(heading for _, heading in stack)
        paragraphs = text_to_paragraphs(_render(body))
        if paragraphs and not any(is_dropped_section(h) for h in path):
            sections.append(Section(path, tuple(paragraphs)))
        body.clear()

    for node in _parse(wikitext).nodes:
        if isinstance(node, Heading):
            close()
            while stack and stack[-1][0] >= node.level:
                stack.pop()
            stack.append((node.level, clean_paragraph(_render(node.title.nodes))))
        else:
            body.append(node)
    close()
    return sections


def is_dropped_section(heading: str) -> bool:
    """Whether a heading names back matter (see :data:`DROPPED_SECTIONS`)."""
    return " ".join(heading.lower().split()).rstrip(":").strip() in DROPPED_SECTIONS


def slug(text: str) -> str:
    """Lower-case words joined by ``-`` (letters of any script kept)."""
    return re.sub(r"[\W_]+", "-", text.lower()).strip("-") or "section"


def article_to_document(page_id: str, title: str, wikitext: str) -> tuple[Document, Queries, Qrels]:
    """An article's document, and its section queries with their qrels (all splits)."""
    passages: list[Passage] = []
    queries: Queries = {}
    qrels: Qrels = {}
    for section in article_sections(wikitext):
        ids = []
        for text in section.paragraphs:
            ids.append(f"{page_id}-{len(passages)}")
            passages.append(Passage(ids[-1], page_id, len(passages), text))
        if section.path and section.path[-1]:
            qid = _unique(f"{page_id}/" + "/".join(slug(h) for h in section.path), queries)
            queries[qid] = f"{title} {section.path[-1]}"
            qrels[qid] = dict.fromkeys(ids, 1)
    return Document(page_id, title, tuple(passages)), queries, qrels


def _unique(qid: str, taken: Queries) -> str:
    """``qid``, or ``qid-2``, ``qid-3``... when a repeated heading path already took it."""
    candidate, n = qid, 1
    while candidate in taken:
        n += 1
        candidate = f"{qid}-{n}"
    return candidate


def with_train_split(dataset: Dataset, share: float) -> Dataset:
    """``dataset`` with the queries of a ``share`` of its articles (by SHA-256 of the article
    id) moved from dev and test into a new ``train`` split; the corpus is unchanged."""
    trained = {d.id for d in dataset.corpus if _fraction(d.id) < share}
    splits = {"train": Split(queries={}, qrels={})}
    for name, split in dataset.splits.items():
        kept = Split(queries={}, qrels={})
        for qid, text in split.queries.items():
            target = splits["train"] if qid.split("/", 1)[0] in trained else kept
            target.queries[qid] = text
            target.qrels[qid] = split.qrels[qid]
        splits[name] = kept
    return replace(dataset, splits=splits)


def _fraction(text: str) -> float:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") / 2**64


def split_of(query_id: str) -> str:
    """``dev`` or ``test``, stable across runs and machines (SHA-256 of the id)."""
    digest = hashlib.sha256(query_id.encode()).digest()
    return "dev" if int.from_bytes(digest[:8], "big") < DEV_SHARE * 2**64 else "test"


# --- the export -> the dataset -------------------------------------------------------------


def source_path() -> Path:
    """The export inside the installed gensim package, or a :class:`DataError` saying why not."""
    spec = importlib.util.find_spec("gensim")  # spec.origin is gensim.__file__, not imported
    if spec is None or spec.origin is None:
        raise DataError(
            f'dataset {NAME!r} is built from gensim\'s test data: pip install "dapr-ir[wiki]"'
        )
    path = Path(spec.origin).parent / SOURCE
    if not path.is_file():
        raise DataError(
            f"dataset {NAME!r}: {path} is missing from the installed gensim; "
            'reinstall it with pip install --force-reinstall "dapr-ir[wiki]"'
        )
    return path


def read_pages(path: Path) -> Iterator[tuple[str, str, str]]:
    """``(page id, title, wikitext)`` of every main-namespace, non-redirect page, streamed."""
    with bz2.open(path) as stream:
        for _, element in ET.iterparse(stream):
            if element.tag != f"{EXPORT_NS}page":
                continue
            if (
                element.findtext(f"{EXPORT_NS}ns") == "0"
                and element.find(f"{EXPORT_NS}redirect") is None
            ):
                yield (
                    element.findtext(f"{EXPORT_NS}id", "").strip(),
                    element.findtext(f"{EXPORT_NS}title", "").strip(),
                    element.findtext(f"{EXPORT_NS}revision/{EXPORT_NS}text", ""),
                )
            element.clear()


def build(path: Path | None = None) -> Dataset:
    """Parse the export into the dataset (no cache involved)."""
    documents: list[Document] = []
    splits = {name: Split(queries={}, qrels={}) for name in ("dev", "test")}
    for page_id, title, wikitext in read_pages(path or source_path()):
        document, queries, qrels = article_to_document(page_id, title, wikitext)
        if not document.passages:
            continue
        documents.append(document)
        for qid, text in queries.items():
            split = splits[split_of(qid)]
            split.queries[qid] = text
            split.qrels[qid] = qrels[qid]
    return Dataset(NAME, Corpus(documents), splits)


class WikiSample(Adapter):
    """Built from gensim's export into the cache at first use, then read from the cache."""

    name = NAME
    origin = "about 100 Wikipedia articles from gensim's test data (CC BY-SA), built locally"
    builds_at_first_use = True

    @property
    def prepared(self) -> Path:
        return home() / "datasets" / f"{NAME}-{VERSION}"

    def load(self, train_articles: float = 0.0, **options: object) -> Dataset:
        """The dataset; with ``train_articles`` (a share in [0, 1)), that share of the articles,
        chosen by a hash of their id, give their queries to a ``train`` split instead of dev and
        test, so that no test query comes from an article trained on.

        :param train_articles: The share of the articles whose queries move to ``train``.
        """
        from dapr.datasets import read_dataset, write_dataset

        if options:
            raise DataError(
                f"dataset {NAME!r} takes only train_articles, not: {', '.join(options)}"
            )
        if isinstance(train_articles, bool) or not isinstance(train_articles, (int, float)):
            raise DataError(f"dataset {NAME!r}: train_articles must be a number in [0, 1)")
        if not 0 <= train_articles < 1:
            raise DataError(
                f"dataset {NAME!r}: train_articles must be in [0, 1), got {train_articles}"
            )
        if not self.cached():
            write_dataset(build(), self.prepared)
        dataset = read_dataset(self.prepared, name=NAME)
        return with_train_split(dataset, train_articles) if train_articles else dataset

    def build(self, source: Path) -> Dataset:
        """``source``: a MediaWiki export (``.xml.bz2``), or a directory holding gensim's one."""
        source = Path(source)
        return build(source if source.is_file() else source / Path(SOURCE).name)


adapter = WikiSample()
