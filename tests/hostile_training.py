"""Bad-input cases: What dapr check must find in train: blocks before any work (issue 38, class 8).

Each case registers itself in the catalogue (tests/bad_input_kit.py) and runs in
tests/test_bad_inputs.py like every other case: once as `dapr train FILE`, once as `dapr check
FILE` (``<name>_checked``), which must refuse the same with the same line.
tests/test_hostile_training.py runs them as `dapr run` too, with model loading forbidden.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bad_input_kit import BASE, Bad, Kit, case

from dapr.retrievers.support.encoding import cuda_available

TRAINING: dict[str, Callable[[Kit], Path]] = {}
"""The experiment files of this module's cases, by case name (for `dapr run`)."""


def refused(*names: str, fix: str) -> Callable[[Callable[[Kit], Path]], Callable[[Kit], Path]]:
    """Register the experiment file ``write`` makes as a case for `dapr train` (its name) and
    for `dapr check` (its name + ``_checked``): both name ``names`` and give ``fix``."""

    def register(write: Callable[[Kit], Path]) -> Callable[[Kit], Path]:
        TRAINING[write.__name__] = write
        for suffix, command in (("", "train"), ("_checked", "check")):

            def made(kit: Kit, command: str = command) -> Bad:
                return Bad([command, str(write(kit))], ("bad.yaml", *names), fix)

            made.__name__ = made.__qualname__ = write.__name__ + suffix
            made.__doc__ = f"{(write.__doc__ or '').strip()} (dapr {command})"
            case(made)
        return write

    return register


def _train(kit: Kit, retrievers: dict | None = None, **entries: dict) -> Path:
    """The base experiment with these ``train:`` entries (and retrievers beside BASE's)."""
    systems = {**BASE["retrievers"], **(retrievers or {})}
    return kit.experiment(train=entries, retrievers=systems)


GOOD = {"split": "test", "negatives": {"same_document": 1}}
"""A training entry with nothing wrong: it would train first if it could."""


@refused("train.de.sources[1]", "'train'", fix="choose a split with judgements")
def train_source_split_missing(kit: Kit) -> Path:
    """A training source names a split its dataset lacks, after a model that could train"""
    return _train(kit, ok=GOOD, de={"sources": [{"split": "test"}, {"split": "train"}]})


@refused("train.de", "'train'", fix="choose a split with judgements")
def train_split_missing(kit: Kit) -> Path:
    """A model trains on the default split, train, which the dataset lacks"""
    return _train(kit, ok=GOOD, de={})


@refused("train.de.sources[1].dataset", "corpus.jsonl", fix="expected the hub layout")
def train_source_files_missing(kit: Kit) -> Path:
    """A training source's dataset directory lacks its corpus file"""
    other = kit.dataset(name="other")
    (other / "corpus.jsonl").unlink()
    sources = [{"split": "test"}, {"dataset": str(other), "split": "test"}]
    return _train(kit, de={"sources": sources})


@refused("train.de.augment.split", "'train'", fix="choose one of: dev, test")
def augment_split_missing(kit: Kit) -> Path:
    """Augmentation queries from a split the dataset lacks, after mining negatives"""
    augment = {"split": "train", "retriever": "bm25", "model": "cross-encoder/any"}
    return _train(kit, de={"split": "test", "negatives": {"mined": "bm25"}, "augment": augment})


@refused("train.de -> retrievers.mine (model: trained/de) -> train.de", fix="break the loop")
def training_mines_with_itself(kit: Kit) -> Path:
    """A model's negatives are mined by a retriever that uses that model (a cycle)"""
    mine = {"mine": {"name": "dense", "args": {"model": "trained/de"}}}
    return _train(kit, mine, de={"split": "test", "negatives": {"mined": "mine"}})


@refused(
    "train.a -> retrievers.ra (model: trained/b) -> train.b -> retrievers.rr -> retrievers.rb "
    "(model: trained/a) -> train.a",
    fix="break the loop",
)
def training_loop_through_another_model(kit: Kit) -> Path:
    """Two models each taught or mined by a system that uses the other"""
    systems = {
        "ra": {"name": "dense", "args": {"model": "trained/b"}},
        "rb": {"name": "dense", "args": {"model": "trained/a"}},
        "rr": {"name": "rerank", "first_stage": "rb"},
    }
    b = {"split": "test", "kind": "cross", **GOOD, "distill": {"teacher": "rr", "depth": 5}}
    return _train(kit, systems, a={"split": "test", "negatives": {"mined": "ra"}}, b=b)


@refused("train.ce.negatives", fix="set negatives: {same_document: n}")
def cross_encoder_without_negatives(kit: Kit) -> Path:
    """A cross-encoder with no negatives to learn from (once refused after its model loaded)"""
    return _train(kit, ce={"split": "test", "kind": "cross"})


@refused("train.ce.negatives", fix="set negatives: {same_document: n}")
def cross_encoder_mining_no_negatives(kit: Kit) -> Path:
    """A cross-encoder whose mining keeps none (count: 0), distilled from a teacher first"""
    negatives = {"mined": "bm25", "count": 0}
    distill = {"teacher": "bm25", "depth": 5, "count": 2}
    return _train(kit, ce={"split": "test", "kind": "cross", "negatives": negatives,
                           "distill": distill})  # fmt: skip


@refused("train.ce.distill.count", "depth: 10", fix="lower count below 10 or raise depth")
def distillation_needs_more_than_the_teacher_ranks(kit: Kit) -> Path:
    """Distillation rows of 13 passages from a teacher's run of 10 (once trained undistilled)"""
    distill = {"teacher": "bm25", "depth": 20, "count": 12}
    return _train(kit, ce={**GOOD, "kind": "cross", "distill": distill})


if not cuda_available():  # fp16 is what a GPU trains in

    @refused("train.de.args", "fp16", fix="use bf16 or fp32 on a CPU")
    def fp16_training_on_a_cpu(kit: Kit) -> Path:
        """precision: fp16 on a machine without a GPU (once refused after the model loaded)"""
        return _train(kit, de={**GOOD, "args": {"precision": "fp16"}})
