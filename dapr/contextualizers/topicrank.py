"""TopicRank keyphrase extraction, vectorised, on the same spaCy parse that pke reads.

TopicRank (Bougouin, Boudin and Daille, IJCNLP 2013) ranks topics rather than phrases. As the
``pke`` toolkit implements it, and as the DAPR paper ran it:

1. Candidates are the longest runs of nouns, proper nouns and adjectives inside one sentence,
   keyed by their stemmed words (NLTK's Porter stemmer) so that inflected forms merge. A candidate
   is dropped when its first surface form has a stop word (spaCy's English list), a word of
   punctuation only, a one-character word, a character other than letters, digits and ``-``, fewer
   than 3 characters in all, or more than 5 words.
2. Candidates are grouped into topics by average-linkage agglomerative clustering of the Jaccard
   distances of their stem sets, cut at distance 0.74 (about a quarter of shared stems).
3. The topics form a complete graph whose edge ``(i, j)`` weighs the sum, over every pair of
   occurrences of a candidate of topic ``i`` and one of topic ``j``, of ``1 / gap``: the number
   of tokens from the end of the earlier occurrence to the start of the later one.
4. PageRank (damping 0.85) scores the topics; each topic is represented by its candidate that
   occurs first, as its first surface form lower-cased.

Here every step after the parse works on arrays: candidate runs from a boolean mask, the stem-set
distances from one sparse product, the clustering with SciPy, the occurrence-pair weights summed
into a topic x topic matrix block by block, and PageRank as the power iteration NetworkX runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from string import punctuation
from typing import TYPE_CHECKING, cast

import numpy as np

if TYPE_CHECKING:
    pass

VALID_POS = frozenset({"NOUN", "PROPN", "ADJ"})
"""Parts of speech a candidate is made of."""
THRESHOLD = 0.74
"""Distance at which the average-linkage dendrogram is cut into topics."""
DAMPING = 0.85
MAX_WORDS = 5
MIN_CHARS = 3
MIN_WORD_CHARS = 2
_PUNCTUATION = frozenset(punctuation)
_BLOCK_CELLS = 1 << 22
"""Occurrence pairs weighed at a time (a float64 block of 32 MiB)."""
CACHE_LIMIT = 1 << 20
"""Words remembered by the stem and word-check caches before they start afresh."""


# --- words ------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _porter() -> Callable[[str], str]:
    from nltk.stem.snowball import SnowballStemmer

    return SnowballStemmer("porter").stem


@lru_cache(maxsize=1)
def stop_words() -> frozenset[str]:
    """spaCy's English stop words, the list pke filters with by default."""
    from spacy.lang.en.stop_words import STOP_WORDS

    return frozenset(STOP_WORDS)


_stems: dict[str, str] = {}
_word_checks: dict[str, bool] = {}


def stem(word: str) -> str:
    """The lower-cased Porter stem of ``word`` (NLTK's, as pke computes it), cached."""
    found = _stems.get(word)
    if found is None:
        if len(_stems) >= CACHE_LIMIT:
            _stems.clear()
        found = _stems[word] = _porter()(word).lower()
    return found


def word_ok(lower: str) -> bool:
    """Whether a lower-cased word may be part of a candidate (pke's default filters)."""
    found = _word_checks.get(lower)
    if found is None:
        if len(_word_checks) >= CACHE_LIMIT:
            _word_checks.clear()
        found = _word_checks[lower] = (
            lower not in stop_words()
            and len(lower) >= MIN_WORD_CHARS
            and not set(lower) <= _PUNCTUATION
            and lower.replace("-", "").isalnum()
        )
    return found


# --- candidates -------------------------------------------------------------------------------


@dataclass
class Candidates:
    """Kept candidates in sorted order of their stemmed (lexical) form, as pke clusters them.

    ``phrases[c]`` is the first surface form lower-cased, ``stems[c]`` the stemmed words;
    occurrence ``o`` of candidate ``owner[o]`` starts at token ``offsets[o]``.
    """

    phrases: list[str]
    stems: list[tuple[str, ...]]
    offsets: np.ndarray
    owner: np.ndarray

    def __len__(self) -> int:
        return len(self.phrases)


def candidate_runs(valid: np.ndarray, sentence_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (exclusive) of every longest run of ``valid`` tokens inside a sentence."""
    if not len(valid):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    new_sentence = np.empty(len(valid), dtype=bool)
    new_sentence[0] = True
    np.not_equal(sentence_ids[1:], sentence_ids[:-1], out=new_sentence[1:])
    previous = np.empty_like(valid)
    previous[0] = False
    previous[1:] = valid[:-1]
    following = np.empty_like(valid)
    following[-1] = False
    following[:-1] = valid[1:]
    last = np.empty_like(new_sentence)
    last[-1] = True
    last[:-1] = new_sentence[1:]
    starts = np.flatnonzero(valid & (~previous | new_sentence))
    ends = np.flatnonzero(valid & (~following | last)) + 1
    return starts, ends


def select_candidates(
    words: Sequence[str | None] | np.ndarray, valid: np.ndarray, sentence_ids: np.ndarray
) -> Candidates:
    """Group the runs by their stems and keep those whose first surface form passes the filters."""
    starts, ends = candidate_runs(valid, sentence_ids)
    first: dict[str, tuple[list[str], tuple[str, ...], bool]] = {}
    offsets: dict[str, list[int]] = {}
    for start, end in zip(starts.tolist(), ends.tolist()):
        surface = cast("Sequence[str]", words[start:end])  # runs hold valid tokens: no None
        stems = tuple(stem(w) for w in surface)
        key = " ".join(stems)
        if key in offsets:
            offsets[key].append(start)
            continue
        lower = [w.lower() for w in surface]
        kept = (
            len(stems) <= MAX_WORDS
            and all(word_ok(w) for w in lower)
            and len("".join(lower)) >= MIN_CHARS
        )
        first[key] = (lower, stems, kept)
        offsets[key] = [start]
    keys = sorted(k for k, (_, _, kept) in first.items() if kept)
    counts = [len(offsets[k]) for k in keys]
    return Candidates(
        phrases=[" ".join(first[k][0]) for k in keys],
        stems=[first[k][1] for k in keys],
        offsets=np.fromiter((o for k in keys for o in offsets[k]), np.int64, sum(counts)),
        owner=np.repeat(np.arange(len(keys)), counts),
    )


# --- topics -----------------------------------------------------------------------------------


def stem_distances(stems: Sequence[tuple[str, ...]]) -> np.ndarray:
    """Condensed Jaccard distances of the candidates' stem sets (SciPy's ``pdist`` values)."""
    from scipy.sparse import csr_matrix
    from scipy.spatial.distance import squareform

    vocabulary: dict[str, int] = {}
    rows, columns = [], []
    for c, words in enumerate(stems):
        for word in set(words):
            rows.append(c)
            columns.append(vocabulary.setdefault(word, len(vocabulary)))
    shape = (len(stems), len(vocabulary))
    member = csr_matrix((np.ones(len(rows)), (rows, columns)), shape=shape)
    shared = (member @ member.T).toarray()
    sizes = np.diag(shared).copy()
    union = sizes[:, None] + sizes[None, :] - shared
    return squareform((union - shared) / union, checks=False)


def topic_clusters(stems: Sequence[tuple[str, ...]], threshold: float = THRESHOLD) -> np.ndarray:
    """The 0-based topic of every candidate: average linkage cut at ``threshold``."""
    if len(stems) == 1:
        return np.zeros(1, np.int64)
    from scipy.cluster.hierarchy import fcluster, linkage

    tree = linkage(stem_distances(stems), method="average")
    return fcluster(tree, t=threshold, criterion="distance").astype(np.int64) - 1


def topic_graph(
    offsets: np.ndarray, lengths: np.ndarray, topics: np.ndarray, n_topics: int
) -> np.ndarray:
    """Symmetric topic x topic weights: ``1 / gap`` summed over occurrence pairs of two topics.

    The gap from an occurrence starting at ``a`` with ``k`` words to a later one starting at
    ``b`` is ``b - (a + k - 1)`` tokens, at least 1; pairs within one topic add nothing. Each
    block of earlier occurrences is weighed against every later one at once, and the weights are
    summed per topic with two products by the sparse occurrence -> topic indicator.
    """
    from scipy.sparse import csr_matrix

    order = np.argsort(offsets, kind="stable")
    start = offsets[order].astype(np.float64)
    end = start + lengths[order] - 1
    count = len(start)
    member = csr_matrix(
        (np.ones(count), (np.arange(count), topics[order])), shape=(count, n_topics)
    )
    step = int(max(1, min(count, max(64, _BLOCK_CELLS // max(1, count)))))
    later = np.tril(np.ones((step, step)), -1)  # later[b, a]: occurrence b comes after a
    weights = np.zeros((n_topics, n_topics))
    for lo in range(0, count, step):
        hi = min(lo + step, count)
        inverse = start[lo:, None] - end[None, lo:hi]  # later occurrences x this block
        np.maximum(inverse, 1.0, out=inverse)
        np.reciprocal(inverse, out=inverse)
        inverse[: hi - lo] *= later[: hi - lo, : hi - lo]
        weights += (member[lo:].T @ inverse) @ member[lo:hi]
    weights += weights.T
    np.fill_diagonal(weights, 0.0)
    return weights


def pagerank(
    weights: np.ndarray, alpha: float = DAMPING, max_iter: int = 100, tol: float = 1.0e-6
) -> np.ndarray:
    """PageRank of a weighted graph given as a dense adjacency matrix, as NetworkX computes it.

    Rows are normalised to transition probabilities; a node without edges (dangling) jumps
    uniformly; uniform start and teleport; stops once the L1 change is below ``n * tol``. Where
    NetworkX raises after ``max_iter`` rounds, this returns the last iterate.
    """
    n = len(weights)
    if n == 0:
        return np.zeros(0)
    out = weights.sum(axis=1)
    dangling = out == 0
    scale = np.zeros(n)
    scale[~dangling] = 1.0 / out[~dangling]
    transition = weights * scale[:, None]
    uniform = np.full(n, 1.0 / n)
    x = uniform.copy()
    for _ in range(max_iter):
        previous = x
        x = alpha * (x @ transition + x[dangling].sum() * uniform) + (1 - alpha) * uniform
        if np.abs(x - previous).sum() < n * tol:
            break
    return x


# --- the whole method -------------------------------------------------------------------------


def rank_candidates(
    candidates: Candidates, threshold: float = THRESHOLD
) -> list[tuple[str, float]]:
    """Every topic's first-occurring candidate with its topic's PageRank, best first (ties in
    topic order, as pke's stable sort leaves them)."""
    if not len(candidates):
        return []
    topics = topic_clusters(candidates.stems, threshold)
    n_topics = int(topics.max()) + 1
    lengths = np.array([len(s) for s in candidates.stems], np.int64)
    owner = candidates.owner
    graph = topic_graph(candidates.offsets, lengths[owner], topics[owner], n_topics)
    scores = pagerank(graph)
    first_offset = np.full(len(candidates), np.iinfo(np.int64).max)
    np.minimum.at(first_offset, owner, candidates.offsets)
    by_topic = np.lexsort((first_offset, topics))
    leaders = by_topic[np.unique(topics[by_topic], return_index=True)[1]]
    ranking = np.argsort(-scores, kind="stable")
    return [(candidates.phrases[leaders[t]], float(scores[t])) for t in ranking.tolist()]


def topicrank(
    words: Sequence[str],
    pos: Sequence[str],
    sentence_ids: Sequence[int] | np.ndarray,
    n: int = 10,
    threshold: float = THRESHOLD,
) -> list[tuple[str, float]]:
    """The top ``n`` TopicRank keyphrases and scores of one tokenised, tagged document.

    ``words``, ``pos`` (universal tags) and ``sentence_ids`` have one entry per token.
    """
    if not (len(words) == len(pos) == len(sentence_ids)):
        raise ValueError("words, pos and sentence_ids must have one entry per token")
    valid = np.fromiter((p in VALID_POS for p in pos), bool, len(pos))
    return rank_tokens(words, valid, sentence_ids, n, threshold)


def rank_tokens(
    words: Sequence[str | None] | np.ndarray,
    valid: np.ndarray,
    sentence_ids: Sequence[int] | np.ndarray,
    n: int = 10,
    threshold: float = THRESHOLD,
) -> list[tuple[str, float]]:
    """:func:`topicrank` from a mask of the tokens that may be in a candidate."""
    sentences = np.asarray(sentence_ids, dtype=np.int64)
    return rank_candidates(select_candidates(words, valid, sentences), threshold)[:n]
