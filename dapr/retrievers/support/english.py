"""Lucene's English analyzer in Python, so that bm25s indexes the terms Lucene does.

- words are cut by Unicode's word-break rules (UAX #29) as Lucene's standard tokenizer applies
  them: letters and digits run together, ``'`` ``.`` ``:`` join letters (``don't``, ``u.s.a``),
  ``,`` ``.`` ``;`` join digits (``1,000``, ``3.14``), ``_`` joins anything; single letters and
  digits are words; each ideograph, kana or emoji is a word of its own;
- a trailing ``'s`` is dropped, words are lowercased, Lucene's 33 English stop words removed;
- words are stemmed with Lucene's Porter stemmer, which is Porter's own C version: Snowball's
  ``porter`` (PyStemmer, in C) where the two agree, else :func:`porter_lucene` (words of one or
  two letters are left alone, ``-bli`` becomes ``-ble``, ``-logi`` becomes ``-log``, and step 1b
  undoubles every doubled consonant but l, s and z: ``trekked`` -> ``trek``).
"""

from __future__ import annotations

import enum
import functools
import re
import unicodedata
from array import array
from collections.abc import Iterable

import numpy as np

from dapr.errors import DaprError

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


class _Unseen(enum.Enum):
    """A word not looked up yet (a one-member enum, so that type checkers narrow on ``is``)."""

    TOKEN = 0


_UNSEEN = _Unseen.TOKEN
_LOWER_AS_JAVA = {"\u0130": "i", "\u03a3": "\u03c3"}
"""Where Python's ``str.lower`` (full case mapping: İ -> i̇, final ς) differs from Java's."""


def _require_stemmer():
    try:
        import Stemmer
    except ImportError:
        raise DaprError(
            "retriever 'bm25' needs PyStemmer; install it with: pip install \"dapr-ir[bm25]\""
        ) from None
    return Stemmer


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
        Stemmer = _require_stemmer()
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


class TermIds(dict):
    """Word -> term id (-1 for a stop word), growing the vocabulary on first sight: ``terms``
    (term -> id) and ``order`` (the terms by id)."""

    def __init__(self, analyzer: EnglishAnalyzer):
        super().__init__()
        self.analyzer = analyzer
        self.terms: dict[str, int] = {}
        self.order: list[str] = []

    def __missing__(self, word: str) -> int:
        term = self.analyzer.term(word)
        if term is None:
            found = -1
        elif (found := self.terms.get(term, -1)) < 0:
            found = self.terms[term] = len(self.order)
            self.order.append(term)
        self[word] = found
        return found


@functools.cache
def process_analyzer() -> EnglishAnalyzer:
    """This process's analyzer, made on first use: indexing and queries share its cache of
    stems."""
    return EnglishAnalyzer()


_END = "\uffff"
"""Marks the end of a text in a batch (a noncharacter: no word holds it)."""
_JOINS_ACROSS_SPACE = "\u202f"
"""Narrow no-break space: whitespace to ``str.split``, but it joins words (ExtendNumLet)."""
_CHUNKS = 2_000_000
"""Chunks of text remembered by a process at most (more are forgotten between batches)."""


class ChunkIds(dict):
    """A chunk of text between whitespace -> its term id: -1 for none (stop words, punctuation),
    -2 for the end mark, else the id of its one term or, for a chunk of several (``co-op``),
    ``-3 - i`` where ``several[i]`` lists them. A word never spans whitespace, so a text's terms
    are its chunks' terms one after another."""

    def __init__(self, ids: TermIds):
        super().__init__()
        self.ids = ids
        self.several: list[tuple[int, ...]] = []
        self[_END] = -2

    def __missing__(self, chunk: str) -> int:
        found = [i for i in map(self.ids.__getitem__, self.ids.analyzer.words(chunk)) if i >= 0]
        if len(found) > 1:
            self.several.append(tuple(found))
        code = found[0] if len(found) == 1 else -1 if not found else -2 - len(self.several)
        self[chunk] = code
        return code

    def expand(self, codes: np.ndarray) -> np.ndarray:
        """``codes`` of chunks -> the term ids they stand for, one after another (-1 and -2
        kept)."""
        multi = np.flatnonzero(codes <= -3)
        if not len(multi):
            return codes
        parts = [self.several[-3 - c] for c in codes[multi].tolist()]
        lengths = np.array([len(p) for p in parts], dtype=np.int64)
        sizes = np.ones(len(codes), dtype=np.int64)
        sizes[multi] = lengths
        out = np.repeat(codes, sizes)
        starts = (np.cumsum(sizes) - sizes)[multi]
        inner = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        out[np.repeat(starts, lengths) + inner] = np.concatenate(parts)
        return out


def english_batch(texts: list[str], memo: dict) -> tuple[list[str], np.ndarray, np.ndarray]:
    """A batch of texts as :data:`dapr.retrievers.support.postings.Tokenize` gives it: the
    terms first seen in it, their ids one text after another (stop words left out), and each
    text's number of terms. The batch is split at whitespace as one string, each text followed
    by an end mark, and each distinct chunk analysed once per process (:class:`ChunkIds`);
    a batch where that would not hold (a text with the mark itself or a narrow no-break space)
    is analysed a text at a time."""
    if "ids" not in memo:
        memo["ids"] = TermIds(process_analyzer())
    lookup: TermIds = memo["ids"]
    if "chunks" not in memo or len(memo["chunks"]) > _CHUNKS:
        memo["chunks"] = ChunkIds(lookup)
    chunks: ChunkIds = memo["chunks"]
    before = len(lookup.order)
    joined = f" {_END} ".join(texts) + f" {_END}"
    if joined.count(_END) == len(texts) and _JOINS_ACROSS_SPACE not in joined:
        codes = np.frombuffer(array("i", map(chunks.__getitem__, joined.split())), np.int32)
        every = chunks.expand(codes)
    else:
        tokens = array("i")
        for text in texts:
            tokens.extend(map(lookup.__getitem__, lookup.analyzer.words(text)))
            tokens.append(-2)
        every = np.frombuffer(tokens, dtype=np.int32)
    ends = np.flatnonzero(every == -2)
    kept = np.zeros(len(every) + 1, dtype=np.int64)
    np.cumsum(every >= 0, out=kept[1:])
    counts = np.diff(kept[ends], prepend=0)
    return lookup.order[before:], every[every >= 0], counts
