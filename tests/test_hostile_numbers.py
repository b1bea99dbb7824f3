"""Numbers and devices from a hostile experiment file (issue 38, classes 5-6): every numeric
argument of every component and training setting declares its range once (dapr.ranges), the
shared validation refuses NaN, infinities and values outside it in one line, and a device this
machine lacks is refused when the file is read (the catalogue cases are in hostile_numbers.py)."""

from __future__ import annotations

import dataclasses
import math
import sys
import types
import typing
from pathlib import Path
from typing import Annotated, Any

import pytest
from bad_input_kit import good_dataset
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dapr import devices, registry
from dapr.errors import ConfigError
from dapr.experiment.arguments import check_args, declared_hints
from dapr.experiment.validate import validate
from dapr.ranges import Device, Range, declared
from dapr.training.dual import Settings

BM25 = {"name": "bm25"}
FUSION_BASE = {"alpha": 0.5}


def _numeric(hint: Any) -> bool:
    """Whether an annotation (without its Annotated wrapper) takes an int or a float."""
    union = typing.get_origin(hint) in (types.UnionType, typing.Union)
    return any(o in (int, float) for o in (typing.get_args(hint) if union else (hint,)))


def _builtin(kind: registry.Registry) -> dict[str, Any]:
    """The registered components of dapr itself (a plugin's are its own business)."""
    found = {name: kind.get(name) for name in kind.names()}
    return {name: f for name, f in found.items() if f.__module__.startswith("dapr.")}


def _arguments() -> list[tuple[str, str, str, Range]]:
    """(kind, component, argument, declared range) of every numeric argument of every built-in
    retriever, fuser and contextualizer, and of the training settings."""
    found = []
    for kind, group in (
        ("retriever", registry.retrievers),
        ("fuser", registry.fusers),
        ("contextualizer", registry.contextualizers),
    ):
        for name, factory in _builtin(group).items():
            for argument, hint in declared_hints(factory).items():
                base, metadata = declared(hint)
                if argument != "return" and _numeric(base):
                    bounds = [m for m in metadata if isinstance(m, Range)]
                    found.append((kind, name, argument, bounds[0] if bounds else None))
    hints = typing.get_type_hints(Settings, include_extras=True)
    for field in dataclasses.fields(Settings):
        base, metadata = declared(hints[field.name])
        if _numeric(base):
            bounds = [m for m in metadata if isinstance(m, Range)]
            found.append(("training", "dual", field.name, bounds[0] if bounds else None))
    return found


ARGUMENTS = _arguments()


def test_every_numeric_argument_declares_its_range():
    """A new numeric argument without a Range would pass unchecked: this names it."""
    assert len(ARGUMENTS) > 40
    undeclared = [f"{kind} {name}: {arg}" for kind, name, arg, bounds in ARGUMENTS if not bounds]
    assert undeclared == []


def test_every_device_argument_is_declared_a_device():
    """An argument named like a device is checked against the machine."""
    for group in (registry.retrievers, registry.contextualizers):
        for name, factory in _builtin(group).items():
            for argument, hint in declared_hints(factory).items():
                if "device" in argument:
                    marks = declared(hint)[1]
                    assert any(isinstance(m, Device) for m in marks), f"{name}.{argument}"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return good_dataset(tmp_path_factory.mktemp("numbers") / "data")


def _experiment(kind: str, name: str, argument: str, value: Any, dataset: Path) -> dict:
    """An experiment file (as read) that gives ``argument`` of ``name`` the ``value``."""
    raw: dict[str, Any] = {"dataset": str(dataset), "retrievers": {"bm25": BM25}}
    if kind == "retriever":
        spec = {"name": name, "args": {argument: value}}
        if name == "rerank":
            spec["first_stage"] = "bm25"
        raw["retrievers"]["x"] = spec
    elif kind == "fuser":
        raw["retrievers"]["doc"] = {**BM25, "level": "document"}
        args = {**FUSION_BASE, argument: value} if name != "rrf" else {argument: value}
        raw["fusion"] = {"f": {"name": name, "document": "doc", "passage": "bm25", "args": args}}
    elif kind == "contextualizer":
        raw["retrievers"]["bm25"] = {
            **BM25,
            "contextualizer": {"name": name, "args": {argument: value}},
        }
    else:
        raw["train"] = {"de": {"split": "test", "args": {argument: value}}}
    return raw


VALUES = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, 0, 0.0, -1, 1, 0.5, 1e308, 10**30, -(10**30)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**6), max_value=10**6),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=st.sampled_from(ARGUMENTS), value=VALUES)
def test_numbers_are_accepted_in_range_or_refused_naming_the_key(dataset, case, value):
    """Whatever number an argument is given: accepted and inside its declared range, or one
    ConfigError line naming the key; never another exception, never NaN or infinity through."""
    kind, name, argument, bounds = case
    path = Path("numbers.yaml")
    try:
        validate(_experiment(kind, name, argument, value, dataset), path)
    except ConfigError as error:
        message = str(error)
        assert "\n" not in message and message.startswith(f"{path}: ")
        assert argument in message
        return
    assert not isinstance(value, bool) and math.isfinite(value)
    assert bounds is not None and value in bounds, f"{name}.{argument} = {value!r} accepted"


def test_a_plugin_declares_its_own_range():
    """A third-party factory annotates its argument; the shared check reads it."""

    def plugin(depth: Annotated[int, Range(1, 10)] = 5, share: Annotated[float, Range()] = 0.5):
        return None

    check_args(plugin, {"depth": 10, "share": -3.5}, Path("p.yaml"), "retrievers.p.args")
    with pytest.raises(
        ConfigError, match=r"retrievers\.p\.args\.depth must be an integer in \[1, 10\], got 11"
    ):
        check_args(plugin, {"depth": 11}, Path("p.yaml"), "retrievers.p.args")
    with pytest.raises(ConfigError, match=r"args\.share must be a finite number, got -inf"):
        check_args(plugin, {"share": -math.inf}, Path("p.yaml"), "retrievers.p.args")
    with pytest.raises(ConfigError, match=r"args\.depth must be an integer, got True"):
        check_args(plugin, {"depth": True}, Path("p.yaml"), "retrievers.p.args")


def test_ranges_read_as_intervals():
    assert [str(r) for r in (Range(0, 1), Range(0, 1, min_open=True), Range(1), Range(max=0))] == [
        "in [0, 1]",
        "in (0, 1]",
        ">= 1",
        "<= 0",
    ]
    assert (
        0 not in Range(0, 1, min_open=True)
        and 1 in Range(0, 1)
        and 1 not in Range(0, 1, max_open=True)
    )


@pytest.fixture
def gpus(monkeypatch):
    """This machine with ``n`` CUDA GPUs, as torch reports them."""
    torch = pytest.importorskip("torch")

    def have(n: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setitem(sys.modules, "torch", torch)
    return have


def test_devices_resolve_against_a_machine_with_gpus(gpus):
    gpus(2)
    assert [devices.device_problem(d) for d in ("cpu", "cuda", "cuda:0", "cuda:1")] == [None] * 4
    assert devices.device_problem("cuda:2") == (
        "'cuda:2': this machine has 2 CUDA GPUs (cuda:0 to cuda:1); use one of them, or leave "
        "the device unset"
    )
    gpus(1)
    assert "has 1 CUDA GPU (cuda:0)" in str(devices.device_problem("cuda:1"))
    gpus(0)
    assert "no CUDA GPU" in str(devices.device_problem("cuda"))


@pytest.mark.parametrize(
    "device", ["tpu", "CUDA", "cuda:", "cuda:-1", "cuda:1.5", " cpu", "", 7, None, "cpu:3", "mps:1"]
)
def test_device_names_of_no_known_form_are_refused(device):
    problem = devices.device_problem(device)
    assert problem is not None and problem.startswith(repr(device))


def test_devices_on_a_cluster_are_the_workers(gpus, monkeypatch):
    """With RAY_ADDRESS (dapr run/train --ray-address set it) the driver's GPUs say nothing of
    the workers': a device is checked for its form only."""
    gpus(0)
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    assert devices.device_problem("cuda:7") is None
    assert devices.device_problem("tpu") is not None


def test_a_dense_retriever_is_refused_a_missing_gpu_before_anything_loads(gpus, dataset):
    gpus(1)
    raw = {
        "dataset": str(dataset),
        "retrievers": {"de": {"name": "dense", "args": {"devices": ["cuda:0", "cuda:1"]}}},
    }
    with pytest.raises(
        ConfigError, match=r"retrievers\.de\.args\.devices: 'cuda:1': this machine has 1 CUDA GPU"
    ):
        validate(raw, Path("gpu.yaml"))
    raw["retrievers"]["de"]["args"] = {"devices": ["cuda:0"], "search_device": "cuda"}
    assert validate(raw, Path("gpu.yaml")).retrievers["de"].args["search_device"] == "cuda"
