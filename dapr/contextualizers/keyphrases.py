"""Keyphrase context: every passage is prefixed with its document's top TopicRank keyphrases.

The DAPR paper (section 4.2.2) extracts the top 10 TopicRank keyphrases of each document with the
``pke`` toolkit on spaCy's ``en_core_web_sm``; the reference code joins them with a space (its
``did2dsum.jsonl`` summaries) and writes each passage as that summary, one space, then the passage
text (``separator`` changes the join). The document text is its passages joined by newlines, cut
to 65,536 characters as in the reference code.

Two backends compute the keyphrases:

- ``pke``: the reference implementation itself (the ``pke`` module of ``ccpke``), called exactly
  as the reference code calls it, on the same pipeline pke's own reader would load (tagger and
  attribute ruler, no parser or NER, a sentencizer, hyphenated words kept whole).
- ``native`` (default): :mod:`dapr.contextualizers.topicrank`, the same algorithm vectorised,
  on the same parse made cheaply: only the tokenizer, ``tok2vec`` and ``tagger`` run (the
  lemmatizer is not needed; the attribute ruler's tag -> part-of-speech rules and the
  sentencizer's rule are applied on arrays), the network's matrix products go to NumPy's BLAS on
  one thread instead of BLIS, and stems are cached. Its keyphrases are the reference's up to
  ties: identical top-10 lists on all 151 wiki-sample and XQuAD articles, about 14 times faster
  per process (``benchmarks/keyphrases.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, cast

from dapr.contextualizers.spacy_models import model_version as spacy_model_version
from dapr.data import Document
from dapr.errors import DaprError, check_choice
from dapr.ranges import Range

if TYPE_CHECKING:
    from spacy.pipeline import AttributeRuler, Sentencizer

BACKENDS = ("native", "pke")
INSTALL = 'install it with: pip install "dapr-ir[context]"'
PKE_EXCLUDE = ("ner", "parser", "textcat")
"""What pke's reader leaves out of the spaCy pipeline it loads."""
NATIVE_EXCLUDE = ("lemmatizer", "ner", "parser", "senter", "textcat")
"""Not needed for coarse part-of-speech tags (tok2vec -> tagger -> attribute_ruler)."""

Extractor = Callable[[str, int], list[str]]


class Keyphrases:
    """Prefix each passage with its document's top ``n`` TopicRank keyphrases.

    ``backend`` is ``native`` (fast, the default) or ``pke`` (the reference); ``spacy_model``
    names the spaCy pipeline both parse with; the document text is cut to ``max_chars``.

    :param backend: ``native`` (dapr's TopicRank, fast) or ``pke`` (the reference's toolkit).
    :param n: Keyphrases per document.
    :param separator: What joins the keyphrases.
    :param max_chars: Characters of the document text the keyphrases are extracted from.
    :param spacy_model: The spaCy pipeline that tags the text.
    """

    version = "2"
    parallel = True  # CPU work one document at a time: worth worker processes

    def __init__(
        self,
        backend: str = "native",
        n: Annotated[int, Range(0)] = 10,
        separator: str = " ",
        max_chars: Annotated[int, Range(1)] = 65536,
        spacy_model: str = "en_core_web_sm",
    ):
        check_choice("keyphrases", "backend", backend, BACKENDS)
        if n < 0 or max_chars < 1:
            raise DaprError(f"keyphrases: n ({n}) must be >= 0 and max_chars ({max_chars}) >= 1")
        self.backend = backend
        self.n = n
        self.separator = separator
        self.max_chars = max_chars
        self.spacy_model = spacy_model
        self._extractor: Extractor | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_extractor": None}  # workers load their own pipeline

    def identity(self) -> dict[str, Any]:
        found = {
            "backend": self.backend,
            "n": self.n,
            "separator": self.separator,
            "max_chars": self.max_chars,
            "spacy_model": self.spacy_model,
            "spacy_model_version": spacy_model_version(self.spacy_model),
        }
        if self.backend == "pke":
            found["pke"] = _pke_version()
        return found

    def text(self, document: Document) -> str:
        """What the extractor reads: the passages joined by newlines, cut to ``max_chars``."""
        return "\n".join(p.text for p in document.passages)[: self.max_chars]

    def keyphrases(self, document: Document) -> list[str]:
        """The document's top ``n`` keyphrases, best first."""
        if self.n == 0:
            return []
        if self._extractor is None:
            self._extractor = _load(self.backend, self.spacy_model)
        return self._extractor(self.text(document), self.n)

    def contextualize(self, document: Document) -> list[str]:
        phrases = self.keyphrases(document)
        if not phrases:
            return [p.text for p in document.passages]
        prefix = self.separator.join(phrases)
        return [f"{prefix} {p.text}" for p in document.passages]


# --- backends ---------------------------------------------------------------------------------


def _load(backend: str, spacy_model: str) -> Extractor:
    return PkeTopicRank(spacy_model) if backend == "pke" else NativeTopicRank(spacy_model)


class PkeTopicRank:
    """The reference: pke's TopicRank with its defaults, as the DAPR code calls it."""

    def __init__(self, spacy_model: str = "en_core_web_sm"):
        try:
            import pke
        except ImportError:
            raise DaprError(f"keyphrases backend 'pke' needs ccpke; {INSTALL}") from None
        from dapr.contextualizers.spacy_models import spacy_pipeline
        from dapr.contextualizers.topicrank_spacy import prepare_like_pke

        self._topicrank = pke.unsupervised.TopicRank
        self.nlp = prepare_like_pke(spacy_pipeline(spacy_model, PKE_EXCLUDE))

    def __call__(self, text: str, n: int) -> list[str]:
        extractor = self._topicrank()
        extractor.load_document(input=text, language="en", spacy_model=self.nlp)
        extractor.candidate_selection()
        extractor.candidate_weighting()
        best = sorted(extractor.get_n_best(n=n), key=lambda pair: pair[1], reverse=True)
        return [phrase for phrase, _ in best]


class NativeTopicRank:
    """:func:`dapr.contextualizers.topicrank.topicrank` on a lean spaCy pipeline."""

    def __init__(self, spacy_model: str = "en_core_web_sm"):
        try:
            import nltk.stem.snowball  # noqa: F401
            import scipy.cluster.hierarchy  # noqa: F401
        except ImportError as missing:
            raise DaprError(
                f"keyphrases backend 'native' needs {missing.name or 'nltk and scipy'}; {INSTALL}"
            ) from None
        from dapr.contextualizers.spacy_models import spacy_pipeline
        from dapr.contextualizers.topicrank_spacy import PosRules, prepare_like_pke

        nlp = prepare_like_pke(spacy_pipeline(spacy_model, NATIVE_EXCLUDE))
        self.rules = None
        if "attribute_ruler" in nlp.component_names:
            ruler = cast("AttributeRuler", nlp.get_pipe("attribute_ruler"))
            self.rules = PosRules.compile(ruler.patterns)
            if self.rules is not None and "attribute_ruler" in nlp.pipe_names:
                nlp.disable_pipe("attribute_ruler")
        sentencizer = cast("Sentencizer", nlp.get_pipe("sentencizer"))
        self.stop_chars = frozenset(sentencizer.punct_chars)
        if "sentencizer" in nlp.pipe_names:
            nlp.disable_pipe("sentencizer")  # read_doc applies its rule on arrays
        _numpy_matmul(nlp)
        self.nlp = nlp
        self._one_thread = _one_blas_thread()

    def parse(self, text: str) -> Any:
        with self._one_thread():
            return self.nlp(text)

    def __call__(self, text: str, n: int) -> list[str]:
        from dapr.contextualizers.topicrank import rank_tokens
        from dapr.contextualizers.topicrank_spacy import read_doc

        words, valid, sentence_ids = read_doc(self.parse(text), self.rules, self.stop_chars)
        return [phrase for phrase, _ in rank_tokens(words, valid, sentence_ids, n)]


def _numpy_matmul(nlp: Any) -> None:
    """Run the pipeline's matrix products through NumPy's BLAS rather than BLIS: the same
    weights and operations, several times faster where BLIS is a generic build."""
    from thinc.api import NumpyOps

    ops = NumpyOps(use_blis=False)
    for _, component in nlp.pipeline:
        model = getattr(component, "model", None)
        if model is not None and type(model.ops) is NumpyOps:
            for node in model.walk():
                node.ops = ops


def _one_blas_thread() -> Callable[[], contextlib.AbstractContextManager[Any]]:
    """A context that keeps BLAS on one thread (the parallelism is over documents)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return contextlib.nullcontext
    controller = ThreadpoolController()
    return lambda: controller.limit(limits=1, user_api="blas")


def _pke_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ccpke")
    except PackageNotFoundError:
        return "not installed"
