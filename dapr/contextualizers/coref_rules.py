"""Offline coreference by rules on spaCy's parse: a heuristic stand-in, not a neural model.

The ``rules`` backend of the ``coref`` contextualizer, for machines without the neural models.
It only links what a few well-known heuristics can: named entities repeated (and, for people, a
surname or first name alone: "Einstein" after "Albert Einstein"), third-person pronouns and
definite noun phrases ("the venue", "the band") to an entity mentioned before. Expect far lower
recall, and some errors, compared with a trained model; the clusters it finds are nevertheless
the kind the paper's annotation uses.

Mentions come from spaCy's ``en_core_web_sm`` (parser and named entities), read passage by
passage in document order:

- names: named entities (people, organisations, places, facilities, works, events, products,
  laws, languages, groups; not dates or numbers; not adjectives such as "German"), proper-noun
  noun chunks, and occurrences of the title entity: the document title without a trailing
  "(...)" or ", ..." qualifier ("The Half Moon, Putney" -> "The Half Moon"). A name joins the
  entity of an earlier name with the same text (ignoring case, a leading "the" and a trailing
  "'s"), a person's name also that of an earlier person whose name contains all its words
  (the title entity first), else it starts a new entity;
- pronouns he/him/his/himself (a person, masculine), she/her/hers/herself (a person, feminine),
  it/its/itself (one non-person thing: organisation, place, facility, work, event, product... or
  a name of unknown type), they/them/their/theirs/themselves (a group: organisation, nationality
  or religious/political group, or a plural name). Expletive "it" ("it is important that ...")
  is skipped;
- definite noun phrases: "the" + a common noun, no relative clause or "of" after it.

A pronoun goes to the most salient compatible entity among the closest ``max_antecedents``
earlier mentions that lie at most three sentences back. Salience: each candidate mention adds 1
(2 as a subject), halved for every sentence between it and the pronoun, so the most recent
compatible entity wins unless an earlier one was the subject or was mentioned repeatedly (a
simplified Lappin & Leass salience). A direct object never refers to the subject of its own verb,
and a person once called "he" (or "she") is no longer a candidate for the other.

A definite noun phrase goes to the most salient candidate entity that some phrase described with
the same noun and at least the same modifiers: "The Half Moon is a pub and music venue" describes
The Half Moon as a "pub" and a "music venue", so "the venue" and "the music venue" refer to it,
"the old venue" does not (descriptions come from "X is a Y", appositions "X, a Y, ..." and
earlier resolved phrases; a plural phrase needs a plural entity). A bare "the" + noun with no
such entity goes to the most salient candidate of the last three sentences whose named-entity
type suits the noun (a small lexicon: "the company" -> an organisation, "the city" -> a
place...) and which no phrase described yet.

When no candidate fits, the title entity is the fallback: for a pronoun if its type is compatible
(a title name of unknown type counts as a thing, for "it"), for a definite noun phrase if the
noun describes it. It is what a Wikipedia-like article is about.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dapr.contextualizers.mentions import Mention

if TYPE_CHECKING:
    from spacy.language import Language
    from spacy.tokens import Doc, Span, Token

RULES_VERSION = "1"

THINGS = frozenset(
    {"ORG", "GPE", "LOC", "FAC", "PRODUCT", "WORK_OF_ART", "EVENT", "LAW", "LANGUAGE", None}
)
"""Entity types "it" may refer to (None: a name spaCy gave no type)."""
NAME_LABELS = (THINGS - {None}) | {"PERSON", "NORP"}
"""Named-entity types that are names (not dates, times, numbers, amounts)."""
GROUPS = frozenset({"ORG", "NORP"})
"""Entity types "they" may refer to, besides plural names."""

PRONOUN_KINDS = {
    **dict.fromkeys(["he", "him", "his", "himself"], "m"),
    **dict.fromkeys(["she", "her", "hers", "herself"], "f"),
    **dict.fromkeys(["it", "its", "itself"], "n"),
    **dict.fromkeys(["they", "them", "their", "theirs", "themselves"], "p"),
}
REFLEXIVES = frozenset({"himself", "herself", "itself", "themselves"})
COPULAS = frozenset({"be", "become", "remain", "seem", "appear"})
SUBJECT = frozenset({"nsubj", "nsubjpass"})
PRONOUN_REACH = 3
"""Sentences back (besides the pronoun's own) where a pronoun's antecedent may be."""

_PLACES = ("FAC", "ORG", "GPE", "LOC")
_NOUNS: dict[tuple[str, ...], str] = {
    _PLACES: "venue pub bar club building hall theatre theater stadium arena church cathedral "
    "chapel bridge station hotel museum castle house school college university hospital "
    "airport park library restaurant tower palace temple mosque mall store shop factory "
    "site centre center studio gallery prison port harbour harbor farm estate mill",
    ("ORG",): "company firm band group team organization organisation party corporation "
    "agency association society label network channel newspaper magazine government army "
    "council committee institute institution foundation brand airline bank league union "
    "orchestra choir club duo trio quartet ensemble business charity publisher",
    ("GPE", "LOC"): "city town village country region province county island river "
    "lake mountain area district borough municipality capital suburb neighbourhood "
    "neighborhood valley parish territory kingdom republic empire colony settlement",
    ("WORK_OF_ART", "PRODUCT", "EVENT"): "album song single film movie book novel series "
    "show game play opera poem painting sculpture software car ship aircraft vehicle program "
    "programme episode record magazine newspaper",
    ("EVENT",): "war battle festival election tournament championship competition race "
    "conflict campaign ceremony siege revolution",
    ("PERSON",): "man woman singer author writer actor actress player president king queen "
    "prince princess poet painter composer musician politician scientist artist director "
    "officer general minister bishop pope emperor founder leader guitarist drummer",
}
NOUN_TYPES: dict[str, frozenset[str]] = {}
"""Common noun -> named-entity types a bare definite noun phrase ("the band") may refer to."""
for _types, _words in _NOUNS.items():
    for _word in _words.split():
        NOUN_TYPES[_word] = NOUN_TYPES.get(_word, frozenset()) | frozenset(_types)


@dataclass(eq=False)
class _Entity:
    key: str
    label: str | None
    plural: bool = False
    gender: str | None = None
    is_title: bool = False
    descriptors: set[tuple[str, frozenset[str]]] = field(default_factory=set)
    """(noun, its modifiers) of phrases that described the entity: ("venue", {"music"})."""
    mentions: list[Mention] = field(default_factory=list)
    last: int = -1


@dataclass(frozen=True)
class _Seen:
    """One earlier mention, as an antecedent candidate."""

    entity: _Entity
    sentence: int
    subject: bool
    governor: tuple[int, int] | None
    """(passage, token index) of the verb it is the subject of."""


def title_core(title: str) -> str:
    """The title without a trailing "(...)" or ", ..." qualifier."""
    core = re.sub(r"\s*\([^()]*\)\s*$", "", title.strip())
    return core.split(", ")[0].strip()


def resolve(
    title: str, passages: Sequence[str], nlp: Language, max_antecedents: int = 50
) -> list[list[Mention]]:
    """The coreference clusters (two mentions or more) of a document's passages."""
    resolver = _Resolver(title, max_antecedents)
    sentence = 0
    for passage, doc in enumerate(nlp.pipe(passages)):
        for sent in doc.sents:
            resolver.read(passage, doc, sent, sentence)
            sentence += 1
    return [e.mentions for e in resolver.entities if len(e.mentions) > 1]


def _key(text: str) -> str:
    key = " ".join(text.casefold().split())
    key = re.sub(r"^the ", "", key)
    return re.sub(r"['\u2019]s$", "", key)


class _Resolver:
    def __init__(self, title: str, limit: int):
        self.limit = limit
        self.history: list[_Seen] = []
        self.entities: list[_Entity] = []
        self.clock = 0
        core = title_core(title)
        self.title = _Entity(_key(core), None, is_title=True) if core else None
        self.title_pattern = _pattern(core) if core else None
        if self.title is not None:
            self.entities.append(self.title)

    # ------------------------------------------------------------------ one sentence

    def read(self, passage: int, doc: Doc, sent: Span, sentence: int) -> None:
        names = self._names(doc, sent)
        taken = [(span.start, span.end) for span, _, _ in names]
        items: list[tuple[int, Callable[[], tuple[int, int, _Entity | None, Token]]]] = []
        for span, label, is_title in names:
            items.append((span.start, _bind(self._name, span, label, is_title)))
        for token in sent:
            if _pronoun(token) and not _inside(token.i, token.i + 1, taken):
                items.append((token.i, _bind(self._pronoun, passage, token, sentence)))
        for chunk in _definites(doc, sent):
            if not _inside(chunk.start, chunk.end, taken):
                items.append((chunk.start, _bind(self._definite, passage, chunk, sentence)))
        found = []
        for _, handle in sorted(items, key=lambda item: item[0]):
            start, end, entity, root = handle()
            if entity is not None:
                self._record(passage, doc, start, end, entity, root, sentence)
                found.append((start, end, entity))
        self._describe(sent, found)

    def _names(self, doc: Doc, sent: Span) -> list[tuple[Span, str | None, bool]]:
        """Title occurrences, named entities and proper-noun chunks, without overlaps."""
        ents = [
            e
            for e in doc.ents
            if e.label_ in NAME_LABELS
            and sent.start <= e.start
            and e.end <= sent.end
            and e.root.pos_ != "ADJ"
        ]
        out: list[tuple[Span, str | None, bool]] = []
        if self.title_pattern is not None:
            for match in self.title_pattern.finditer(sent.text):
                span = doc.char_span(
                    sent.start_char + match.start(),
                    sent.start_char + match.end(),
                    alignment_mode="expand",
                )
                if span is not None:
                    labels = [e.label_ for e in ents if e.start < span.end and span.start < e.end]
                    out.append((span, labels[0] if labels else None, True))
        for ent in ents:
            out.append((_without_possessive(ent), ent.label_, False))
        for chunk in doc.noun_chunks:
            words = [t for t in chunk if not (t.i == chunk.start and t.lower_ == "the")]
            if (
                sent.start <= chunk.start
                and chunk.end <= sent.end
                and words
                and all(t.tag_ in ("NNP", "NNPS") for t in words)
            ):
                out.append((_without_possessive(chunk), None, False))
        kept: list[tuple[Span, str | None, bool]] = []
        for span, label, is_title in out:
            if not _inside(span.start, span.end, [(s.start, s.end) for s, _, _ in kept]):
                kept.append((span, label, is_title))
        return kept

    def _record(
        self,
        passage: int,
        doc: Doc,
        start: int,
        end: int,
        entity: _Entity,
        root: Token,
        sentence: int,
    ) -> None:
        span = doc[start:end]
        entity.mentions.append(Mention(passage, span.start_char, span.end_char))
        entity.last = self.clock
        self.clock += 1
        subject = root.dep_ in SUBJECT
        governor = (passage, root.head.i) if subject else None
        self.history.append(_Seen(entity, sentence, subject, governor))

    def _describe(self, sent: Span, found: list[tuple[int, int, _Entity]]) -> None:
        """Nouns that describe an entity: "X is a Y" and "X, a Y, ..."."""

        def entity_of(token: Token) -> _Entity | None:
            for start, end, entity in found:
                if start <= token.i < end:
                    return entity
            return None

        for token in sent:
            if token.pos_ != "NOUN":
                continue
            if token.dep_ == "attr" and token.head.lemma_ in COPULAS:
                subjects = [c for c in token.head.children if c.dep_ in SUBJECT]
                target = entity_of(subjects[0]) if subjects else None
            elif token.dep_ == "appos":
                target = entity_of(token.head)
            else:
                continue
            if target is not None:
                nouns = (token, *token.conjuncts)
                target.descriptors.update(_described(t) for t in nouns if t.pos_ == "NOUN")

    # ------------------------------------------------------------------ mention kinds

    def _name(self, span: Span, label: str | None, is_title: bool) -> tuple:
        key = _key(span.text)
        if is_title or (self.title is not None and key == self.title.key):
            entity = self.title
            assert entity is not None  # a title mention is found only when the title is known
            if entity.label is None and label is not None:
                entity.label = label
            if not entity.mentions:
                entity.plural = span.root.tag_ in ("NNS", "NNPS")
            return span.start, span.end, entity, span.root
        by_recency = sorted(self.entities, key=lambda e: e.last, reverse=True)
        person = label == "PERSON"
        same = [e for e in by_recency if e.key == key and (e.label == "PERSON") == person]
        if not same and person:
            words = set(key.split())
            same = [e for e in by_recency if e.label == "PERSON" and words < set(e.key.split())]
        if same:  # the title entity first: the article is about it
            chosen = self.title if self.title in same else same[0]
            return span.start, span.end, chosen, span.root
        entity = _Entity(key, label, plural=span.root.tag_ in ("NNS", "NNPS"))
        self.entities.append(entity)
        return span.start, span.end, entity, span.root

    def _pronoun(self, passage: int, token: Token, sentence: int) -> tuple:
        kind = PRONOUN_KINDS[token.lower_]
        blocked = set()
        if token.dep_ in ("dobj", "dative") and token.lower_ not in REFLEXIVES:
            here = (passage, token.head.i)
            blocked = {id(s.entity) for s in self.history if s.governor == here}
        entity = self._salient(
            sentence, lambda e: id(e) not in blocked and _fits(e, kind), PRONOUN_REACH
        ) or self._title_if(lambda e: _fits(e, kind))
        if entity is not None and kind in "mf":
            entity.gender = kind
        return token.i, token.i + 1, entity, token

    def _definite(self, passage: int, chunk: Span, sentence: int) -> tuple:
        noun, modifiers = _described(chunk.root)
        plural = chunk.root.tag_ == "NNS"

        def described(entity: _Entity) -> bool:
            agrees = entity.plural or not plural
            return agrees and any(n == noun and modifiers <= m for n, m in entity.descriptors)

        def typed(entity: _Entity) -> bool:
            types = NOUN_TYPES.get(noun, ())
            return not modifiers and not entity.descriptors and entity.label in types

        entity = (
            self._salient(sentence, described)
            or self._salient(sentence, lambda e: typed(e) and e.plural == plural, PRONOUN_REACH)
            or self._title_if(described)
        )
        if entity is not None:
            entity.descriptors.add((noun, modifiers))
        return chunk.start, chunk.end, entity, chunk.root

    # ------------------------------------------------------------------ choosing

    def _salient(
        self, sentence: int, fits: Callable[[_Entity], bool], reach: int | None = None
    ) -> _Entity | None:
        """The fitting entity with the highest salience among the closest candidates (those at
        most ``reach`` sentences back, if given)."""
        scores: dict[int, tuple[float, int, _Entity]] = {}
        for order, seen in enumerate(self.history[-self.limit :]):
            if not fits(seen.entity) or (reach is not None and sentence - seen.sentence > reach):
                continue
            weight = (2.0 if seen.subject else 1.0) * 0.5 ** (sentence - seen.sentence)
            score = scores.get(id(seen.entity), (0.0, 0, seen.entity))[0]
            scores[id(seen.entity)] = (score + weight, order, seen.entity)
        if not scores:
            return None
        return max(scores.values(), key=lambda s: (s[0], s[1]))[2]

    def _title_if(self, fits: Callable[[_Entity], bool]) -> _Entity | None:
        return self.title if self.title is not None and fits(self.title) else None


def _fits(entity: _Entity, kind: str) -> bool:
    """Whether a pronoun of ``kind`` (m, f, n, p) may refer to the entity."""
    if kind in "mf":
        return entity.label == "PERSON" and not entity.plural and entity.gender in (None, kind)
    if kind == "n":
        return entity.label in THINGS and not entity.plural
    return entity.plural or entity.label in GROUPS


def _pronoun(token: Token) -> bool:
    """A third-person pronoun that refers to something (not expletive "it")."""
    if token.lower_ not in PRONOUN_KINDS or token.tag_ not in ("PRP", "PRP$"):
        return False
    if token.dep_ == "expl":
        return False
    if token.lower_ == "it" and token.dep_ in SUBJECT:
        clauses = {c.dep_ for c in token.head.children}
        if token.head.lemma_ in COPULAS and clauses & {"ccomp", "csubj", "xcomp"}:
            return False
        if token.dep_ == "nsubjpass" and "ccomp" in clauses:
            return False
    return True


def _definites(doc: Doc, sent: Span) -> list[Span]:
    """Noun chunks "the + common noun" with nothing restrictive after the noun."""
    out = []
    for chunk in doc.noun_chunks:
        if not (sent.start <= chunk.start and chunk.end <= sent.end):
            continue
        root = chunk.root
        if doc[chunk.start].lower_ != "the" or root.pos_ != "NOUN":
            continue
        after = {c.dep_ for c in root.children} | {
            "of" for c in root.children if c.dep_ == "prep" and c.lower_ == "of"
        }
        if after & {"relcl", "acl", "of"}:
            continue
        out.append(chunk)
    return out


def _described(noun: Token) -> tuple[str, frozenset[str]]:
    """A noun's lemma and the lemmas of its adjective and noun modifiers."""
    modifiers = {c.lemma_.lower() for c in noun.children if c.dep_ in ("amod", "compound")}
    return noun.lemma_.lower(), frozenset(modifiers)


def _without_possessive(span: Span) -> Span:
    """The span without a final possessive "'s" token."""
    return span[:-1] if len(span) > 1 and span[-1].tag_ == "POS" else span


def _inside(start: int, end: int, spans: Sequence[tuple[int, int]]) -> bool:
    """Whether token range ``[start, end)`` overlaps any of ``spans``."""
    return any(s < end and start < e for s, e in spans)


def _pattern(core: str) -> re.Pattern[str]:
    """The title core as a whole-word pattern, its first letter in either case."""
    first = core[0]
    initial = f"[{re.escape(first.upper())}{re.escape(first.lower())}]"
    return re.compile(rf"(?<!\w){initial}{re.escape(core[1:])}(?!\w)")


def _bind(function: Callable, *args: object) -> Callable[[], tuple]:
    return lambda: function(*args)
