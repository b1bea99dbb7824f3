"""Bad-input cases: Numbers that are NaN, infinite or out of range, and devices this machine lacks
(issue 38, classes 5-6).

Each case registers itself in the catalogue (tests/bad_input_kit.py) and runs in
tests/test_bad_inputs.py like every other case.
"""

from __future__ import annotations

import math
from pathlib import Path

from bad_input_kit import BASE, Bad, Kit, case

DENSE = {"name": "dense", "level": "passage"}
NO_GPU = "this machine has no CUDA GPU"


def _bm25(kit: Kit, **args: object) -> Path:
    """The base experiment with BM25 given ``args`` (its document twin and fusion as they are)."""
    retrievers = {**BASE["retrievers"], "bm25": {"name": "bm25", "args": args}}
    return kit.experiment(retrievers=retrievers)


def _dense(kit: Kit, **args: object) -> Path:
    """An experiment with one dense retriever given ``args`` (nothing loads: the check fails)."""
    return kit.experiment(retrievers={"de": {**DENSE, "args": args}}, fusion=None)


def _train(kit: Kit, **args: object) -> Path:
    return kit.experiment(train={"de": {"split": "test", "args": args}})


@case
def bm25_k1_nan(kit: Kit) -> Bad:
    """BM25 k1: .nan reached bm25s' parameter file, a JSON parse error after indexing."""
    argv = kit.run(_bm25(kit, k1=math.nan))
    return Bad(argv, ("bad.yaml", "retrievers.bm25.args.k1", "nan"), "must be a number >= 0")


@case
def bm25_k1_nan_check(kit: Kit) -> Bad:
    """dapr check reports BM25 k1: .nan as dapr run does."""
    argv = ["check", str(_bm25(kit, k1=math.nan))]
    return Bad(argv, ("bad.yaml", "retrievers.bm25.args.k1", "nan"), "must be a number >= 0")


@case
def bm25_k1_negative(kit: Kit) -> Bad:
    """BM25 k1: -5 ran silently (Lucene refuses k1 < 0)."""
    argv = kit.run(_bm25(kit, k1=-5))
    return Bad(argv, ("bad.yaml", "retrievers.bm25.args.k1", "-5"), "must be a number >= 0")


@case
def bm25_b_above_one(kit: Kit) -> Bad:
    """BM25 b: 2 ran silently (Lucene refuses b outside [0, 1])."""
    argv = kit.run(_bm25(kit, b=2))
    return Bad(argv, ("bad.yaml", "retrievers.bm25.args.b", "got 2"), "must be a number in [0, 1]")


@case
def bm25_b_negative_check(kit: Kit) -> Bad:
    """dapr check refuses BM25 b: -1 (it planned the run before)."""
    argv = ["check", str(_bm25(kit, b=-1))]
    return Bad(argv, ("bad.yaml", "retrievers.bm25.args.b", "-1"), "must be a number in [0, 1]")


@case
def integer_argument_infinite(kit: Kit) -> Bad:
    """An integer argument given .inf (BM25 threads)."""
    argv = kit.run(_bm25(kit, threads=math.inf))
    return Bad(argv, ("bad.yaml", "retrievers.bm25.args.threads", "inf"), "must be an integer")


@case
def integer_argument_beyond_64_bits(kit: Kit) -> Bad:
    """An integer argument no machine integer holds (BM25 threads: 10**30)."""
    argv = kit.run(_bm25(kit, threads=10**30))
    return Bad(argv, ("bad.yaml", "retrievers.bm25.args.threads"), "below 2**63")


@case
def fusion_alpha_nan(kit: Kit) -> Bad:
    """A convex fusion's alpha: .nan."""
    fusion = {"fused": {**BASE["fusion"]["fused"], "args": {"alpha": math.nan}}}
    argv = kit.run(kit.experiment(fusion=fusion))
    return Bad(argv, ("bad.yaml", "fusion.fused.args.alpha", "nan"), "must be a number in [0, 1]")


@case
def fusion_missing_infinite_check(kit: Kit) -> Bad:
    """dapr check refuses a fusion's missing: .inf (only NaN was refused before)."""
    args = {"alpha": 0.5, "missing": math.inf}
    path = kit.experiment(fusion={"fused": {**BASE["fusion"]["fused"], "args": args}})
    return Bad(["check", str(path)], ("bad.yaml", "fusion.fused.args.missing", "inf"), "finite")


@case
def metric_cutoff_huge(kit: Kit) -> Bad:
    """nDCG@10**21 was a KeyError traceback after the whole run."""
    path = kit.experiment(metrics=["nDCG@" + "1" + "0" * 21])
    return Bad(kit.run(path), ("bad.yaml", "metrics", "nDCG@1000"), "below 2**63")


@case
def metric_cutoff_not_an_integer(kit: Kit) -> Bad:
    """nDCG@2.5 was an unknown metric; it is a cutoff that is not a whole number."""
    path = kit.experiment(metrics=["nDCG@2.5"])
    return Bad(["check", str(path)], ("bad.yaml", "metrics", "'nDCG@2.5'"), "a whole number")


@case
def resources_gpus_nan(kit: Kit) -> Bad:
    """resources.gpus_per_job: .nan passed the >= 0 check."""
    path = kit.experiment(resources={"gpus_per_job": math.nan})
    return Bad(kit.run(path, "--ray"), ("bad.yaml", "resources.gpus_per_job", "nan"), ">= 0")


@case
def training_learning_rate_nan(kit: Kit) -> Bad:
    """learning_rate: .nan was torch's own error after the model loaded."""
    argv = ["train", str(_train(kit, learning_rate=math.nan))]
    return Bad(argv, ("bad.yaml", "train.de.args", "learning_rate", "nan"), "must be a number > 0")


@case
def training_epochs_infinite(kit: Kit) -> Bad:
    """epochs: .inf was an OverflowError."""
    argv = ["train", str(_train(kit, epochs=math.inf))]
    return Bad(argv, ("bad.yaml", "train.de.args", "epochs", "inf"), "must be a number > 0")


@case
def training_epochs_infinite_check(kit: Kit) -> Bad:
    """dapr check reports epochs: .inf as dapr train does."""
    argv = ["check", str(_train(kit, epochs=math.inf))]
    return Bad(argv, ("bad.yaml", "train.de.args", "epochs", "inf"), "must be a number > 0")


@case
def distill_epochs_nan(kit: Kit) -> Bad:
    """A cross-encoder's distill.epochs: .nan passed the <= 0 check."""
    entry = {"kind": "cross", "split": "test", "negatives": {"mined": "bm25", "count": 1}}
    entry["distill"] = {"teacher": "bm25", "epochs": math.nan}
    argv = ["check", str(kit.experiment(train={"ce": entry}))]
    return Bad(argv, ("bad.yaml", "train.ce.distill.epochs", "nan"), "must be a number > 0")


@case
def dense_search_device_missing(kit: Kit) -> Bad:
    """search_device: cuda:7 on a machine without it failed after the whole encoding."""
    argv = kit.run(_dense(kit, search_device="cuda:7"))
    names = ("bad.yaml", "retrievers.de.args.search_device", "'cuda:7'", NO_GPU)
    return Bad(argv, names, "use cpu, or leave the device unset")


@case
def dense_search_device_missing_check(kit: Kit) -> Bad:
    """dapr check reports search_device: cuda:7 (it planned the run before)."""
    argv = ["check", str(_dense(kit, search_device="cuda:7"))]
    names = ("bad.yaml", "retrievers.de.args.search_device", "'cuda:7'", NO_GPU)
    return Bad(argv, names, "use cpu, or leave the device unset")


@case
def dense_search_device_unknown(kit: Kit) -> Bad:
    """search_device: tpu was a RuntimeError traceback."""
    argv = kit.run(_dense(kit, search_device="tpu"))
    names = ("bad.yaml", "retrievers.de.args.search_device", "'tpu'")
    return Bad(argv, names, "cpu, cuda, cuda:N (N from 0), mps")


@case
def dense_devices_missing(kit: Kit) -> Bad:
    """devices: [cuda:3] on a CPU-only machine encoded on the CPU (another cache key)."""
    argv = kit.run(_dense(kit, devices=["cpu", "cuda:3"]))
    return Bad(argv, ("bad.yaml", "retrievers.de.args.devices", "'cuda:3'", NO_GPU), "use cpu")


@case
def coref_device_unknown_check(kit: Kit) -> Bad:
    """A contextualizer's device of no known form (coref device: gpu0)."""
    context = {"name": "coref", "args": {"device": "gpu0"}}
    retrievers = {"bm25": {"name": "bm25", "contextualizer": context}}
    path = kit.experiment(retrievers=retrievers, fusion=None)
    names = ("bad.yaml", "retrievers.bm25.contextualizer.args.device", "'gpu0'")
    return Bad(["check", str(path)], names, "cpu, cuda, cuda:N")
