"""Where a model's training examples come from: the ``sources:`` of a ``train:`` entry
(several dataset/split pairs, or the experiment's ``split``), the model card that names every
one, and the warning ``dapr run`` gives when an evaluated split shares documents with them."""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dapr.data import Dataset, Split
from dapr.errors import ConfigError, DaprError
from dapr.experiment.spec import Experiment, TrainSource, TrainSpec, check_fields

DOCUMENTS_FILE = "dapr_training_documents.json"
"""Beside a trained model's card: per source, the documents of its training queries' judged
passages, so that ``dapr run`` can tell when a test split shares them."""


def check_sources(spec: dict, path: Path, where: str) -> tuple[TrainSource, ...]:
    """``sources:`` checked: each a split of the experiment's dataset or of a known one."""
    from dapr import registry
    from dapr.datasets.irds import IRDS

    if "sources" not in spec:
        return ()
    if "split" in spec:
        raise ConfigError(f"{path}: {where}: give split or sources, not both")
    if not spec["sources"]:
        raise ConfigError(f"{path}: {where}.sources: give at least one {{split, dataset}}")
    found = []
    for i, item in enumerate(spec["sources"]):
        at = f"{where}.sources[{i}]"
        check_fields(item, TrainSource, path, at)
        if "split" not in item:
            raise ConfigError(f"{path}: {at}: missing key 'split'; name the split to train on")
        name = item.get("dataset")
        if name is None and item.get("dataset_args"):
            raise ConfigError(f"{path}: {at}.dataset_args: name their dataset (dataset: ...)")
        known = name is None or name.startswith(IRDS) or name in registry.datasets
        if not known and not Path(name).is_dir():
            raise ConfigError(
                f"{path}: {at}.dataset: {name!r} is neither a registered dataset nor a "
                f"directory; choose from: {', '.join(registry.datasets.names())}, or give a "
                "dataset directory"
            )
        found.append(TrainSource(**item))
    return tuple(found)


def load_sources(
    name: str,
    spec: TrainSpec,
    dataset: Dataset,
    loaded: dict[str, Dataset] | None = None,
    readable: Callable[[str, dict[str, Any]], bool] | None = None,
) -> list[tuple[Dataset, str]]:
    """The (dataset, split) pairs ``spec`` trains on: its ``sources``, else the experiment's
    ``split``; a DaprError naming the source when its dataset cannot be read or lacks the split.
    ``loaded``: datasets read before, by name and arguments; ``readable(name, args)``: whether
    to read a source's dataset now (one left unread is left out)."""
    from dapr.datasets import load_dataset

    wanted = [(s.dataset, s.dataset_args, s.split) for s in spec.sources]
    loaded = {} if loaded is None else loaded
    found = []
    for i, (source_name, args, split) in enumerate(wanted or [(None, {}, spec.split)]):
        source = dataset
        where = f"train.{name}" + (f".sources[{i}]" if wanted else "")
        if source_name is not None:
            if readable is not None and not readable(source_name, args):
                continue
            known = json.dumps([source_name, args], sort_keys=True, default=str)
            if known not in loaded:
                try:
                    loaded[known] = load_dataset(source_name, **args)
                except DaprError as error:
                    raise DaprError(f"{where}.dataset: {error}") from None
            source = loaded[known]
        if split not in source.splits:
            raise DaprError(
                f"{where}: dataset {source.name!r} has no {split!r} split (it has: "
                f"{', '.join(source.splits)}); choose a split with judgements to train on"
            )
        found.append((source, split))
    return found


def augment_queries(name: str, augment: dict, dataset: Dataset) -> dict[str, str]:
    """The unlabelled queries ``augment`` names: a split of this dataset or of another, or a
    queries file; a DaprError when there are none."""
    from dapr.datasets import load_dataset
    from dapr.io.rows import read_queries

    where = f"train.{name}.augment"
    if "queries" in augment:
        queries, source = read_queries(Path(augment["queries"])), f"file {augment['queries']}"
    else:
        try:
            source_set = load_dataset(augment["dataset"]) if "dataset" in augment else dataset
        except DaprError as error:
            raise DaprError(f"{where}.dataset: {error}") from None
        if augment["split"] not in source_set.splits:
            raise DaprError(
                f"{where}.split: dataset {source_set.name!r} has no {augment['split']!r} split; "
                f"choose one of: {', '.join(source_set.splits)}"
            )
        queries = source_set.split(augment["split"]).queries
        source = f"split {augment['split']!r} of {source_set.name!r}"
    if not queries:
        raise DaprError(f"{where}: the {source} has no queries; give a source that has some")
    return queries


def key_parts(spec: TrainSpec, sources: list, chains: Sequence, mined: Sequence) -> list:
    """The parts of a model's cache key that name its data: corpus fingerprints, splits, their
    hashes, context chains and mining-run keys, one list each; one value each for a single split,
    so that it keeps the keys it had before sources existed."""
    columns = [
        [d.corpus.fingerprint for d, _ in sources],
        [s for _, s in sources],
        [split_hash(d.split(s).queries, d.split(s).qrels) for d, s in sources],
        [c.identity() if c else None for c in chains],
        [m for _, m in mined],
    ]
    return columns if spec.sources else [column[0] for column in columns]


def split_hash(queries: dict, qrels: dict) -> str:
    digest = hashlib.sha256(json.dumps([queries, qrels], sort_keys=True).encode())
    return digest.hexdigest()[:16]


def add_counts(total: dict | None, counts: dict) -> dict:
    """Denoising counts per rank of several sources, summed rank by rank."""
    if total is None:
        return counts
    summed = {}
    for key in ("scored", "removed"):
        a, b = total[key], counts[key]
        longest = max(len(a), len(b))
        a, b = a + [0] * (longest - len(a)), b + [0] * (longest - len(b))
        summed[key] = [x + y for x, y in zip(a, b)]
    return {**total, **summed}


def describe_source(source: Dataset, split_name: str, split: Split) -> dict:
    """What the card says of one source, with the ids of the documents its training queries'
    judged passages belong to (written beside the card, not in it)."""
    doc_of = {p.id: p.doc_id for p in source.corpus.passages()}
    documents = {doc_of[p] for judged in split.qrels.values() for p in judged if p in doc_of}
    return {
        "dataset": source.name,
        "dataset_fingerprint": source.corpus.fingerprint,
        "split": split_name,
        "queries": len(split.queries),
        "documents": sorted(documents),
    }


UNTIMED = ("seconds",)
"""Fields of a training record that the model card leaves out, its own and its distillation's:
the card is part of the model's content, which keys the runs that use it, and a rerun takes
another time; they stay in the cache entry's ``training.json``, beside the model."""


def untimed(record: dict) -> dict:
    """``record`` without :data:`UNTIMED`, at its top and in its ``distilled`` record."""
    found = {k: v for k, v in record.items() if k not in UNTIMED}
    if isinstance(found.get("distilled"), dict):
        found["distilled"] = untimed(found["distilled"])
    return found


def write_card(
    entry: Path, name: str, spec: TrainSpec, trained_on: list[dict], record: dict
) -> None:
    """The model card beside the weights: what it was trained from and on (every dataset and
    split, ``trained_on``), and how; the documents trained on go to :data:`DOCUMENTS_FILE`.
    How long it took is left out (:data:`UNTIMED`)."""
    record = untimed(record)
    listed = [{k: v for k, v in t.items() if k != "documents"} for t in trained_on]
    for source, row in zip(trained_on, listed):
        row["documents"] = len(source["documents"])
    card = {
        "name": f"trained/{name}",
        "base_model": spec.model,
        "kind": spec.kind,
        "dataset": " + ".join(dict.fromkeys(t["dataset"] for t in trained_on)),
        "dataset_fingerprint": trained_on[0]["dataset_fingerprint"],
        "split": " + ".join(t["split"] for t in trained_on),
        "trained_on": listed,
        "min_grade": spec.min_grade,
        "contextualizer": [step.name for step in spec.contextualizer],
        "negatives": spec.negatives,
        **record,
    }
    (entry / "model" / "dapr_training.json").write_text(json.dumps(card, indent=2))
    documents = [
        {"dataset": t["dataset"], "corpus": t["dataset_fingerprint"], "split": t["split"]}
        | {"documents": t["documents"]}
        for t in trained_on
    ]
    (entry / "model" / DOCUMENTS_FILE).write_text(json.dumps(documents))


def overlap_warnings(experiment: Experiment, dataset: Dataset, split: Split) -> list[str]:
    """One line per model a retriever of ``experiment`` uses that was trained on documents the
    evaluated ``split`` judges (read from the model's :data:`DOCUMENTS_FILE`, for the same
    corpus): its results on them are not held out."""
    from dapr.checkpoints import resolve

    models: dict[str, str] = {}
    for system, spec in experiment.retrievers.items():
        for key, value in spec.args.items():
            if key.endswith("model") and isinstance(value, str):
                models.setdefault(value, system)
    lines, judged = [], None
    for model, system in models.items():
        try:
            listing = Path(resolve(model)) / DOCUMENTS_FILE
            trained = json.loads(listing.read_text()) if listing.is_file() else []
        except (DaprError, OSError, ValueError):
            continue
        same = [t for t in trained if t.get("corpus") == dataset.corpus.fingerprint]
        if not same:
            continue
        if judged is None:
            doc_of = {p.id: p.doc_id for p in dataset.corpus.passages()}
            judged = {doc_of[p] for js in split.qrels.values() for p in js if p in doc_of}
        shared = judged & {doc for t in same for doc in t["documents"]}
        if shared:
            sources = " + ".join(f"{t['dataset']}/{t['split']}" for t in same)
            lines.append(
                f"dapr: warning: {system}: model {model!r} was trained on {len(shared):,} of "
                f"the {len(judged):,} documents that split {experiment.split!r} of "
                f"{dataset.name!r} judges ({sources}); its results there are not held out"
            )
    return lines


_WARNED: set[str] = set()


def warn_if_trained_on(experiment: Experiment, dataset: Dataset, split: Split) -> None:
    """Print each of :func:`overlap_warnings` on stderr, once per process (a sweep evaluates
    the same split several times)."""
    for line in overlap_warnings(experiment, dataset, split):
        if line not in _WARNED:
            _WARNED.add(line)
            print(line, file=sys.stderr)
