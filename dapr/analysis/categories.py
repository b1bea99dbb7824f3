"""Per-category metrics: means over the queries of each category (NQ-hard's CR / MT / MHR / AC,
a hard subset, or whether the gold passages name their document), and the category table file.

Categories come out in a stable order: ``"all"`` first, then the ones named in ``order`` (in that
order), then the rest sorted by name. A query may have several categories; an unlabelled query
counts only in ``"all"``. Only scored queries count: a labelled query no metric scores is left
out (the labels may cover a whole dataset, the scores one split).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from dapr.data import Dataset
from dapr.errors import DaprError, DataError
from dapr.io.files import write_bytes_atomic

ALL = "all"
TITLE_IN_GOLD = "title in gold"
TITLE_NOT_IN_GOLD = "title not in gold"
LABELS_HEADER = ("query_id", "category")

PerQuery = Mapping[str, Mapping[str, float]]
"""``{metric: {query_id: score}}``, as in ``Evaluation.per_query`` and ``metrics.json``."""
Labels = Mapping[str, Sequence[str]]
"""``{query_id: (category, ...)}``."""


def category_members(
    per_query: PerQuery, labels: Labels, order: Sequence[str] = ()
) -> dict[str, list[str]]:
    """The scored query ids of ``"all"`` and of every category, categories in the stable order.

    Every metric must score the same queries (the ones :func:`dapr.evaluation.evaluate` keeps).
    """
    scored = _scored_queries(per_query)
    members: dict[str, list[str]] = {}
    for qid in scored:
        for category in dict.fromkeys(labels.get(qid, ())):
            if category == ALL:
                raise DaprError(f"query {qid!r}: category {ALL!r} is reserved; rename it")
            members.setdefault(category, []).append(qid)
    ordered = [c for c in order if c in members]
    ordered += sorted(set(members) - set(ordered))
    return {ALL: scored, **{c: members[c] for c in ordered}}


def category_means(
    per_query: PerQuery, labels: Labels, order: Sequence[str] = ()
) -> dict[str, dict[str, float]]:
    """``{category: {metric: mean over its queries}}``, ``"all"`` first (see the module doc)."""
    return {
        category: {metric: _mean(scores[q] for q in qids) for metric, scores in per_query.items()}
        for category, qids in category_members(per_query, labels, order).items()
    }


def category_counts(
    per_query: PerQuery, labels: Labels, order: Sequence[str] = ()
) -> dict[str, int]:
    """``{category: number of scored queries}``, in the same order as :func:`category_means`."""
    return {c: len(q) for c, q in category_members(per_query, labels, order).items()}


def system_scores(entry: Mapping, system: str, metric: str, where: str) -> dict[str, float]:
    """``{query_id: score}`` of ``metric`` in a metrics.json system entry, or a DaprError
    (prefixed ``where``) listing the metrics it has."""
    per_query = entry.get("per_query") or {}
    if metric not in per_query:
        raise DaprError(
            f"{where}: system {system!r} has no per-query {metric!r}; choose from: "
            f"{', '.join(per_query) or 'none'}"
        )
    return dict(per_query[metric])


def category_table(
    metrics: Mapping,
    metric: str,
    systems: Sequence[str] | None = None,
    labels: Labels | None = None,
    order: Sequence[str] = (),
) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    """From a ``metrics.json`` dict: ``{system: {category: mean metric}}`` and the counts.

    ``systems`` defaults to every passage-level system; ``labels`` to the file's own
    ``"labels"`` (a hard subset, or any other table read with :func:`read_labels`, can replace
    them).
    """
    have = metrics.get("systems") or {}
    if systems is None:
        systems = [s for s, v in have.items() if v.get("level", "passage") == "passage"]
        if not systems:
            raise DaprError('metrics.json: no passage-level system under "systems"; run one first')
    labels = (metrics.get("labels") or {}) if labels is None else labels
    table: dict[str, dict[str, float]] = {}
    counts: dict[str, int] = {}
    for system in systems:
        if system not in have:
            raise DaprError(
                f"metrics.json: no system {system!r}; choose from: {', '.join(have) or 'none'}"
            )
        scores = {metric: system_scores(have[system], system, metric, "metrics.json")}
        table[system] = {c: m[metric] for c, m in category_means(scores, labels, order).items()}
        these = category_counts(scores, labels, order)
        if counts and these != counts:
            raise DaprError(
                f"metrics.json: system {system!r} scores other queries than {systems[0]!r}; "
                "compare systems of one evaluation"
            )
        counts = these
    return table, counts


# --------------------------------------------------------------------------- title mentions


def title_mention_labels(dataset: Dataset, split: str) -> dict[str, tuple[str, ...]]:
    """``"title in gold"`` when any relevant passage of a query names its document's title.

    A passage names the title when the case-folded title occurs in the case-folded passage on
    word boundaries; a trailing disambiguator such as ``" (book)"`` is dropped from the title
    first (Wikipedia's convention, which running text never repeats). Relevant means a grade of
    at least ``dataset.relevance_level``; queries without a relevant passage get no label. Plain
    string matching has blind spots: a one-letter title (the article "A") matches nearly every
    English passage, and a pronoun or a shortened name ("Lincoln") is no mention.
    """
    qrels = dataset.split(split).qrels
    gold = {
        qid: [p for p, grade in judged.items() if grade >= dataset.relevance_level]
        for qid, judged in qrels.items()
    }
    wanted = {p for passages in gold.values() for p in passages}
    mentions: dict[str, bool] = {}
    for document in dataset.corpus:
        pattern = _title_pattern(document.title)
        for passage in document.passages:
            if passage.id in wanted:
                found = pattern is not None and pattern.search(passage.text.casefold())
                mentions[passage.id] = bool(found)
    labels: dict[str, tuple[str, ...]] = {}
    for qid, passages in gold.items():
        if not passages:
            continue
        missing = [p for p in passages if p not in mentions]
        if missing:
            raise DataError(
                f"dataset {dataset.name!r}, split {split!r}: query {qid!r} judges passage "
                f"{missing[0]!r}, which is not in the corpus; fix the qrels"
            )
        hit = any(mentions[p] for p in passages)
        labels[qid] = (TITLE_IN_GOLD if hit else TITLE_NOT_IN_GOLD,)
    return labels


def _title_pattern(title: str) -> re.Pattern[str] | None:
    core = re.sub(r"\s*\([^()]*\)\s*$", "", title).strip() or title.strip()
    if not core:
        return None
    return re.compile(rf"(?<!\w){re.escape(core.casefold())}(?!\w)")


# --------------------------------------------------------------------------- the label file


def write_labels(path: Path, labels: Labels) -> None:
    """A TSV ``query_id<TAB>category`` with a header, one row per query and category."""
    rows = ["\t".join(LABELS_HEADER)]
    for qid, categories in labels.items():
        for category in categories:
            for value in (qid, category):
                if not value or any(c in value for c in "\t\r\n"):
                    raise DaprError(
                        f"{path}: label value {value!r} is empty or holds a tab or line break; "
                        "rename it"
                    )
            rows.append(f"{qid}\t{category}")
    write_bytes_atomic(Path(path), [("\n".join(rows) + "\n").encode()])


def read_labels(path: Path) -> dict[str, tuple[str, ...]]:
    """The labels a :func:`write_labels` file holds, queries and categories in file order."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: no such file; check the path") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason}); save it as UTF-8") from None
    labels: dict[str, list[str]] = {}
    lines = _numbered(text.splitlines())
    first = next(lines, None)
    if first is None or tuple(first[1].split("\t")) != LABELS_HEADER:
        at = f"line {first[0]}" if first else "line 1"
        raise DataError(f"{path}, {at}: expected the header 'query_id<TAB>category'")
    for n, line in lines:
        fields = line.split("\t")
        if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
            raise DataError(
                f"{path}, line {n}: expected 'query_id<TAB>category' (two non-empty fields), "
                f"got {line!r}"
            )
        qid, category = fields
        if category not in labels.setdefault(qid, []):
            labels[qid].append(category)
    return {qid: tuple(c) for qid, c in labels.items()}


def _numbered(lines: Iterable[str]) -> Iterator[tuple[int, str]]:
    return ((n, line) for n, line in enumerate(lines, 1) if line.strip())


# --------------------------------------------------------------------------- helpers


def _scored_queries(per_query: PerQuery) -> list[str]:
    if not per_query:
        raise DaprError("no per-query scores given; evaluate the run first")
    metrics = iter(per_query.items())
    first_metric, first = next(metrics)
    for metric, scores in metrics:
        if scores.keys() != first.keys():
            odd = next(iter(scores.keys() ^ first.keys()))
            raise DaprError(
                f"metrics {first_metric!r} and {metric!r} score different queries (e.g. {odd!r});"
                " give per-query scores of one evaluation"
            )
    return list(first)


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")
