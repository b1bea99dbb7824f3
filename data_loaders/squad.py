"""A SQuAD-format JSON file, brought by the user (https://rajpurkar.github.io/SQuAD-explorer/).

Input: ``{"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question",
"answers"}]}]}]}``, the format of SQuAD 1.1 and 2.0, XQuAD, MLQA and many others.

Construction:

* document: an article. Its id is the article's title with every whitespace run turned into
  ``_`` (SQuAD titles such as ``Super_Bowl_50`` stay as they are); two articles giving the same
  id are an error. Its title is the article's title with ``_`` read as a space (SQuAD titles
  are Wikipedia page names: ``Super Bowl 50``), so that retrievers see its words;
* passage: a paragraph's ``context``, ids ``{doc_id}-{position}`` in article order; paragraphs
  without questions stay as passages;
* query: a question (its ``id``, its text stripped); relevant (grade 1): the paragraph holding it.
  SQuAD 2.0 questions marked ``is_impossible`` have no answer in their paragraph and are
  skipped, as are questions with an empty text and articles without paragraphs; the notes count
  them;
* splits: every question in ``test``. Option ``dev_share`` (0 to 1, default 0) moves the
  questions whose SHA-256 of the id falls below that share of the hash range into ``dev``:
  stable across runs and machines, and a question's split never depends on the others. Option
  ``language`` (ISO 639-1 code, default ``en``) for non-English files such as XQuAD's.

Licence: that of the data the user brings (SQuAD and XQuAD: CC BY-SA 4.0).

``XQuAD`` is the same construction registered by name for XQuAD's English file
(https://github.com/google-deepmind/xquad, ``xquad.en.json``: 48 articles, 240 paragraphs,
1,190 questions): ``dapr data build XQuAD --download`` fetches it (:data:`XQUAD_URL`, checked
against :data:`XQUAD_SHA256`), ``--source FILE`` builds from a copy.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dapr.data_loaders.beir import id_of

from dapr.data import Corpus, Dataset, Document, Passage, Split
from dapr.datasets.adapter import LocalAdapter, RawFile
from dapr.errors import DataError
from dapr.io.rows import check_type, json_problem, optional_field, required_field

NAME = "squad"
XQUAD_FILE = "xquad.en.json"
XQUAD_URL = (
    "https://raw.githubusercontent.com/google-deepmind/xquad/"
    "7d30520c717524000f0d9d2f9c10a069acd9d285/xquad.en.json"
)
XQUAD_SHA256 = "e4c57d1c9143aaa1c5d265ba5987a65f4e69528d2a98f29d6e75019b10344f29"
"""Of the file at :data:`XQUAD_URL`, computed on a copy recorded as that commit's file; not
checked here against a fresh download, so a mismatch is refused in one line naming both."""
_NEEDS = "SQuAD JSON holds data: [{title, paragraphs: [{context, qas: [{id, question, answers}]}]}]"


def split_of(query_id: str, dev_share: float) -> str:
    """``dev`` or ``test``: ``dev`` when the id's SHA-256 falls in the first ``dev_share``."""
    digest = hashlib.sha256(query_id.encode()).digest()
    return "dev" if int.from_bytes(digest[:8], "big") < dev_share * 2**64 else "test"


def read_json(path: Path, needs: str = _NEEDS) -> dict[str, Any]:
    """The parsed file, or a one-line :class:`DataError` saying why not (and ``needs``)."""
    if path.is_dir():
        raise DataError(f"{path}: is a directory; give the SQuAD-format JSON file itself")
    try:
        with path.open(encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file; check the path") from None
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text; save the file as UTF-8") from None
    except json.JSONDecodeError as e:
        raise DataError(
            f"{path}:{e.lineno}: invalid JSON ({json_problem(e, line=False)}); {needs}"
        ) from None
    except RecursionError as e:
        raise DataError(f"{path}: invalid JSON ({json_problem(e)}); {needs}") from None
    return check_type(data, dict, str(path), "top level", needs)


@dataclass
class Reader:
    """Reads articles one by one, collecting the splits and checking ids across the file."""

    dev_share: float
    splits: dict[str, Split] = field(init=False)
    doc_at: dict[str, str] = field(default_factory=dict)
    query_at: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, int] = field(
        default_factory=lambda: {"impossible": 0, "empty": 0, "articles": 0}
    )

    def __post_init__(self) -> None:
        names = ("dev", "test") if self.dev_share > 0 else ("test",)
        self.splits = {name: Split({}, {}) for name in names}

    def article(self, article: object, at: str) -> Document | None:
        """The article's document (None without paragraphs); its questions go to the splits."""
        check_type(article, dict, at, "article", _NEEDS)
        title = required_field(article, "title", str, at, _NEEDS)
        doc_id = id_of(title)
        if not doc_id:
            raise DataError(f"{at}: field 'title' is empty; give every article a title")
        if self.doc_at.setdefault(doc_id, at) != at:
            raise DataError(
                f"{at}: title {title!r} gives doc id {doc_id!r}, as {self.doc_at[doc_id]} does; "
                "merge the two articles or give them distinct titles"
            )
        paragraphs = required_field(article, "paragraphs", list, at, _NEEDS)
        if not paragraphs:
            self.skipped["articles"] += 1
            return None
        passages = []
        for p, paragraph in enumerate(paragraphs):
            where = f"{at}.paragraphs[{p}]"
            check_type(paragraph, dict, where, "paragraph", _NEEDS)
            text = required_field(paragraph, "context", str, where, _NEEDS)
            passages.append(Passage(f"{doc_id}-{p}", doc_id, p, text))
            for q, qa in enumerate(required_field(paragraph, "qas", list, where, _NEEDS)):
                self.question(qa, f"{where}.qas[{q}]", passages[-1].id)
        return Document(doc_id, " ".join(title.replace("_", " ").split()), tuple(passages))

    def question(self, qa: object, at: str, passage_id: str) -> None:
        """Add a question judging ``passage_id``, unless it is unanswerable or empty."""
        check_type(qa, dict, at, "question", _NEEDS)
        qid = required_field(qa, "id", str, at, _NEEDS)
        text = required_field(qa, "question", str, at, _NEEDS).strip()
        if not qid.strip():
            raise DataError(f"{at}: field 'id' is empty; give every question an id")
        if self.query_at.setdefault(qid, at) != at:
            raise DataError(
                f"{at}: field 'id' {qid!r} repeats {self.query_at[qid]}; "
                "give every question a unique id"
            )
        if optional_field(qa, "is_impossible", bool, at, _NEEDS, False):
            self.skipped["impossible"] += 1
        elif not text:
            self.skipped["empty"] += 1
        else:
            split = self.splits[split_of(qid, self.dev_share)]
            split.queries[qid] = text
            split.qrels[qid] = {passage_id: 1}


def _notes(skipped: dict[str, int]) -> tuple[str, ...]:
    notes = [
        "documents are the articles, passages their paragraphs; each question judges the "
        "paragraph holding it (grade 1)"
    ]
    if skipped["impossible"]:
        notes.append(f"{skipped['impossible']} unanswerable (is_impossible) questions skipped")
    if skipped["empty"]:
        notes.append(f"{skipped['empty']} questions with an empty text skipped")
    if skipped["articles"]:
        notes.append(f"{skipped['articles']} articles without paragraphs skipped")
    return tuple(notes)


class Squad(LocalAdapter):
    name = NAME
    origin = (
        "your own SQuAD-format JSON file (articles -> paragraphs -> questions, as "
        "https://rajpurkar.github.io/SQuAD-explorer/ publishes): give its path"
    )
    path_help = "a SQuAD-format JSON file"

    def build(self, source: Path, *, dev_share: float = 0.0, language: str = "en") -> Dataset:
        """The dataset of the SQuAD-format file ``source`` (see the module docstring).

        :param dev_share: The share of the questions (by a hash of the id) moved to ``dev``.
        :param language: The text's ISO 639-1 code (``en``, ``zh``...).
        """
        if not 0 <= dev_share <= 1:
            raise self.option_error("dev_share", "a number from 0 to 1", dev_share)
        language = self.language_code(language)
        path = Path(source)
        articles = required_field(read_json(path), "data", list, str(path), _NEEDS)
        reader = Reader(float(dev_share))
        documents = [reader.article(art, f"{path}: data[{a}]") for a, art in enumerate(articles)]
        return Dataset(
            self.name,
            Corpus([d for d in documents if d is not None]),
            reader.splits,
            notes=_notes(reader.skipped),
            language=language,
        )


adapter = Squad()


class XQuAD(Squad):
    """XQuAD's English file by name: fetched with ``--download``, or a copy as ``--source``."""

    name = "XQuAD"
    origin = (
        "XQuAD English: 48 Wikipedia articles, 1,190 questions (SQuAD format), "
        "https://github.com/google-deepmind/xquad (CC BY-SA 4.0)"
    )
    raw_files = (RawFile(XQUAD_FILE, XQUAD_URL, XQUAD_SHA256),)
    path_help = f"{XQUAD_FILE} or the folder holding it"

    def require(self, source: Path, download: bool = False) -> None:
        """A source may be the JSON file itself or the folder holding ``xquad.en.json``."""
        if not Path(source).is_file():
            super().require(source, download)

    def build(self, source: Path, *, dev_share: float = 0.0, language: str = "en") -> Dataset:
        """The dataset of ``source`` (the file, or a folder with ``xquad.en.json``)."""
        path = Path(source)
        return super().build(
            path if path.is_file() else path / XQUAD_FILE, dev_share=dev_share, language=language
        )


xquad = XQuAD()
