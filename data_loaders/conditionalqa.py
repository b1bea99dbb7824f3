"""``ConditionalQA``: GOV.UK pages as documents, their HTML elements as passages (DAPR, Appendix A).

Source: the ConditionalQA v1.0 release, https://github.com/haitian-sun/ConditionalQA (folder
``v1_0``: ``documents.json``, ``train.json``, ``dev.json``), licence BSD-2-Clause. The DAPR
benchmark publishes a prebuilt copy on the hub (``UKPLab/dapr``, configs ``ConditionalQA-*``).

Construction, as the DAPR reference builder (``dapr/datasets/conditionalqa.py``) does it:

* **Document**: one per page of ``documents.json`` (a JSON array of ``{url, title, contents}``);
  its id is the page's 0-based position in that array (``"0"``, ``"1"``, ...), its title the
  page title. Pages without any element are skipped (their position stays unused).
* **Passage**: one per element of ``contents`` (an HTML element string such as ``<p>...</p>``),
  in order, id ``f"{doc_id}-{position}"``, every element kept (even an empty one) so positions
  match the published data. The HTML tags are removed (every ``<...>`` within a line, then the
  text stripped); ``--set tagged=true`` keeps the elements verbatim (the reference's
  "tagged" variant).
* **Query**: one per question that has evidence; id the question id (``train-0``, ``dev-3``...),
  text ``scenario + " " + question``. Questions without evidence are left out.
* **Relevance** (grade 1): the elements quoted as ``evidences``, each matched verbatim to the
  first element of the question's page (found by ``url``) with exactly that text.
* **Splits**: the original dev set is ``test``. The original train set is split into ``dev``,
  as many queries as ``test`` has, and ``train``, the rest: ``random.Random(42).sample`` of the
  train queries' indices (in file order) picks ``dev``, in the order drawn; the rest keep file
  order. This is the reference's rule, so the splits equal the paper's.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dapr.data import Corpus, Dataset, Document, Passage, Qrels, Queries, Split
from dapr.datasets.adapter import Adapter, RawFile
from dapr.errors import DataError
from dapr.io.rows import check_type, json_problem, required_field, show

NAME = "ConditionalQA"
BASE_URL = "https://raw.githubusercontent.com/haitian-sun/ConditionalQA/master/v1_0"
DOCUMENTS, TRAIN, DEV = "documents.json", "train.json", "dev.json"
SEED = 42
"""Seed of the reference's train -> dev/train split."""

HTML_TAG = re.compile(r"<.*?>")
"""An HTML tag (never across a line break), removed from every element unless ``tagged``."""
_PAGE_NEEDS = "every page of documents.json needs url, title and contents (a list of strings)"
_QUESTION_NEEDS = "every question needs id, url, scenario, question and evidences (strings)"


class ConditionalQAAdapter(Adapter):
    name = NAME
    origin = f"ConditionalQA v1.0 (GOV.UK pages, HTML elements as passages), {BASE_URL}"
    raw_files = tuple(RawFile(f, f"{BASE_URL}/{f}") for f in (DOCUMENTS, TRAIN, DEV))
    hub_repo = "UKPLab/dapr"

    def build(self, source: Path, *, tagged: bool = False) -> Dataset:
        """The dataset from ``documents.json``, ``train.json`` and ``dev.json`` in ``source``;
        ``tagged`` keeps the HTML elements verbatim.

        :param tagged: Keep the HTML elements verbatim (the reference's "tagged" variant).
        """
        source = Path(source)
        self.require(source)
        pages = read_pages(source / DOCUMENTS)
        by_url = {page.url: page for page in pages}  # a repeated url: the last page wins
        train_queries, train_qrels = read_questions(source / TRAIN, by_url)
        test_queries, test_qrels = read_questions(source / DEV, by_url)
        dev_ids, train_ids = split_by_number(list(train_queries), len(test_queries))
        documents = [page.document(tagged) for page in pages if page.contents]
        return Dataset(
            NAME,
            Corpus(documents),
            {
                "train": _subset(train_ids, train_queries, train_qrels),
                "dev": _subset(dev_ids, train_queries, train_qrels),
                "test": Split(test_queries, test_qrels),
            },
        )


# --------------------------------------------------------------------------- documents


@dataclass(frozen=True, slots=True)
class Page:
    """One page of ``documents.json``: its id (position), url, title and HTML elements."""

    id: str
    url: str
    title: str
    contents: list[str]

    def document(self, tagged: bool) -> Document:
        passages = tuple(
            Passage(f"{self.id}-{i}", self.id, i, element if tagged else strip_tags(element))
            for i, element in enumerate(self.contents)
        )
        return Document(self.id, self.title, passages)


def strip_tags(element: str) -> str:
    """The element's text: every HTML tag removed, surrounding whitespace stripped."""
    return HTML_TAG.sub("", element).strip()


def read_pages(path: Path) -> list[Page]:
    data = _read_json_array(path)
    pages = []
    for i, row in enumerate(data):
        at = f"{path}: page {i}"
        check_type(row, dict, at, "page", _PAGE_NEEDS)
        contents = required_field(row, "contents", list, at, _PAGE_NEEDS)
        for element in contents:
            check_type(element, str, at, "contents", _PAGE_NEEDS)
        url = required_field(row, "url", str, at, _PAGE_NEEDS)
        title = required_field(row, "title", str, at, _PAGE_NEEDS)
        pages.append(Page(str(i), url, title, contents))
    return pages


# --------------------------------------------------------------------------- questions


def read_questions(path: Path, by_url: dict[str, Page]) -> tuple[Queries, Qrels]:
    """Queries and qrels of the questions with evidence, in file order."""
    queries: Queries = {}
    qrels: Qrels = {}
    for i, row in enumerate(_read_json_array(path)):
        at = f"{path}: question {i}"
        check_type(row, dict, at, "question", _QUESTION_NEEDS)
        evidences = required_field(row, "evidences", list, at, _QUESTION_NEEDS)
        if not evidences:
            continue
        qid = required_field(row, "id", str, at, _QUESTION_NEEDS)
        at = f"{path}: question {qid!r}"
        url = required_field(row, "url", str, at, _QUESTION_NEEDS)
        scenario = required_field(row, "scenario", str, at, _QUESTION_NEEDS)
        question = required_field(row, "question", str, at, _QUESTION_NEEDS)
        page = by_url.get(url)
        if page is None:
            raise DataError(
                f"{at}: url {url!r} is not a page of {DOCUMENTS}; use the documents.json "
                "of the same ConditionalQA release"
            )
        queries.setdefault(qid, f"{scenario} {question}")
        judged = qrels.setdefault(qid, {})
        for evidence in evidences:
            check_type(evidence, str, at, "evidences", _QUESTION_NEEDS)
            judged[f"{page.id}-{_position(page, evidence, at)}"] = 1
    return queries, qrels


def _position(page: Page, evidence: str, at: str) -> int:
    try:
        return page.contents.index(evidence)
    except ValueError:
        raise DataError(
            f"{at}: evidence {show(evidence)} is no element of page {page.id} ({page.url}); "
            "use the documents.json of the same ConditionalQA release"
        ) from None


def _read_json_array(path: Path) -> list[Any]:
    try:
        with path.open(encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file; download {BASE_URL}/{path.name}") from None
    except (json.JSONDecodeError, RecursionError) as e:
        raise DataError(f"{path}: not valid JSON ({json_problem(e)}); download it again") from None
    except UnicodeDecodeError as e:
        raise DataError(
            f"{path}: not valid JSON ({' '.join(str(e).split())}); download it again"
        ) from None
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON array, got {show(data)}; download it again")
    return data


# --------------------------------------------------------------------------- splits


def split_by_number(ids: list[str], number: int, seed: int = SEED) -> tuple[list[str], list[str]]:
    """``number`` ids drawn by ``random.Random(seed).sample`` (in drawn order), and the rest."""
    drawn = random.Random(seed).sample(range(len(ids)), min(number, len(ids)))
    chosen = set(drawn)
    return [ids[i] for i in drawn], [qid for i, qid in enumerate(ids) if i not in chosen]


def _subset(ids: list[str], queries: Queries, qrels: Qrels) -> Split:
    return Split({qid: queries[qid] for qid in ids}, {qid: qrels[qid] for qid in ids})


adapter = ConditionalQAAdapter()
