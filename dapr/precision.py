"""Numeric precision of neural models: ``fp32`` (full), ``bf16`` or ``fp16`` (half).

Half precision is a GPU's: bfloat16 on NVIDIA Ampere or newer, float16 on any CUDA GPU. torch
also runs bfloat16 on CPUs (fast on processors with bfloat16 instructions), but computes float16
products there slower than float32 ones, so ``fp16`` on a CPU is refused rather than run slowly.
torch is imported only when a device is checked.
"""

from __future__ import annotations

from typing import Any

from dapr.errors import DaprError

PRECISIONS = ("fp32", "bf16", "fp16")
"""The precisions a model can compute in; ``fp32`` is every component's default."""


def check(precision: Any, who: str, choices: tuple[str, ...] = PRECISIONS) -> str:
    """``precision`` when it is one of ``choices``, else a one-line DaprError from ``who``."""
    if not isinstance(precision, str) or precision not in choices:
        raise DaprError(f"{who}: precision {precision!r} is not one of: {', '.join(choices)}")
    return precision


def native_bf16() -> bool:
    """Whether the current CUDA device computes bfloat16 in hardware (not emulated)."""
    import torch

    if not torch.cuda.is_available():
        return False
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # torch < 2.3 reports native support only
        return bool(torch.cuda.is_bf16_supported())


def check_device(precision: str, device: str, who: str) -> None:
    """A one-line DaprError from ``who`` when ``device`` (a torch device type: ``cpu``,
    ``cuda``...) cannot compute in ``precision`` well: fp16 on a CPU, bf16 on an old GPU."""
    if precision == "fp16" and device == "cpu":
        raise DaprError(
            f"{who}: precision fp16 needs a GPU (a CPU computes float16 slower than float32); "
            "use bf16 or fp32 on a CPU"
        )
    if precision == "bf16" and device == "cuda" and not native_bf16():
        raise DaprError(
            f"{who}: precision bf16 needs a GPU with bfloat16 (NVIDIA Ampere or newer); "
            "use fp16 or fp32 on this one"
        )


def resolve(precision: str, device: str, who: str) -> str:
    """The precision used on ``device``: ``auto`` is bf16 on a CUDA GPU with native bfloat16,
    else fp32; an explicit one as given, once :func:`check_device` allows it."""
    if precision == "auto":
        return "bf16" if device == "cuda" and native_bf16() else "fp32"
    check_device(precision, device, who)
    return precision


def dtype(precision: str) -> Any:
    """The torch dtype of ``precision``."""
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
