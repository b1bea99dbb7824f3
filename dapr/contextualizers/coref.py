"""Coreference annotation: name, in parentheses, what a mention refers to in an earlier paragraph.

The DAPR paper (section 4.2.2) runs a coreference model over the whole document and, wherever a
mention's cluster has an antecedent in another paragraph, appends that cluster's earliest
antecedent in parentheses after the mention, so a passage read on its own says whom "it" or
"the venue" means: "The venue has hosted ..." becomes "The venue (The Half Moon) has hosted ...".
Coreference inside one paragraph adds nothing, since the passage already holds the antecedent.
The paper's model was allennlp's SpanBERT coreference model (higher-order, coarse-to-fine), which
scores each span against at most its 50 closest preceding candidate spans (``max_antecedents``).

The annotation (:func:`annotate`) is independent of the backend that finds the clusters:

- ``fastcoref`` (default, neural): F-coref (``biu-nlp/f-coref``, a DistilRoBERTa model distilled
  from LingMess) or LingMess (``biu-nlp/lingmess-coref``, Longformer) from the ``fastcoref``
  package, on GPU or CPU, batched over documents. The document is tokenized with spaCy's
  ``en_core_web_sm`` tokenizer (passages in order, whitespace tokens dropped) and cut into
  windows of ``window`` tokens overlapping by ``overlap`` tokens; each window is one model input.
  Clusters of different windows that share a mention (the same token span, found in the overlap)
  are merged. ``max_antecedents`` is enforced inside the model: the antecedent logits of every
  candidate mention are masked (fastcoref's own -10000 masking, below the null antecedent's 0)
  for all but its ``max_antecedents`` closest preceding candidates in the model's pruned,
  position-sorted span list, so the argmax can only pick one of those.
- ``rules`` (offline, CPU): :mod:`dapr.contextualizers.coref_rules`, a heuristic on spaCy's parse
  and named entities. It reads each passage whole (no windows) and considers the closest
  ``max_antecedents`` earlier mentions as candidates.

Annotation rules (:func:`annotate`): a mention is annotated when its cluster has a mention in an
earlier paragraph. The text added is the cluster's earliest mention that is not a pronoun (the
earliest mention itself unless it is one); a cluster of pronouns only adds nothing. The antecedent
must end before the mention starts, and a mention whose text equals it gets nothing (ignoring
case, a leading article and a trailing possessive: "the General Council's" adds nothing after
"General Council"). Where several annotated mentions end at the same character (nested
mentions), the longest one's antecedent is used. Every addition is ``" (" + antecedent + ")"``
inserted after a mention, so removing those insertions gives back the original passage.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import random
import re
import warnings
from collections.abc import Iterable, Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

from dapr import models
from dapr.data import Document
from dapr.errors import DaprError
from dapr.nlp import installed_name, model_version, spacy_pipeline

logger = logging.getLogger(__name__)

BACKENDS = ("fastcoref", "rules")
SPACY_MODEL = "en_core_web_sm"
TOKENIZER_ONLY = ("tok2vec", "tagger", "parser", "attribute_ruler", "lemmatizer", "ner", "senter")
"""Components left out of the spaCy pipeline that only tokenizes for fastcoref."""

_PRONOUN_GROUPS = (
    "i me my mine myself",
    "you your yours yourself yourselves",
    "he him his himself she her hers herself it its itself one",
    "we us our ours ourselves they them their theirs themselves",
    "this that these those who whom whose which",
)
PRONOUNS = frozenset(word for group in _PRONOUN_GROUPS for word in group.split())
"""Mention texts that never serve as the antecedent written into a passage."""


class Mention(NamedTuple):
    """Characters ``[start, end)`` of passage ``passage`` (its index in the document)."""

    passage: int
    start: int
    end: int


# ---------------------------------------------------------------- annotation (any backend)


def annotate(passages: Sequence[str], clusters: Iterable[Sequence[Mention]]) -> list[str]:
    """Each passage with ``" (antecedent)"`` after every mention whose cluster reaches into an
    earlier passage (the rules are in the module docstring)."""
    return [
        apply_insertions(text, inserted)
        for text, inserted in zip(passages, insertions(passages, clusters), strict=True)
    ]


def insertions(
    passages: Sequence[str], clusters: Iterable[Sequence[Mention]]
) -> list[list[tuple[int, str]]]:
    """Per passage, the ``(character offset, inserted text)`` pairs :func:`annotate` applies,
    by increasing offset."""
    chosen: list[dict[int, tuple[int, str]]] = [{} for _ in passages]
    for cluster in clusters:
        mentions = sorted({_checked(Mention(*m), passages) for m in cluster})
        named = [m for m in mentions if _text(passages, m).casefold() not in PRONOUNS]
        if len(mentions) < 2 or not named:
            continue
        antecedent = named[0]
        name = _text(passages, antecedent)
        for mention in mentions:
            if mention.passage == mentions[0].passage:
                continue  # no mention of the cluster in an earlier passage
            if (mention.passage, mention.start) < (antecedent.passage, antecedent.end):
                continue  # the antecedent does not precede it
            if _same_name(_text(passages, mention), name):
                continue
            length = mention.end - mention.start
            current = chosen[mention.passage].get(mention.end)
            if current is None or length > current[0]:
                chosen[mention.passage][mention.end] = (length, f" ({name})")
    return [sorted((end, text) for end, (_, text) in found.items()) for found in chosen]


def apply_insertions(text: str, inserted: Sequence[tuple[int, str]]) -> str:
    """``text`` with each ``(offset, addition)`` inserted at its offset (offsets ascending)."""
    pieces, last = [], 0
    for offset, addition in inserted:
        pieces += [text[last:offset], addition]
        last = offset
    pieces.append(text[last:])
    return "".join(pieces)


def _checked(mention: Mention, passages: Sequence[str]) -> Mention:
    passage, start, end = mention
    if not 0 <= passage < len(passages) or not 0 <= start < end <= len(passages[passage]):
        raise DaprError(
            f"coref: mention {tuple(mention)} is not inside a passage of this {len(passages)}-"
            "passage document; a mention is (passage index, start char, end char), start < end"
        )
    return mention


def _same_name(a: str, b: str) -> bool:
    """Equal texts, ignoring case, a leading article and a trailing possessive."""
    return _bare(a) == _bare(b)


def _bare(text: str) -> str:
    text = re.sub(r"^(?:the|a|an)\s+", "", text.casefold())
    return re.sub(r"(?:'s|\u2019s|'|\u2019)$", "", text)


def _text(passages: Sequence[str], mention: Mention) -> str:
    """The mention's text with its whitespace collapsed to single spaces."""
    return " ".join(passages[mention.passage][mention.start : mention.end].split())


# ------------------------------------------------------------ windows and token spans


def windows(n: int, size: int, overlap: int) -> list[tuple[int, int]]:
    """Token ranges ``[start, end)`` covering ``n`` tokens: ``size`` long (fewer only when
    ``n < size``), each starting ``size - overlap`` after the previous one; the last window
    ends at ``n`` and may overlap its predecessor by more."""
    if n <= 0:
        return []
    out, start = [], 0
    while start + size < n:
        out.append((start, start + size))
        start += size - overlap
    out.append((max(0, n - size), n))
    return out


def merge_clusters(
    predictions: Iterable[tuple[int, Sequence[Sequence[tuple[int, int]]]]],
) -> list[list[tuple[int, int]]]:
    """Clusters of document token spans ``[start, end)`` from per-window predictions
    ``(window start, clusters of window-relative spans)``: clusters sharing a span are one."""
    parent: dict[tuple[int, int], tuple[int, int]] = {}

    def root(span: tuple[int, int]) -> tuple[int, int]:
        parent.setdefault(span, span)
        while parent[span] != span:
            parent[span] = parent[parent[span]]
            span = parent[span]
        return span

    for offset, clusters in predictions:
        for cluster in clusters:
            spans = [(offset + s, offset + e) for s, e in cluster]
            for span in spans:
                parent[root(span)] = root(spans[0])
    groups: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for span in sorted(parent):
        groups.setdefault(root(span), []).append(span)
    return [spans for spans in groups.values() if len(spans) > 1]


def to_mentions(
    tokens: Sequence[Mention], clusters: Iterable[Sequence[tuple[int, int]]]
) -> list[list[Mention]]:
    """Token-span clusters as character mentions; ``tokens[i]`` is where token ``i`` lies. A
    span running across two passages is dropped (a mention lies inside one passage)."""
    out = []
    for cluster in clusters:
        mentions = []
        for start, end in cluster:
            first, last = tokens[start], tokens[end - 1]
            if first.passage == last.passage:
                mentions.append(Mention(first.passage, first.start, last.end))
        if len(mentions) > 1:
            out.append(mentions)
    return out


def tokenize(tokenizer: Any, passages: Sequence[str]) -> list[Mention]:
    """Where every non-whitespace token of the passages lies, in document order."""
    return [
        Mention(p, token.idx, token.idx + len(token.text))
        for p, doc in enumerate(tokenizer.pipe(passages))
        for token in doc
        if not token.is_space
    ]


# ------------------------------------------------------------------- fastcoref plumbing


def limit_antecedents(model: Any, limit: int) -> None:
    """Let every candidate mention of a fastcoref model (F-coref or LingMess) choose among its
    ``limit`` closest preceding candidates only: the model's antecedent mask is narrowed to a
    band of ``limit`` diagonals below the main one."""
    import torch
    from fastcoref.utilities.util import mask_tensor

    original = model._mask_antecedent_logits

    def masked(logits: torch.Tensor, span_mask: torch.Tensor, *args: Any) -> torch.Tensor:
        logits = original(logits, span_mask, *args)
        k = logits.size(-1)
        band = torch.ones(k, k, dtype=logits.dtype, device=logits.device).triu(-limit)
        return mask_tensor(logits, band)

    model._mask_antecedent_logits = masked


def span_clusters(result: Any) -> list[list[tuple[int, int]]]:
    """The token-span clusters of a fastcoref result predicted on pre-tokenized words (its
    "character" offsets are then word indices ``[start, end)``)."""
    clusters = [[s for s in c if s is not None] for c in result.get_clusters(as_strings=False)]
    return [[tuple(s) for s in c] for c in clusters if len(c) > 1]


@contextlib.contextmanager
def _fastcoref_side_effects() -> Iterator[None]:
    """Undo what importing and loading fastcoref does to the process: it configures the root
    logger, reseeds the global random generators and silences transformers' logging."""
    import numpy as np
    import torch
    import transformers

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    verbosity = transformers.logging.get_verbosity()
    logging.getLogger("fastcoref").setLevel(logging.WARNING)
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        transformers.logging.set_verbosity(verbosity)


@contextlib.contextmanager
def _quiet_predict() -> Iterator[None]:
    """No progress bar from ``datasets`` (fastcoref maps its inputs through it), no advice from
    transformers' tokenizers (as fastcoref intends) and none of the deprecation warnings."""
    import datasets
    import transformers

    shown = not datasets.are_progress_bars_disabled()
    verbosity = transformers.logging.get_verbosity()
    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        transformers.logging.set_verbosity(verbosity)
        if shown:
            datasets.enable_progress_bars()


def _is_lingmess(name: str) -> bool:
    config = Path(models.resolve(name)) / "config.json"
    if config.is_file():
        architectures = json.loads(config.read_text()).get("architectures") or []
        if any("lingmess" in a.lower() for a in architectures):
            return True
        if any("fcoref" in a.lower() for a in architectures):
            return False
    return "lingmess" in name.lower()


# --------------------------------------------------------------------------- contextualizer


class Coref:
    """Annotate mentions with their antecedent from an earlier paragraph (DAPR section 4.2.2).

    ``backend``: ``"fastcoref"`` (neural: ``model`` is an F-coref or LingMess checkpoint, a hub
    id or a local directory) or ``"rules"`` (offline spaCy heuristic; ``model``, ``device``,
    ``batch_size``, ``window`` and ``overlap`` do not apply). ``batch_size``: sub-word tokens per
    model batch (fastcoref's ``max_tokens_in_batch``). ``window``/``overlap``: spaCy tokens per
    model input and shared by consecutive inputs (default: an eighth of ``window``).
    ``max_antecedents``: candidates each mention may refer to (the closest ones before it).

    ``Coref(...)`` returns a :class:`FastCoref` or :class:`RulesCoref`: the neural one batches
    documents in one process (``contextualize_batch``, ``parallel = False``), the heuristic one
    runs one document at a time in worker processes (``parallel = True``).
    """

    version = "1"
    parallel: bool

    def __new__(cls, backend: str = "fastcoref", **kwargs: Any) -> Coref:
        if cls is Coref:
            if backend not in BACKENDS:
                raise DaprError(
                    f"coref: unknown backend {backend!r}; choose from: {', '.join(BACKENDS)}"
                )
            cls = FastCoref if backend == "fastcoref" else RulesCoref
        return super().__new__(cls)

    def __init__(
        self,
        backend: str = "fastcoref",
        model: str = "biu-nlp/f-coref",
        device: str | None = None,
        batch_size: int = 10000,
        window: int = 2048,
        overlap: int | None = None,
        max_antecedents: int = 50,
    ):
        overlap = window // 8 if overlap is None else overlap
        if window < 1 or not 0 <= overlap < window:
            raise DaprError(
                f"coref: window={window}, overlap={overlap}: need window >= 1 and "
                "0 <= overlap < window"
            )
        if max_antecedents < 1 or batch_size < 1:
            raise DaprError("coref: max_antecedents and batch_size must be at least 1")
        self.backend = backend
        self.model = model
        self.device = device
        self.batch_size = batch_size
        self.window = window
        self.overlap = overlap
        self.max_antecedents = max_antecedents

    def __getstate__(self) -> dict:
        """Settings only: loaded models and pipelines stay behind (they load again lazily)."""
        keep = ("backend", "model", "device", "batch_size", "window", "overlap", "max_antecedents")
        return {k: self.__dict__[k] for k in keep}

    def clusters(self, document: Document) -> list[list[Mention]]:
        """The document's coreference clusters as character mentions."""
        raise NotImplementedError

    def contextualize(self, document: Document) -> list[str]:
        return annotate([p.text for p in document.passages], self.clusters(document))


class FastCoref(Coref):
    """The ``fastcoref`` backend of :class:`Coref`."""

    parallel = False

    def identity(self) -> dict:
        return {
            "backend": "fastcoref",
            "model": self.model,
            "revision": models.revision(self.model),
            "window": self.window,
            "overlap": self.overlap,
            "max_antecedents": self.max_antecedents,
        }

    @cached_property
    def tokenizer(self) -> Any:
        return spacy_pipeline(SPACY_MODEL, disable=TOKENIZER_ONLY)

    @cached_property
    def coref_model(self) -> Any:
        """The fastcoref model (FCoref or LingMessCoref), antecedents limited."""
        if importlib.util.find_spec("fastcoref") is None:
            raise DaprError(
                "coref: the fastcoref backend needs fastcoref; install it with: pip install "
                '"dapr[coref]" (or use backend: rules)'
            )
        with _fastcoref_side_effects():
            from fastcoref import FCoref, LingMessCoref

            factory = LingMessCoref if _is_lingmess(self.model) else FCoref
            loaded = models.load(
                factory,
                self.model,
                device=self.device,
                nlp=self.tokenizer,
                enable_progress_bar=False,
            )
        limit_antecedents(loaded.model, self.max_antecedents)
        return loaded

    def clusters(self, document: Document) -> list[list[Mention]]:
        return self.clusters_batch([document])[0]

    def contextualize_batch(self, documents: Sequence[Document]) -> list[list[str]]:
        """:meth:`contextualize` for many documents, their windows batched through the model."""
        found = self.clusters_batch(documents)
        return [
            annotate([p.text for p in d.passages], clusters)
            for d, clusters in zip(documents, found, strict=True)
        ]

    def clusters_batch(self, documents: Sequence[Document]) -> list[list[list[Mention]]]:
        tokens = [tokenize(self.tokenizer, [p.text for p in d.passages]) for d in documents]
        jobs = [
            (d, start, [_word(documents[d], t) for t in doc_tokens[start:end]])
            for d, doc_tokens in enumerate(tokens)
            for start, end in windows(len(doc_tokens), self.window, self.overlap)
        ]
        predicted = self.predict([words for _, _, words in jobs])
        per_document: list[list] = [[] for _ in documents]
        for (d, start, _), clusters in zip(jobs, predicted, strict=True):
            per_document[d].append((start, clusters))
        return [
            to_mentions(doc_tokens, merge_clusters(found))
            for doc_tokens, found in zip(tokens, per_document, strict=True)
        ]

    def predict(self, inputs: Sequence[list[str]]) -> list[list[list[tuple[int, int]]]]:
        """Token-span clusters of every input word list (none for an input the model skips,
        which fastcoref does for inputs longer than its ``max_doc_len``)."""
        out: list[list[list[tuple[int, int]]]] = [[] for _ in inputs]
        if not inputs:
            return out
        model = self.coref_model
        with _quiet_predict():
            results = model.predict(
                list(inputs), is_split_into_words=True, max_tokens_in_batch=self.batch_size
            )
        for result in results:
            out[result.text_idx] = span_clusters(result)
        if len(results) < len(inputs):
            logger.warning(
                "coref: the model skipped %d of %d windows (too many sub-word tokens); "
                "use a smaller window",
                len(inputs) - len(results),
                len(inputs),
            )
        return out


def _word(document: Document, token: Mention) -> str:
    return document.passages[token.passage].text[token.start : token.end]


class RulesCoref(Coref):
    """The ``rules`` backend of :class:`Coref` (see :mod:`dapr.contextualizers.coref_rules`)."""

    parallel = True

    def identity(self) -> dict:
        from dapr.contextualizers import coref_rules

        return {
            "backend": "rules",
            "rules": coref_rules.RULES_VERSION,
            "spacy_model": installed_name(SPACY_MODEL),
            "spacy_model_version": model_version(SPACY_MODEL),
            "max_antecedents": self.max_antecedents,
        }

    @cached_property
    def nlp(self) -> Any:
        return spacy_pipeline(SPACY_MODEL)

    def clusters(self, document: Document) -> list[list[Mention]]:
        from dapr.contextualizers import coref_rules

        return coref_rules.resolve(
            document.title,
            [p.text for p in document.passages],
            self.nlp,
            max_antecedents=self.max_antecedents,
        )
