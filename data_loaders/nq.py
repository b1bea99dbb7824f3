"""``NaturalQuestions``: Wikipedia pages of Natural Questions, their paragraphs as passages.

Source: NQ-retrieval, the Natural Questions dev and train sets as JSON lines (one question per
line: ``question``, ``title``, ``candidates``, ``passage_types``, ``long_answers``),
https://huggingface.co/datasets/sentence-transformers/NQ-retrieval (``dev.jsonl.gz``,
``train.jsonl.gz``); Natural Questions is CC BY-SA 3.0. The raw files may also be given
uncompressed as ``{dev,train}.jsonl`` or ``{dev,train}.tsv`` (JSON lines despite the name). The
DAPR benchmark publishes a prebuilt copy on the hub (``UKPLab/dapr``, configs
``NaturalQuestions-*``).

Construction, as the DAPR reference builder (``dapr/datasets/nq.py``) does it:

* **Records**: line ``n`` (0-based) of ``dev`` / ``train`` is record ``dev-n`` / ``train-n``.
  Records without text (every ``text`` candidate empty) are dropped, and so are dev records
  without a text long answer (a long answer of type ``text`` whose candidate is not empty).
* **Document**: one per title: the first record (dev before train, in file order) of each
  lower-cased title; its id is the record id, its title the record's title.
* **Passage**: the record's candidates of type ``text`` (paragraphs; tables and lists are
  dropped), in order, id ``f"{doc_id}-{i}"`` with ``i`` counting text candidates only. Every text
  candidate is kept, even an empty one, so positions match the published data. The reference
  passed each text through a RoBERTa tokenizer and back, which removes the space before
  ``. ? ! ,`` and before ``'s 'm 've 're n't`` (and turns `` ' `` into ``'``); the same
  replacements are made here, so texts equal the published ones (``--set clean_spaces=false``
  keeps the candidates verbatim).
* **Query**: the record's ``question``, id the record id; **relevant** (grade 1): its long
  answers of type ``text`` (only paragraph answers count).
* **test**: the dev records that are documents. **dev**: as many train records as ``test`` has,
  drawn by ``random.Random(42).sample`` from the train records that are documents and have a text
  long answer (in file order; dev keeps the drawn order). **train**: the other train records with
  a text long answer and at least one other non-empty text candidate, whose title is not the
  title of a dev query. This is the reference's rule, so test and dev equal the paper's.

One departure: a train record whose title repeats an earlier one is no document, so the
reference's train qrels named passages outside the corpus. Here such a query is judged on the
title's document when that document's passages are identical to the record's; otherwise it is
dropped (the dataset's ``notes`` say how many).

The train file is large (307k pages): it is read as a stream. A build keeps the queries and a
few ids per record in memory; the corpus is re-read from the raw files on every pass.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from dapr.data import Corpus, Dataset, Document, Passage, Qrels, Queries, Split
from dapr.datasets.adapter import Adapter, RawFile
from dapr.errors import DataError
from dapr.io.rows import check_type, json_object, required_field, show, text_lines

NAME = "NaturalQuestions"
BASE_URL = "https://huggingface.co/datasets/sentence-transformers/NQ-retrieval/resolve/main"
RAW_SPLITS = ("dev", "train")
RAW_NAMES = ("{}.jsonl.gz", "{}.jsonl", "{}.tsv")
"""The names a raw split file may have in the source directory, in order of preference."""
SEED = 42
PASSAGE_TYPES = frozenset({"text", "table", "list", "list_definition", "invalid"})
TOKENIZER_SPACES = (
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
)
"""What the reference's tokenizer round trip did to a text, replacement by replacement."""
_NEEDS = (
    "every line needs question, title (strings), candidates (strings), passage_types "
    "(one per candidate) and long_answers (candidate indices)"
)


class NaturalQuestionsAdapter(Adapter):
    name = NAME
    origin = f"Natural Questions (NQ-retrieval JSON lines, Wikipedia pages), {BASE_URL}"
    raw_files = tuple(
        RawFile(
            f"{split}.jsonl.gz",
            f"{BASE_URL}/{split}.jsonl.gz",
            how=f"or give it uncompressed as {split}.jsonl or {split}.tsv",
        )
        for split in RAW_SPLITS
    )
    hub_repo = "UKPLab/dapr"

    def require(self, source: Path, download: bool = False) -> None:
        """Like :meth:`Adapter.require`, accepting any name of :data:`RAW_NAMES`."""
        from dapr.datasets.download import fetch

        for raw, split in zip(self.raw_files, RAW_SPLITS):
            if find_raw(Path(source), split) is not None:
                continue
            target = Path(source) / raw.path
            if download and raw.url:
                fetch(raw.url, target, raw.sha256)
                continue
            raise DataError(
                f"{target}: missing raw file of {NAME}; download {raw.url} there "
                f"({raw.how}), or rerun with --download"
            )

    def build(self, source: Path, *, clean_spaces: bool = True) -> Dataset:
        """The dataset from the raw dev and train files in ``source``; ``clean_spaces`` makes
        the reference's tokenizer replacements.

        :param clean_spaces: Drop the space before punctuation and ``'s``-like endings, as the
            reference's tokenizer round trip did (false: the texts verbatim).
        """
        source = Path(source)
        self.require(source)
        paths = {}
        for split in RAW_SPLITS:
            path = find_raw(source, split)
            if path is None:
                names = ", ".join(name.format(split) for name in RAW_NAMES)
                raise DataError(f"{source}: no raw {split} file of {NAME} ({names}); download it")
            paths[split] = path
        scan = Scan(clean_spaces)
        scan.read_dev(paths["dev"])
        scan.read_train(paths["train"])
        splits, dropped = scan.splits()
        notes = ()
        if dropped:
            notes = (
                f"train queries dropped: {dropped} (their page repeats an earlier title with "
                "other passages, so their relevant passages are not in the corpus)",
            )
        corpus = Corpus(partial(documents, paths, scan.corpus_lines, clean_spaces))
        return Dataset(NAME, corpus, splits, notes=notes)


def find_raw(source: Path, split: str) -> Path | None:
    for name in RAW_NAMES:
        path = source / name.format(split)
        if path.is_file():
            return path
    return None


def clean_spaces(text: str) -> str:
    """``text`` as the reference's tokenizer round trip left it."""
    for before, after in TOKENIZER_SPACES:
        text = text.replace(before, after)
    return text


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class Record:
    """One line of a raw file: its question and its page's text candidates."""

    id: str
    question: str
    title: str
    texts: tuple[str, ...]
    """The candidates of type ``text``, in order (the passages)."""
    positives: tuple[int, ...]
    """Indices into ``texts`` of the long answers of type ``text``."""

    @property
    def has_text(self) -> bool:
        return any(self.texts)

    @property
    def has_text_answer(self) -> bool:
        return any(self.texts[i] for i in self.positives)

    @property
    def has_in_doc_negative(self) -> bool:
        positives = set(self.positives)
        return any(text for i, text in enumerate(self.texts) if i not in positives)

    def document(self, clean: bool) -> Document:
        return Document(
            self.id,
            self.title,
            tuple(
                Passage(f"{self.id}-{i}", self.id, i, clean_spaces(text) if clean else text)
                for i, text in enumerate(self.texts)
            ),
        )


def parse_record(line: str, record_id: str, at: str) -> Record:
    row = json_object(line, at)
    question = required_field(row, "question", str, at, _NEEDS)
    title = required_field(row, "title", str, at, _NEEDS)
    candidates = required_field(row, "candidates", list, at, _NEEDS)
    types = required_field(row, "passage_types", list, at, _NEEDS)
    answers = required_field(row, "long_answers", list, at, _NEEDS)
    if len(types) != len(candidates):
        raise DataError(
            f"{at}: field 'passage_types' has {len(types)} entries for {len(candidates)} "
            f"candidates; {_NEEDS}"
        )
    text_index: dict[int, int] = {}
    texts = []
    for i, (candidate, kind) in enumerate(zip(candidates, types)):
        check_type(candidate, str, at, "candidates", _NEEDS)
        if kind not in PASSAGE_TYPES:
            raise DataError(
                f"{at}: field 'passage_types' holds {show(kind)}; use one of "
                f"{', '.join(sorted(PASSAGE_TYPES))}"
            )
        if kind == "text":
            text_index[i] = len(texts)
            texts.append(candidate)
    positives = set()
    for answer in answers:
        check_type(answer, int, at, "long_answers", _NEEDS)
        if not 0 <= answer < len(candidates):
            raise DataError(
                f"{at}: field 'long_answers' holds {answer}, but there are {len(candidates)} "
                "candidates; give candidate indices"
            )
        if answer in text_index:
            positives.add(text_index[answer])
    return Record(record_id, question, title, tuple(texts), tuple(sorted(positives)))


def read_records(path: Path, split: str) -> Iterator[tuple[int, Record]]:
    for n, line in text_lines(path):
        yield n, parse_record(line, f"{split}-{n - 1}", f"{path}:{n}")


# --------------------------------------------------------------------------- the scan


@dataclass(frozen=True, slots=True)
class TrainQuery:
    """What a train record with a text long answer needs for the dev/train split."""

    id: str
    question: str
    title: str
    """Lower-cased."""
    positives: tuple[int, ...]
    in_corpus: bool
    in_doc_negative: bool
    judged_on: str | None
    """The document holding its passages: its own id, the title's document or none."""


def _no_lines() -> dict[str, set[int]]:
    return {split: set() for split in RAW_SPLITS}


@dataclass
class Scan:
    """One pass over dev, then train, keeping only what the splits and corpus need."""

    clean: bool
    corpus_lines: dict[str, set[int]] = field(default_factory=_no_lines)
    """Line numbers of the records that are documents, per raw file."""
    titles: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    """Lower-cased title -> its document's id and a digest of its passages."""
    test_queries: Queries = field(default_factory=dict)
    test_qrels: Qrels = field(default_factory=dict)
    train: list[TrainQuery] = field(default_factory=list)

    def _add_document(self, n: int, split: str, record: Record) -> bool:
        """Whether the record is the first of its title (and so became a document)."""
        title = record.title.lower()
        if title in self.titles:
            return False
        self.titles[title] = (record.id, self._digest(record))
        self.corpus_lines[split].add(n)
        return True

    def _digest(self, record: Record) -> bytes:
        texts = [clean_spaces(t) if self.clean else t for t in record.texts]
        return hashlib.blake2b(json.dumps(texts).encode(), digest_size=16).digest()

    def read_dev(self, path: Path) -> None:
        for n, record in read_records(path, "dev"):
            if record.has_text and record.has_text_answer and self._add_document(n, "dev", record):
                self.test_queries[record.id] = record.question
                self.test_qrels[record.id] = _judged(record.id, record.positives)

    def read_train(self, path: Path) -> None:
        for n, record in read_records(path, "train"):
            if not record.has_text:
                continue
            in_corpus = self._add_document(n, "train", record)
            if not record.has_text_answer:
                continue
            judged_on: str | None = record.id
            if not in_corpus:
                doc_id, digest = self.titles[record.title.lower()]
                judged_on = doc_id if digest == self._digest(record) else None
            self.train.append(
                TrainQuery(
                    record.id,
                    record.question,
                    record.title.lower(),
                    record.positives,
                    in_corpus,
                    record.has_in_doc_negative,
                    judged_on,
                )
            )

    def splits(self) -> tuple[dict[str, Split], int]:
        """train, dev and test by the reference's rule; and how many train queries dropped."""
        candidates = [q for q in self.train if q.in_corpus]
        number = min(len(self.test_queries), len(candidates))
        drawn = random.Random(SEED).sample(range(len(candidates)), number)
        heldout = [candidates[i] for i in drawn]
        heldout_ids = {q.id for q in heldout}
        heldout_titles = {q.title for q in heldout}
        train = [
            q
            for q in self.train
            if q.id not in heldout_ids and q.in_doc_negative and q.title not in heldout_titles
        ]
        kept = [q for q in train if q.judged_on is not None]
        splits = {
            "train": _split(kept),
            "dev": _split(heldout),
            "test": Split(self.test_queries, self.test_qrels),
        }
        return splits, len(train) - len(kept)


def _judged(doc_id: str, positives: tuple[int, ...]) -> dict[str, int]:
    return {f"{doc_id}-{i}": 1 for i in positives}


def _split(queries: list[TrainQuery]) -> Split:
    return Split(
        {q.id: q.question for q in queries},
        {q.id: _judged(q.judged_on or q.id, q.positives) for q in queries},
    )


# --------------------------------------------------------------------------- the corpus


def documents(
    paths: dict[str, Path], lines: dict[str, set[int]], clean: bool
) -> Iterator[Document]:
    """The documents, re-read from the raw files: dev first, then train, in file order."""
    for split in RAW_SPLITS:
        wanted = lines[split]
        path = paths[split]
        for n, line in text_lines(path):
            if n in wanted:
                yield parse_record(line, f"{split}-{n - 1}", f"{path}:{n}").document(clean)


adapter = NaturalQuestionsAdapter()
