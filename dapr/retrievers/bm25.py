"""BM25 as Lucene (and Pyserini, the DAPR reference) computes it, on bm25s or on Lucene itself.

``backend="bm25s"`` (the default) computes the weights of Lucene's ``BM25Similarity`` itself
(:class:`LuceneWeights`, in Lucene's float32 arithmetic): idf = ln(1 + (n - df + 0.5) / (df +
0.5)), term weight tf / (tf + k1 (1 - b + b |d| / avgdl)), k1=0.9, b=0.4, with the document length
|d| kept in one byte as Lucene keeps it (:func:`lucene_lengths`: exact below 24, then 4
significant bits), and hands them to bm25s, which stores them and sums them per query. Items
tied on score rank by id, as Anserini ranks them. English text is analysed as Lucene's English
analyzer does, re-implemented in :mod:`dapr.retrievers.support.english` so both backends index the
same terms. The bm25s index is built in bounded memory (``index_memory``): postings and ids wait
on disk as they stream in, and the score matrix is written a range of terms at a time
(:mod:`dapr.retrievers.support.spill`), the same files, byte for byte, at any budget.

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
import mmap
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import numpy as np

from dapr.data import Run
from dapr.errors import DaprError, check_choice
from dapr.ids import read_id_list
from dapr.ranges import Range
from dapr.retrievers.support.cores import cores
from dapr.retrievers.support.english import english_batch, process_analyzer
from dapr.retrievers.support.postings import stream_postings
from dapr.retrievers.support.spill import MEMORY, Spill, parse_size

if TYPE_CHECKING:
    from dapr.retrievers.support.lucene import LuceneSearcher

LANGUAGES = ("en", "zh")
"""Languages with a tokenizer (ISO 639-1 codes)."""
_T = TypeVar("_T")

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


class LuceneWeights:
    """The weights of Lucene's ``BM25Similarity`` for bm25s' score matrix, in its float32
    arithmetic: idf = ln(1 + (n - df + 0.5) / (df + 0.5)) and idf - idf / (1 + tf / (k1 (1 - b +
    b |d| / avgdl))), where n and avgdl count the documents with at least one term and |d| is the
    one-byte length (:func:`lucene_lengths`). ``df`` is every term's document frequency,
    ``lengths`` every document's number of terms; called with postings (each one's term,
    document and term frequency), it gives their weights."""

    def __init__(self, df: np.ndarray, lengths: np.ndarray, k1: float, b: float) -> None:
        counted = max(int(np.count_nonzero(lengths)), 1)
        self.idf = np.log(1 + (counted - df + 0.5) / (df + 0.5)).astype(np.float32)
        avgdl = np.float32(max(int(lengths.sum(dtype=np.int64)), 1) / counted)
        k1_32, b_32, one = np.float32(k1), np.float32(b), np.float32(1)
        self.inverse = np.empty(len(lengths), dtype=np.float32)
        for start in range(0, len(lengths), 1 << 16):  # a block at a time: no int64 copy of all
            part = lucene_lengths(lengths[start : start + (1 << 16)]).astype(np.float32)
            self.inverse[start : start + len(part)] = one / (
                k1_32 * ((one - b_32) + b_32 * part / avgdl)
            )

    def __call__(self, terms: np.ndarray, docs: np.ndarray, tf: np.ndarray) -> np.ndarray:
        weight = self.idf[terms]
        return weight - weight / (np.float32(1) + tf.astype(np.float32) * self.inverse[docs])


# --- the retriever ---------------------------------------------------------------------------


class BM25:
    """Lucene's BM25 variant (k1=0.9, b=0.4 by default) over Lucene's English analysis, or for
    ``language="zh"`` jieba's segmentation (see the module), on ``backend`` bm25s or pyserini
    (Lucene itself; ``java_heap`` bounds its JVM, ``index_memory`` a bm25s build). ``threads``
    (0: every core) index and search with Lucene; the bm25s backend runs on one core and searches
    its saved score matrix memory-mapped, reading the columns of the query terms on demand.

    :param k1: Term-frequency saturation: how much repeated query terms add.
    :param b: Document-length normalisation, from none (0) to full (1).
    :param threads: Cores that tokenize and index (and with pyserini search); 0: every core.
    :param language: ``en`` (Lucene's English analysis) or ``zh`` (jieba's segmentation).
    :param backend: ``bm25s`` (pure Python) or ``pyserini`` (Lucene, needs Java).
    :param java_heap: The JVM's maximum heap for pyserini, e.g. ``2g`` or ``512m``.
    :param index_memory: Working memory of a bm25s index build, e.g. ``1GB`` (the default) or
        ``200MB``: past it, postings and ids wait on disk; the index is the same, byte for byte.
        A search over a score matrix larger than it lets go of the pages it mapped every
        :data:`RELEASE_EVERY` queries (see :func:`release_pages`).
    """

    version = "2"

    def __init__(
        self,
        k1: Annotated[float, Range(0)] = 0.9,  # Lucene refuses k1 < 0 and b outside [0, 1]
        b: Annotated[float, Range(0, 1)] = 0.4,
        threads: Annotated[int, Range(0)] = 0,
        language: str = "en",
        backend: str = "bm25s",
        java_heap: str = "2g",
        index_memory: Annotated[int | str, Range(1)] = MEMORY,  # bytes, or a size such as 1GB
    ) -> None:
        check_choice("retriever 'bm25'", "language", language, LANGUAGES)
        check_choice("retriever 'bm25'", "backend", backend, BACKENDS)
        self._memory = parse_size(index_memory, "retriever 'bm25': index_memory")
        self.index_memory = index_memory
        self.k1 = k1
        self.b = b
        self.threads = threads
        self.language = language
        self.backend = backend
        self.java_heap = java_heap
        self._model: Any = None  # a bm25s.BM25 once loaded
        self._ids: np.ndarray | None = None
        self._ids_file: Path | None = None  # read on first use after index()
        self._lucene: LuceneSearcher | None = None

    def identity(self) -> dict[str, Any]:
        """What determines the results: ``k1``, ``b``, ``language`` and ``backend``."""
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
        """Index ``(id, text)`` pairs into the folder ``store``, then search it."""
        if self.backend == "pyserini":
            from dapr.retrievers.support import lucene

            store.mkdir(parents=True, exist_ok=True)
            lucene.build_index(items, store, self.language, self._cores(), self.java_heap)
            self.load(store)
            return
        bm25s, _ = _require_bm25s()
        store.mkdir(parents=True, exist_ok=True)
        with Spill(store, self._memory) as spill:  # postings and ids on disk, then the matrix
            vocab = self._postings(items, spill)
            vocab[""] = len(vocab)  # bm25s' empty term, for queries with no known term
            rank = spill.write_ids(store / "ids.json")  # sorted: ties rank by id, as in Anserini
            weights = LuceneWeights(spill.df(len(vocab)), spill.lengths(), self.k1, self.b)
            model = bm25s.BM25(k1=self.k1, b=self.b, method="lucene")
            model.vocab_dict = vocab
            model.nonoccurrence_array = None
            empty = {"data": np.zeros(0, np.float32), "indices": np.zeros(0, np.int32)}
            model.scores = {**empty, "indptr": np.zeros(1, np.int64), "num_docs": spill.documents}
            # bm25s writes its vocabulary and parameters, then the matrix is written over its
            # empty arrays, a range of terms at a time
            model.save(str(store / "bm25s"), show_progress=False)
            del model
            spill.write_matrix(store / "bm25s", len(vocab), weights, rank)
        if self.language != "en":
            (store / _LANGUAGE_FILE).write_text(json.dumps({"language": self.language}))
        self._model = self._ids = None
        self._model = bm25s.BM25.load(str(store / "bm25s"), mmap=True, show_progress=False)
        self._ids_file = store / "ids.json"  # read by the first search: the build holds no ids

    def _postings(self, items: Iterable[tuple[str, str]], spill: Spill) -> dict[str, int]:
        """The items' postings, a batch of texts at a time, added to ``spill``; the vocabulary
        (term -> id). Texts are tokenized on every core when there are enough of them
        (:mod:`~dapr.retrievers.support.postings`)."""
        tokenize = english_batch if self.language == "en" else chinese_batch
        if self.language == "zh":
            _require_jieba()  # named before any worker starts
        vocab: dict[str, int] = {}
        for batch_ids, batch, counts in stream_postings(items, tokenize, vocab, self._cores()):
            spill.add(batch_ids, batch, counts)
        return vocab

    def load(self, store: Path) -> None:
        """Search the index :meth:`index` built in ``store``."""
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
        self._ids = read_id_list(store / "ids.json", int(self._model.scores["num_docs"]))
        self._ids_file = None

    def _searchable(self, method: str) -> np.ndarray:
        """The items' ids (read now if index() left them on disk); an error before any index."""
        if self._ids is None and self._ids_file is not None:
            self._ids = read_id_list(self._ids_file, int(self._model.scores["num_docs"]))
        if self._model is None or self._ids is None:
            raise RuntimeError(f"BM25.{method} called before index() or load()")
        return self._ids

    def _check_language(self, store: Path, indexed: str) -> None:
        if indexed != self.language:
            raise DaprError(
                f"{store}: this BM25 index was built for language {indexed!r}, not "
                f"{self.language!r}; rebuild it or search it with language={indexed!r}"
            )

    def search(self, queries: Mapping[str, str], k: int) -> Run:
        """The top ``k`` items for each of ``{query_id: text}``."""
        if self._lucene is not None:
            return self._lucene.search(queries, k, self._cores())
        ids = self._searchable("search")
        qids = list(queries)
        texts = self._tokenize([queries[q] for q in qids])
        found = [self._top(terms, k) for terms in self._releasing(texts)]
        items, scores = zip(*found) if found else ((), ())
        return Run.from_lists(qids, list(items), list(scores), ids)

    def score(self, queries: Mapping[str, str], candidates: Run) -> Run:
        """The items of ``candidates`` (its scores ignored) ranked for each of its queries that
        ``queries`` has, with the scores :meth:`search` gives them; candidates that are not in
        the index are dropped, and candidates sharing no term with the query, which search
        leaves out, score 0. On bm25s every item is scored and the candidates picked out; on
        Lucene the query runs with a filter on the candidates' ids."""
        if self._lucene is not None:
            return lucene_scores(self._lucene, queries, candidates)
        ids = self._searchable("score")
        from dapr.retrievers.support.index_rows import candidate_rows

        qids, rows = candidate_rows(queries, candidates, ids)
        texts = [queries[q] for q, found in zip(qids, rows) if len(found)]
        terms = iter(self._tokenize(texts))
        scores = []
        for found in self._releasing(rows):
            query = next(terms) if len(found) else []
            every = self._model.get_scores(query) if query else None
            scores.append(np.zeros(len(found)) if every is None else every[found])
        return Run.from_lists(qids, rows, scores, ids)

    def _releasing(self, queries: Iterable[_T]) -> Iterator[_T]:
        """``queries`` one by one, letting go of the index pages they mapped every
        :data:`RELEASE_EVERY` of them and after the last (:func:`release_pages`)."""
        for n, query in enumerate(queries, 1):
            yield query
            if n % RELEASE_EVERY == 0:
                release_pages(self._model, self._memory)
        release_pages(self._model, self._memory)

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


RELEASE_EVERY = 1
"""Queries a bm25s index answers between two releases of the pages they mapped: every query
(300 queries over 4M passages: peak RSS 0.33 GiB at 1, 0.53 at 16, in the same time)."""


def release_pages(model: Any, budget: int) -> None:
    """Let go of the pages of ``model``'s memory-mapped score matrix that this process mapped,
    when the matrix is larger than ``budget`` (the retriever's ``index_memory``):
    ``madvise(MADV_DONTNEED)`` on the file's clean pages, which stay in the page cache, so the
    next query maps them again without reading the disk. A search's resident memory then holds
    what the last few queries' postings took, not every posting it read (6.7 GB for 1,000
    queries over 8.8M passages before, 1.3 GB of it the process's own)."""
    arrays = [a for a in model.scores.values() if getattr(a, "_mmap", None) is not None]
    if sum(a.nbytes for a in arrays) <= budget or not hasattr(mmap, "MADV_DONTNEED"):
        return
    for array in arrays:
        array._mmap.madvise(mmap.MADV_DONTNEED)


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
