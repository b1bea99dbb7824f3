"""What an experiment will do, worked out without doing it: the cache key of every step.

The runner (:mod:`dapr.experiment.runner`) names its cache entries with the key functions here,
and :func:`plan_steps` walks an experiment with the same functions and the same order of steps,
asking only whether each entry is present; ``dapr check`` prints that plan. So the plan and the
run agree on what is cached: they compute the same keys from the same parts.

Nothing here indexes, searches or loads a model; a component is constructed (cheap: models load
lazily) to read its identity, which for a neural model is the revision of its local files.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from dapr import registry
from dapr.data import RANKING, Dataset, Document, Queries
from dapr.errors import DaprError
from dapr.experiment.chain import Chain, chain_for
from dapr.experiment.spec import Experiment, FusionSpec, RetrieverSpec
from dapr.experiment.sweep_spec import with_value
from dapr.interfaces import NamesModels, ScopingFuser, identity_of, scoring_of, version_of
from dapr.store.cache import content_key

# -------------------------------------------------------------------------- keys


@dataclass(frozen=True)
class Retrieval:
    """A retrieval system made ready to run: its factory, the component, its contextualizer
    chain, and ``made_by``, what determines its output besides the data."""

    factory: Any
    component: Any
    chain: Chain | None
    made_by: tuple


def retrieval(spec: RetrieverSpec, dataset: Dataset) -> Retrieval:
    """The component of ``spec`` for ``dataset`` and what identifies it (its model's revision,
    its settings, the chain's identity); raises the component's DaprError for bad settings or a
    model that is not there."""
    factory = registry.retrievers.get(spec.name)
    component = factory(**with_language(factory, spec.args, dataset.language))
    chain = chain_for(spec.contextualizer, dataset) if spec.contextualizer else None
    made_by = (
        spec.name,
        version_of(factory),
        by_content(identity_of(component, spec.args)),
        spec.level if spec.level == "passage" else f"document: {Document.TEXT}",
        chain.identity() if chain else None,
    )
    return Retrieval(factory, component, chain, made_by)


def by_content(identity: Any) -> Any:
    """``identity`` with each ``trained/<name>`` replaced by the revision of what that name
    stores: runs of the same trained weights share their cache entries whatever the experiment
    called the model (two recipes training one cross-encoder alike reuse each other's runs)."""
    from dapr.checkpoints import TRAINED, revision

    if isinstance(identity, str) and identity.startswith(TRAINED):
        return f"trained@{revision(identity)}"
    if isinstance(identity, Mapping):
        return {key: by_content(value) for key, value in identity.items()}
    if isinstance(identity, list | tuple):
        return [by_content(value) for value in identity]
    return identity


def index_key(made_by: tuple, dataset: Dataset) -> str:
    """The ``indexes`` entry of a retriever over ``dataset``'s corpus."""
    return content_key(*made_by, dataset.corpus.fingerprint)


def search_key(index: str, retriever: Any, queries: Queries, depth: int) -> str:
    """The ``runs`` entry of searching index ``index`` for ``queries`` to ``depth``; the
    ``retriever``'s ``scoring`` (a change of search that keeps the index: its class's, or the
    component's own, as dense's quantized first pass sets) is part of it."""
    scoring = scoring_of(retriever)
    ranking = RANKING if scoring is None else (RANKING, scoring)
    return content_key(index, queries_hash(queries), depth, ranking)


def rerank_key(made_by: tuple, first_stage: str) -> str:
    """The ``runs`` entry of re-scoring the run under key ``first_stage``."""
    return content_key(*made_by, first_stage)


def fusion_made_by(spec: FusionSpec) -> tuple[Any, tuple]:
    """The fuser of ``spec`` and what identifies it."""
    factory = registry.fusers.get(spec.name)
    return factory(**spec.args), (spec.name, version_of(factory), spec.args)


def scope_key(fuser: ScopingFuser, document: str, passage: str) -> str:
    """The ``runs`` entry of scoring the passages a scoping fuser picks from the document run
    (key ``document``) with the passage retriever (whose run has key ``passage``)."""
    return content_key("scope", fuser.scope_identity(), document, passage)


def fused_key(made_by: tuple, first: str, second: str) -> str:
    """The ``runs`` entry of fusing the runs under keys ``first`` and ``second``."""
    return content_key(*made_by, first, second)


def with_language(factory: Any, args: dict, language: str) -> dict:
    """``args`` plus the dataset's language, for a retriever that takes ``language`` (its
    tokenizer depends on it) and was not given one; English, the default, is left implicit."""
    if language == "en" or "language" in args:
        return args
    try:
        takes = "language" in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        takes = False
    return {**args, "language": language} if takes else args


def queries_hash(queries: Queries) -> str:
    digest = hashlib.sha256()
    for qid in sorted(queries):
        digest.update(f"{len(qid)}:{qid}{len(queries[qid])}:{queries[qid]}".encode())
    return digest.hexdigest()[:16]


# -------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Planned:
    """One step as the runner would log it: ``cached``, ``computed``, or ``unknown`` (a
    problem, or a model trained first, keeps its key from being known); ``entry`` is the cache
    entry (``runs/<key>``) when known."""

    kind: str
    system: str
    status: str
    entry: str | None = None
    note: str = ""


@dataclass
class Plan:
    steps: list[Planned]
    problems: list[str]
    """One line each: what would stop the run."""


def plan_steps(
    experiment: Experiment, dataset: Dataset, present: Callable[[str, str], bool]
) -> Plan:
    """The steps :meth:`Runner.run` would take on ``dataset`` (steps of the ``train:`` block
    first, their status unknown: a model's key depends on the runs it mines), each cached when
    ``present(kind, key)`` says its entry is there. A sweep is every value on both splits."""
    plan = Plan([], [])
    for name in experiment.train:
        plan.steps.append(Planned("train", name, "unknown", note="decided when run"))
    variants = [experiment]
    if experiment.sweep is not None:  # as run_sweep: the file's value, then each, per split
        sweep, base = experiment.sweep, replace(experiment, sweep=None)
        variants = []
        for split in (sweep.tune_on, experiment.split):
            at_split = replace(base, split=split)
            variants += [at_split, *(with_value(at_split, sweep, v) for v in sweep.values)]
    seen: set[tuple[str, str, str | None]] = set()
    for variant in variants:
        walk = _Walk(variant, dataset, present, plan.problems)
        try:
            queries = dataset.split(variant.split).queries
        except DaprError as error:  # the systems are still checked, their steps unknown
            key = "split" if variant.split == experiment.split else "sweep.tune_on"
            plan.problems.append(f"{key}: {error}")
            queries, walk.unknown = {}, f"no split {variant.split!r}"
        for step in walk.steps(queries):
            if (step.kind, step.system, step.entry) not in seen:
                seen.add((step.kind, step.system, step.entry))
                plan.steps.append(step)
    plan.problems = list(dict.fromkeys(plan.problems))
    return plan


class _Walk:
    """One experiment's steps, in the runner's order (see :meth:`Runner._retrieve`)."""

    def __init__(self, exp: Experiment, dataset: Dataset, present, problems: list[str]):
        self.exp, self.dataset, self.present, self.problems = exp, dataset, present, problems
        self.keys: dict[str, str] = {}
        self.index: dict[str, Planned] = {}
        """Per retriever, its index step (taken when its run is not cached)."""
        self.out: list[Planned] = []
        self.unknown = ""
        """Why no step's key can be known (the split is missing), if so."""

    def steps(self, queries: Queries) -> list[Planned]:
        for system, spec in self.exp.retrievers.items():
            self._retriever(system, spec, queries)
        for system, fusion in self.exp.fusion.items():
            self._fusion(system, fusion)
        return self.out

    def _step(self, kind: str, system: str, cache: str, key: str | None, note: str = "") -> None:
        if key is None or self.unknown:
            self.out.append(Planned(kind, system, "unknown", None, note or self.unknown))
            return
        status = "cached" if self.present(cache, key) else "computed"
        self.out.append(Planned(kind, system, status, f"{cache}/{key}", note))

    def _retriever(self, system: str, spec: RetrieverSpec, queries: Queries) -> None:
        kind = "rerank" if spec.first_stage else "search"
        trained = [m for m in model_names(spec) if trained_here(m, self.exp)]
        if trained:
            self._step(kind, system, "runs", None, f"after training {', '.join(trained)}")
            return
        if spec.first_stage and spec.first_stage not in self.keys:
            self._step(kind, system, "runs", None, f"after {spec.first_stage}")
            return
        try:
            made = retrieval(spec, self.dataset)
        except DaprError as error:
            self.problems.append(f"retrievers.{system}: {error}")
            self._step(kind, system, "runs", None, "see the problem below")
            return
        if spec.first_stage:
            self.keys[system] = rerank_key(made.made_by, self.keys[spec.first_stage])
            self._step("rerank", system, "runs", self.keys[system])
            return
        index = index_key(made.made_by, self.dataset)
        self.keys[system] = search_key(index, made.component, queries, self.exp.depth)
        self._step("index", system, "indexes", index)
        self.index[system] = self.out.pop()
        if not self.present("runs", self.keys[system]):  # a cached run needs no index
            self._open(system)
        self._step("search", system, "runs", self.keys[system])

    def _open(self, system: str) -> None:
        """The retriever's index step, once: where the runner opens its index."""
        step = self.index.pop(system, None)
        if step is not None:
            self.out.append(step)

    def _fusion(self, system: str, spec: FusionSpec) -> None:
        missing = [s for s in spec.inputs if s not in self.keys]
        if missing:
            self._step("fuse", system, "runs", None, f"after {', '.join(missing)}")
            return
        try:
            fuser, made_by = fusion_made_by(spec)
        except DaprError as error:
            self.problems.append(f"fusion.{system}: {error}")
            self._step("fuse", system, "runs", None, "see the problem below")
            return
        if spec.passages:
            first, second = spec.passages
            self.keys[system] = fused_key(made_by, self.keys[first], self.keys[second])
            self._step("fuse", system, "runs", self.keys[system])
            return
        document, passage_system = spec.document, spec.passage
        assert document is not None and passage_system is not None  # (validated: see inputs)
        passage = self.keys[passage_system]
        if isinstance(fuser, ScopingFuser):
            passage = scope_key(fuser, self.keys[document], passage)
            if not self.present("runs", passage):
                self._open(passage_system)
            self._step("score", system, "runs", passage)
        self.keys[system] = fused_key(made_by, self.keys[document], passage)
        self._step("fuse", system, "runs", self.keys[system])


TRAINED = "trained/"
"""Models of a ``train:`` block are named ``trained/<name>``."""


def trained_here(model: str, experiment: Experiment) -> bool:
    """Whether ``model`` is one the experiment's ``train:`` block trains before retrieval."""
    return model.startswith(TRAINED) and model[len(TRAINED) :] in experiment.train


def model_names(spec: RetrieverSpec) -> list[str]:
    """The models a retriever loads: its arguments named ``model`` or ``*_model``, given or
    defaulted (``model`` is left out when ``query_model`` and ``document_model`` are given)."""
    try:
        factory = registry.retrievers.get(spec.name)
    except DaprError:
        return []
    return _models(factory, spec.args)


def contextualizer_models(spec: RetrieverSpec) -> list[str]:
    """The models the contextualizer chain of ``spec`` loads (``model``, ``spacy_model``...)."""
    found = []
    for step in spec.contextualizer:
        try:
            found += _models(registry.contextualizers.get(step.name), step.args)
        except DaprError:
            continue
    return found


def spacy_pipelines(experiment: Experiment) -> set[str]:
    """The models of :func:`models_needed` that are spaCy pipelines, pip packages that no hub
    download provides (``dapr check`` and ``dapr fetch`` both go by this): the names (not paths)
    a contextualizer's ``*spacy_model`` argument gives or defaults to, and those a contextualizer
    loads that :func:`~dapr.contextualizers.spacy_models.is_pipeline_name` recognises (coref's)."""
    from dapr.contextualizers.spacy_models import is_pipeline_name

    found: set[str] = set()
    for spec in experiment.retrievers.values():
        for step in spec.contextualizer:
            try:
                factory = registry.contextualizers.get(step.name)
                params = inspect.signature(factory).parameters
            except (DaprError, TypeError, ValueError):
                continue
            for name, param in params.items():
                value = step.args.get(name, param.default)
                if name.endswith("spacy_model") and isinstance(value, str):
                    found.add(value)
            found.update(m for m in _models(factory, step.args) if is_pipeline_name(m))
    return {name for name in found if not name.startswith((".", "~", "/")) and "/" not in name}


def _models(factory: Any, args: Mapping[str, Any]) -> list[str]:
    """The models ``factory(**args)`` loads: what its ``models_needed(args)`` says when it has
    one (a component whose arguments do not show them), else its ``*model`` arguments."""
    if isinstance(factory, NamesModels):
        try:
            return list(dict.fromkeys(factory.models_needed(args)))
        except DaprError:  # a bad argument: reported where the file is validated
            return []
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return []
    given = {
        name: args.get(name, param.default)
        for name, param in params.items()
        if name == "model" or name.endswith("_model")
    }
    if given.get("query_model") and given.get("document_model"):
        given.pop("model")  # each side has its own: the shared one is not loaded
    return list(dict.fromkeys(v for v in given.values() if isinstance(v, str)))


# -------------------------------------------------------------------------- what it needs


@dataclass(frozen=True)
class Source:
    """Where an experiment's dataset comes from: ``what`` in words; ``offline``: whether it is
    there without the hub (None: cannot tell); ``readable``: whether reading it now writes
    nothing into ``$DAPR_HOME`` (when it does, the first run builds or downloads it)."""

    what: str
    offline: bool | None
    readable: bool


def dataset_source(experiment: Experiment) -> Source:
    """How :func:`dapr.datasets.load_dataset` would find the experiment's dataset."""
    from pathlib import Path

    from dapr.datasets.adapter import Adapter, LocalAdapter
    from dapr.datasets.irds import IRDS

    name = experiment.dataset
    if name.startswith(IRDS):
        what = f"read through ir_datasets, which downloads what its cache lacks ({name})"
        return Source(what, None, False)
    if name not in registry.datasets and Path(name).is_dir():
        return Source(f"the directory {Path(name).resolve()}", True, True)
    adapter = registry.datasets.get(name)
    path = experiment.dataset_args.get("path")
    if not isinstance(adapter, Adapter):
        return Source("loaded by the function registered under that name", None, True)
    if isinstance(adapter, LocalAdapter) and path:
        return Source(f"built from {path} at each run", True, True)
    if adapter.cached():
        return Source(f"prepared in {adapter.prepared}", True, True)
    if adapter.builds_at_first_use:
        return Source(f"built at first use into {adapter.prepared}", True, False)
    if adapter.hub_repo:
        what = f"downloaded from the hub dataset {adapter.hub_repo} into {adapter.prepared} first"
        return Source(what, False, False)
    return Source("not built yet", False, True)  # reading it says how to build it


def pinned_revisions(experiment: Experiment) -> dict[str, str]:
    """The hub revision each model is loaded at where a retriever pins one (``revision``)."""
    pinned: dict[str, str] = {}
    for spec in experiment.retrievers.values():
        revision = spec.args.get("revision")
        if isinstance(revision, str) and revision:
            pinned.update((model, revision) for model in model_names(spec))
    return pinned


def models_needed(experiment: Experiment) -> dict[str, list[str]]:
    """Each model the experiment loads (retrievers, contextualizers, the ``train:`` block's
    starting models and judges), with the keys that name it (``retrievers.dense``)."""
    found: dict[str, list[str]] = {}
    for system, spec in experiment.retrievers.items():
        for model in model_names(spec) + contextualizer_models(spec):
            found.setdefault(model, []).append(f"retrievers.{system}")
    for name, training in experiment.train.items():
        judges = [training.negatives.get("denoise") or {}, training.augment or {}]
        for model in [training.model, *(j["model"] for j in judges if j.get("model"))]:
            found.setdefault(model, []).append(f"train.{name}")
    return found
