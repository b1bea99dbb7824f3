"""Device names resolved against this machine: ``cpu``, ``cuda``, ``cuda:N`` and ``mps``.

A device setting is checked when the file is read (:func:`device_problem`): a name of another
form is refused with the forms accepted, and a device this machine lacks (``cuda:7`` with two
GPUs, ``cuda`` without CUDA, ``mps`` without Apple's GPU) with what the machine has. Where the
work runs on a Ray cluster (``RAY_ADDRESS`` set, as ``--ray-address`` sets it) the driver's
devices say nothing of the workers', so only the form is checked. torch is imported only where
a GPU driver is present (or torch is loaded already).
"""

from __future__ import annotations

import os
import platform
import re
import sys

FORMS = "cpu, cuda, cuda:N (N from 0), mps"
"""The device names a setting accepts, as error messages list them."""
_FORM = re.compile(r"(cpu|cuda|mps)(?::(\d+))?")


def cuda_count() -> int:
    """The CUDA devices torch sees; 0 without asking torch on a machine with no GPU driver."""
    if "torch" not in sys.modules:
        if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
            return 0
        drivers = ("/proc/driver/nvidia/version", "/dev/kfd")  # NVIDIA's, ROCm's
        if not any(os.path.exists(path) for path in drivers):
            return 0
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def mps_available() -> bool:
    """Whether torch sees Apple's GPU (asked only on macOS)."""
    if platform.system() != "Darwin":
        return False
    import torch

    return bool(torch.backends.mps.is_available())


def on_cluster() -> bool:
    """Whether work is sent to a Ray cluster whose workers, not this machine, compute."""
    return bool(os.environ.get("RAY_ADDRESS"))


def device_problem(value: object) -> str | None:
    """What is wrong with ``value`` as a device on this machine, or None when it is there."""
    match = _FORM.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return f"{value!r} is not a device; use one of: {FORMS}"
    kind, number = match.group(1), match.group(2)
    if kind != "cuda" and number not in (None, "0"):
        return f"{value!r}: there is one {kind} device; use {kind}"
    if kind == "cpu" or on_cluster():
        return None
    if kind == "mps":
        return None if mps_available() else f"{value!r}: this machine has no MPS (Apple) GPU"
    count = cuda_count()
    if count == 0:
        return f"{value!r}: this machine has no CUDA GPU; use cpu, or leave the device unset"
    if number is not None and int(number) >= count:
        gpus = machine_gpus(count)
        return f"{value!r}: this machine has {gpus}; use one of them, or leave the device unset"
    return None


def machine_gpus(count: int) -> str:
    """``1 CUDA GPU (cuda:0)`` or ``2 CUDA GPUs (cuda:0 to cuda:1)``."""
    if count == 1:
        return "1 CUDA GPU (cuda:0)"
    return f"{count} CUDA GPUs (cuda:0 to cuda:{count - 1})"
