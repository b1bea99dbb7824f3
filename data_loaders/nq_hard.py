"""``NQ-hard``: the NaturalQuestions test queries that need the document's context.

NQ-hard is the subset of 479 queries / 516 (query, relevant passage) pairs of NaturalQuestions'
test split whose relevant passage cannot be understood alone. Each pair carries one or more of
four categories: Coreference Resolution (``CR``), Main Topic (``MT``), Multi-Hop Reasoning
(``MHR``) and ACronym (``AC``). The DAPR authors publish the labels as the config ``nq-hard`` of
the hub dataset ``UKPLab/dapr`` (https://huggingface.co/datasets/UKPLab/dapr, parquet under
``NaturalQuestions/nq-hard/``; licence as NaturalQuestions, CC BY-SA 3.0).

Construction: the corpus is NaturalQuestions' whole corpus; the only split, ``test``, holds the
labelled queries of NaturalQuestions' test split, each judged on its labelled pairs only (with
NaturalQuestions' grades). ``Dataset.labels`` maps each query to the union of its pairs'
categories, ordered CR, MT, MHR, AC.

Labels come from a table of rows (query id, passage id, categories), whose column names are
read defensively, since the hub's are not documented:

* query id (the first found of): ``query_id``, ``qid``, ``question_id``, ``_id``/``id``, ``query``;
* passage id, one or a list per row (optional; without it every relevant passage of the query
  is kept): ``corpus_id``, ``passage_id``, ``chunk_id``, ``pid``, ``paragraph_id`` (or the
  plural), ``passage``, ``chunk``;
* categories: either one true/false column per category (named ``CR`` / ``coreference_resolution``
  and so on) or one column (``categories``, ``category``, ``labels``, ``label``, ``types``,
  ``type``, ``tags``...) holding a list or a ``,``/``;``/``|`` separated string of categories,
  each an abbreviation or a full name.

Names are compared ignoring case and ``-``/space/``_``. A table that fits none of these gets a
:class:`DataError` listing the columns it has. ``dapr data build NQ-hard --source DIR`` reads the
label files in ``DIR`` (``.tsv``/``.csv`` with a header row, ``.jsonl``, ``.parquet``) and takes
NaturalQuestions from its prepared copy, or from a built dataset directory given by
``--set nq=PATH``. :func:`from_labels` applies label rows already read (the hub's) to a loaded
NaturalQuestions.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

from dapr.data import Dataset, Split
from dapr.datasets.adapter import Adapter
from dapr.errors import DataError
from dapr.io.rows import jsonl_rows, parquet_columns, show, table_rows

NAME = "NQ-hard"
HUB_CONFIG = "nq-hard"
"""The config of ``UKPLab/dapr`` that holds the labels."""
CATEGORIES = ("CR", "MT", "MHR", "AC")
CATEGORY_NAMES = {
    "CR": ("coreference resolution", "coreference", "coref"),
    "MT": ("main topic",),
    "MHR": ("multi hop reasoning", "multihop reasoning", "multi hop", "multihop"),
    "AC": ("acronym", "acronyms"),
}
QUERY_COLUMNS = ("query id", "qid", "question id", "id", "query")
PASSAGE_COLUMNS = (
    "corpus id",
    "passage id",
    "chunk id",
    "pid",
    "paragraph id",
    "corpus ids",
    "passage ids",
    "chunk ids",
    "pids",
    "passage",
    "chunk",
)
"""Passage id columns; a cell may hold one id or a list of them."""
CATEGORY_COLUMNS = (
    "categories",
    "category",
    "labels",
    "label",
    "types",
    "type",
    "tags",
    "tag",
    "classes",
    "class",
    "reasons",
    "reason",
)
LABEL_SUFFIXES = (".tsv", ".csv", ".jsonl", ".parquet")
_TRUE = frozenset({"true", "t", "yes", "y", "1", "x"})
_FALSE = frozenset({"false", "f", "no", "n", "0", ""})
_SEPARATORS = re.compile(r"[,;|/+]")


def _key(name: str) -> str:
    """A name compared ignoring case, leading ``_``, and ``-``/``_``/space differences."""
    return " ".join(re.split(r"[\s_\-]+", name.strip().lower())).strip()


_CATEGORY_OF = {_key(c): c for c in CATEGORIES} | {
    _key(name): c for c, names in CATEGORY_NAMES.items() for name in names
}
_FLAG_OF = _CATEGORY_OF | {
    f"{prefix} {key}": c for key, c in _CATEGORY_OF.items() for prefix in ("is", "has")
}


class NQHardAdapter(Adapter):
    name = NAME
    origin = (
        "NaturalQuestions test queries labelled CR/MT/MHR/AC; labels: hub UKPLab/dapr config "
        "nq-hard, https://huggingface.co/datasets/UKPLab/dapr"
    )
    hub_repo = "UKPLab/dapr"

    def build(self, source: Path, *, nq: Path | None = None) -> Dataset:
        """NQ-hard from the label files in ``source`` (a directory or one file), over the
        NaturalQuestions dataset built at ``nq`` (default: the registered one).

        :param nq: A built NaturalQuestions dataset directory (None: the registered one).
        """
        self.require(Path(source))
        files = label_files(Path(source))
        return from_label_files(_load_nq(nq), files)

    def load(self, **options: Any) -> Dataset:
        """The prepared copy, else NaturalQuestions plus the hub's ``nq-hard`` labels."""
        from dapr.datasets import read_dataset, write_dataset
        from dapr.datasets.published import config_files

        if self.cached() or options:
            return super().load(**options)
        files = config_files(HUB_CONFIG, self.hub_repo, dataset=NAME)
        write_dataset(
            from_label_files(_load_nq(None), sorted(sum(files.values(), []))), self.prepared
        )
        return read_dataset(self.prepared, NAME)


def _load_nq(path: Path | None) -> Dataset:
    """NaturalQuestions: the dataset built at ``path``, else the registered one."""
    if path is None:
        from dapr.data_loaders.nq import adapter as nq_adapter

        return nq_adapter.load()
    from dapr.datasets import read_dataset

    return read_dataset(Path(path).expanduser(), "NaturalQuestions")


def label_files(source: Path) -> list[Path]:
    """``source`` itself, or the label files directly inside it, by name."""
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise DataError(f"{source}: no such file or directory; give the NQ-hard label file(s)")
    found = sorted(p for p in source.iterdir() if p.is_file() and p.suffix in LABEL_SUFFIXES)
    if not found:
        raise DataError(
            f"{source}: no label file ({', '.join(LABEL_SUFFIXES)}); put the NQ-hard labels "
            "(query id, passage id, categories) there"
        )
    return found


# --------------------------------------------------------------------------- columns


@dataclass(frozen=True)
class Columns:
    """Which column holds what in one label table."""

    query: str
    passage: str | None
    categories: str | None
    flags: dict[str, str] = field(default_factory=dict)
    """Category -> the true/false column that marks it."""


def resolve_columns(columns: Iterable[str], where: str) -> Columns:
    """The label columns among ``columns``, or a DataError listing them."""
    names = list(columns)
    keys = {}
    for name in names:
        keys.setdefault(_key(name), name)
    query = _first(keys, QUERY_COLUMNS)
    passage = _first(keys, PASSAGE_COLUMNS)
    flags = {}
    for key, name in keys.items():
        category = _FLAG_OF.get(key)
        if category is not None and category not in flags:
            flags[category] = name
    categories = None if flags else _first(keys, CATEGORY_COLUMNS)
    if query is None or (categories is None and not flags):
        found = ", ".join(repr(n) for n in names) or "none"
        raise DataError(
            f"{where}: columns {found} do not fit NQ-hard labels; give a query id column "
            "(query_id or qid), a passage id column (corpus_id or passage_id) and the categories "
            "(one column 'categories' of CR/MT/MHR/AC, or one true/false column per category)"
        )
    return Columns(query, passage, categories, flags)


def _first(keys: dict[str, str], aliases: tuple[str, ...]) -> str | None:
    return next((keys[a] for a in aliases if a in keys), None)


# --------------------------------------------------------------------------- rows


def categories_of(value: Any, at: str, name: str) -> set[str]:
    """The categories a cell holds: a list of them, or a separated string (or JSON list)."""
    if value is None:
        return set()
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text.replace("'", '"'))
            except json.JSONDecodeError:
                value = text.strip("[]").replace("'", "").replace('"', "")
        if isinstance(value, str):
            value = _SEPARATORS.split(value)
    if not isinstance(value, (list, tuple)):
        value = list(value) if hasattr(value, "tolist") else [value]
    found = set()
    for item in value:
        if not isinstance(item, str):
            raise DataError(
                f"{at}: field {name!r} holds {show(item)}; write categories as CR, MT, MHR, AC"
            )
        if not item.strip():
            continue
        category = _CATEGORY_OF.get(_key(item))
        if category is None:
            raise DataError(
                f"{at}: field {name!r} holds unknown category {item.strip()!r}; use CR, MT, MHR, "
                "AC or their names (coreference resolution, main topic, multi-hop reasoning, "
                "acronym)"
            )
        found.add(category)
    return found


def _flag(value: Any, at: str, name: str) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise DataError(f"{at}: field {name!r} must be true or false, got {show(value)}")


def _ids(row: Mapping[str, Any], column: str, at: str) -> list[str]:
    """The passage id(s) of a cell: one id, or a list of them."""
    value = row.get(column)
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)) and value:
        return [_id({column: item}, column, at) for item in value]
    return [_id(row, column, at)]


def _id(row: Mapping[str, Any], column: str, at: str) -> str:
    value = row.get(column)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{at}: field {column!r} must be a non-empty id, got {show(value)}")
    return value.strip()


@dataclass
class Labels:
    """Labelled pairs checked against NaturalQuestions' test split, as they are read."""

    nq: Dataset
    pairs: dict[str, dict[str | None, set[str]]] = field(default_factory=dict)

    def add(self, rows: Iterable[tuple[str, Mapping[str, Any]]], columns: Columns) -> None:
        test = self.nq.split("test")
        for at, row in rows:
            qid = _id(row, columns.query, at)
            judged = test.qrels.get(qid)
            if qid not in test.queries or not judged:
                raise DataError(
                    f"{at}: query {qid!r} is no judged test query of {self.nq.name}; use labels "
                    "made for this NaturalQuestions build (query ids like dev-2)"
                )
            pids: list[str | None] = [None]
            if columns.passage is not None:
                pids = list(_ids(row, columns.passage, at))
                for pid in pids:
                    if judged.get(pid, 0) < self.nq.relevance_level:
                        raise DataError(
                            f"{at}: passage {pid!r} is not relevant to query {qid!r} in "
                            f"{self.nq.name} test; give (query, relevant passage) pairs"
                        )
            if columns.flags:
                found = {c for c, name in columns.flags.items() if _flag(row.get(name), at, name)}
            else:
                found = categories_of(row.get(columns.categories), at, columns.categories)
            for pid in pids:
                self.pairs.setdefault(qid, {}).setdefault(pid, set()).update(found)

    def dataset(self) -> Dataset:
        test = self.nq.split("test")
        queries = {qid: text for qid, text in test.queries.items() if qid in self.pairs}
        qrels, labels = {}, {}
        for qid in queries:
            by_passage = self.pairs[qid]
            judged = test.qrels[qid]
            if None in by_passage:
                kept = {p: g for p, g in judged.items() if g >= self.nq.relevance_level}
            else:
                kept = {}
            kept |= {p: judged[p] for p in by_passage if p is not None}
            qrels[qid] = kept
            found = set().union(*by_passage.values())
            if found:
                labels[qid] = tuple(c for c in CATEGORIES if c in found)
        note = (
            f"queries: the {len(queries)} NQ-hard queries of {self.nq.name} test "
            f"({sum(map(len, qrels.values()))} judged pairs); corpus: all of {self.nq.name}"
        )
        return Dataset(
            NAME,
            self.nq.corpus,
            {"test": Split(queries, qrels)},
            labels,
            self.nq.relevance_level,
            (note,),
            self.nq.language,
        )


def from_labels(
    nq: Dataset, label_rows: Iterable[Mapping[str, Any]], source: str = HUB_CONFIG
) -> Dataset:
    """NQ-hard from label rows already read (e.g. the hub's parquet rows) over ``nq``.

    The columns are those of the first row; ``source`` names the rows in error messages.
    """
    rows = iter(label_rows)
    first = next(rows, None)
    if first is None:
        raise DataError(f"{source}: no label rows; NQ-hard needs (query, passage, categories)")
    columns = resolve_columns(first.keys(), source)
    labels = Labels(nq)
    labels.add(
        ((f"{source}: row {n}", row) for n, row in enumerate(chain([first], rows), 1)), columns
    )
    return labels.dataset()


def from_label_files(nq: Dataset, paths: Iterable[Path]) -> Dataset:
    """NQ-hard from label files (TSV/CSV with a header, JSON lines, parquet) over ``nq``."""
    labels = Labels(nq)
    for path in paths:
        columns, rows = read_table(path)
        labels.add(rows, resolve_columns(columns, str(path)))
    if not labels.pairs:
        raise DataError(f"{NAME}: the label files hold no rows; give (query, passage, categories)")
    return labels.dataset()


def read_table(path: Path) -> tuple[list[str], Iterator[tuple[str, dict[str, Any]]]]:
    """A label file's column names and its rows, each with its location."""
    if path.suffix == ".parquet":
        return parquet_columns(path), ((f"{path}: row {n}", r) for n, r in table_rows(path))
    if path.suffix == ".jsonl":
        rows = list(jsonl_rows(path))
        columns = list(dict.fromkeys(k for _, row in rows for k in row))
        return columns, ((f"{path}:{n}", row) for n, row in rows)
    if path.suffix in (".tsv", ".csv"):
        return _delimited(path, "\t" if path.suffix == ".tsv" else ",")
    raise DataError(f"{path}: unknown label file type; use {', '.join(LABEL_SUFFIXES)}")


def _delimited(path: Path, delimiter: str) -> tuple[list[str], Iterator[tuple[str, dict]]]:
    """The header and rows of a CSV/TSV file, each row located by its (first) line."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise DataError(f"{path}: no such file; check the path") from None
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text; save the file as UTF-8") from None
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    rows = []
    try:
        header = next(reader, [])
        start = reader.line_num + 1
        for cells in reader:
            if any(cell.strip() for cell in cells):
                rows.append((start, cells))
            start = reader.line_num + 1
    except csv.Error as e:
        raise DataError(f"{path}:{reader.line_num}: {e}; check the quoting") from None
    return header, _delimited_rows(path, header, rows, delimiter)


def _delimited_rows(
    path: Path, header: list[str], rows: list[tuple[int, list[str]]], delimiter: str
) -> Iterator[tuple[str, dict[str, str]]]:
    for n, cells in rows:
        if len(cells) != len(header):
            raise DataError(
                f"{path}:{n}: {len(cells)} columns but the header has {len(header)}; "
                f"write one value per column{' (tab-separated)' if delimiter == chr(9) else ''}"
            )
        yield f"{path}:{n}", dict(zip(header, cells))


adapter = NQHardAdapter()
