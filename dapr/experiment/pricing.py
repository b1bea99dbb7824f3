"""The price of one step of an experiment on a named machine: time, peak memory and disk.

Rates come from ``calibration.json`` beside this module, which ``python
benchmarks/calibration.py`` writes from the benchmarks' results: measured rates with their
benchmark, machine and date, and derived ones (another device) with their factor and its source.
A model's encoding costs its share of the reference model's ``12 x layers x hidden**2``
multiply-adds per token (SPLADE adds its vocabulary head); sizes come from
:mod:`dapr.experiment.sizes`. A cached step costs nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from dapr.errors import DaprError
from dapr.experiment.plan import Planned
from dapr.experiment.sizes import Sizes
from dapr.experiment.spec import Experiment, RetrieverSpec

CALIBRATION = Path(__file__).with_name("calibration.json")
RUN_BYTES = 17
"""Bytes per run entry on disk (a cold rank_fusion run on a wiki-sample slice, 2026-11-27)."""
CONTEXT_WORDS = {"title": None, "keyphrases": 20.0, "coref": 0.1}
"""Words a contextualizer adds to a passage: the title's length; ten keyphrases of about two
words (assumed); coreference, a tenth of the passage (assumed)."""
SPARSE_NONZEROS = 256
"""Assumed non-zero terms of a SPLADE passage vector (index size; search priced as dense 768)."""
BERT_BASE = {"layers": 12, "hidden": 768, "vocab": 30_522}
KNOWN_SIZES = {
    "facebook/dragon-plus-query-encoder": BERT_BASE,
    "facebook/dragon-plus-context-encoder": BERT_BASE,
    "naver/splade-cocondenser-ensembledistil": BERT_BASE,
    "colbert-ir/colbertv2.0": BERT_BASE,
    "jinaai/jina-embeddings-v2-base-en": BERT_BASE,
}
"""Shapes of the paper's checkpoints (their config.json), for machines without them."""
NEURAL = {"dense", "sparse", "late_interaction", "rerank"}
GB = 1e9


@dataclass(frozen=True)
class Cost:
    """One step priced: what it processes, seconds on one device, peak memory and disk (bytes);
    ``gpu``: whether it runs on the accelerator; ``rates``: the calibration entries used."""

    kind: str
    system: str
    status: str
    work: str
    seconds: float
    memory: float
    disk: float
    gpu: bool = False
    rates: tuple[str, ...] = ()


def _cost(
    step: Planned,
    work: str,
    seconds: float,
    memory: float,
    disk: float,
    gpu: bool = False,
    rates: tuple[str, ...] = (),
) -> Cost:
    """The :class:`Cost` of ``step`` (its kind, system and status carried over)."""
    return Cost(step.kind, step.system, step.status, work, seconds, memory, disk, gpu, rates)


@cache
def calibration() -> dict[str, Any]:
    """The calibration table (``python benchmarks/calibration.py`` writes it)."""
    return json.loads(CALIBRATION.read_text())


def device_rates(device: str) -> dict[str, Any]:
    """The calibration of ``device`` (``cpu``, ``cpu:N``, or a GPU the table names), with
    ``rates`` scaled for a CPU with another number of cores."""
    devices = calibration()["devices"]
    if device in devices:
        return dict(devices[device])
    cores = 2 if device == "cpu" else None
    if device.startswith("cpu:") and device[4:].isdigit() and int(device[4:]) > 0:
        cores = int(device[4:])
    if cores is None:
        gpus = ", ".join(name for name in devices if not name.startswith("cpu"))
        raise DaprError(f"--device {device}: no calibration for it; choose cpu:N, {gpus}")
    base = devices["cpu:2"]
    factor = cores / 2
    rates = {name: _scaled(rate, factor, name) for name, rate in base["rates"].items()}
    return {
        **base,
        "about": f"{cores}-core CPU, from {base['about']}",
        "cores": cores,
        "rates": rates,
    }


def _scaled(rate: dict[str, Any], factor: float, name: str) -> dict[str, Any]:
    if factor == 1 or name in ("start_s", "model_start_s") or "bytes" in name:
        return rate  # one core's work, or a size
    value = rate["value"] * factor if name.endswith("_per_s") else rate["value"] / factor
    return {
        **rate,
        "value": value,
        "status": "derived",
        "source": f"{rate['source']}, scaled to {factor * 2:.0f} cores (linear, assumed)",
    }


# -------------------------------------------------------------------------- pricing


class Pricer:
    """Prices steps of one experiment on one device."""

    def __init__(self, experiment: Experiment, sizes: Sizes, device: str):
        self.exp, self.sizes, self.device = experiment, sizes, device_rates(device)
        self.gpu = self.device["kind"] == "gpu"
        self.rates: dict[str, Any] = self.device["rates"]
        self.per_word = calibration()["tokens_per_word"]["value"]
        self.started: set[str] = set()

    def rate(self, name: str) -> float:
        return float(self.rates[name]["value"])

    def price(self, step: Planned) -> Cost:
        free = _cost(step, "cached", 0.0, 0.0, 0.0)
        if step.status == "cached":
            return free
        if step.kind == "train":
            return _cost(step, "not estimated (training)", 0, 0, 0)
        if step.kind == "fuse":
            return self._fuse(step)
        if step.kind == "score":
            return self._score(step)
        spec = self.exp.retrievers[step.system]
        if spec.name == "bm25":
            return self._bm25(step, spec)
        if spec.name in NEURAL:
            return self._neural(step, spec)
        return _cost(step, f"not estimated ({spec.name})", 0, 0, 0)

    def passage_words(self, spec: RetrieverSpec) -> float:
        """Words of a passage as the retriever indexes it (contextualizers added)."""
        words = self.sizes.passage_words
        for context in spec.contextualizer:
            kind = context.args.get("kind", context.name)
            added = CONTEXT_WORDS.get(kind, 0.0)
            words += (
                self.sizes.title_words
                if added is None
                else (added if added >= 1 else added * self.sizes.passage_words)
            )
        return words

    def _bm25(self, step: Planned, spec: RetrieverSpec) -> Cost:
        level, s = spec.level, self.sizes
        words = s.passages * self.passage_words(spec)
        memory = words * self.rate(f"bm25_{level}_index_bytes_per_word")
        used = (f"bm25_{level}_index_words_per_s", f"bm25_{level}_index_bytes_per_word")
        if step.kind == "index":
            seconds = words / self.rate(used[0])
            work = (
                f"{count(s.documents if level == 'document' else s.passages)} {level}s, "
                f"{count(words)} words"
            )
            return _cost(step, work, seconds, memory, memory, False, used)
        name = f"bm25_{level}_search_s_per_query_word"
        seconds = s.queries * (words * self.rate(name) + self.rate("query_run_s"))
        depth = min(self.exp.depth, s.documents if level == "document" else s.passages)
        work = f"{count(s.queries)} queries x {count(words)} words"
        return _cost(
            step,
            work,
            seconds,
            memory,
            s.queries * depth * RUN_BYTES,
            False,
            (name, used[1], "query_run_s"),
        )

    def _model(self, spec: RetrieverSpec, side: str) -> tuple[str, float]:
        """The model encoding ``side`` (``query``/``document``) and its cost per token
        relative to the calibration's reference model."""
        args = spec.args
        name = args.get(f"{side}_model") or args.get("model") or _default_model(spec.name)
        shape = _shape(name)
        sparse = spec.name == "sparse"
        ref = calibration()["reference_model"]
        cost = 12 * shape["layers"] * shape["hidden"] ** 2
        cost += shape["hidden"] * shape.get("vocab", BERT_BASE["vocab"]) if sparse else 0
        return name, cost / (12 * ref["layers"] * ref["hidden"] ** 2)

    def _encode(self, tokens: float, factor: float, spec: RetrieverSpec) -> float:
        precision = spec.args.get("precision", "fp32")
        speed = self.rate("encode_tokens_per_s")
        if precision != "fp32" and "bf16_factor" in self.rates:
            speed *= self.rate("bf16_factor")
        return tokens * factor / speed

    def _start(self, system: str) -> float:
        """A neural model's start (imports, loading), once per system."""
        if system in self.started:
            return 0.0
        self.started.add(system)
        return self.rate("model_start_s")

    def _neural(self, step: Planned, spec: RetrieverSpec) -> Cost:
        s, a = self.sizes, spec.args
        limit = a.get("max_length") or a.get("doc_maxlen") or 512
        doc_tokens = min(float(limit), self.passage_words(spec) * self.per_word)
        passages = s.documents if spec.level == "document" else s.passages
        used = ("encode_tokens_per_s", "model_start_s", "exact_macs_per_s")
        if spec.name == "rerank":
            name, factor = self._model(spec, "document")
            pairs = s.queries * min(int(a.get("top_k", 100)), passages)
            tokens = pairs * min(float(limit), doc_tokens + s.query_words * self.per_word)
            seconds = self._start(step.system) + self._encode(tokens, factor, spec)
            seconds += s.queries * self.rate("query_run_s")
            work = f"{count(pairs)} pairs, {count(tokens)} tokens ({name})"
            return _cost(
                step,
                work,
                seconds,
                _model_bytes(factor),
                pairs * RUN_BYTES,
                self.gpu,
                (*used[:2], "query_run_s"),
            )
        if step.kind == "index":
            name, factor = self._model(spec, "document")
            tokens = passages * doc_tokens
            seconds = self._start(step.system) + self._encode(tokens, factor, spec)
            disk = passages * self._row_bytes(spec, doc_tokens)
            work = f"{count(passages)} {spec.level}s, {count(tokens)} tokens ({name})"
            return _cost(
                step,
                work,
                seconds,
                _model_bytes(factor),
                disk,
                self.gpu,
                used[:2],
            )
        name, factor = self._model(spec, "query")
        query_tokens = s.query_words * self.per_word
        if spec.name == "late_interaction":
            query_tokens = float(a.get("query_maxlen") or 32)  # padded with [MASK] to the length
        seconds = self._start(step.system) + self._encode(s.queries * query_tokens, factor, spec)
        macs = s.queries * passages * self._pair_macs(spec, query_tokens, doc_tokens)
        seconds += macs / self.rate("exact_macs_per_s") + s.queries * self.rate("query_run_s")
        work = f"{count(s.queries)} queries x {count(passages)} {spec.level}s"
        work += f" ({count(macs)} multiply-adds)"
        memory = _model_bytes(factor) + min(passages * self._row_bytes(spec, doc_tokens), 1 * GB)
        return _cost(
            step,
            work,
            seconds,
            memory,
            s.queries * min(self.exp.depth, passages) * RUN_BYTES,
            self.gpu,
            (*used, "query_run_s"),
        )

    def _pair_macs(self, spec: RetrieverSpec, query_tokens: float, doc_tokens: float) -> float:
        """Multiply-adds to score one query against one passage."""
        if spec.name == "late_interaction":
            return query_tokens * doc_tokens * 128
        return float(_width(spec))

    def _row_bytes(self, spec: RetrieverSpec, doc_tokens: float) -> float:
        """Bytes an indexed passage takes on disk."""
        if spec.name == "late_interaction":
            return doc_tokens * 128 * 2  # float16 token vectors
        if spec.name == "sparse":
            return SPARSE_NONZEROS * 8  # term id and weight
        return _width(spec) * 4  # float32

    def _score(self, step: Planned) -> Cost:
        fusion = self.exp.fusion[step.system]
        spec = self.exp.retrievers[fusion.passage or ""]
        s = self.sizes
        per_document = s.passages / max(s.documents, 1)
        top = fusion.args.get("documents") or self.exp.depth
        candidates = s.queries * min(s.passages, top * per_document)
        query_tokens = float(spec.args.get("query_maxlen") or s.query_words * self.per_word)
        doc_tokens = min(512.0, self.passage_words(spec) * self.per_word)
        macs = candidates * self._pair_macs(spec, query_tokens, doc_tokens)
        seconds = macs / self.rate("exact_macs_per_s")
        work = f"{count(candidates)} candidates in the top {top} documents"
        return _cost(
            step,
            work,
            seconds,
            1 * GB / 4,
            candidates * RUN_BYTES,
            self.gpu,
            ("exact_macs_per_s",),
        )

    def _fuse(self, step: Planned) -> Cost:
        entries = self.sizes.queries * 2 * self.exp.depth
        seconds = entries / self.rate("fuse_entries_per_s")
        seconds += self.sizes.queries * self.rate("query_run_s")
        work = f"{count(self.sizes.queries)} queries x 2 runs"
        return _cost(
            step,
            work,
            seconds,
            entries * 48,
            self.sizes.queries * self.exp.depth * RUN_BYTES,
            False,
            ("fuse_entries_per_s", "query_run_s"),
        )

    def start(self) -> Cost:
        """Starting ``dapr run`` and reading the dataset (each process reads it once)."""
        words = self.sizes.words
        seconds = self.rate("start_s") + words / self.rate("read_words_per_s")
        work = f"reading {count(self.sizes.passages)} passages ({count(words)} words)"
        return Cost(
            "start",
            "",
            "computed",
            work,
            seconds,
            words * 1.1,
            0.0,
            False,
            ("start_s", "read_words_per_s"),
        )


def _width(spec: RetrieverSpec) -> int:
    """The dimension of a retriever's vectors (its model's hidden size; SPLADE priced as 768)."""
    if spec.name == "sparse":
        return 768
    name = spec.args.get("document_model") or spec.args.get("model") or _default_model(spec.name)
    return int(_shape(name)["hidden"])


def _default_model(retriever: str) -> str:
    from dapr import registry
    from dapr.experiment.plan import model_names

    try:
        registry.retrievers.get(retriever)
    except DaprError:
        return ""
    names = model_names(RetrieverSpec(retriever))
    return names[0] if names else ""


@cache
def _shape(model: str) -> dict[str, int]:
    """Layers, hidden size and vocabulary of ``model``: from its config.json when it is on this
    machine, else the paper's checkpoints' known shapes, else BERT-base's (assumed)."""
    from dapr.checkpoints import offline_copy

    if model in KNOWN_SIZES:
        return KNOWN_SIZES[model]
    found = offline_copy(model) if model else None
    config = Path(found) / "config.json" if found else None
    if config is not None and config.is_file():
        raw = json.loads(config.read_text())
        layers = raw.get("num_hidden_layers") or raw.get("n_layers")
        hidden = raw.get("hidden_size") or raw.get("dim")
        if layers and hidden:
            return {"layers": layers, "hidden": hidden, "vocab": raw.get("vocab_size", 30_522)}
    return BERT_BASE


def _model_bytes(factor: float) -> float:
    """Peak memory of a model's process: its weights (float32) and a batch, about 1 GB more."""
    ref = calibration()["reference_model"]
    params = 12 * ref["layers"] * ref["hidden"] ** 2 * factor + 30_522 * 768
    return params * 4 + 1 * GB


def count(value: float) -> str:
    """A count in words a reader takes in: 4,726, 2.7M, 3.1G."""
    for size, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if value >= size:
            return f"{value / size:.1f}{suffix}"
    return f"{value:,.0f}"
