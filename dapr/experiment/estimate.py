"""What an experiment will cost on a named machine: each step of its plan priced
(:mod:`dapr.experiment.pricing`), the sum per experiment and per file (``dapr check --cost``).

Each step of the plan (:func:`dapr.experiment.plan.plan_steps`) is priced by what it processes
(documents, passages, words, tokens: the dataset's statistics when it is readable here, else the
DAPR paper's Table 1, :mod:`dapr.experiment.sizes`); a step whose status is unknown is priced as
computed, a cached one costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dapr.errors import DaprError
from dapr.experiment.plan import Planned
from dapr.experiment.pricing import Cost, Pricer, count, device_rates
from dapr.experiment.sizes import Sizes, corpus_of, sizes_of
from dapr.experiment.spec import Experiment
from dapr.experiment.summary import duration
from dapr.store.housekeeping import human_size


@dataclass
class Estimate:
    """The steps of one experiment priced on ``device``."""

    name: str
    dataset: str
    device: str
    sizes: Sizes
    steps: list[Cost] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(step.seconds for step in self.steps)

    @property
    def gpu_seconds(self) -> float:
        return sum(step.seconds for step in self.steps if step.gpu)

    @property
    def memory(self) -> float:
        return max((step.memory for step in self.steps), default=0.0)

    @property
    def disk(self) -> float:
        return sum(step.disk for step in self.steps)


@dataclass(frozen=True)
class FileEstimate:
    """Every experiment of a file priced on ``devices`` of ``device``: ``seconds`` on one,
    ``gpu_hours`` of accelerator time, ``wall_seconds`` with the jobs spread over ``devices``."""

    path: str
    device: str
    devices: int
    experiments: list[Estimate]

    @property
    def seconds(self) -> float:
        return sum(e.seconds for e in self.experiments)

    @property
    def gpu_hours(self) -> float:
        return sum(e.gpu_seconds for e in self.experiments) / 3600

    @property
    def wall_seconds(self) -> float:
        return self.seconds / self.devices

    @property
    def disk(self) -> float:
        return sum(e.disk for e in self.experiments)


# -------------------------------------------------------------------------- estimates


def estimate(experiment: Experiment, steps: list[Planned], sizes: Sizes, device: str) -> Estimate:
    """Price ``steps`` (a plan, or :func:`cold_steps`) of ``experiment`` on ``device``."""
    pricer = Pricer(experiment, sizes, device)
    found = Estimate(experiment.name, experiment.dataset, device, sizes, [pricer.start()])
    listed = {(step.kind, step.system) for step in steps}
    for step in steps:
        if (
            step.kind == "search"
            and step.status == "unknown"
            and ("index", step.system) not in listed
        ):
            found.steps.append(pricer.price(Planned("index", step.system, "unknown")))
        found.steps.append(pricer.price(step))
    return found


def cold_steps(experiment: Experiment) -> list[Planned]:
    """Every step of ``experiment`` from an empty cache, in the runner's order (for a dataset
    that is not here: its keys cannot be known, so the steps' status is ``unknown``)."""
    from dapr.experiment.plan import fusion_made_by
    from dapr.interfaces import ScopingFuser

    steps = [Planned("train", name, "unknown") for name in experiment.train]
    for system, spec in experiment.retrievers.items():
        if spec.first_stage:
            steps.append(Planned("rerank", system, "unknown"))
        else:
            steps += [Planned("index", system, "unknown"), Planned("search", system, "unknown")]
    for system, fusion in experiment.fusion.items():
        if isinstance(fusion_made_by(fusion)[0], ScopingFuser):
            steps.append(Planned("score", system, "unknown"))
        steps.append(Planned("fuse", system, "unknown"))
    return steps


def estimate_file(
    path: str | Path,
    variant: str | None = None,
    overrides: tuple[str, ...] = (),
    device: str = "v100",
    devices: int = 4,
) -> FileEstimate:
    """Every experiment of the file at ``path`` priced cold on ``devices`` of ``device``, with
    the sizes of Table 1 for the DAPR datasets (no data needed) and the statistics of any other
    dataset readable here."""
    from dapr.experiment.config import raw_grid
    from dapr.experiment.validate import validate

    if devices < 1:
        raise DaprError(f"--devices {devices}: give at least 1")
    device_rates(device)
    path = Path(path)
    found: list[Estimate] = []
    indexed: set[tuple] = set()
    for raw in raw_grid(path, overrides, variant):
        experiment = validate(raw, path)
        corpus = corpus_of(experiment.dataset)
        steps = []
        for step in cold_steps(experiment):  # an index of a corpus indexed before is cached
            spec = experiment.retrievers.get(step.system)
            if step.kind == "index" and spec is not None:
                made = (corpus, spec.name, spec.level, repr(spec.args), repr(spec.contextualizer))
                step = Planned("index", step.system, "cached") if made in indexed else step
                indexed.add(made)
            steps.append(step)
        found.append(estimate(experiment, steps, sizes_of(experiment), device))
    return FileEstimate(str(path), device, devices, found)


# -------------------------------------------------------------------------- rendering


def size(value: float) -> str:
    """Bytes in binary units, as ``dapr cache`` shows them."""
    return human_size(int(value))


def render(found: Estimate) -> list[str]:
    """The cost lines of one experiment (for ``dapr check --cost``)."""
    device = device_rates(found.device)
    lines = [f"  cost on {found.device} ({device['about']}), sizes from {found.sizes.source}"]
    width = max((len(step.system) for step in found.steps), default=0)
    for step in found.steps:
        head = f"    {step.kind:<6} {step.system:<{width}}"
        lines.append(
            f"{head}  {duration(step.seconds):>10}  {size(step.memory):>9}  "
            f"{size(step.disk):>9}  {step.work}"
        )
    used = {name for step in found.steps for name in step.rates}
    rates = device["rates"]
    kinds = {s: sorted(n for n in used if rates[n]["status"] == s) for s in ("measured", "derived")}
    lines.append(
        f"  total {duration(found.seconds)}, peak memory {size(found.memory)}, disk "
        f"{size(found.disk)}"
    )
    for status, names in kinds.items():
        if names:
            lines.append(f"  {status} rates: {', '.join(names)}")
    for name in kinds["derived"]:
        lines.append(f"    {name}: {rates[name]['source']}")
    return lines


def render_file(found: FileEstimate) -> str:
    """The total of a file (for ``dapr check --cost`` and the docs)."""
    hours = found.seconds / 3600
    return (
        f"{found.path} on {found.devices} x {found.device}: {len(found.experiments)} "
        f"experiments, {hours:,.1f} device-hours ({found.gpu_hours:,.1f} of them on the GPU), "
        f"{duration(found.wall_seconds)} with the jobs spread over {found.devices}, disk "
        f"{size(found.disk)}"
    )


def grid_table(found: FileEstimate) -> str:
    """A markdown table of a file's estimate, one row per experiment, and its total."""
    lines = [
        f"| dataset | passages | {found.device}-hours | of them on the GPU | disk |",
        "|---|---:|---:|---:|---:|",
    ]
    for e in found.experiments:
        lines.append(
            f"| {e.dataset} | {count(e.sizes.passages)} | {e.seconds / 3600:,.1f} | "
            f"{e.gpu_seconds / 3600:,.1f} | {size(e.disk)} |"
        )
    lines.append(
        f"| total | | {found.seconds / 3600:,.1f} | {found.gpu_hours:,.1f} | {size(found.disk)} |"
    )
    return "\n".join(lines) + "\n\n" + render_file(found) + "\n"
