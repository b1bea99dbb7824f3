"""Document-level views of passage-level data: a passage run's MaxP document run (the DAPR
paper's Table 4) and document judgements derived from passage judgements."""

from __future__ import annotations

import numpy as np

from dapr.data import Qrels, Run, rank_order
from dapr.ids import CorpusIds


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
    vocab = np.asarray(ids.doc_ids, dtype=object)
    order = rank_order(offsets, items, scores, vocab)
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
