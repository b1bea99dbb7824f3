"""Training examples: ``(query, positive, negatives...)`` from a split's judgements.

Negatives come from two sources, in this order: *mined* (the best-ranked unjudged passages of a
retriever's run over the training queries: BM25- or dense-mined) and *same-document* (other
passages of the positive's own document: the DAPR problem, a passage that shares every word of
its context but does not answer). A passage judged for the query is never a negative.
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dapr.data import Corpus, Qrels, Queries, Run
from dapr.errors import DaprError


@dataclass(frozen=True)
class Example:
    """One training row: the query, a relevant passage's text and negative passages' texts;
    ``label`` is the positive's grade over the split's highest (1 for binary judgements)."""

    query: str
    positive: str
    negatives: tuple[str, ...] = ()
    label: float = 1.0


def positives(qrels: Qrels, min_grade: int = 1) -> dict[str, list[str]]:
    """Per query, its passages judged ``min_grade`` or better (queries without any left out)."""
    if min_grade < 1:
        raise DaprError(
            f"training: min_grade must be at least 1 (a relevant grade), got {min_grade}"
        )
    found = {
        q: sorted(p for p, g in judged.items() if g >= min_grade) for q, judged in qrels.items()
    }
    return {q: found[q] for q in sorted(found) if found[q]}


def examples(
    queries: Queries,
    qrels: Qrels,
    texts: Mapping[str, str],
    corpus: Corpus,
    min_grade: int = 1,
    same_document: int = 0,
    mined: Run | None = None,
    mined_count: int = 0,
    seed: int = 0,
    sample_from: int = 0,
) -> list[Example]:
    """One example per (query, positive) pair, each with ``mined_count`` mined negatives (the
    run's best unjudged passages; with ``sample_from`` n, drawn at random from its best n
    unjudged, as RocketQA samples hard negatives from the top of a ranking) then
    ``same_document`` passages of the positive's document; draws use ``seed``. ``texts`` gives
    each passage's (contextualized) text."""
    chosen = positives(qrels, min_grade)
    if not chosen:
        raise DaprError(
            f"training: no query has a passage judged {min_grade} or better; choose a split "
            "with judgements or lower min_grade"
        )
    ranked = mined.to_dict() if mined is not None else {}
    top = max(g for judged in qrels.values() for g in judged.values())
    siblings = _siblings(corpus)
    rng = random.Random(seed)
    rows = []
    for qid, relevant in chosen.items():
        judged = set(qrels[qid])
        pool = [p for p in ranked.get(qid, {}) if p not in judged and p in texts]
        for positive in relevant:
            if positive not in texts:
                continue
            if sample_from:
                best = pool[:sample_from]
                negatives = rng.sample(best, min(mined_count, len(best)))
            else:
                negatives = pool[:mined_count]
            if same_document:
                others = [
                    p
                    for p in siblings.get(positive, ())
                    if p not in judged and p in texts and p not in negatives
                ]
                negatives += rng.sample(others, min(same_document, len(others)))
            grade = qrels[qid][positive]
            rows.append(
                Example(
                    queries[qid], texts[positive], tuple(texts[p] for p in negatives), grade / top
                )
            )
    if not rows:
        raise DaprError(
            "training: none of the judged passages is among the texts to train on (are they "
            "retrieval candidates of this corpus?)"
        )
    return rows


def usual_count(rows: Sequence[Example]) -> int:
    """The count of negatives most rows have (the smaller on a tie): what :func:`uniform` keeps;
    0 for no rows."""
    counts = Counter(len(r.negatives) for r in rows)
    return max(counts, key=lambda n: (counts[n], -n)) if counts else 0


def uniform(rows: Sequence[Example]) -> list[Example]:
    """The rows with one count of negatives, as a batch needs: :func:`usual_count`; rows with
    more are cut to it, and rows with fewer (a query whose mined candidates denoising removed)
    are left out with a line on stderr, so one short row does not take every row's negatives
    away."""
    kept = usual_count(rows)
    short = sum(1 for r in rows if len(r.negatives) < kept)
    if short:
        print(f"dapr: training: {short} of {len(rows)} examples have fewer than {kept} negatives "
              "(denoising or a short ranking) and are left out", file=sys.stderr)  # fmt: skip
    return [
        Example(r.query, r.positive, r.negatives[:kept], r.label)
        for r in rows
        if len(r.negatives) >= kept
    ]


def _siblings(corpus: Corpus) -> dict[str, tuple[str, ...]]:
    """Per passage id, the other candidate passages of its document."""
    found: dict[str, tuple[str, ...]] = {}
    for document in corpus:
        ids = [p.id for p in document.passages if p.is_candidate]
        for pid in ids:
            found[pid] = tuple(p for p in ids if p != pid)
    return found
