"""BM25 as Lucene (and Pyserini, the DAPR reference) computes it, on bm25s or on Lucene itself.

``backend="bm25s"`` (the default) computes the weights of Lucene's ``BM25Similarity`` itself
(:func:`lucene_weights`, in Lucene's float32 arithmetic): idf = ln(1 + (n - df + 0.5) / (df +
0.5)), term weight tf / (tf + k1 (1 - b + b |d| / avgdl)), k1=0.9, b=0.4, with the document length
|d| kept in one byte as Lucene keeps it (:func:`lucene_lengths`: exact below 24, then 4
significant bits), and hands them to bm25s, which stores them and sums them per query. Items
tied on score rank by id, as Anserini ranks them. English text is analysed as Lucene's English
analyzer does, re-implemented in :mod:`dapr.retrievers.support.english` so both backends index the
same terms.

Chinese (``language="zh"``), written without spaces, is segmented with jieba's search-engine mode
(:func:`jieba.lcut_for_search`): besides each word it emits the dictionary words inside long
ones (冠状病毒 -> 冠状, 病毒, 冠状病毒), so a query worded more briefly or at a finer grain than
the passage still matches. Latin letters are lowercased, tokens of only punctuation or
whitespace are dropped, and nothing is stemmed; no stop words are removed, since BM25's idf
already gives the frequent function words (的, 了, 是) almost no weight.

``backend="pyserini"`` indexes and searches with Lucene itself (see
:mod:`dapr.retrievers.support.lucene`; for Chinese it uses Lucene's CJK bigrams, not jieba). Either
backend returns the top ``k`` items with a score above 0: items sharing no term with the query are
never returned. ``score`` ranks given candidates (hierarchical retrieval) with the same scores, 0
for those sharing no term.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np

from dapr.data import Run
from dapr.errors import DaprError, check_choice
from dapr.ranges import Range
from dapr.retrievers.support.cores import cores
from dapr.retrievers.support.english import english_batch, process_analyzer
from dapr.retrievers.support.postings import Postings, stream_postings

if TYPE_CHECKING:
    from dapr.retrievers.support.lucene import LuceneSearcher

LANGUAGES = ("en", "zh")
"""Languages with a tokenizer (ISO 639-1 codes)."""
BACKENDS = ("bm25s", "pyserini")
_LANGUAGE_FILE = "language.json"
"""Written beside a non-English index, so it is never searched with another tokenizer."""


_BM25S_SKIPS = ("jax", "numba", "scipy")
"""Optional libraries bm25s imports when they are installed and dapr never uses through it (its
numpy backend scores, :meth:`BM25._top` selects): jax took 2.6 s to import on a GPU machine, and
bm25s runs a top-k with it on import, which starts JAX on the GPU and reserves most of its
memory; numba and scipy took 0.2 s and 0.3 s more there."""


def _import_bm25s() -> Any:
    """bm25s, imported without :data:`_BM25S_SKIPS` (each reads as not installed to it; any
    already imported is put back)."""
    if "bm25s" in sys.modules:
        return sys.modules["bm25s"]
    hidden = {name: sys.modules.get(name) for name in _BM25S_SKIPS}
    # None: "import jax" raises ImportError (the import system's own convention)
    sys.modules.update(dict.fromkeys(hidden))  # type: ignore[arg-type]  # None on purpose
    try:
        import bm25s
    finally:
        for name, module in hidden.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return bm25s


def _require_bm25s() -> tuple[Any, Any]:
    try:
        bm25s = _import_bm25s()
        import Stemmer
    except ImportError as error:
        raise DaprError(
            f"retriever 'bm25' needs bm25s and PyStemmer ({error.name} is missing); "
            'install them with: pip install "dapr-ir[bm25]"'
        ) from None
    return bm25s, Stemmer


def _require_jieba() -> Any:
    try:
        import jieba
    except ImportError:
        raise DaprError(
            "retriever 'bm25' with language 'zh' needs jieba; install it with: "
            'pip install "dapr-ir[zh]"'
        ) from None
    jieba.setLogLevel(logging.WARNING)  # its dictionary loading reports on stderr otherwise
    return jieba


def chinese_tokens(text: str, jieba: Any) -> list[str]:
    """jieba's search-engine segmentation of lowercased ``text``, without tokens holding no
    letter or digit (punctuation, whitespace)."""
    return [t for t in jieba.lcut_for_search(text.lower()) if any(c.isalnum() for c in t)]


def chinese_batch(texts: list[str], memo: dict) -> tuple[list[str], np.ndarray, np.ndarray]:
    """A batch of Chinese texts as :func:`~dapr.retrievers.support.english.english_batch`
    gives an English one."""
    jieba = _require_jieba()
    vocab: dict[str, int] = memo.setdefault("vocab", {})
    order: list[str] = memo.setdefault("order", [])  # the terms by id
    before = len(order)

    def term_id(term: str) -> int:
        found = vocab.get(term)
        if found is None:
            found = vocab[term] = len(order)
            order.append(term)
        return found

    found = [list(map(term_id, chinese_tokens(text, jieba))) for text in texts]
    counts = np.array([len(terms) for terms in found], dtype=np.int64)
    flat = np.fromiter((t for terms in found for t in terms), dtype=np.int32, count=counts.sum())
    return order[before:], flat, counts


# --- Lucene's English analyzer ---------------------------------------------------------------


def lucene_lengths(lengths: np.ndarray) -> np.ndarray:
    """Document lengths as Lucene keeps them, in one byte (``SmallFloat.intToByte4``): exact
    below 24, above only the four leading bits of ``length - 24`` survive (100 -> 96)."""
    rest = np.maximum(lengths.astype(np.int64) - 24, 0)
    shift = np.maximum(np.frexp(rest)[1] - 4, 0)
    return np.where(lengths < 24, lengths, 24 + ((rest >> shift) << shift))


def lucene_weights(
    chunks: list[Postings],
    lengths: np.ndarray,
    terms: int,
    k1: float,
    b: float,
    rank: np.ndarray | None = None,
) -> dict[str, Any]:
    """bm25s' score matrix (one column of documents and weights per term) with the weights of
    Lucene's ``BM25Similarity``, in its float32 arithmetic: idf = ln(1 + (n - df + 0.5) / (df +
    0.5)) and idf - idf / (1 + tf / (k1 (1 - b + b |d| / avgdl))), where n and avgdl count the
    documents with at least one term and |d| is the one-byte length (:func:`lucene_lengths`).

    ``chunks`` are the :func:`~dapr.retrievers.support.postings.postings` of consecutive runs of
    documents, written into the matrix on every core, then emptied; ``lengths`` every
    document's number of terms; ``terms`` the size of the vocabulary; ``rank`` the matrix row
    of each document (by default its position)."""
    documents = len(lengths)
    rank = np.arange(documents) if rank is None else rank
    df = np.zeros(terms, dtype=np.int64)
    for chunk in chunks:
        df[chunk.terms] += chunk.counts
    counted = max(int(np.count_nonzero(lengths)), 1)
    idf = np.log(1 + (counted - df + 0.5) / (df + 0.5)).astype(np.float32)
    avgdl = np.float32(max(int(lengths.sum()), 1) / counted)
    k1_32, b_32, one = np.float32(k1), np.float32(b), np.float32(1)
    inverse = one / (
        k1_32 * ((one - b_32) + b_32 * lucene_lengths(lengths).astype(np.float32) / avgdl)
    )
    indptr = np.zeros(terms + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    free = indptr[:-1].copy()  # where each term's next posting goes
    firsts = []  # per chunk, where each of its terms' postings go
    for chunk in chunks:
        firsts.append(free[chunk.terms])
        free[chunk.terms] += chunk.counts
    indices = np.empty(indptr[-1], dtype=np.int32)
    data = np.empty(indptr[-1], dtype=np.float32)

    def place(chunk: Postings, first: np.ndarray) -> None:
        starts = np.cumsum(chunk.counts) - chunk.counts
        at = np.repeat(first - starts, chunk.counts) + np.arange(int(chunk.counts.sum()))
        doc = chunk.docs.astype(np.int64) + chunk.first
        weight = np.repeat(idf[chunk.terms], chunk.counts)
        indices[at] = rank[doc]
        data[at] = weight - weight / (one + chunk.tf.astype(np.float32) * inverse[doc])

    with ThreadPoolExecutor(max_workers=cores()) as threads:  # chunks fill disjoint places
        list(threads.map(place, chunks, firsts))
    chunks.clear()
    return {"data": data, "indices": indices, "indptr": indptr, "num_docs": documents}


# --- the retriever ---------------------------------------------------------------------------


class BM25:
    """Lucene's BM25 variant (k1=0.9, b=0.4 by default) over Lucene's English analysis, or for
    ``language="zh"`` jieba's segmentation (see the module), on ``backend`` bm25s or pyserini
    (Lucene itself; ``java_heap`` bounds its JVM). ``threads`` (0: every core) index and search
    with Lucene; the bm25s backend runs on one core and searches its saved score matrix
    memory-mapped, reading the columns of the query terms on demand."""

    version = "2"

    def __init__(
        self,
        k1: Annotated[float, Range(0)] = 0.9,  # Lucene refuses k1 < 0 and b outside [0, 1]
        b: Annotated[float, Range(0, 1)] = 0.4,
        threads: Annotated[int, Range(0)] = 0,
        language: str = "en",
        backend: str = "bm25s",
        java_heap: str = "2g",
    ) -> None:
        check_choice("retriever 'bm25'", "language", language, LANGUAGES)
        check_choice("retriever 'bm25'", "backend", backend, BACKENDS)
        self.k1 = k1
        self.b = b
        self.threads = threads
        self.language = language
        self.backend = backend
        self.java_heap = java_heap
        self._model: Any = None  # a bm25s.BM25 once loaded
        self._ids: np.ndarray | None = None
        self._lucene: LuceneSearcher | None = None

    def identity(self) -> dict[str, Any]:
        return {"k1": self.k1, "b": self.b, "language": self.language, "backend": self.backend}

    def _cores(self) -> int:
        return self.threads if self.threads > 0 else cores()

    def _tokenize(self, texts: list[str]) -> list[list[str]]:
        if self.language == "zh":
            jieba = _require_jieba()
            return [chinese_tokens(text, jieba) for text in texts]
        analyzer = process_analyzer()
        return [analyzer.terms(text) for text in texts]

    def index(self, items: Iterable[tuple[str, str]], store: Path) -> None:
        if self.backend == "pyserini":
            from dapr.retrievers.support import lucene

            store.mkdir(parents=True, exist_ok=True)
            lucene.build_index(items, store, self.language, self._cores(), self.java_heap)
            self.load(store)
            return
        bm25s, _ = _require_bm25s()
        ids: list[str] = []
        chunks, lengths, vocab = self._postings(items, ids)
        vocab[""] = len(vocab)  # bm25s' empty term, for queries with no known term
        order = np.argsort(np.array(ids, dtype=object), kind="stable")
        rank = np.empty(len(ids), dtype=np.int64)
        rank[order] = np.arange(len(ids))  # items by id: ties rank by id, as in Anserini
        ids = [ids[i] for i in order]
        model = bm25s.BM25(k1=self.k1, b=self.b, method="lucene")
        model.scores = lucene_weights(chunks, lengths, len(vocab), self.k1, self.b, rank)
        model.vocab_dict = vocab
        model.unique_token_ids_set = set(vocab.values())
        model.nonoccurrence_array = None
        store.mkdir(parents=True, exist_ok=True)
        model.save(str(store / "bm25s"), show_progress=False)
        del model  # searched from the saved matrix, memory-mapped as load() maps it
        (store / "ids.json").write_text(json.dumps(ids))
        if self.language != "en":
            (store / _LANGUAGE_FILE).write_text(json.dumps({"language": self.language}))
        self._model = bm25s.BM25.load(str(store / "bm25s"), mmap=True, show_progress=False)
        self._ids = np.array(ids, dtype=object)

    def _postings(
        self, items: Iterable[tuple[str, str]], ids: list[str]
    ) -> tuple[list[Postings], np.ndarray, dict[str, int]]:
        """The postings of the items, a batch of texts at a time, every item's number of terms,
        and the vocabulary (term -> id); the item ids are appended to ``ids``. Texts are
        tokenized on every core when there are enough of them
        (:mod:`~dapr.retrievers.support.postings`)."""
        tokenize = english_batch if self.language == "en" else chinese_batch
        if self.language == "zh":
            _require_jieba()  # named before any worker starts
        vocab: dict[str, int] = {}
        chunks: list[Postings] = []
        lengths: list[np.ndarray] = []
        for batch_ids, batch, counts in stream_postings(items, tokenize, vocab, self._cores()):
            ids.extend(batch_ids)
            chunks.append(batch)
            lengths.append(counts)
        every = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
        return chunks, every.astype(np.int64), vocab

    def load(self, store: Path) -> None:
        from dapr.retrievers.support import lucene

        lucene_language = lucene.indexed_language(store)
        built = "pyserini" if lucene_language is not None else "bm25s"
        if built != self.backend:
            raise DaprError(
                f"{store}: this BM25 index was built with backend {built!r}, not "
                f"{self.backend!r}; rebuild it or search it with backend={built!r}"
            )
        if lucene_language is not None:
            self._check_language(store, lucene_language)
            self._lucene = lucene.LuceneSearcher(
                store, self.k1, self.b, self.language, self.java_heap
            )
            return
        bm25s, _ = _require_bm25s()
        marker = store / _LANGUAGE_FILE
        self._check_language(
            store, json.loads(marker.read_text())["language"] if marker.is_file() else "en"
        )
        self._model = self._ids = None  # before the new index arrives, not after
        self._model = bm25s.BM25.load(str(store / "bm25s"), mmap=True, show_progress=False)
        self._ids = np.array(json.loads((store / "ids.json").read_text()), dtype=object)

    def _check_language(self, store: Path, indexed: str) -> None:
        if indexed != self.language:
            raise DaprError(
                f"{store}: this BM25 index was built for language {indexed!r}, not "
                f"{self.language!r}; rebuild it or search it with language={indexed!r}"
            )

    def search(self, queries: Mapping[str, str], k: int) -> Run:
        if self._lucene is not None:
            return self._lucene.search(queries, k, self._cores())
        if self._model is None or self._ids is None:
            raise RuntimeError("BM25.search called before index() or load()")
        qids = list(queries)
        found = [self._top(terms, k) for terms in self._tokenize([queries[q] for q in qids])]
        items, scores = zip(*found) if found else ((), ())
        return Run.from_lists(qids, list(items), list(scores), self._ids)

    def score(self, queries: Mapping[str, str], candidates: Run) -> Run:
        """The items of ``candidates`` (its scores ignored) ranked for each of its queries that
        ``queries`` has, with the scores :meth:`search` gives them; candidates that are not in
        the index are dropped, and candidates sharing no term with the query, which search
        leaves out, score 0. On bm25s every item is scored and the candidates picked out; on
        Lucene the query runs with a filter on the candidates' ids."""
        if self._lucene is not None:
            return lucene_scores(self._lucene, queries, candidates)
        if self._model is None or self._ids is None:
            raise RuntimeError("BM25.score called before index() or load()")
        from dapr.retrievers.support.index_rows import candidate_rows

        qids, rows = candidate_rows(queries, candidates, self._ids)
        texts = [queries[q] for q, found in zip(qids, rows) if len(found)]
        terms = iter(self._tokenize(texts))
        scores = []
        for found in rows:
            query = next(terms) if len(found) else []
            every = self._model.get_scores(query) if query else None
            scores.append(np.zeros(len(found)) if every is None else every[found])
        return Run.from_lists(qids, rows, scores, self._ids)

    def _top(self, terms: list[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best items sharing a term with the query (by score, then id, as Lucene
        ranks them) and their scores: bm25s' score of every item, then a selection among the
        matching ones only (bm25s' own ``retrieve`` partitions every item's score: 2.6x slower).
        One query at a time on one core: threads did not help, numpy holding the GIL here."""
        if not terms or k < 1:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        scores = self._model.get_scores(terms)
        matched = np.flatnonzero(scores > 0)
        if len(matched) > k:
            values = scores[matched]
            kth = np.partition(values, len(values) - k)[len(values) - k]
            above, tied = matched[values > kth], matched[values == kth]
            matched = np.concatenate((above, tied[: k - len(above)]))
        return matched, scores[matched]


def lucene_scores(searcher: Any, queries: Mapping[str, str], candidates: Run) -> Run:
    """:meth:`BM25.score` on Lucene (a :class:`dapr.retrievers.support.lucene.LuceneSearcher`): per
    query, Anserini's bag-of-words query as an optional clause and the candidates' ids (a
    ``TermInSetQuery`` on the ``id`` field) as a filter, so every candidate in the index is a hit,
    scored as search scores it (0 when it shares no term with the query). One query at a time."""
    from jnius import autoclass

    java = searcher._searcher
    bag_of_words = autoclass("io.anserini.search.query.BagOfWordsQueryGenerator")()
    builder = autoclass("org.apache.lucene.search.BooleanQuery$Builder")
    occur = autoclass("org.apache.lucene.search.BooleanClause$Occur")
    within = autoclass("org.apache.lucene.search.TermInSetQuery")
    term = autoclass("org.apache.lucene.util.BytesRef")
    array_list = autoclass("java.util.ArrayList")
    analyzer = java.get_analyzer()
    vocab: dict[str, int] = {}
    qids, items, scores = [], [], []
    bounds = candidates.offsets.tolist()
    for q, qid in enumerate(candidates.queries.tolist()):
        if qid not in queries:
            continue
        wanted = np.unique(candidates.items[bounds[q] : bounds[q + 1]])
        hits = []
        if len(wanted):
            ids = array_list()
            for item in candidates.vocab[wanted].tolist():
                ids.add(term(item, signature="(Ljava/lang/CharSequence;)V"))
            query = (
                builder()
                .add(bag_of_words.buildQuery("contents", analyzer, queries[qid]), occur.SHOULD)
                .add(within("id", ids), occur.FILTER)
                .build()
            )
            hits = java.search(query, len(wanted))
        qids.append(qid)
        items.append(np.array([vocab.setdefault(h.docid, len(vocab)) for h in hits], np.int64))
        # Anserini rounds to 4 decimals and nudges ties below: filter-only hits fall to <= 0
        scores.append(np.array([max(h.score, 0.0) for h in hits], dtype=np.float64))
    return Run.from_lists(qids, items, scores, np.array(list(vocab), dtype=object))
