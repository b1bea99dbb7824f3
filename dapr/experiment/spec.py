"""The experiment file's schema, declared once: each section is a dataclass whose fields are its
keys, in the order error messages list them.

What a key accepts in YAML follows from the field's type (``str``, ``int``, a number, a mapping,
a list; ``X | None`` accepts ``X``), unless the field's metadata says otherwise (``yaml``: the
accepted types, ``kind``: how an error message names them) where the file's form differs from
the typed setting (``contextualizer: title`` becomes a tuple of steps). :func:`check_fields`
checks a section's keys and their types; :mod:`dapr.experiment.validate` checks what they name.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from dapr import ranges
from dapr.errors import ConfigError, DaprError
from dapr.evaluation import DEFAULT_METRICS
from dapr.experiment.chain import ContextStep

LEVELS = ("passage", "document")
CATEGORY_SOURCES = ("dataset", "title_mention")


def yaml(
    accepts: tuple[type, ...], kind: str, default: Any = dataclasses.MISSING, **kw: Any
) -> Any:
    """A field whose YAML form is one of ``accepts`` (named ``kind`` in error messages)."""
    return field(default=default, metadata={"yaml": accepts, "kind": kind}, **kw)


@dataclass(frozen=True)
class RetrieverSpec:
    """One retrieval system: a registered retriever over passages or whole documents."""

    name: str
    """A registered retriever (``dapr plugins`` lists them)."""
    level: str = "passage"
    """``passage`` or ``document``: what the retriever indexes and is judged on."""
    args: dict[str, Any] = field(default_factory=dict)
    """The retriever's keyword arguments (a ``preset`` among them); see the component pages."""
    contextualizer: tuple[ContextStep, ...] = yaml(
        (str, dict, list, type(None)), "a name, a mapping {name, args} or a list of them", ()
    )
    """Steps applied in order to every document's passages before indexing."""
    first_stage: str | None = None
    """For a reranker: the system of the experiment whose run it re-scores."""
    approach: str | None = None
    """How tables name the approach (default: derived, e.g. "passage only", "+ title")."""


@dataclass(frozen=True)
class FusionSpec:
    """A fuser combining two systems of the same experiment: a document-level and a
    passage-level one (``document``, ``passage``), or two passage-level ones (``passages``)."""

    name: str
    """A registered fuser: ``convex``, ``rrf``, ``hierarchical`` or a plugin's."""
    document: str | None = None
    """The document-level system of the experiment."""
    passage: str | None = None
    """The passage-level system of the experiment."""
    passages: tuple[str, ...] = ()
    """Two passage-level systems, in place of ``document`` and ``passage`` (a hybrid)."""
    args: dict[str, Any] = field(default_factory=dict)
    """The fuser's keyword arguments (``alpha``...); see the component pages."""
    approach: str | None = None
    """How tables name the approach (default: the fuser's own)."""

    @property
    def inputs(self) -> tuple[str, ...]:
        """The systems fused: ``passages``, else ``document`` and ``passage`` (an experiment file
        names one or the other)."""
        if self.passages:
            return self.passages
        return tuple(name for name in (self.document, self.passage) if name is not None)


@dataclass(frozen=True)
class Range:
    """``{start, stop, step}``: the values from ``start`` to ``stop`` (included)."""

    start: float
    """The first value."""
    stop: float
    """The last value (included)."""
    step: float
    """The distance between values."""


@dataclass(frozen=True)
class Sweep:
    """Evaluate every value of one fusion argument on ``tune_on``, keep the best by ``metric``,
    and report it on the experiment's split (cached runs are fused again; nothing re-retrieved)."""

    parameter: str
    """``fusion.<system>.args.<argument>``."""
    values: tuple[Any, ...] = yaml(
        (list, dict), "a list of values or a mapping {start, stop, step}", ()
    )
    """The values tried: a list, or ``{start, stop, step}`` (stop included)."""
    tune_on: str = "dev"
    """The split the best value is chosen on."""
    metric: str = "nDCG@10"
    """The metric the best value is chosen by (ir_measures' or trec_eval's name)."""
    subset: str | None = yaml((str, type(None)), "a string or null", "hard")
    """A query set drawn beside all queries: ``hard`` (every passage-level retriever of the
    experiment scores 0 on ``metric``), a query category of the dataset, or null."""

    system: str = field(init=False, metadata={"yaml": None})
    """The fusion system of ``parameter`` (derived, not a key of the file)."""
    argument: str = field(init=False, metadata={"yaml": None})
    """The argument of ``parameter`` (derived, not a key of the file)."""

    def __post_init__(self) -> None:
        parts = self.parameter.split(".")
        object.__setattr__(self, "system", parts[1] if len(parts) == 4 else "")
        object.__setattr__(self, "argument", parts[3] if len(parts) == 4 else "")


@dataclass(frozen=True)
class Resources:
    """What each retrieval job asks Ray for, and over how many Ray actors it spreads encoding
    and contextualizing its corpus (``actors``; 0 or absent: it does that itself)."""

    gpus_per_job: Annotated[float, ranges.Range(0)] = 0
    """GPUs each retrieval job asks Ray for (a job given GPUs runs in its own process)."""
    cpus_per_job: Annotated[float, ranges.Range(0)] = 1
    """CPUs each retrieval job asks Ray for."""
    actors: Annotated[int, ranges.Range(0)] = 0
    """Ray actors a job spreads contextualizing and encoding its corpus over."""
    gpus_per_actor: Annotated[float, ranges.Range(0)] = 0
    """GPUs each of those actors asks Ray for."""
    cpus_per_actor: Annotated[float, ranges.Range(0)] = 1
    """CPUs each of those actors asks Ray for."""


@dataclass(frozen=True)
class TrainSource:
    """One dataset/split pair whose judgements a model trains on."""

    split: str
    """The split whose judgements are trained on."""
    dataset: str | None = None
    """A registered dataset or a dataset directory; default: the experiment's own."""
    dataset_args: dict[str, Any] = field(default_factory=dict)
    """Options of that dataset."""


@dataclass(frozen=True)
class TrainSpec:
    """A model that ``dapr train`` fits on a split's judgements, stored as ``trained/<name>``
    for the experiment's retrievers to use (``model: trained/<name>``)."""

    model: str = "sentence-transformers/all-MiniLM-L6-v2"
    """The model training starts from (a cross-encoder starts from its transformer weights)."""
    kind: str = "dual"
    """``dual`` (a dense retriever's encoder) or ``cross`` (a re-ranker for ``rerank``)."""
    split: str = "train"
    """The split of the experiment's dataset whose judgements are trained on."""
    sources: tuple[TrainSource, ...] = yaml(
        (list,), "a list of mappings {split, dataset, dataset_args}", ()
    )
    """Several dataset/split pairs trained on together, in place of ``split`` (e.g. COVID-QA's
    train split and XQuAD's questions); negatives are drawn within each source's corpus."""
    min_grade: int = 1
    """The lowest grade that makes a passage a positive (T2Ranking: 2)."""
    contextualizer: tuple[ContextStep, ...] = yaml(
        (str, dict, list, type(None)), "a name, a mapping {name, args} or a list of them", ()
    )
    """Steps applied to the passages trained on, as for a retriever."""
    negatives: dict[str, Any] = field(default_factory=dict)
    """``same_document: n`` passages of the positive's own document, ``mined: <system>`` and
    ``count: n``: the best unjudged passages of a retriever of the experiment over the split."""
    loss: str | None = None
    """The training loss; None: the first of those the ``kind`` takes."""
    augment: dict[str, Any] = field(default_factory=dict)
    """RocketQA's pseudo-labels: ``split`` (its queries, judgements ignored), ``retriever`` (a
    system of the experiment), ``model`` (a cross-encoder), ``depth``, ``positive_above`` and
    ``negative_below``."""
    head: str = "fresh"
    """A cross-encoder's head at the start: ``fresh`` (as loaded) or ``prior`` (its bias at the
    log-odds of the positives' share)."""
    distill: dict[str, Any] = field(default_factory=dict)
    """A cross-encoder's warm start: first learn to order the training queries' candidates as
    ``teacher`` (a passage-level retriever of the experiment) scores them: its top ``depth``
    (20), the best and ``count`` (3) others a row, MarginMSE for ``epochs`` (1); then the labels."""
    calibration: str = "none"
    """A cross-encoder's map from raw scores to the probabilities that denoising and augmentation
    compare with their thresholds, fitted on held-out training questions: ``platt`` (slope and
    intercept), ``temperature`` (slope only: BCE-trained scores) or ``none`` (its own sigmoid)."""
    calibration_share: Annotated[float, ranges.Range(0, 1, min_open=True, max_open=True)] = 0.2
    """With a ``calibration``: the share of the training questions (drawn with the seed) kept
    out of the cross-encoder's training and its ``distill:``, to fit the calibration on."""
    workers: int = 1
    """Ray Train workers for a dual encoder (one per GPU when the experiment's resources give
    ``gpus_per_job``): each batch is split among them and the loss sees all their passages."""
    args: dict[str, Any] = field(default_factory=dict)
    """Training settings (:class:`dapr.training.dual.Settings`): the keys of
    ``train.NAME.args``."""


OVERLAP_ROWS = ("alone", "with title")
"""The rows ``dapr overlap`` prints (the DAPR paper's Table 5: without and with titles)."""


@dataclass(frozen=True)
class PublishedRow:
    """One row of a paper's table, per dataset: the value of ``metric`` for ``system`` of this
    experiment, or (``overlap``) a row of ``dapr overlap``'s query / gold-passage Jaccard."""

    table: str
    """The paper's table, e.g. ``Table 3``."""
    row: str
    """The paper's row, e.g. ``rank fusion / DRAGON+``."""
    values: dict[str, float] = field(default_factory=dict)
    """``{dataset: fraction}``, the dataset as ``dapr`` names it (44.5 is 0.445)."""
    system: str = ""
    """The system of this experiment that runs the row."""
    metric: str = ""
    """A metric of this experiment."""
    overlap: str = ""
    """Instead of a system and a metric: ``alone`` or ``with title`` of ``dapr overlap``."""


@dataclass(frozen=True)
class Published:
    """A paper's numbers, printed beside the experiment's own for the systems that stand in
    for its rows: ``values[system][metric]`` whatever the dataset, or ``rows`` per dataset, as
    fractions like dapr's (32.39% is 0.3239)."""

    source: str
    """Where the numbers come from, printed under the table."""
    values: dict[str, dict[str, float]] = field(default_factory=dict)
    """``{system: {metric: fraction}}``."""
    rows: tuple[PublishedRow, ...] = ()
    """The paper's rows, each ``{table, row, system, metric, values: {dataset: fraction}}``;
    ``dapr report`` and the reproduction matrix read them."""

    def value(self, system: str, metric: str, dataset: str) -> tuple[float, str] | None:
        """The paper's value for ``system``'s ``metric`` on ``dataset`` and where it comes
        from, or None where the paper gives none."""
        for row in self.rows:
            if row.system == system and row.metric == metric and dataset in row.values:
                return row.values[dataset], f"{self.source}, {row.table}, {row.row}"
        given = self.values.get(system, {}).get(metric)
        return None if given is None else (given, self.source)


@dataclass(frozen=True)
class Experiment:
    name: str
    """Names the results folder, ``results/<name>/``."""
    dataset: str
    """A registered dataset, a dataset directory, ``irds:<id>``, or a list of them (a grid)."""
    dataset_args: dict[str, Any] = field(default_factory=dict)
    """Options of the dataset (``path``, ``train_articles``...); see the datasets page."""
    split: str = "test"
    """The split whose queries are evaluated."""
    depth: Annotated[int, ranges.Range(1)] = 1000
    """How many items each system retrieves per query."""
    metrics: tuple[str, ...] = DEFAULT_METRICS
    """ir_measures' names (``nDCG@10``, ``R@100``...) or trec_eval's."""
    retrievers: dict[str, RetrieverSpec] = field(default_factory=dict)
    """The retrieval systems, by the name their runs and table rows get."""
    fusion: dict[str, FusionSpec] = field(default_factory=dict)
    """Fusions of the systems above, by name."""
    workers: Annotated[int | None, ranges.Range(1)] = None
    """Processes for contextualizing a corpus (default: every core)."""
    categories: str = "dataset"
    """Query categories for per-category results: ``dataset`` (the dataset's own labels),
    ``title_mention`` (whether a gold passage names its document's title), or a TSV file."""
    sweep: Sweep | None = None
    """One fusion argument tuned on another split (see ``sweep`` below)."""
    maxp: tuple[str, ...] = yaml((bool, list), "true, false or a list of passage-level systems", ())
    """Passage-level systems also evaluated as document runs by MaxP (the paper's Table 4)."""
    resources: dict[str, float] = field(default_factory=dict)
    """The keys of :class:`Resources` that the file sets (absent ones keep Ray's defaults)."""
    train: dict[str, TrainSpec] = field(default_factory=dict)
    """Models to train before retrieval, by the name retrievers use (``trained/<name>``)."""
    published: Published | None = None
    """A paper's numbers printed beside the experiment's own."""


# -- checking a section against its dataclass -----------------------------------------------

_KINDS = {
    str: "a string",
    int: "an integer",
    bool: "true or false",
    dict: "a mapping",
    list: "a list",
    (int, float): "a number",
}


def default(section: type, key: str) -> Any:
    """The default the schema gives ``key`` of ``section``: the one place defaults are set."""
    found = next(f for f in dataclasses.fields(section) if f.name == key)
    if found.default_factory is not dataclasses.MISSING:
        return found.default_factory()
    return found.default


def check_fields(raw: Any, section: type, path: Path, where: str) -> None:
    """A ConfigError naming ``path``, the key and what it accepts, unless ``raw`` is a mapping of
    known keys of ``section`` with values of the types they accept."""
    prefix = f"{where}." if where else ""
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: {where or 'top level'}: expected a mapping")
    accepted = _accepted(section)
    for key, value in raw.items():
        if key not in accepted:
            raise ConfigError(
                f"{path}: unknown key {prefix + str(key)!r}; valid keys: {', '.join(accepted)}"
            )
        types_, kind = accepted[key]
        exact_int = types_ == (int,)
        if not isinstance(value, types_) or (isinstance(value, bool) and exact_int):
            raise ConfigError(f"{path}: {prefix}{key} must be {kind}, got {value!r}")
        if kind in ("an integer", "a number"):  # finite, and in the range the field declares
            problem = ranges.number_problem(value, kind, _bounds(section).get(key))
            if problem is not None:
                raise ConfigError(f"{path}: {prefix}{key} {problem}")


def _bounds(section: type) -> dict[str, ranges.Range]:
    """The :class:`~dapr.ranges.Range` each field of ``section`` declares."""
    found = {}
    for key, hint in typing.get_type_hints(section, include_extras=True).items():
        bounds = [d for d in ranges.declared(hint)[1] if isinstance(d, ranges.Range)]
        if bounds:
            found[key] = bounds[0]
    return found


def _accepted(section: type) -> dict[str, tuple[tuple[type, ...], str]]:
    hints = typing.get_type_hints(section)
    out = {}
    for f in dataclasses.fields(section):
        if "yaml" in f.metadata and f.metadata["yaml"] is None:
            continue  # derived from other keys
        if "yaml" in f.metadata:
            out[f.name] = (f.metadata["yaml"], f.metadata["kind"])
        else:
            accepts = _yaml_types(hints[f.name])
            out[f.name] = (accepts, _KINDS[accepts if len(accepts) > 1 else accepts[0]])
    return out


def _yaml_types(hint: Any) -> tuple[type, ...]:
    """The YAML types a typed field accepts: its type, a mapping for a dict or a section, a
    list for a tuple, a number for a float; ``None`` is not accepted unless declared."""
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        (only,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return _yaml_types(only)
    if hint is float:
        return (int, float)
    if origin in (dict, Mapping) or dataclasses.is_dataclass(hint):
        return (dict,)
    if origin in (tuple, list):
        return (list,)
    return (hint,)


def wrapped(path: Path, where: str, thunk: Any) -> Any:
    """``thunk()``, its DaprError turned into a ConfigError naming ``path`` and ``where``."""
    try:
        return thunk()
    except DaprError as error:
        raise ConfigError(f"{path}: {where}: {error}") from None
