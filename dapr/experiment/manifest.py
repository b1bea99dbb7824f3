"""``manifest.json``: what produced a results directory (config, data, code, machine, timings).

Cheap to build: it imports nothing heavy, reports only the packages the run already imported and
asks git (when the package is a git checkout) three quick questions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import math
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

from dapr.experiment.runner import Outcome

DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "numpy": ("numpy",),
    "torch": ("torch",),
    "sentence-transformers": ("sentence_transformers",),
    "transformers": ("transformers",),
    "bm25s": ("bm25s",),
    "pyserini": ("pyserini",),
    "pytrec-eval-terrier": ("pytrec_eval",),
    "spacy": ("spacy",),
    "ccpke": ("pke",),
    "fastcoref": ("fastcoref",),
    "colbert-ai": ("colbert",),
    "scipy": ("scipy",),
    "ray": ("ray",),
}
"""Distributions a manifest names when the run imported one of their modules."""


def manifest(
    outcome: Outcome, started: float, finished: float, jobs: Sequence[Any] = ()
) -> dict[str, Any]:
    """The manifest of a run that began at ``started`` and ended at ``finished`` (seconds since
    the epoch, as ``time.time()``), with its retrieval ``jobs`` that ran on Ray (each
    :class:`dapr.experiment.schedule.Done`: where, when, on which GPU); JSON-safe
    (``json.dumps(..., allow_nan=False)`` works)."""
    exp = outcome.experiment
    ran = {"jobs": [plain(done) for done in jobs]} if jobs else {}
    return {
        "experiment": plain(exp),
        "dataset": outcome.dataset.name,
        "dataset_fingerprint": outcome.dataset.fingerprint,
        "split": exp.split,
        "steps": [
            {"kind": s.kind, "system": s.system, "status": s.status, "seconds": s.seconds}
            for s in outcome.steps
        ],
        "wall_seconds": finished - started,
        "started": _iso(started),
        "finished": _iso(finished),
        "keys": dict(outcome.keys),
        "trained": {name: trained(name, card) for name, card in outcome.trained.items()},
        "packages": package_versions(),
        "git": git_revision(Path(__file__).resolve().parents[1]),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "hardware": {"cpus": os.cpu_count(), "memory_bytes": _memory(), "gpus": _gpus()},
        **ran,
    }


def trained(name: str, card: dict) -> dict[str, Any]:
    """A trained model in the manifest: its cache key, the files of the results that report on
    it, and what augmentation added to its training data."""
    files = ["training.json", "training.md"]
    if "denoising" in card:
        files += [f"{denoising_figure(name)}.png", f"{denoising_figure(name)}.pdf"]
    entry = {"key": card["key"], "files": files}
    if "augmentation" in card:
        entry["augmentation"] = card["augmentation"]
    return entry


def denoising_figure(name: str) -> str:
    """The results' plot (without suffix) of what denoising removed from ``name``'s negatives."""
    return f"denoising-{name}"


def plain(value: Any) -> Any:
    """``value`` as JSON data: dataclasses and mappings become objects, sequences lists, paths
    and other objects strings, non-finite floats strings (``"nan"``)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((plain(v) for v in value), key=str)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return str(value)


def package_versions() -> dict[str, str]:
    """The version of dapr and of each of :data:`DISTRIBUTIONS` whose modules are imported."""
    import dapr

    names = [
        dist
        for dist, modules in DISTRIBUTIONS.items()
        if any(module in sys.modules for module in modules)
    ]
    versions = {"dapr": dapr.version()}
    for name in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[name] = importlib.metadata.version(name)
    return versions


def git_revision(directory: Path) -> dict[str, Any] | None:
    """``{"revision": HEAD, "dirty": tracked files changed}`` of the git checkout that holds
    ``directory`` and tracks its ``__init__.py``; None when there is none (or no git)."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["git", "-C", str(directory), *args],
            capture_output=True,
            text=True,
            timeout=20,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},  # never take the index lock
        )

    try:
        tracked = git("ls-files", "--error-unmatch", "__init__.py")
        head = git("rev-parse", "HEAD")
        if tracked.returncode or head.returncode:
            return None
        status = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    if status.returncode:
        return None
    return {"revision": head.stdout.strip(), "dirty": bool(status.stdout.strip())}


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds")


def _memory() -> int | None:
    """Total physical memory in bytes, where the system tells."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _gpus() -> list[str]:
    """The CUDA devices' names, when the run imported torch and it sees any."""
    torch = sys.modules.get("torch")
    try:
        if torch is None or not torch.cuda.is_available():
            return []
        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:  # a broken CUDA setup must not fail the run's report
        return []
