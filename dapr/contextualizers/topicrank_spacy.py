"""TopicRank's input read from spaCy as pke reads it: pke's tokenizer infixes, its
part-of-speech rules, sentence ids, and a document as the arrays :mod:`topicrank` ranks."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from dapr.contextualizers.topicrank import CACHE_LIMIT, VALID_POS

if TYPE_CHECKING:
    from spacy.language import Language
    from spacy.tokenizer import Tokenizer
    from spacy.tokens import Doc


def pke_infixes() -> Any:
    """spaCy's English infix regex without the rule that splits hyphenated words, as pke sets
    it (so "state-of-the-art" stays one token)."""
    from spacy.lang.char_classes import ALPHA, HYPHENS
    from spacy.lang.en.punctuation import TOKENIZER_INFIXES
    from spacy.util import compile_infix_regex

    hyphen = rf"(?<=[{ALPHA}0-9])(?:{HYPHENS})(?=[{ALPHA}])"
    return compile_infix_regex([p for p in TOKENIZER_INFIXES if p != hyphen])


def prepare_like_pke(nlp: Language) -> Language:
    """Give a pipeline pke's reader set-up: a sentencizer and the hyphen-keeping infixes."""
    if "sentencizer" not in nlp.component_names:
        nlp.add_pipe("sentencizer")
    tokenizer = cast("Tokenizer", nlp.tokenizer)  # spaCy's own, in the pipelines loaded here
    tokenizer.infix_finditer = pke_infixes().finditer
    return nlp


class PosRules:
    """The coarse tags spaCy's ``attribute_ruler`` would set, computed from its patterns.

    Without a parser every ``DEP`` test sees an empty label, so in ``en_core_web_sm`` only
    one-token rules on ``TAG``, ``LOWER`` and ``IS_SPACE`` can set ``POS``. They are applied in
    rule order (later rules win) once per distinct (tag, space) pair of a document, and once per
    token only for the few words a rule names, far cheaper than running the matcher.
    :meth:`compile` returns None for patterns outside that subset.
    """

    def __init__(self, rules: list[tuple[dict[str, Any], str]]):
        self.rules = rules
        self.words: frozenset[str] | None = frozenset()
        """Lower-cased words some rule names (None: a rule matches words by pattern)."""
        named: set[str] = set()
        for spec, _ in rules:
            test = spec.get("LOWER")
            if isinstance(test, str):
                named.add(test)
            elif isinstance(test, dict):
                if set(test) != {"IN"}:
                    self.words = None
                    break
                named.update(test["IN"])
        else:
            self.words = frozenset(named)
        self._cache: dict[tuple[str, str | None, bool], str] = {}
        self._ids: np.ndarray | None = None

    @classmethod
    def compile(cls, patterns: Iterable[dict[str, Any]]) -> PosRules | None:
        rules = []
        for entry in patterns:
            if "POS" not in entry["attrs"]:
                continue
            for pattern in entry["patterns"]:
                if any(not _test(spec["DEP"], "") for spec in pattern if "DEP" in spec):
                    continue  # needs a dependency label, which this pipeline never sets
                if len(pattern) != 1 or not set(pattern[0]) <= {"TAG", "LOWER", "IS_SPACE"}:
                    return None
                if not all(_supported(v) for v in pattern[0].values()):
                    return None
                rules.append((pattern[0], entry["attrs"]["POS"]))
        return cls(rules)

    def pos(self, tag: str, lower: str | None, is_space: bool) -> str:
        """``pos_ or tag_`` of a token, as pke reads it; ``lower`` None stands for any word no
        rule names."""
        key = (tag, lower, is_space)
        found = self._cache.get(key)
        if found is None:
            found = ""
            values = {"TAG": tag, "LOWER": lower, "IS_SPACE": is_space}
            for spec, pos in self.rules:
                if all(_test(test, values[attr]) for attr, test in spec.items()):
                    found = pos
            found = found or tag
            if len(self._cache) >= CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = found
        return found

    def _named_ids(self) -> np.ndarray:
        if self._ids is None:
            from spacy.strings import hash_string  # type: ignore[attr-defined]  # compiled in; spaCy's strings.pyi omits it

            self._ids = np.array(sorted(hash_string(w) for w in self.words or ()), np.uint64)
        return self._ids

    def tags(self, doc: Doc) -> np.ndarray:
        """The coarse tag of every token of ``doc`` (an object array of strings)."""
        from spacy.attrs import IS_SPACE, LOWER, TAG

        table = doc.to_array([TAG, IS_SPACE, LOWER])
        strings = doc.vocab.strings
        if self.words is None:
            return np.array(
                [self.pos(strings[t], strings[w], bool(s)) for t, s, w in table.tolist()],
                dtype=object,
            )
        keys, inverse = np.unique(table[:, :2], axis=0, return_inverse=True)
        common = [self.pos(strings[t], None, bool(s)) for t, s in keys.tolist()]
        tags = np.array(common, dtype=object)[inverse.reshape(-1)]
        for i in np.flatnonzero(np.isin(table[:, 2], self._named_ids())).tolist():
            t, s, w = table[i].tolist()
            tags[i] = self.pos(strings[t], strings[w], bool(s))
        return tags


def _supported(test: Any) -> bool:
    if isinstance(test, dict):
        return set(test) <= {"IN", "NOT_IN", "REGEX"}
    return isinstance(test, (str, bool))


def _test(test: Any, value: Any) -> bool:
    """One attribute test of a spaCy Matcher token pattern (a None word matches no name)."""
    if isinstance(test, dict):
        return (
            ("IN" not in test or value in test["IN"])
            and ("NOT_IN" not in test or value not in test["NOT_IN"])
            and ("REGEX" not in test or re.search(test["REGEX"], str(value)) is not None)
        )
    return value == test


def sentence_ids(is_punct: np.ndarray, is_stop_char: np.ndarray) -> np.ndarray:
    """The sentence of every token as spaCy's rule-based ``sentencizer`` splits them.

    A sentence ends at a sentence-final character (``is_stop_char``) and the punctuation that
    follows it; the next token that is neither starts a new one.
    """
    plain = ~is_punct & ~is_stop_char
    words = np.flatnonzero(plain)
    previous = np.empty_like(words)
    previous[:1] = -1
    previous[1:] = words[:-1]
    seen = np.zeros(len(plain) + 1, np.int64)
    np.cumsum(is_stop_char, out=seen[1:])
    starts = np.zeros(len(plain), np.int64)
    starts[words[seen[words] > seen[previous + 1]]] = 1
    if len(starts):
        starts[0] = 0
    return np.cumsum(starts)


def read_doc(
    doc: Doc, rules: PosRules | None, stop_chars: Iterable[str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Words (only where a candidate may be, else None), candidate-tag mask and sentence ids of
    a tokenised, tagged doc; coarse tags from ``rules`` when given, else from the doc, and
    sentences split by the sentencizer's rule on ``stop_chars``."""
    from spacy.attrs import IS_PUNCT, ORTH
    from spacy.strings import hash_string  # type: ignore[attr-defined]  # compiled in; spaCy's strings.pyi omits it

    if rules is None:
        tags = np.array([t.pos_ or t.tag_ for t in doc], dtype=object)
    else:
        tags = rules.tags(doc)
    valid = np.zeros(len(tags), dtype=bool)
    for pos in VALID_POS:
        valid |= tags == pos
    table = doc.to_array([ORTH, IS_PUNCT])
    strings = doc.vocab.strings
    words = np.full(len(tags), None, dtype=object)
    where = np.flatnonzero(valid)
    words[where] = [strings[h] for h in table[where, 0].tolist()]
    stops = np.array([hash_string(c) for c in stop_chars], np.uint64)
    sentences = sentence_ids(table[:, 1] == 1, np.isin(table[:, 0], stops))
    return words, valid, sentences
