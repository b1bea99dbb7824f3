"""TREC Genomics 2006 + 2007 in the DAPR form: Highwire full-text articles cut at their legal spans.

Source: the TREC Genomics track data (https://dmice.ohsu.edu/trec-gen/), for research use only
(the Highwire documents sit on the track's protected pages; ask the organisers for access):

- corpus: 59 journal archives ``{journal}.zip`` of ``{PMID}.html`` files and ``legalspans.txt``
  (``PMID offset length`` per line, the documents in archive order), from
  https://dmice.ohsu.edu/trec-gen/data/2006/documents/;
- topics: ``2006topics.txt`` and ``2007topics.txt`` (``<ID>question`` per line);
- judgements: ``trec2006.raw.relevance.tsv.txt`` (``topic PMID offset length ... grade``, grades
  ``NOT``/``POSSIBLY``/``DEFINITELY``) and ``trecgen2007.gold.standard.tsv.txt`` (``topic PMID
  offset length aspects``, every row relevant). The 2007 ``trecgen2007.all.judgments.tsv.txt``
  (grades ``NOT_RELEVANT``/``RELEVANT``) may stand in for the gold standard under its name.

Construction (as the DAPR reference builder, which read the collection through ir_datasets):

- Document: one article (id: its PMID). Passage: the text of one legal span, i.e. the bytes
  ``html[offset:offset + length]`` read as Latin-1, tags removed, HTML entities decoded, then
  stripped and every run of line breaks turned into one ``"\\r\\n"`` (and one appended). The first
  legal span holds the title and authors: it is not a passage, and the document title is the text
  of the first ``<h2>`` in it. Passage ids keep the span's index, ``"{PMID}-{i}"`` with i = 1, 2,
  ... (as the DAPR dump does), at positions 0, 1, ... Articles with no span but the
  title span are left out.
- Query: a topic; 2006 topics are numbered 160-187 and 2007 ones 200-235, so the ids are kept.
  ``[GENES]``-style placeholders become lower-case words ("genes").
- Relevance (3 levels): 2006 DEFINITELY -> 2, POSSIBLY -> 1; 2007 relevant -> 1; grade-0 rows
  are dropped. A judged passage (PMID, offset, length) is matched to the legal spans it overlaps
  (``match=overlap``, the default: gold-standard passages are sub-spans of legal spans and may
  cross several) or only to a legal span with the very same offset and length (``match=exact``,
  the reference builder's rule, which suits files judged on legal spans). A pair judged more than
  once keeps its highest grade. Judgements of the title span, of spans that match no legal span
  or of PMIDs absent from ``legalspans.txt`` are dropped (a note counts them); queries left
  without a judgement are dropped.
- Splits: ``test`` only.

Tags are removed with regular expressions rather than lxml (about 10 times faster than
Python's HTML parser, and the same text on the cases tested); script and style content stays
text, as with lxml's ``text_content()``. The archives are streamed one HTML file at a time; a
build reads ``legalspans.txt`` once for the judged PMIDs' spans.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from html import unescape
from pathlib import Path, PurePosixPath
from typing import Literal

from dapr.data import Corpus, Dataset, Document, Passage, Qrels, Queries, Split
from dapr.datasets.adapter import Adapter, RawFile
from dapr.errors import DataError
from dapr.io.rows import judge, text_lines

NAME = "Genomics"
JOURNALS = (
    "ajepidem", "ajpcell", "ajpendometa", "ajpgastro", "ajpheart", "ajplung", "ajprenal",
    "alcohol", "andrology", "annonc", "bjanast", "bjp", "blood", "carcinogenesis", "cercor",
    "development", "diabetes", "endocrinology", "euroheartj", "glycobiology", "humanrep",
    "humolgen", "ijepidem", "intimm", "jantichemo", "jappliedphysio", "jbc-1995", "jbc-1996",
    "jbc-1997", "jbc-1998", "jbc-1999", "jbc-2000", "jbc-2001", "jbc-2002", "jbc-2003",
    "jbc-2004", "jbc-2005", "jcb", "jclinicalendometa", "jcs", "jexpbio", "jexpmed", "jgenphysio",
    "jgenviro", "jhistocyto", "jnci", "jneuro", "mcp", "microbio", "molbiolevol", "molendo",
    "molhumanrep", "nar", "nephrodiatransp", "peds", "physiogenomics", "rheumatolgy", "rna",
    "toxsci",
)  # fmt: skip
"""The journal archives in collection order (the order of ``legalspans.txt``)."""
DOCUMENTS_URL = "https://dmice.ohsu.edu/trec-gen/data/2006/documents/{}"
LEGALSPANS = "legalspans.txt"
YEARS = ("2006", "2007")
TOPICS = {"2006": "2006topics.txt", "2007": "2007topics.txt"}
JUDGEMENTS = {"2006": "trec2006.raw.relevance.tsv.txt", "2007": "trecgen2007.gold.standard.tsv.txt"}
URLS = {
    TOPICS["2006"]: "https://dmice.ohsu.edu/trec-gen/data/2006/topics/2006topics.txt",
    TOPICS["2007"]: "https://dmice.ohsu.edu/trec-gen/data/2007/2007topics.txt",
    JUDGEMENTS["2006"]: "https://dmice.ohsu.edu/trec-gen/data/2006/trec2006.raw.relevance.tsv.txt",
    JUDGEMENTS["2007"]: (
        "https://dmice.ohsu.edu/trec-gen/data/2007/trecgen2007.gold.standard.tsv.txt"
    ),
}
GRADES = {"NOT": 0, "POSSIBLY": 1, "DEFINITELY": 2, "NOT_RELEVANT": 0, "RELEVANT": 1}
"""Grade words of the 2006 raw relevance and the 2007 all-judgements files."""
Match = Literal["overlap", "exact"]
"""How judged passages are matched to legal spans (option ``match``)."""

_TOPIC = re.compile(r"<(\d+)>(.*)")
_PLACEHOLDER = re.compile(r"\[([A-Z][A-Z ]*)\]")
_LINE_BREAKS = re.compile(r"[\r\n]+")
_TAG = r"""</?[A-Za-z](?:[^>"']|"[^"]*"|'[^']*')*>"""
_MARKUP = re.compile(rf"<!--.*?(?:-->|$)|{_TAG}|<![^>]*>|<\?[^>]*>", re.S)
"""Tags, comments, declarations and processing instructions."""
_RAW_TEXT = re.compile(r"<(script|style)\b[^>]*>(.*?)(?:</\1\s*>|$)", re.S | re.I)
"""Elements whose content is text, not markup."""
_H2 = re.compile(r"<h2\b[^>]*>(.*?)(?:</h2\s*>|$)", re.S | re.I)
_JUDGEMENT_NEEDS = (
    "write TOPIC PMID OFFSET LENGTH then the aspects (gold standard) or a grade word "
    f"({'/'.join(GRADES)})"
)


@dataclass(frozen=True)
class Judgement:
    """A judged passage of an article: ``html[start:start + length]`` has ``grade``."""

    query_id: str
    pmid: str
    start: int
    length: int
    grade: int


@dataclass(frozen=True)
class Span:
    start: int
    length: int
    line: int
    """Line of ``legalspans.txt`` that gives it."""


# --- topics and judgements -------------------------------------------------------------------


def read_topics(path: Path) -> Queries:
    """Topic id -> question, with ``[GENES]``-style placeholders in lower case."""
    queries: Queries = {}
    for n, line in text_lines(path, "cp1252"):
        found = _TOPIC.fullmatch(line.strip())
        if found is None or not found.group(2).strip():
            raise DataError(f"{path}:{n}: expected <ID>question; write one topic per line")
        qid, text = found.group(1), found.group(2).strip()
        if qid in queries:
            raise DataError(f"{path}:{n}: topic {qid} appears twice; keep one line per topic")
        queries[qid] = _PLACEHOLDER.sub(lambda m: m.group(1).lower(), text)
    return queries


def read_judgements(path: Path) -> list[Judgement]:
    """Every judged row; the file is graded when its first row ends with a grade word."""
    judgements: list[Judgement] = []
    graded: bool | None = None
    for n, line in text_lines(path, "latin-1"):
        if line.startswith("#"):
            continue
        at = f"{path}:{n}"
        fields = [f.strip() for f in line.split("\t")] if "\t" in line else line.split()
        if len(fields) < 4:
            raise DataError(f"{at}: expected at least 4 columns; {_JUDGEMENT_NEEDS}")
        if graded is None:
            graded = len(fields) >= 5 and fields[-1] in GRADES
        if graded:
            if len(fields) < 5 or fields[-1] not in GRADES:
                raise DataError(
                    f"{at}: the last column must be a grade word like the first row's; "
                    f"{_JUDGEMENT_NEEDS}"
                )
            grade = GRADES[fields[-1]]
        else:
            grade = 1  # the gold standard lists relevant passages only
        start, length = _offset(fields[2], at, "offset"), _offset(fields[3], at, "length")
        judgements.append(Judgement(fields[0], fields[1], start, length, grade))
    return judgements


def _offset(text: str, at: str, name: str) -> int:
    if not text.isdigit():
        raise DataError(f"{at}: {name} {text!r} is not a non-negative integer; {_JUDGEMENT_NEEDS}")
    return int(text)


# --- legal spans ---------------------------------------------------------------------------------


def legal_spans(path: Path) -> Iterator[tuple[str, list[Span]]]:
    """``(PMID, its spans)`` in file order; a document's lines must be consecutive."""
    pmid: str | None = None
    spans: list[Span] = []
    for n, line in text_lines(path, "latin-1"):
        fields = line.split()
        if len(fields) != 3 or not fields[1].isdigit() or not fields[2].isdigit():
            raise DataError(
                f"{path}:{n}: expected PMID OFFSET LENGTH (non-negative integers); "
                "download legalspans.txt again"
            )
        if fields[0] != pmid:
            if pmid is not None:
                yield pmid, spans
            pmid, spans = fields[0], []
        spans.append(Span(int(fields[1]), int(fields[2]), n))
    if pmid is not None:
        yield pmid, spans


def matching_spans(spans: list[Span], judged: Judgement, match: Match) -> list[int]:
    """Indexes of the legal spans a judged passage falls on."""
    end = judged.start + judged.length
    if match == "exact":
        return [
            i for i, s in enumerate(spans) if (s.start, s.length) == (judged.start, judged.length)
        ]
    return [i for i, s in enumerate(spans) if s.start < end and judged.start < s.start + s.length]


# --- HTML -> text --------------------------------------------------------------------------------


def text_content(fragment: bytes) -> tuple[str, str]:
    """``(text, text of the first <h2> or "")`` of an HTML fragment read as Latin-1.

    Tags and comments are removed and entities decoded; the content of ``<script>`` and
    ``<style>`` elements is kept verbatim, as an HTML parser reports it.
    """
    html = fragment.decode("latin-1")
    heading = _H2.search(html)
    title = _markup_text(heading.group(1)) if heading else ""
    parts = []
    position = 0
    for raw in _RAW_TEXT.finditer(html):
        parts += [_markup_text(html[position : raw.start()]), raw.group(2)]
        position = raw.end()
    parts.append(_markup_text(html[position:]))
    return "".join(parts), title


def _markup_text(html: str) -> str:
    return unescape(_MARKUP.sub("", html))


def passage_text(text: str) -> str:
    """Stripped, each run of line breaks one ``"\\r\\n"``, ending with ``"\\r\\n"``."""
    return _LINE_BREAKS.sub("\r\n", text.strip()) + "\r\n"


def article(pmid: str, html: bytes, spans: list[Span], at: str, legalspans: Path) -> Document:
    """The document of one HTML file: title from the first span, passages from the others."""
    for span in spans:
        if span.start + span.length > len(html):
            raise DataError(
                f"{legalspans}:{span.line}: span {span.start}+{span.length} ends after the "
                f"{len(html)} bytes of {at}; use the legalspans.txt of this collection"
            )
    _, title = text_content(html[spans[0].start : spans[0].start + spans[0].length])
    passages = tuple(
        Passage(
            f"{pmid}-{i}",
            pmid,
            i - 1,
            passage_text(text_content(html[span.start : span.start + span.length])[0]),
        )
        for i, span in enumerate(spans)
        if i > 0
    )
    return Document(pmid, title, passages)


def documents(source: Path) -> Iterator[Document]:
    """The articles of the journal archives, in collection order, one HTML file at a time."""
    spans_path = source / LEGALSPANS
    groups = legal_spans(spans_path)
    for journal in JOURNALS:
        yield from _archive_documents(source / f"{journal}.zip", groups, spans_path)
    rest = next(groups, None)
    if rest is not None:
        raise DataError(
            f"{spans_path}:{rest[1][0].line}: PMID {rest[0]} has no HTML file in the journal "
            "archives; download every archive"
        )


def _archive_documents(
    path: Path, groups: Iterator[tuple[str, list[Span]]], spans_path: Path
) -> Iterator[Document]:
    """The articles of one journal archive, each paired with the next spans of ``groups``."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise DataError(f"{path}: not a readable zip archive ({e}); download it again") from None
    with archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            pmid = PurePosixPath(info.filename).name.split(".")[0]
            group = next(groups, None)
            if group is None:
                raise DataError(
                    f"{spans_path}: ends before {info.filename} of {path}; "
                    "use the legalspans.txt of this collection"
                )
            if group[0] != pmid:
                raise DataError(
                    f"{spans_path}:{group[1][0].line}: spans of PMID {group[0]} where the next "
                    f"article is {info.filename} of {path}; legalspans.txt must list the "
                    "articles in archive order"
                )
            try:
                html = archive.read(info)
            except (zipfile.BadZipFile, OSError) as e:
                raise DataError(
                    f"{path}: cannot read {info.filename} ({e}); download it again"
                ) from None
            document = article(pmid, html, group[1], f"{path}:{info.filename}", spans_path)
            if document.passages:
                yield document


# --- the dataset ---------------------------------------------------------------------------------


@dataclass
class _Matching:
    qrels: Qrels
    unknown_pmid: int = 0
    no_span: int = 0
    """Judgements that fall on no legal span, or on the title span only."""


def match_judgements(legalspans: Path, judgements: list[Judgement], match: Match) -> _Matching:
    """Graded passages -> legal span ids, reading the spans of judged PMIDs only."""
    by_pmid: dict[str, list[Judgement]] = {}
    for judged in judgements:
        by_pmid.setdefault(judged.pmid, []).append(judged)
    found: dict[str, list[Span]] = {}
    for pmid, spans in legal_spans(legalspans):
        if pmid in by_pmid:
            found[pmid] = spans
    result = _Matching(qrels={})
    for judged in judgements:  # in file order, so qrels are too
        spans = found.get(judged.pmid)
        if spans is None:
            result.unknown_pmid += 1
            continue
        hits = [i for i in matching_spans(spans, judged, match) if i > 0]
        if not hits:
            result.no_span += 1
        for i in hits:
            judge(result.qrels, judged.query_id, f"{judged.pmid}-{i}", judged.grade)
    return result


class Genomics(Adapter):
    name = NAME
    origin = (
        "TREC Genomics 2006 + 2007 (Highwire full texts, research use only): "
        "https://dmice.ohsu.edu/trec-gen/"
    )
    raw_files = (
        *(
            RawFile(f"{journal}.zip", DOCUMENTS_URL.format(f"{journal}.zip"), None, "")
            for journal in JOURNALS
        ),
        RawFile(LEGALSPANS, DOCUMENTS_URL.format(LEGALSPANS), None, ""),
        *(RawFile(name, url, None, "") for name, url in URLS.items()),
    )
    hub_repo = "UKPLab/dapr"

    def build(self, source: Path, *, match: Match = "overlap") -> Dataset:
        """The dataset from the raw files in ``source`` (see the module docstring).

        :param match: How a judged passage finds its legal spans: every span it ``overlap``s, or
            only one with the very same offset and length (``exact``, the reference's rule).
        """
        self.require(source)
        source = Path(source)
        queries: Queries = {}
        judgements: list[Judgement] = []
        for year in YEARS:
            topics_path = source / TOPICS[year]
            topics = read_topics(topics_path)
            for qid in topics:
                if qid in queries:
                    raise DataError(
                        f"{topics_path}: topic {qid} is also a topic of an earlier year; "
                        "TREC Genomics topic ids are unique across 2006 and 2007"
                    )
            queries.update(topics)
            judged_path = source / JUDGEMENTS[year]
            for judged in read_judgements(judged_path):
                if judged.grade <= 0:
                    continue
                if judged.query_id not in topics:
                    raise DataError(
                        f"{judged_path}: topic {judged.query_id} is judged but not in "
                        f"{topics_path}; use the topics and judgements of the same year"
                    )
                judgements.append(judged)
        matched = match_judgements(source / LEGALSPANS, judgements, match)
        test = Split(
            {qid: text for qid, text in queries.items() if qid in matched.qrels},
            {qid: matched.qrels[qid] for qid in queries if qid in matched.qrels},
        )
        notes: tuple[str, ...] = ()
        if matched.unknown_pmid or matched.no_span:
            notes = (
                f"of {len(judgements)} relevant judgements, {matched.unknown_pmid} name PMIDs "
                f"missing from {LEGALSPANS} and {matched.no_span} match only the title span or no "
                f"legal span ({match} matching); they were dropped, and with them "
                f"{len(queries) - len(test.queries)} of {len(queries)} topics",
            )
        corpus = Corpus(partial(documents, source))
        return Dataset(NAME, corpus, {"test": test}, relevance_level=1, notes=notes)


adapter = Genomics()
