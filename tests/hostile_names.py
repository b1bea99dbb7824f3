"""Bad-input cases: Names that become paths, outputs that collide, output roots inside DAPR_HOME
(issue 38, classes 1-3).

Each case registers itself in the catalogue (tests/bad_input_kit.py) and runs in
tests/test_bad_inputs.py like every other case.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml
from bad_input_kit import BASE, Bad, Kit, case, good_dataset

FIX = "names become file names"
BM25 = {"name": "bm25"}


def _systems(kit: Kit, **systems: dict) -> list[str]:
    """A run of the base experiment with these retrievers and no fusion."""
    return kit.run(kit.experiment(retrievers=systems, fusion=None))


@case
def system_name_climbs_out(kit: Kit) -> Bad:
    """A system name ../../../x would write runs/../../../x.trec outside --out."""
    argv = _systems(kit, **{"../../../x": BM25})
    return Bad(argv, ("bad.yaml", "retrievers", "'../../../x'", "'/'"), FIX)


@case
def system_name_absolute(kit: Kit) -> Bad:
    """An absolute path as a system name."""
    name = str(kit.tmp / "elsewhere")
    return Bad(_systems(kit, **{name: BM25}), ("bad.yaml", "retrievers", repr(name)), FIX)


@case
def fusion_name_with_slash(kit: Kit) -> Bad:
    """A / in a fusion's name would make a sub-folder of runs/."""
    path = kit.experiment(fusion={"f/used": BASE["fusion"]["fused"]})
    return Bad(kit.run(path), ("bad.yaml", "fusion", "'f/used'"), FIX)


@case
def system_name_with_control_character(kit: Kit) -> Bad:
    """A bell character in a system name (shown escaped in the one line)."""
    argv = _systems(kit, **{"bm\x0725": BM25})
    return Bad(argv, ("bad.yaml", "retrievers", "'bm\\x0725'", "control"), FIX)


@case
def system_name_reserved_on_windows(kit: Kit) -> Bad:
    """A system named like a Windows device (nul.trec cannot be a file there)."""
    return Bad(_systems(kit, nul=BM25), ("bad.yaml", "retrievers", "'nul'", "device"), FIX)


@case
def system_name_too_long(kit: Kit) -> Bad:
    """A system name of 200 bytes (its run file's name would pass the 255 bytes limit)."""
    argv = _systems(kit, **{"é" * 100: BM25})
    return Bad(argv, ("bad.yaml", "retrievers", "200 bytes", "at most 128"), FIX)


@case
def systems_differ_only_by_case(kit: Kit) -> Bad:
    """Two systems whose run files are one file on macOS and Windows."""
    argv = _systems(kit, bm25=BM25, BM25=BM25)
    return Bad(argv, ("bad.yaml", "retrievers", "'BM25'", "'bm25'", "runs/bm25.trec"), "rename one")


@case
def system_named_as_a_maxp_twin(kit: Kit) -> Bad:
    """A system named bm25@maxp beside maxp's twin of bm25: two runs for one file."""
    path = kit.experiment(retrievers={"bm25": BM25, "bm25@maxp": BM25}, fusion=None, maxp=True)
    return Bad(kit.run(path), ("bad.yaml", "maxp", "'bm25@maxp'"), "rename one")


@case
def trained_model_name_climbs_out(kit: Kit) -> Bad:
    """A train: name ../../x would write its pointer outside $DAPR_HOME/trained."""
    path = kit.experiment(train={"../../x": {"model": "all-MiniLM-L6-v2"}})
    return Bad(kit.run(path), ("bad.yaml", "train", "model name", "'../../x'"), FIX)


@case
def experiment_name_part_reserved(kit: Kit) -> Bad:
    """A nested experiment name whose second folder Windows reserves."""
    path = kit.experiment(name="paper/CON")
    return Bad(kit.run(path), ("bad.yaml", "name", "'CON'"), FIX)


def _grid(kit: Kit) -> Path:
    """A grid over two dataset folders named data."""
    datasets = [good_dataset(kit.tmp / side / "data") for side in ("a", "b")]
    return kit.experiment(text=yaml.safe_dump({**BASE, "dataset": [str(d) for d in datasets]}))


@case
def grid_datasets_share_a_folder_name(kit: Kit) -> Bad:
    """A grid over a/data and b/data: both results would go to <out>/data."""
    names = ("bad.yaml", "dataset", "a/data'", "b/data'", "bad/data")
    return Bad(kit.run(_grid(kit)), names, "rename one of the folders")


@case
def grid_datasets_share_a_folder_name_check(kit: Kit) -> Bad:
    """dapr check of the same grid says the same."""
    names = ("bad.yaml", "dataset", "a/data'", "b/data'", "bad/data")
    return Bad(["check", str(_grid(kit))], names, "rename one of the folders")


def _in_home(kit: Kit) -> str:
    return str(Path(os.environ["DAPR_HOME"]) / "cache" / "runs" / "x")


@case
def out_inside_dapr_home(kit: Kit) -> Bad:
    """--out inside $DAPR_HOME/cache, where dapr cache prune cleans."""
    argv = ["run", str(kit.experiment()), "--out", _in_home(kit)]
    return Bad(argv, ("--out", "$DAPR_HOME"), "choose an --out outside them")


@case
def out_inside_dapr_home_check(kit: Kit) -> Bad:
    """dapr check says the same of --out inside $DAPR_HOME."""
    argv = ["check", str(kit.experiment()), "--out", _in_home(kit)]
    return Bad(argv, ("--out", "$DAPR_HOME"), "choose an --out outside them")


@case
def runs_export_of_a_climbing_system_name(kit: Kit) -> Bad:
    """A results folder whose metrics.json names a system ../../x: runs export writes nothing."""
    results = kit.copy_results()
    metrics = json.loads((results / "metrics.json").read_text())
    metrics["systems"]["../../x"] = metrics["systems"].pop("bm25")
    (results / "metrics.json").write_text(json.dumps(metrics))
    argv = ["runs", "export", str(results), "--out", str(kit.tmp / "exported")]
    return Bad(argv, ("metrics.json", "'../../x'"), "rerun `dapr run`")


@case
def grid_trains_one_name_per_dataset(kit: Kit) -> Bad:
    """A train: block on a dataset: list would replace trained/<name> once per dataset."""
    datasets = [str(kit.dataset(name=n)) for n in ("one", "two")]
    raw = {**BASE, "dataset": datasets, "train": {"mine": {"model": "all-MiniLM-L6-v2"}}}
    return Bad(
        kit.run(kit.experiment(text=yaml.safe_dump(raw))),
        ("bad.yaml", "train"),
        "--set dataset=DIR",
    )
