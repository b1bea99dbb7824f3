"""BM25 as Lucene (and Pyserini, the DAPR reference) computes it, on bm25s or on Lucene itself.

``backend="bm25s"`` (the default) computes the weights of Lucene's ``BM25Similarity`` itself
(:func:`lucene_weights`, in Lucene's float32 arithmetic): idf = ln(1 + (n - df + 0.5) / (df +
0.5)), term weight tf / (tf + k1 (1 - b + b |d| / avgdl)), k1=0.9, b=0.4, with the document length
|d| kept in one byte as Lucene keeps it (:func:`lucene_lengths`: exact below 24, then 4
significant bits), and hands them to bm25s, which stores them and sums them per query. Items
tied on score rank by id, as Anserini ranks them. English text is analysed as Lucene's English
analyzer does, re-implemented here so both backends index the same terms:

- words are cut by Unicode's word-break rules (UAX #29) as Lucene's standard tokenizer applies
  them: letters and digits run together, ``'`` ``.`` ``:`` join letters (``don't``, ``u.s.a``),
  ``,`` ``.`` ``;`` join digits (``1,000``, ``3.14``), ``_`` joins anything; single letters and
  digits are words; each ideograph, kana or emoji is a word of its own;
- a trailing ``'s`` is dropped, words are lowercased, Lucene's 33 English stop words removed;
- words are stemmed with Lucene's Porter stemmer, which is Porter's own C version: Snowball's
  ``porter`` (PyStemmer, in C) where the two agree, else :func:`porter_lucene` (words of one or
  two letters are left alone, ``-bli`` becomes ``-ble``, ``-logi`` becomes ``-log``, and step 1b
  undoubles every doubled consonant but l, s and z: ``trekked`` -> ``trek``).

Chinese (``language="zh"``), written without spaces, is segmented with jieba's search-engine mode
(:func:`jieba.lcut_for_search`): besides each word it emits the dictionary words inside long
ones (冠状病毒 -> 冠状, 病毒, 冠状病毒), so a query worded more briefly or at a finer grain than
the passage still matches. Latin letters are lowercased, tokens of only punctuation or
whitespace are dropped, and nothing is stemmed; no stop words are removed, since BM25's idf
already gives the frequent function words (的, 了, 是) almost no weight.

``backend="pyserini"`` indexes and searches with Lucene itself (see :mod:`dapr.retrievers.lucene`;
for Chinese it uses Lucene's CJK bigrams, not jieba). Either backend returns the top ``k`` items
with a score above 0: items sharing no term with the query are never returned.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import unicodedata
from array import array
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from dapr.data import Run
from dapr.errors import DaprError

_CHUNK_TOKENS = 1 << 22
"""Terms gathered before they are turned into postings (a 4M-term chunk takes ~100 MB)."""
LANGUAGES = ("en", "zh")
"""Languages with a tokenizer (ISO 639-1 codes)."""
BACKENDS = ("bm25s", "pyserini")
_LANGUAGE_FILE = "language.json"
"""Written beside a non-English index, so it is never searched with another tokenizer."""

STOP_WORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
))  # fmt: skip
"""Lucene's English stop words (``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``), Anserini's default."""

# Word-break classes where Lucene's standard tokenizer differs from "letters and digits", read
# off its output character by character (hexadecimal code points and ranges).
_SINGLE = """
00A9 00AE 203C 2049 2122 2194-2199 21A9-21AA 231A-231B 2328 2388 23CF 23E9-23F3 23F8-23FA 25AA-25AB
25B6 25C0 25FB-25FE 2600-2605 2607-2612 2614-2685 2690-2705 2708-2712 2714 2716 271D 2721 2728
2733-2734 2744 2747 274C 274E 2753-2755 2757 2763-2767 2795-2797 27A1 27B0 27BF 2934-2935
2B05-2B07 2B1B-2B1C 2B50 2B55 2E80-2FD5 3007 3021-3029 3030 3038-303A 303D 3041-3096 309D-309F
3297 3299 3400-4DBF 4E00-9FFF F900-FAD9
"""
"""Each character is a word of its own: ideographs, hiragana, emoji (Extended_Pictographic)."""
_SINGLE_ASTRAL = "\U0001f000-\U0001faff\U00020000-\U0003ffff"
"""The same beyond the Basic Multilingual Plane, coarsely: emoji, rarer ideographs. Other
characters there (historic scripts, mathematical letters) are not words here."""
_RUNS = """
0E01-0E30 0E32-0E33 0E40-0E46 0E81-0EB0 0EB2-0EB3 0EBD-0EC6 0EDC-0EDF 1000-102A 103F 1050-1055
105A-105D 1061 1065-1066 106E-1070 1075-1081 108E 109E-109F 1780-17B3 17D7 17DC 1950-19C9
19DA-19DF 1A20-1A54 1AA0-1AAD 3031-3035 309B-309C 30A0-30FA 30FC-30FF 31F0-31FF 32D0-32FE
3300-3357 A9E0-A9E4 A9E6-A9EF A9FA-A9FE AA60-AA7A AA7E-AAAF AAB1 AAB5-AAB6 AAB9-AABD AAC0
AAC2-AADF FF66-FF9D
"""
"""Runs of these form a word but do not join Latin letters: Thai, Lao, Myanmar, Khmer, katakana."""
_LETTER_SYMBOLS = "24B6-24E9"
"""Symbols that are letters to the word-break rules: circled Latin letters."""
_EXTEND_NUM_LET = "005F 202F 203F-2040 2054 FE33-FE34 FE4D-FE4F FF3F"
"""Joins letters and digits on either side (``_``)."""
_MID_LETTER = "003A 00B7 0387 05F4 2027 FE13 FE55 FF1A"
"""Joins two letters (``:``)."""
_MID_NUM = "002C 003B 037E 0589 060C-060D 066C 07F8 2044 FE10 FE14 FE50 FE54 FF0C FF1B"
"""Joins two digits (``,`` ``;``)."""
_MID_NUM_LET = "0027 002E 2018-2019 2024 FE52 FF07 FF0E"
"""Joins two letters or two digits (``'`` ``.``)."""
_POSSESSIVE = ("'s", "\u2019s", "\uff07s")
_UNSEEN = object()
_LOWER_AS_JAVA = {"\u0130": "i", "\u03a3": "\u03c3"}
"""Where Python's ``str.lower`` (full case mapping: İ -> i̇, final ς) differs from Java's."""


def _require_bm25s():
    try:
        import bm25s
        import Stemmer
    except ImportError as error:
        raise DaprError(
            f"retriever 'bm25' needs bm25s and PyStemmer ({error.name} is missing); "
            'install them with: pip install "dapr[bm25]"'
        ) from None
    return bm25s, Stemmer


def _require_jieba():
    try:
        import jieba
    except ImportError:
        raise DaprError(
            "retriever 'bm25' with language 'zh' needs jieba; install it with: "
            'pip install "dapr[zh]"'
        ) from None
    jieba.setLogLevel(logging.WARNING)  # its dictionary loading reports on stderr otherwise
    return jieba


def chinese_tokens(text: str, jieba) -> list[str]:
    """jieba's search-engine segmentation of lowercased ``text``, without tokens holding no
    letter or digit (punctuation, whitespace)."""
    return [t for t in jieba.lcut_for_search(text.lower()) if any(c.isalnum() for c in t)]


# --- Lucene's English analyzer ---------------------------------------------------------------


def _code_points(ranges: str) -> set[int]:
    points: set[int] = set()
    for span in ranges.split():
        low, _, high = span.partition("-")
        points.update(range(int(low, 16), int(high or low, 16) + 1))
    return points


def _char_class(points: Iterable[int]) -> str:
    """The body of a regex character class holding exactly ``points``."""
    parts, ordered = [], sorted(points)
    start = 0
    for i in range(1, len(ordered) + 1):
        if i == len(ordered) or ordered[i] != ordered[i - 1] + 1:
            low, high = ordered[start], ordered[i - 1]
            parts.append(re.escape(chr(low)) + (f"-{re.escape(chr(high))}" if high > low else ""))
            start = i
    return "".join(parts)


@functools.cache
def _word_pattern() -> re.Pattern:
    """One regex match per word that Lucene's standard tokenizer emits.

    The character classes hold only the Basic Multilingual Plane: Python's ``re`` tests larger
    code points against a class one range at a time, which made tokenizing five times slower."""
    single, runs = _code_points(_SINGLE), _code_points(_RUNS)
    letters, digits, extend = _code_points(_LETTER_SYMBOLS), set(), set()
    for point in range(0x10000):
        category = unicodedata.category(chr(point))
        if category[0] == "L" or category == "Nl":
            letters.add(point)
        elif category == "Nd":
            digits.add(point)
        elif category in ("Mn", "Mc", "Me") or (category == "Cf" and point != 0x200B):
            extend.add(point)
    letters -= single | runs
    digits -= single | runs
    letter, digit, joiner = _char_class(letters), _char_class(digits), _code_points(_EXTEND_NUM_LET)
    inner, marks = _char_class(letters | digits | extend | joiner), _char_class(extend)
    mid_letter = _char_class(_code_points(_MID_LETTER + " " + _MID_NUM_LET))
    mid_num = _char_class(_code_points(_MID_NUM + " " + _MID_NUM_LET))
    word = (
        f"[{_char_class(joiner)}]*[{letter}{digit}][{inner}]*"
        f"(?:(?:(?<=[{letter}{marks}])[{mid_letter}](?=[{letter}])"
        f"|(?<=[{digit}])[{mid_num}](?=[{digit}]))[{inner}]+)*"
    )
    single_word = f"[{_char_class(single)}][{marks}]*|[{_SINGLE_ASTRAL}]"
    run = f"[{_char_class(runs)}][{_char_class(runs | extend)}]*"
    return re.compile(f"{word}|{single_word}|{run}")


def _vowels(word: str) -> list[bool]:
    """Porter's vowels: a, e, i, o, u, and y after a consonant."""
    vowels: list[bool] = []
    for i, char in enumerate(word):
        vowels.append(char in "aeiou" or (char == "y" and i > 0 and not vowels[-1]))
    return vowels


def _measure(stem: str) -> int:
    """Porter's m: the number of vowel-consonant sequences in ``stem``."""
    vowels = _vowels(stem)
    return sum(1 for a, b in zip(vowels, vowels[1:]) if a and not b)


def _ends_cvc(stem: str) -> bool:
    """Consonant, vowel, consonant other than w, x or y at the end of ``stem``."""
    vowels = _vowels(stem)
    return len(stem) > 2 and vowels[-3:] == [False, True, False] and stem[-1] not in "wxy"


_STEP2 = (
    ("ational", "ate"), ("tional", "tion"), ("enci", "ence"), ("anci", "ance"), ("izer", "ize"),
    ("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous"),
    ("ization", "ize"), ("ation", "ate"), ("ator", "ate"), ("alism", "al"), ("iveness", "ive"),
    ("fulness", "ful"), ("ousness", "ous"), ("aliti", "al"), ("iviti", "ive"), ("biliti", "ble"),
    ("logi", "log"),
)  # fmt: skip
_STEP3 = (
    ("icate", "ic"), ("ative", ""), ("alize", "al"), ("iciti", "ic"), ("ical", "ic"), ("ful", ""),
    ("ness", ""),
)  # fmt: skip
_STEP4 = (
    "al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent", "ion", "ou",
    "ism", "ate", "iti", "ous", "ive", "ize",
)  # fmt: skip
_SNOWBALL_DIFFERS = re.compile("cc|hh|jj|kk|qq|vv|ww|xx|yy")
"""Doubled consonants that Porter's step 1b undoubles and Snowball's does not."""


def _replace_suffix(word: str, rules: tuple[tuple[str, str], ...]) -> str:
    """The first rule whose suffix ends ``word`` applies if the stem before it has m > 0."""
    for suffix, replacement in rules:
        if word.endswith(suffix):
            stem = word[: -len(suffix)]
            return stem + replacement if _measure(stem) > 0 else word
    return word


def porter_lucene(word: str) -> str:
    """Porter's stemmer as Lucene's ``PorterStemmer`` has it (Porter's own C version)."""
    if len(word) <= 2:
        return word
    if word.endswith("sses") or word.endswith("ies"):  # step 1a
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    if word.endswith("eed"):  # step 1b
        word = word[:-1] if _measure(word[:-3]) > 0 else word
    else:
        for suffix in ("ed", "ing"):
            if word.endswith(suffix) and any(_vowels(word[: -len(suffix)])):
                word = word[: -len(suffix)]
                if word.endswith(("at", "bl", "iz")):
                    word += "e"
                elif len(word) > 1 and word[-1] == word[-2] and not _vowels(word)[-1]:
                    word = word if word[-1] in "lsz" else word[:-1]
                elif _measure(word) == 1 and _ends_cvc(word):
                    word += "e"
                break
    if word.endswith("y") and any(_vowels(word[:-1])):  # step 1c
        word = word[:-1] + "i"
    word = _replace_suffix(_replace_suffix(word, _STEP2), _STEP3)  # steps 2 and 3
    for suffix in _STEP4:
        if word.endswith(suffix):
            stem = word[: -len(suffix)]
            if suffix == "ion" and not stem.endswith(("s", "t")):
                continue
            word = stem if _measure(stem) > 1 else word
            break
    if word.endswith("e"):  # step 5
        m = _measure(word[:-1])
        if m > 1 or (m == 1 and not _ends_cvc(word[:-1])):
            word = word[:-1]
    if word.endswith("ll") and _measure(word) > 1:
        word = word[:-1]
    return word


class EnglishAnalyzer:
    """Lucene's English analyzer in Python (see the module): text -> terms, with a cache from
    each distinct word to its term."""

    def __init__(self):
        _, Stemmer = _require_bm25s()
        self._stemmer = Stemmer.Stemmer("porter")
        self._pattern = _word_pattern()
        self._terms: dict[str, str | None] = {}

    def words(self, text: str) -> list[str]:
        """The lowercased words of ``text`` as Lucene's standard tokenizer cuts them."""
        for upper, lower in _LOWER_AS_JAVA.items():
            if upper in text:
                text = text.replace(upper, lower)
        return self._pattern.findall(text.lower())

    def term(self, word: str) -> str | None:
        """The term a lowercased word is indexed as, None for a stop word."""
        found = self._terms.get(word, _UNSEEN)
        if found is not _UNSEEN:
            return found
        bare = word[:-2] if word.endswith(_POSSESSIVE) else word
        term = None if bare in STOP_WORDS else self.stem(bare)
        self._terms[word] = term
        return term

    def stem(self, word: str) -> str:
        """Lucene's Porter stemmer: Snowball's (in C) where the two agree, else
        :func:`porter_lucene`."""
        if len(word) <= 2:
            return word
        stem = self._stemmer.stemWord(word)
        if stem.endswith(("bli", "logi")) or _SNOWBALL_DIFFERS.search(word):
            return porter_lucene(word)
        return stem

    def terms(self, text: str) -> list[str]:
        """The terms of ``text`` in order."""
        return [t for t in map(self.term, self.words(text)) if t is not None]


class _TermIds(dict):
    """Word -> term id (-1 for a stop word), growing the vocabulary ``terms`` on first sight."""

    def __init__(self, analyzer: EnglishAnalyzer):
        super().__init__()
        self.analyzer = analyzer
        self.terms: dict[str, int] = {}

    def __missing__(self, word: str) -> int:
        term = self.analyzer.term(word)
        found = -1 if term is None else self.terms.setdefault(term, len(self.terms))
        self[word] = found
        return found


Postings = tuple[np.ndarray, np.ndarray, np.ndarray]
"""Term ids, document positions and term frequencies (int32), sorted by term then document."""


def postings(tokens: np.ndarray, lengths: np.ndarray, first: int) -> Postings:
    """The postings of consecutive documents: ``tokens`` holds their term ids one document after
    another, ``lengths`` how many each has, ``first`` the position of the first one."""
    count = len(lengths)
    pairs = tokens.astype(np.int64) * count + np.repeat(np.arange(count), lengths)
    pairs.sort()
    starts = np.flatnonzero(np.concatenate((pairs[:1] >= 0, pairs[1:] != pairs[:-1])))
    tf = np.diff(starts, append=len(pairs)).astype(np.int32)
    term, doc = np.divmod(pairs[starts], count)
    return term.astype(np.int32), (doc + first).astype(np.int32), tf


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

    ``chunks`` are the :func:`postings` of consecutive runs of documents, emptied as they are
    written into the matrix; ``lengths`` every document's number of terms; ``terms`` the size
    of the vocabulary; ``rank`` the matrix row of each document (by default its position)."""
    documents = len(lengths)
    rank = np.arange(documents) if rank is None else rank
    df = np.zeros(terms, dtype=np.int64)
    for term, _, _ in chunks:
        found, count = np.unique(term, return_counts=True)
        df[found] += count
    counted = max(int(np.count_nonzero(lengths)), 1)
    idf = np.log(1 + (counted - df + 0.5) / (df + 0.5)).astype(np.float32)
    avgdl = np.float32(max(int(lengths.sum()), 1) / counted)
    k1, b, one = np.float32(k1), np.float32(b), np.float32(1)
    inverse = one / (k1 * ((one - b) + b * lucene_lengths(lengths).astype(np.float32) / avgdl))
    indptr = np.zeros(terms + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    free = indptr[:-1].copy()  # where each term's next posting goes
    indices = np.empty(indptr[-1], dtype=np.int32)
    data = np.empty(indptr[-1], dtype=np.float32)
    while chunks:
        term, doc, tf = chunks.pop(0)
        found, starts, count = np.unique(term, return_index=True, return_counts=True)
        at = free[term] + np.arange(len(term)) - np.repeat(starts, count)
        free[found] += count
        weight = idf[term]
        indices[at] = rank[doc]
        data[at] = weight - weight / (one + tf.astype(np.float32) * inverse[doc])
    return {"data": data, "indices": indices, "indptr": indptr, "num_docs": documents}


# --- the retriever ---------------------------------------------------------------------------


class BM25:
    """Lucene's BM25 variant (k1=0.9, b=0.4 by default) over Lucene's English analysis, or for
    ``language="zh"`` jieba's segmentation (see the module), on ``backend`` bm25s or pyserini
    (Lucene itself; ``java_heap`` bounds its JVM). ``threads`` (0: every core) index and search
    with Lucene; the bm25s backend runs on one core."""

    version = "2"

    def __init__(
        self,
        k1: float = 0.9,
        b: float = 0.4,
        threads: int = 0,
        language: str = "en",
        backend: str = "bm25s",
        java_heap: str = "2g",
    ):
        if language not in LANGUAGES:
            raise DaprError(
                f"retriever 'bm25': unknown language {language!r}; "
                f"choose one of: {', '.join(LANGUAGES)}"
            )
        if backend not in BACKENDS:
            raise DaprError(
                f"retriever 'bm25': unknown backend {backend!r}; "
                f"choose one of: {', '.join(BACKENDS)}"
            )
        self.k1 = k1
        self.b = b
        self.threads = threads
        self.language = language
        self.backend = backend
        self.java_heap = java_heap
        self._model = None
        self._ids: np.ndarray | None = None
        self._analyzer: EnglishAnalyzer | None = None
        self._lucene = None

    def identity(self) -> dict[str, Any]:
        return {"k1": self.k1, "b": self.b, "language": self.language, "backend": self.backend}

    def _cores(self) -> int:
        if self.threads > 0:
            return self.threads
        affinity = getattr(os, "sched_getaffinity", None)
        return len(affinity(0)) if affinity else os.cpu_count() or 1

    def _english(self) -> EnglishAnalyzer:
        if self._analyzer is None:
            self._analyzer = EnglishAnalyzer()
        return self._analyzer

    def _tokenize(self, texts: list[str]) -> list[list[str]]:
        if self.language == "zh":
            jieba = _require_jieba()
            return [chinese_tokens(text, jieba) for text in texts]
        analyzer = self._english()
        return [analyzer.terms(text) for text in texts]

    def index(self, items: Iterable[tuple[str, str]], store: Path) -> None:
        if self.backend == "pyserini":
            from dapr.retrievers import lucene

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
        model.save(str(store / "bm25s"))
        (store / "ids.json").write_text(json.dumps(ids))
        if self.language != "en":
            (store / _LANGUAGE_FILE).write_text(json.dumps({"language": self.language}))
        self._model, self._ids = model, np.array(ids, dtype=object)

    def _postings(
        self, items: Iterable[tuple[str, str]], ids: list[str]
    ) -> tuple[list[Postings], np.ndarray, dict[str, int]]:
        """The postings of the items, a chunk of about ``_CHUNK_TOKENS`` terms at a time (so only
        they and one chunk's term ids are held), every item's number of terms, and the
        vocabulary (term -> id); the item ids are appended to ``ids``."""
        if self.language == "zh":
            jieba = _require_jieba()
            vocab: dict[str, int] = {}

            def encode(text: str) -> Iterable[int]:
                return [vocab.setdefault(t, len(vocab)) for t in chinese_tokens(text, jieba)]
        else:
            analyzer = self._english()
            lookup = _TermIds(analyzer)
            vocab = lookup.terms

            def encode(text: str) -> Iterable[int]:
                return map(lookup.__getitem__, analyzer.words(text))  # -1: a stop word

        chunks: list[Postings] = []
        lengths = array("q")
        tokens, ends = array("i"), array("q")

        def flush() -> None:
            if not ends:
                return
            every = np.frombuffer(tokens, dtype=np.int32)
            bounds = np.frombuffer(ends, dtype=np.int64)
            stop = np.searchsorted(bounds, np.flatnonzero(every < 0), side="right")
            counts = np.diff(bounds, prepend=0) - np.bincount(stop, minlength=len(bounds))
            chunks.append(postings(every[every >= 0], counts, len(lengths)))
            lengths.extend(counts.tolist())
            del every, bounds
            del tokens[:], ends[:]

        for item_id, text in items:
            ids.append(item_id)
            tokens.extend(encode(text))
            ends.append(len(tokens))
            if len(tokens) >= _CHUNK_TOKENS:
                flush()
        flush()
        return chunks, np.array(lengths, dtype=np.int64), vocab

    def load(self, store: Path) -> None:
        from dapr.retrievers import lucene

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
        self._model = bm25s.BM25.load(str(store / "bm25s"))
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
