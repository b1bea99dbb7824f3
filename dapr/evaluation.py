"""Retrieval metrics through pytrec_eval (trec_eval's own code), per query and averaged, and
document-level evaluation of passage runs by MaxP (the DAPR paper's Table 4)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dapr.data import CorpusIds, Qrels, Run, rank_order
from dapr.errors import DaprError

DEFAULT_METRICS = ("nDCG@10", "R@100", "MRR@10")

_PATTERNS = {
    "nDCG": ("ndcg_cut", True),
    "R": ("recall", True),
    "P": ("P", True),
    "MRR": ("recip_rank", None),
    "MAP": ("map", False),
}


@dataclass(frozen=True)
class Metric:
    """A metric by its display name (``nDCG@10``), with the trec_eval measure that computes it."""

    name: str
    measure: str
    cutoff: int | None

    @property
    def request(self) -> str:
        """The measure as pytrec_eval is asked for it."""
        if self.measure == "recip_rank" or self.cutoff is None:
            return self.measure
        return f"{self.measure}.{self.cutoff}"

    @property
    def key(self) -> str:
        """The key under which pytrec_eval reports it."""
        if self.measure == "recip_rank" or self.cutoff is None:
            return self.measure
        return f"{self.measure}_{self.cutoff}"


_TREC_NAMES = {"ndcg_cut": "nDCG", "recall": "R", "P": "P", "recip_rank": "MRR", "map": "MAP"}


def parse_metric(name: str) -> Metric:
    """``nDCG@k``, ``R@k`` (recall), ``P@k``, ``MRR@k`` (or ``MRR``) and ``MAP``; trec_eval's
    names (``ndcg_cut_10``, ``recall_100``, ``P_10``, ``recip_rank``, ``map``) mean the same."""
    trec = re.fullmatch(r"(ndcg_cut|recall|P|recip_rank|map)(?:_(\d+))?", name)
    if trec is not None:
        family, cutoff = trec.groups()
        name = _TREC_NAMES[family] + (f"@{cutoff}" if cutoff else "")
    match = re.fullmatch(r"(nDCG|R|P|MRR|MAP)(?:@(\d+))?", name)
    if match is None:
        raise DaprError(
            f"unknown metric {name!r}; use nDCG@k, R@k, P@k, MRR@k, MRR or MAP (e.g. nDCG@10)"
        )
    family, cutoff = match.group(1), match.group(2)
    measure, needs_cutoff = _PATTERNS[family]
    if needs_cutoff and cutoff is None:
        raise DaprError(f"metric {name!r} needs a cutoff, e.g. {family}@10")
    if needs_cutoff is False and cutoff is not None:
        raise DaprError(f"metric {name!r} takes no cutoff; write {family}")
    return Metric(name, measure, int(cutoff) if cutoff else None)


@dataclass(frozen=True)
class Evaluation:
    """``per_query[metric][query_id]`` and ``means[metric]`` over the evaluated queries."""

    per_query: dict[str, dict[str, float]]
    means: dict[str, float]


def evaluate(
    run: Run, qrels: Qrels, metrics: Sequence[str] = DEFAULT_METRICS, relevance_level: int = 1
) -> Evaluation:
    """Score a run against graded qrels.

    Every query with at least one relevant judgement (grade >= ``relevance_level``) counts; one
    the run does not answer scores 0. Binary metrics (recall, precision, MRR, MAP) count grades
    from ``relevance_level`` up as relevant; nDCG uses the grades themselves. ``MRR@k`` is the
    reciprocal rank of the first relevant item within the top ``k`` (0 beyond), ranks ordered as
    trec_eval orders them: score, then item id, descending.
    """
    import pytrec_eval

    parsed = [parse_metric(m) for m in metrics]
    judged = {q: dict(j) for q, j in qrels.items() if any(g >= relevance_level for g in j.values())}
    results = run.to_dict()
    scores: dict[str, dict[str, float]] = {m.name: dict.fromkeys(judged, 0.0) for m in parsed}
    for cutoff, group in _by_run_depth(parsed).items():
        ranked = results if cutoff is None else _truncate(results, cutoff)
        evaluator = pytrec_eval.RelevanceEvaluator(
            judged, {m.request for m in group}, relevance_level=relevance_level
        )
        for qid, values in evaluator.evaluate(ranked).items():
            for m in group:
                scores[m.name][qid] = values[m.key]
    means = {
        name: (sum(values.values()) / len(values) if values else 0.0)
        for name, values in scores.items()
    }
    return Evaluation(per_query=scores, means=means)


def _by_run_depth(metrics: Sequence[Metric]) -> dict[int | None, list[Metric]]:
    """Metrics grouped by how deep the run must be cut before trec_eval sees it (MRR@k only)."""
    groups: dict[int | None, list[Metric]] = {}
    for m in metrics:
        depth = m.cutoff if m.measure == "recip_rank" else None
        groups.setdefault(depth, []).append(m)
    return groups


def _truncate(results: Mapping[str, Mapping[str, float]], k: int) -> dict[str, dict[str, float]]:
    """The top ``k`` of every query in trec_eval's order (score, then item id, descending)."""
    return {
        qid: dict(sorted(ranked.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:k])
        for qid, ranked in results.items()
    }


def maxp(run: Run, ids: CorpusIds) -> Run:
    """The document run of a passage run: each document scores its best passage (MaxP).

    ``ids`` are the corpus's passage and document ids; a passage it does not know is dropped.
    """
    docs = ids.document_of(run.vocab)[run.items]
    query_of = np.repeat(np.arange(len(run.queries)), np.diff(run.offsets))
    known = np.flatnonzero(docs >= 0)
    # rows are in rank order within a query, so a (query, document) pair's first row is its best
    pairs = query_of[known] * max(len(ids.doc_ids), 1) + docs[known]
    _, first = np.unique(pairs, return_index=True)
    best = known[np.sort(first)]
    offsets = np.zeros(len(run.queries) + 1, dtype=np.int64)
    np.cumsum(np.bincount(query_of[best], minlength=len(run.queries)), out=offsets[1:])
    items, scores = docs[best], run.scores[best]
    order = rank_order(offsets, items, scores)
    vocab = np.asarray(ids.doc_ids, dtype=object)
    return Run(run.queries, offsets, items[order], scores[order], vocab)


def document_qrels(qrels: Qrels, ids: CorpusIds) -> Qrels:
    """Document-level judgements: a document takes the best grade of its judged passages
    (passages the corpus lacks are left out)."""
    passages = list(dict.fromkeys(p for items in qrels.values() for p in items))
    codes = ids.document_of(passages)
    found = np.flatnonzero(codes >= 0)
    doc_of = dict(zip([passages[i] for i in found.tolist()], ids.doc_ids[codes[found]].tolist()))
    out: Qrels = {}
    for qid, judged in qrels.items():
        docs: dict[str, int] = {}
        for passage, grade in judged.items():
            doc = doc_of.get(passage)
            if doc is not None:
                docs[doc] = max(grade, docs.get(doc, grade))
        out[qid] = docs
    return out
