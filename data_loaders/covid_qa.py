"""``COVID-QA``: scientific articles as documents, expert questions judged by answer offsets.

Source: COVID-QA (Möller et al., 2020), https://github.com/deepset-ai/COVID-QA, file
``data/question-answering/200423_covidQA.json`` (saved as ``covid-qa.json``), licence
Apache-2.0: 98 CORD-19 articles of about 3,500 words, 1,380 questions written by biomedical
experts. ``dapr data build COVID-QA --download`` fetches it (:data:`URL`, checked against
:data:`SHA256`); ``--source FILE`` builds from a copy. It is SQuAD-format JSON
(``{"data": [{"paragraphs": [{"context", "document_id", "qas": [{"id", "question", "answers":
[{"text", "answer_start"}]}]}]}]}``) whose every ``context`` is a whole document; any such file
can be read with this adapter.

Construction:

* document: a ``context``. Its id is its ``document_id`` (else ``{article}.{paragraph}``, the
  0-based positions in the file); its title the context's first non-blank line;
* passages: the rest of the context split at blank lines into paragraphs; a paragraph of more
  than ``max_words`` words (default :data:`MAX_WORDS`) is cut into windows at sentence ends (a
  sentence longer than that at word boundaries). Passage texts have their whitespace collapsed
  (the PDF line breaks go); ids ``{doc_id}-{position}``;
* query: a question (its ``id``, its text stripped); relevant (grade 1): every passage that its
  answers' characters overlap (``answer_start`` to the end of the stripped text), so an answer
  across a paragraph break judges both. An answer's text is found at ``answer_start``, or one
  leading space later (the source's offsets skip a leading space of 196 answers); failing that,
  at its occurrence nearest ``answer_start`` (38 answers of one article, counted in the notes).
  Unanswerable (``is_impossible``) questions, questions without text or answers, and answers
  that lie in the title line are skipped and counted;
* splits: every question in ``test``; ``train_articles`` and ``dev_articles`` (shares of the
  articles, by a SHA-256 of the document id) move all questions of that many articles into
  ``train`` and ``dev``, so no question of a test article is trained on. They are load options
  too: a built copy is split again when loaded with them.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dapr.data_loaders.squad import read_json

from dapr.data import Corpus, Dataset, Document, Passage, Split
from dapr.datasets.adapter import LocalAdapter, RawFile
from dapr.errors import DataError
from dapr.io.rows import check_type, optional_field, required_field, show

NAME = "COVID-QA"
FILE = "covid-qa.json"
URL = (
    "https://raw.githubusercontent.com/deepset-ai/COVID-QA/"
    "fb2eb5e249618457e5359806601086c635c8eb8f/data/question-answering/200423_covidQA.json"
)
"""The published file at a fixed commit: the release of 2020-04-23 that dapr's recipes and
numbers use (the repository also holds ``COVID-QA.json``, a later and larger release)."""
SHA256 = "ab310b4e39f726e087c8fa3d1787c73771dacddc584977204ebe3cc889ee1264"
"""Of the file at :data:`URL`, computed on a copy whose length (2,697,757 bytes) and opening
and closing text match the published file's; not checked here against a fresh download, so a
mismatch is refused in one line that names both hashes."""
MAX_WORDS = 350
"""Longer paragraphs are cut into windows at sentence ends: 3,108 passages for COVID-QA (2,994
paragraphs, 98 of them cut), their median under 100 words."""
_NEEDS = (
    "SQuAD JSON holds data: [{paragraphs: [{context, qas: [{id, question, answers: "
    "[{text, answer_start}]}]}]}], each context a whole document with its title on the first line"
)
_PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n\s*")
_SENTENCE_END = re.compile(r"[.!?][\"'”’)\]]*\s+")
_WORD = re.compile(r"\S+")


# --- a context -> title and passage spans --------------------------------------------------


def title_and_body(context: str) -> tuple[str, int]:
    """The first non-blank line (whitespace collapsed) and the offset where the body starts."""
    found = re.match(r"\s*(\S[^\n]*)", context)
    if found is None:
        return "", len(context)
    return " ".join(found.group(1).split()), found.end()


def paragraph_spans(context: str, start: int) -> list[tuple[int, int]]:
    """``(start, end)`` of every paragraph of ``context[start:]`` (blocks between blank lines),
    trimmed of surrounding whitespace; blank blocks are left out."""
    spans, at = [], start
    for gap in [*_PARAGRAPH_BREAK.finditer(context, start), None]:
        end = gap.start() if gap else len(context)
        text = context[at:end]
        if text.strip():
            lead = len(text) - len(text.lstrip())
            spans.append((at + lead, at + len(text.rstrip())))
        at = gap.end() if gap else end
    return spans


def windows(context: str, span: tuple[int, int], max_words: int) -> list[tuple[int, int]]:
    """``span`` cut into windows of at most ``max_words`` words, at sentence ends where one
    sentence fits, else (a sentence too long on its own) at word boundaries."""
    start, end = span
    if len(context[start:end].split()) <= max_words:
        return [span]
    cuts = [m.end() for m in _SENTENCE_END.finditer(context, start, end)]
    sentences = [(s, e) for s, e in zip([start, *cuts], [*cuts, end]) if s < e]
    out: list[tuple[int, int]] = []
    current: list[tuple[int, int]] = []  # word spans of the window being filled
    for s, e in sentences:
        words = [m.span() for m in _WORD.finditer(context, s, e)]
        if current and len(current) + len(words) > max_words:
            out.append((current[0][0], current[-1][1]))
            current = []
        current += words
        while len(current) > max_words:
            out.append((current[0][0], current[max_words - 1][1]))
            current = current[max_words:]
    if current:
        out.append((current[0][0], current[-1][1]))
    return out


def answer_span(context: str, answer: object, at: str) -> tuple[int, int, bool]:
    """The characters an answer covers, and whether its offset had to be corrected: its stripped
    text at ``answer_start``, one leading space later, else at its nearest occurrence."""
    check_type(answer, dict, at, "answer", _NEEDS)
    text = required_field(answer, "text", str, at, _NEEDS)
    start = required_field(answer, "answer_start", int, at, _NEEDS)
    stripped = text.strip()
    if not stripped:
        raise DataError(f"{at}: field 'text' is empty; give the answer's text as in the context")
    if not 0 <= start < len(context):
        raise DataError(
            f"{at}: answer_start {start} is outside the context (0 to {len(context) - 1}); "
            "give the answer's character offset in its context"
        )
    lead = len(text) - len(text.lstrip())
    for offset in (start + lead, start):
        if context.startswith(stripped, offset):
            return offset, offset + len(stripped), False
    found = [m.start() for m in re.finditer(re.escape(stripped), context)]
    if not found:
        raise DataError(
            f"{at}: answer text {show(stripped)} is not in the context; give the text as the "
            "context writes it"
        )
    nearest = min(found, key=lambda offset: abs(offset - start))
    return nearest, nearest + len(stripped), True


# --- the file -> the dataset ---------------------------------------------------------------


@dataclass
class Reader:
    """Reads contexts one by one into documents and judged questions (all in ``test``)."""

    max_words: int
    queries: dict[str, str] = field(default_factory=dict)
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)
    doc_at: dict[str, str] = field(default_factory=dict)
    query_at: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("windowed", "corrected", "crossing", "impossible", "unanswered", "in_title"), 0
        )
    )

    def article(self, article: object, index: int, at: str) -> list[Document]:
        """The documents of one article (one per paragraph, that is, per context)."""
        check_type(article, dict, at, "article", _NEEDS)
        paragraphs = required_field(article, "paragraphs", list, at, _NEEDS)
        return [
            self.document(p, f"{at}.paragraphs[{i}]", f"{index}.{i}")
            for i, p in enumerate(paragraphs)
        ]

    def document(self, paragraph: object, at: str, fallback_id: str) -> Document:
        """One context as a document; its questions judge the passages their answers overlap."""
        check_type(paragraph, dict, at, "paragraph", _NEEDS)
        context = required_field(paragraph, "context", str, at, _NEEDS)
        doc_id = _id(paragraph, "document_id", at) or fallback_id
        if self.doc_at.setdefault(doc_id, at) != at:
            raise DataError(
                f"{at}: document id {doc_id!r} repeats {self.doc_at[doc_id]}; "
                "give every context a unique document_id"
            )
        title, body = title_and_body(context)
        if not title:
            raise DataError(f"{at}: field 'context' is blank; give the document's text")
        spans = []
        for paragraph_span in paragraph_spans(context, body):
            cut = windows(context, paragraph_span, self.max_words)
            self.counts["windowed"] += len(cut) > 1
            spans += cut
        passages = tuple(
            Passage(f"{doc_id}-{i}", doc_id, i, " ".join(context[s:e].split()))
            for i, (s, e) in enumerate(spans)
        )
        for q, qa in enumerate(required_field(paragraph, "qas", list, at, _NEEDS)):
            self.question(qa, f"{at}.qas[{q}]", context, spans, passages)
        return Document(doc_id, title, passages)

    def question(
        self,
        qa: object,
        at: str,
        context: str,
        spans: list[tuple[int, int]],
        passages: tuple[Passage, ...],
    ) -> None:
        """Judge the passages that ``qa``'s answers overlap, unless it is unanswerable."""
        check_type(qa, dict, at, "question", _NEEDS)
        qid = _id(qa, "id", at, required=True)
        text = required_field(qa, "question", str, at, _NEEDS).strip()
        if self.query_at.setdefault(qid, at) != at:
            raise DataError(
                f"{at}: field 'id' {qid!r} repeats {self.query_at[qid]}; "
                "give every question a unique id"
            )
        if optional_field(qa, "is_impossible", bool, at, _NEEDS, False):
            self.counts["impossible"] += 1
            return
        judged: dict[str, int] = {}
        for a, answer in enumerate(required_field(qa, "answers", list, at, _NEEDS)):
            start, end, corrected = answer_span(context, answer, f"{at}.answers[{a}]")
            self.counts["corrected"] += corrected
            hit = [p.id for p, (s, e) in zip(passages, spans) if s < end and start < e]
            self.counts["crossing"] += len(hit) > 1
            self.counts["in_title"] += not hit
            judged |= dict.fromkeys(hit, 1)
        if not text or not judged:
            self.counts["unanswered"] += 1
            return
        self.queries[qid] = text
        self.qrels[qid] = judged


def _id(row: dict[str, Any], key: str, at: str, required: bool = False) -> str | None:
    """An id given as a string or an integer (COVID-QA's are integers), as a string."""
    value = row.get(key)
    if value is None and not required:
        return None
    if value is None:
        raise DataError(f"{at}: missing field {key!r}; {_NEEDS}")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DataError(f"{at}: field {key!r} must be a string or an integer, got {show(value)}")
    text = str(value)
    if not text or len(text.split()) != 1 or text != text.strip():
        raise DataError(f"{at}: field {key!r} {text!r} is empty or has spaces; give a plain id")
    return text


def _notes(counts: dict[str, int], max_words: int) -> tuple[str, ...]:
    notes = [
        "documents are whole articles (title: the first line), passages their paragraphs "
        f"(blank-line blocks; {counts['windowed']} over {max_words} words cut at sentence ends); "
        "each question judges the passages its answer overlaps (grade 1)"
    ]
    described = {
        "crossing": "answers cross a passage boundary and judge every passage they touch",
        "corrected": "answer offsets corrected to the nearest occurrence of the answer text",
        "impossible": "unanswerable (is_impossible) questions skipped",
        "unanswered": "questions without text or a judged passage skipped",
        "in_title": "answers lie in the title line, outside every passage",
    }
    notes += [f"{counts[key]} {text}" for key, text in described.items() if counts[key]]
    return tuple(notes)


def article_share(doc_id: str) -> float:
    """Where a document falls in [0, 1), by a SHA-256 of its id: stable across machines."""
    return int.from_bytes(hashlib.sha256(doc_id.encode()).digest()[:8], "big") / 2**64


def split_by_article(dataset: Dataset, train_articles: float, dev_articles: float) -> Dataset:
    """Every question of ``dataset`` (whatever its split) in ``train`` when its document falls in
    the first ``train_articles`` share, ``dev`` in the next ``dev_articles``, else ``test``."""
    doc_of = {p.id: p.doc_id for p in dataset.corpus.passages()}
    names = [n for n, share in (("train", train_articles), ("dev", dev_articles)) if share > 0]
    splits = {name: Split({}, {}) for name in [*names, "test"]}
    for split in dataset.splits.values():
        for qid, text in split.queries.items():
            judged = split.qrels.get(qid, {})
            share = article_share(doc_of[next(iter(judged))]) if judged else 1.0
            name = "train" if share < train_articles else "test"
            if name == "test" and share < train_articles + dev_articles:
                name = "dev"
            splits[name].queries[qid] = text
            splits[name].qrels[qid] = split.qrels[qid]
    return replace(dataset, splits=splits)


class CovidQA(LocalAdapter):
    name = NAME
    origin = (
        "COVID-QA: 98 CORD-19 articles, 1,380 expert questions (SQuAD format), "
        "https://github.com/deepset-ai/COVID-QA (Apache-2.0)"
    )
    raw_files = (RawFile(FILE, URL, SHA256),)
    path_help = f"{FILE} or the folder holding it"

    def require(self, source: Path, download: bool = False) -> None:
        """A source may be the JSON file itself or the folder holding ``covid-qa.json``."""
        if not Path(source).is_file():
            super().require(source, download)

    def build(
        self,
        source: Path,
        *,
        max_words: int = MAX_WORDS,
        train_articles: float = 0.0,
        dev_articles: float = 0.0,
    ) -> Dataset:
        """The dataset of ``source`` (the file, or a folder with ``covid-qa.json``).

        :param max_words: Words a passage may hold; a longer paragraph is cut at sentence ends.
        :param train_articles: The share of the articles whose questions move to ``train``.
        :param dev_articles: The share of the articles whose questions move to ``dev``.
        """
        if max_words < 1:
            raise self.option_error("max_words", "a positive integer", max_words)
        self._check_shares(train_articles, dev_articles)
        path = Path(source)
        path = path if path.is_file() else path / FILE
        articles = required_field(read_json(path, _NEEDS), "data", list, str(path), _NEEDS)
        reader = Reader(max_words)
        documents = [
            document
            for a, article in enumerate(articles)
            for document in reader.article(article, a, f"{path}: data[{a}]")
        ]
        dataset = Dataset(
            NAME,
            Corpus(documents),
            {"test": Split(reader.queries, reader.qrels)},
            notes=_notes(reader.counts, max_words),
        )
        return split_by_article(dataset, train_articles, dev_articles)

    def load(self, path: str | Path | None = None, **options: Any) -> Dataset:
        """Built from ``path``, else the built copy; split by article as the options say."""
        from dapr.datasets import read_dataset

        options = self.check_options(options)
        train = options.pop("train_articles", 0.0)
        dev = options.pop("dev_articles", 0.0)
        self._check_shares(train, dev)
        if path is None and not options and self.cached():
            dataset = read_dataset(self.prepared, NAME)
        else:
            dataset = super().load(path, **options)
        return split_by_article(dataset, train, dev)

    def _check_shares(self, train: float, dev: float) -> None:
        for key, share in (("train_articles", train), ("dev_articles", dev)):
            if not 0 <= share < 1:
                raise self.option_error(key, "a share in [0, 1)", share)
        if train + dev >= 1:
            raise DataError(
                f"dataset {NAME!r}: train_articles + dev_articles is {train + dev:g}; keep it "
                "below 1 so that some articles are left for test"
            )


adapter = CovidQA()
