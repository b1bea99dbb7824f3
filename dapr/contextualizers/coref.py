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
import warnings
from collections.abc import Iterator, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any

from dapr import checkpoints
from dapr.contextualizers.mentions import (
    Mention,
    annotate,
    merge_clusters,
    to_mentions,
    tokenize,
    windows,
)
from dapr.contextualizers.spacy_models import installed_name, model_version, spacy_pipeline
from dapr.data import Document
from dapr.errors import DaprError, check_choice
from dapr.ranges import Device, Range

logger = logging.getLogger(__name__)

BACKENDS = ("fastcoref", "rules")
SPACY_MODEL = "en_core_web_sm"
TOKENIZER_ONLY = ("tok2vec", "tagger", "parser", "attribute_ruler", "lemmatizer", "ner", "senter")
"""Components left out of the spaCy pipeline that only tokenizes for fastcoref."""

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
    config = Path(checkpoints.resolve(name)) / "config.json"
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

    :param backend: ``fastcoref`` (a neural model) or ``rules`` (an offline spaCy heuristic).
    :param model: fastcoref: an F-coref or LingMess checkpoint (a hub id or a local folder).
    :param device: fastcoref: the device the model runs on (None: a GPU if there is one).
    :param batch_size: fastcoref: sub-word tokens per model batch (``max_tokens_in_batch``).
    :param window: fastcoref: spaCy tokens per model input.
    :param overlap: fastcoref: tokens consecutive inputs share (None: an eighth of ``window``).
    :param max_antecedents: Candidates each mention may refer to: the closest ones before it.
    """

    version = "1"
    parallel: bool

    def __new__(cls, backend: str = "fastcoref", **kwargs: Any) -> Coref:
        if cls is Coref:
            check_choice("coref", "backend", backend, BACKENDS)
            cls = FastCoref if backend == "fastcoref" else RulesCoref
        return super().__new__(cls)

    @staticmethod
    def models_needed(args: Mapping[str, Any]) -> list[str]:
        """What ``coref`` with ``args`` loads: F-coref's checkpoint (fastcoref) and the spaCy
        pipeline both backends tokenize with (its signature hides them behind ``__new__``)."""
        backend = args.get("backend", "fastcoref")
        check_choice("coref", "backend", backend, BACKENDS)
        if backend == "fastcoref":
            return [str(args.get("model", "biu-nlp/f-coref")), SPACY_MODEL]
        return [SPACY_MODEL]

    def __init__(
        self,
        backend: str = "fastcoref",
        model: str = "biu-nlp/f-coref",
        device: Annotated[str | None, Device()] = None,
        batch_size: Annotated[int, Range(1)] = 10000,
        window: Annotated[int, Range(1)] = 2048,
        overlap: Annotated[int | None, Range(0)] = None,  # and below window
        max_antecedents: Annotated[int, Range(1)] = 50,
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
            "revision": checkpoints.revision(self.model),
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
                '"dapr-ir[coref]" (or use backend: rules)'
            )
        with _fastcoref_side_effects():
            from fastcoref import FCoref, LingMessCoref

            factory = LingMessCoref if _is_lingmess(self.model) else FCoref
            loaded = checkpoints.load(
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
