"""``dapr fetch``: download ahead what the experiments of a file need, for compute nodes without
internet.

The file expands into experiments as ``dapr check`` expands it (``--variant``, ``--set``, a
``dataset:`` grid). For each one: its dataset and the datasets its ``train:`` block reads (a
DAPR dataset from the hub as ``dapr data fetch`` does, one with downloadable raw files as ``dapr
data build NAME --download`` does), and every model it loads that its own ``train:`` block does
not make, into the hub cache (``huggingface_hub.snapshot_download``, at a retriever's pinned
``revision``). What dapr cannot fetch (ir_datasets' files, spaCy pipelines, which are pip
packages) gets the line that does it. Each item is one line, once per file; a failed download
is one line on stderr, the others are still tried, and the exit status is then 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dapr.cli import run
from dapr.errors import DaprError

if TYPE_CHECKING:
    from dapr.datasets.adapter import Adapter
    from dapr.experiment.spec import Experiment

OFFLINE = (
    "compute nodes can now run this file with HF_HUB_OFFLINE=1 set, given the same DAPR_HOME "
    "and HF_HOME (or HF_HUB_CACHE) on a file system they share"
)


def add(commands: argparse._SubParsersAction) -> None:
    fetch = commands.add_parser(
        "fetch",
        help="download the datasets and models an experiment file needs, ahead of a run on "
        "compute nodes without internet",
    )
    run.file_options(fetch, "--set dataset=MIRACL")
    fetch.add_argument(
        "--list", action="store_true", help="print what would be fetched; download nothing"
    )
    fetch.set_defaults(handler=_fetch)


@dataclass(frozen=True)
class Item:
    """One thing a run needs: ``state`` is ``here`` or ``trained`` (by the file: nothing to do),
    ``by hand`` (``text`` says how) or ``fetch`` (``get`` downloads it and says what it got;
    ``text`` says from where)."""

    label: str
    state: str
    text: str
    get: Callable[[], str] | None = None


def _fetch(args: argparse.Namespace) -> int:
    from dapr.experiment.config import load_grid

    experiments = load_grid(args.file, args.overrides, args.variant)  # every problem first
    items: dict[str, Item] = {}
    for experiment in experiments:
        for name, options in _datasets(experiment):
            path = options.get("path")
            label = f"dataset {name}" + (f" at {path}" if path else "")
            key = f"{label}\0{bool(options)}"  # options given: read from its raw files
            if key not in items:
                items[key] = _dataset(label, name, options)
        for model, revision in _models(experiment):
            label = f"model {model}" + (f" at revision {revision}" if revision else "")
            if label not in items:
                items[label] = _model(label, model, revision, experiment)
    hub_offline = os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")
    if hub_offline and not args.list and any(item.state == "fetch" for item in items.values()):
        raise DaprError(
            f"{args.file}: HF_HUB_OFFLINE is set here, so nothing can be downloaded; unset it on "
            "this machine (the one with internet) and rerun, or add --list to see what is missing"
        )
    failed = downloaded = 0
    for item in items.values():
        if item.state != "fetch":
            print(f"{item.label}: {item.text}")
        elif args.list:
            print(f"{item.label}: to download {item.text}")
        else:
            assert item.get is not None
            try:
                print(f"{item.label}: {item.get()}", flush=True)
                downloaded += 1
            except Exception as error:  # noqa: BLE001 - any failure: one line, then the others
                failed += 1
                print(
                    f"dapr: error: {item.label}: not downloaded ({_first_line(error)})",
                    file=sys.stderr,
                    flush=True,
                )
    states = [item.state for item in items.values()]
    manual = states.count("by hand")
    summary = f"{len(items)} items: {states.count('here')} already here"
    if "trained" in states:
        summary += f", {states.count('trained')} trained by the file"
    if args.list:
        print(f"{summary}, {states.count('fetch')} to download, {manual} to do by hand")
        return 0
    print(f"{summary}, {downloaded} downloaded, {failed} failed, {manual} to do by hand")
    if failed:
        print("fix what stopped the failed downloads and rerun dapr fetch; it skips what is here")
        return 2
    print(OFFLINE + (f", once the {manual} items to do by hand are done" if manual else ""))
    return 0


# -------------------------------------------------------------------------- what a file needs


def _datasets(experiment: Experiment) -> list[tuple[str, dict[str, Any]]]:
    """The experiment's dataset and those its ``train:`` block's sources read, with options."""
    found = [(experiment.dataset, experiment.dataset_args)]
    for training in experiment.train.values():
        for source in training.sources:
            if source.dataset is not None:
                found.append((source.dataset, source.dataset_args))
    return found


def _models(experiment: Experiment) -> list[tuple[str, str | None]]:
    """Every model of :func:`~dapr.experiment.plan.models_needed`, with the hub revision its
    retriever pins (None: the default branch)."""
    from dapr.experiment.plan import models_needed, pinned_revisions

    pinned = pinned_revisions(experiment)
    return [(model, pinned.get(model)) for model in models_needed(experiment)]


# -------------------------------------------------------------------------- datasets


def _dataset(label: str, name: str, options: dict[str, Any]) -> Item:
    from dapr import registry
    from dapr.datasets.adapter import Adapter, LocalAdapter
    from dapr.datasets.irds import IRDS

    if name.startswith(IRDS):
        how = (
            "ir_datasets downloads its files on first read, into $IR_DATASETS_HOME (default "
            "~/.ir_datasets; put it on the shared file system); read it once here first with "
            f"`dapr data stats {name}`"
        )
        return Item(label, "by hand", how)
    if name not in registry.datasets and Path(name).is_dir():
        return Item(label, "here", f"local ({Path(name).resolve()})")
    adapter = registry.datasets.get(name)
    if not isinstance(adapter, Adapter):
        return Item(
            label,
            "by hand",
            "loaded by a function registered under that name; "
            "dapr cannot fetch it, make sure it reads offline",
        )
    if isinstance(adapter, LocalAdapter) and options.get("path"):
        path = Path(str(options["path"])).expanduser().resolve()
        if not path.exists():
            return Item(label, "by hand", f"no such file or directory: {path}; put it there")
        return Item(label, "here", f"local ({path})")
    if adapter.builds_at_first_use:
        return Item(label, "here", "nothing to download (built at first use, offline)")
    if isinstance(adapter, LocalAdapter) and adapter.fetched():
        return Item(label, "here", f"already here ({adapter.raw})")
    if adapter.cached() and not options:
        return Item(label, "here", f"already here ({adapter.prepared})")
    if adapter.hub_repo is not None and not isinstance(adapter, LocalAdapter):
        return Item(
            label, "fetch", f"from the hub dataset {adapter.hub_repo}", lambda: _published(adapter)
        )
    if any(raw.url for raw in adapter.raw_files):
        return Item(
            label, "fetch", f"its raw files into {adapter.raw}, then built", lambda: _built(adapter)
        )
    how = f"dapr cannot download it; build it here with `dapr data build {name} --source DIR`"
    return Item(label, "by hand", f"{how} ({adapter.origin})")


def _published(adapter: Adapter) -> str:
    """Fetch a DAPR dataset from the hub, as ``dapr data fetch`` does."""
    from dapr.datasets import published

    assert adapter.hub_repo is not None
    published.fetch_published(adapter.name, adapter.prepared, adapter.hub_repo)
    return f"downloaded into {adapter.prepared} ({_size(adapter.prepared)})"


def _built(adapter: Adapter) -> str:
    """Download the raw files and build the dataset, as ``dapr data build NAME --download``."""
    from dapr.datasets import write_dataset

    adapter.require(adapter.raw, download=True)
    dataset = adapter.build(adapter.raw)
    out = adapter.prepared.with_name(dataset.name)
    write_dataset(dataset, out)
    return f"downloaded into {adapter.raw} ({_size(adapter.raw)}) and built into {out}"


# -------------------------------------------------------------------------- models


def _model(label: str, model: str, revision: str | None, experiment: Experiment) -> Item:
    from dapr.checkpoints import ALIASES, TRAINED, offline_copy
    from dapr.experiment.plan import spacy_pipelines, trained_here

    if trained_here(model, experiment):
        return Item(label, "trained", "trained by the file's train: block, nothing to download")
    if model in spacy_pipelines(experiment):
        return _spacy(label, model)
    found = offline_copy(model, revision)
    if found is not None:
        return Item(label, "here", f"already here ({found})")
    if model.startswith(TRAINED):
        how = "not trained yet: run `dapr train FILE` on the file whose train: block defines it"
        return Item(label, "by hand", how)
    if model.startswith(("/", "./", "../", "~")):
        return Item(label, "by hand", f"no such directory: {Path(model).expanduser()}")
    hub_id = ALIASES.get(model, model)
    where = "from the hub" + (f" ({hub_id})" if hub_id != model else "")
    return Item(label, "fetch", where, lambda: _snapshot(hub_id, revision))


def _snapshot(hub_id: str, revision: str | None) -> str:
    """Download ``hub_id`` into the hub cache, as loading it would."""
    import huggingface_hub

    path = huggingface_hub.snapshot_download(hub_id, revision=revision)
    return f"downloaded ({_size(Path(path))}) into {path}"


def _spacy(label: str, model: str) -> Item:
    """A spaCy pipeline is a pip package: here when installed, else the line that installs it."""
    import importlib.util

    from dapr.contextualizers.spacy_models import STAND_INS, installed_name

    package = installed_name(model)
    if importlib.util.find_spec(package) is not None:
        return Item(label, "here", f"already here (the installed package {package})")
    how = f"python -m spacy download {model}"
    if model in STAND_INS:
        how = f"pip install {STAND_INS[model].replace('_', '-')}==3.8.0` or `{how}"
    return Item(
        label,
        "by hand",
        f"a pip package, not on the hub: run `{how}` in the environment the compute nodes use",
    )


# -------------------------------------------------------------------------- helpers


def _size(path: Path) -> str:
    from dapr.store.housekeeping import human_size

    files = [path] if path.is_file() else (p for p in path.rglob("*") if p.is_file())
    return human_size(sum(p.stat().st_size for p in files))


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
