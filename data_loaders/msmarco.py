"""MS MARCO for DAPR: MS MARCO QnA passages located inside their MS MARCO source documents.

Sources (MS MARCO terms: non-commercial research use, see https://microsoft.github.io/msmarco/):
the QnA v2.1 files ``train_v2.1.json`` and ``dev_v2.1.json`` (one JSON object of columns
``{"query": {row: text}, "query_id": {row: id}, "passages": {row: [{is_selected,
passage_text, url}]}, ...}``) and the document-ranking collection ``msmarco-docs.tsv``
(``docid \\t url \\t title \\t body``), each downloaded gzipped from
https://msmarco.z22.web.core.windows.net and read plain or gzipped.

Construction (the DAPR paper's Appendix A, following its reference builder):

- Every QnA passage (selected or not) whose URL names a document with a non-empty body is
  located in that body (body stripped of surrounding whitespace): first as an exact substring,
  else as the leftmost substring within at most ``max_edits`` (5) Levenshtein edits, the span
  the reference builder's ``regex`` search ``(passage){e<=5}`` finds. Passages not located are
  dropped. The search is exact but fast: a passage within 5 edits contains one of 6 pieces of
  itself verbatim, so only the places where a piece occurs are verified (with rapidfuzz), and
  ``regex`` runs only there, when the span's end is ambiguous or the span opens the document.
  The first document line of a URL is used; later lines with the same URL are skipped.
- Within each QnA file, a span of a document located twice keeps its first passage (file order).
- Splits. With the passage-ranking ``qrels.dev.small.tsv`` in the source (rule ``paper``, the
  reference's): test = the selected dev pairs of its queries; dev = a ``random.Random(42)``
  sample of the other selected dev pairs, as many as test has; train = the train file. Without
  it (rule ``qna``): test = every selected dev pair; dev = the same sample drawn from the
  selected train pairs, each sampled query moving to dev with all its selected pairs; train =
  the rest of the train file. Unselected train passages stay as (non-relevant) labelled spans.
- Overlapping spans of one document: the span of the higher split wins (test > dev > train);
  between two train spans the later-starting one wins.
- A document (doc id and title from the tsv) is kept when it holds a span; it is cut into the
  spans (candidates, ``Passage.is_candidate``) and the text between them (not candidates), so
  the passages joined give the body back. Relevance: grade 1 for a selected passage's span;
  queries without one are dropped. Passage ids ``f"{doc_id}-{position}"``.

Memory stays bounded: the QnA JSON is streamed with ijson into a temporary SQLite store, the
tsv is streamed twice (locate, then cut), and the kept documents are written, already cut, to a
gzipped spill file under ``$DAPR_HOME/tmp`` (or ``work_dir``). The returned corpus streams
from that spill; the directory is removed when the corpus object is garbage-collected or the
process exits, so write the dataset (``dapr data build`` does) before dropping it. On the
sample scaled to 36,000 documents (``benchmarks/msmarco_build.py``) the build peaks at 169 MB
against 1.2 GB for the reference's load-everything approach, with the same result.

Options (``--set``): ``split`` = auto (paper when ``qrels.dev.small.tsv`` is present, else
qna) | paper | qna; ``max_edits`` (5); ``seed`` (42); ``work_dir`` (where the spill goes).
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from functools import partial
from pathlib import Path

from dapr.data_loaders.msmarco_spans import MAX_EDITS
from dapr.data_loaders.msmarco_store import (
    DEV,
    DEV_FILE,
    DOCS,
    HOST,
    NAME,
    QNA_NEEDS,
    RANKING_QRELS,
    RANKING_QRELS_URL,
    SEED,
    TRAIN,
    TRAIN_FILE,
    Counts,
    QnaReader,
    Rule,
    assign,
    check_queries,
    connect,
    deduplicate,
    has_passages,
    locate_all,
    raw_path,
    read_spill,
    remove_overlaps,
    write_spill,
)

from dapr.data import Corpus, Dataset, Split
from dapr.datasets.adapter import Adapter, RawFile
from dapr.errors import DataError
from dapr.io.trec import read_trec_qrels
from dapr.paths import home

# --------------------------------------------------------------------------- the adapter


class MSMARCO(Adapter):
    name = NAME
    origin = (
        f"MS MARCO QnA v2.1 passages located in MS MARCO documents (DAPR Appendix A), from {HOST}"
    )
    raw_files = (
        RawFile(f"{DOCS}.gz", f"{HOST}/msmarcoranking/{DOCS}.gz", None, f"or the unpacked {DOCS}"),
        RawFile(f"{TRAIN}.gz", f"{HOST}/msmarco/{TRAIN}.gz", None, f"or the unpacked {TRAIN}"),
        RawFile(f"{DEV}.gz", f"{HOST}/msmarco/{DEV}.gz", None, f"or the unpacked {DEV}"),
    )
    hub_repo = "UKPLab/dapr"

    def require(self, source: Path, download: bool = False) -> None:
        """Every raw file, plain or gzipped, is in ``source`` (downloaded gzipped if asked)."""
        from dapr.datasets.download import fetch

        for raw in self.raw_files:
            plain = raw.path.removesuffix(".gz")
            if raw_path(source, plain) is not None:
                continue
            if download and raw.url:
                fetch(raw.url, Path(source) / raw.path, raw.sha256)
                continue
            raise DataError(
                f"{Path(source) / plain}: missing raw file of {NAME} (plain or .gz); download "
                f"{raw.url} there, or rerun with --download"
            )

    def build(
        self,
        source: Path,
        *,
        split: Rule = "auto",
        max_edits: int = MAX_EDITS,
        seed: int = SEED,
        work_dir: Path | None = None,
    ) -> Dataset:
        """The dataset from the raw files in ``source`` (see the module docstring).

        :param split: How the splits are drawn: ``paper`` (test: the passage-ranking dev
            queries), ``qna`` (test: every selected dev pair) or ``auto`` (``paper`` when its
            qrels file is in ``source``).
        :param max_edits: Levenshtein edits a QnA passage may differ by from its place in the
            document.
        :param seed: The seed of the random sample of queries that makes the dev split.
        :param work_dir: Where the temporary spill of the kept documents goes (None:
            ``$DAPR_HOME/tmp``).
        """
        for key, value in (("max_edits", max_edits), ("seed", seed)):
            if value < 0:
                raise self.option_error(key, "a non-negative integer", value)
        source = Path(source)
        self.require(source)
        ranking_file = raw_path(source, RANKING_QRELS)
        rule = split
        if rule == "auto":
            rule = "paper" if ranking_file is not None else "qna"
        if rule == "paper" and ranking_file is None:
            raise DataError(
                f"{source / RANKING_QRELS}: missing; split=paper needs the passage-ranking dev "
                f"qrels (in {RANKING_QRELS_URL}), or use split=qna"
            )
        root = Path(work_dir) if work_dir is not None else home() / "tmp"
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix="msmarco-", dir=root))
        try:
            splits, ndocs, counts = _build(source, work, rule, ranking_file, max_edits, seed)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        corpus = Corpus(partial(read_spill, work / "corpus.jsonl.gz"))
        weakref.finalize(corpus, shutil.rmtree, work, True)
        notes = (
            f"split rule {rule!r}: "
            + (
                "test = QnA dev queries of the passage-ranking dev (small) qrels, dev = a "
                "sample of the other QnA dev pairs, train = QnA train"
                if rule == "paper"
                else "test = QnA dev, dev = a sample of QnA train pairs, train = the rest"
            ),
            f"located {counts.located} of {counts.with_document} QnA passages whose URL has a "
            f"document (at most {max_edits} edits); {ndocs} documents kept"
            + (
                f"; {counts.duplicate_urls} later document lines repeating a URL skipped"
                if counts.duplicate_urls
                else ""
            ),
            "passages: the located QnA passages (candidates) and the text between them "
            "(not candidates)",
        )
        return Dataset(NAME, corpus, splits, notes=notes)


def _build(
    source: Path, work: Path, rule: str, ranking_file: Path | None, max_edits: int, seed: int
) -> tuple[dict[str, Split], int, Counts]:
    db = connect(work / "store.sqlite")
    db.execute("BEGIN")  # one transaction: no journal, nothing to roll back (files are dropped)
    try:
        for name, file in ((TRAIN, TRAIN_FILE), (DEV, DEV_FILE)):
            path = raw_path(source, name)
            assert path is not None
            if not QnaReader(path, file, db).read() and not has_passages(path):
                raise DataError(f"{path}: no 'passages' column found; {QNA_NEEDS}")
            check_queries(db, path, file)
        db.execute("CREATE INDEX passage_url ON passage (ukey)")
        docs = raw_path(source, DOCS)
        assert docs is not None
        counts = locate_all(db, docs, max_edits)
        deduplicate(db)
        ranking = set(read_trec_qrels(ranking_file)) if rule == "paper" and ranking_file else None
        assign(db, rule, ranking, seed)
        remove_overlaps(db)
        splits, ndocs = write_spill(db, docs, work / "corpus.jsonl.gz")
    finally:
        db.close()
        (work / "store.sqlite").unlink(missing_ok=True)
    return splits, ndocs, counts


adapter = MSMARCO()
