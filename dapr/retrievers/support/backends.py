"""Inference backends for sentence-transformers models on a CPU: ``torch`` (the default),
``onnx`` (ONNX Runtime) and ``openvino``; ``quantize: int8`` adds dynamic int8 quantization to
ONNX, ``quantize: bf16`` runs OpenVINO in bfloat16.

OpenVINO runs in float32 unless told otherwise: left to itself it picks bfloat16 on processors
with AVX512_BF16 or AMX (measured here: 1.6x faster than its float32 on an AMD EPYC), so the same
model and texts would give different embeddings on different machines under one cache key.
With ``bf16`` it is asked for bfloat16, which a processor without it runs in float32: such runs
are reproducible only on like processors.

A model is exported to the backend once and stored in dapr's cache (kind ``models``) under a key
of the model's name and revision, the backend, the quantization and the sentence-transformers
version; later loads read the stored export. Exports give slightly different embeddings than
torch (OpenVINO float32 about 1e-7 in cosine; bfloat16 and int8 much more), so the backend is
part of a retriever's identity and of its cache keys, and ``benchmarks/dense.py`` reports each
backend's speed and its nDCG@10 difference.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dapr.checkpoints import load, revision
from dapr.errors import DaprError
from dapr.store.cache import Cache, content_key

BACKENDS = ("torch", "onnx", "openvino")
QUANTIZATIONS = (None, "int8", "bf16")
_FOR = {"int8": "onnx", "bf16": "openvino"}
"""The backend each quantization is for."""
_INT8_FILES = "onnx/model_*int8_avx2.onnx"
"""Where sentence-transformers writes an ``avx2`` dynamically quantized ONNX model."""


def check_backend(backend: str, quantize: str | None) -> None:
    if backend not in BACKENDS:
        raise DaprError(f"backend {backend!r} is not one of: {', '.join(BACKENDS)}")
    if quantize not in QUANTIZATIONS:
        raise DaprError(
            f"quantize {quantize!r}: give int8 (onnx) or bf16 (openvino), or leave it out"
        )
    if quantize and backend != _FOR[quantize]:
        raise DaprError(f"quantize: {quantize} is for backend {_FOR[quantize]}, not {backend}")


def backend_identity(backend: str, quantize: str | None) -> dict[str, Any]:
    """The backend for a component's identity; nothing for torch, so torch's cache keys stay
    those from before backends existed. OpenVINO's names its precision (entries made before it
    was fixed ran in whatever precision the processor preferred, and are not reused)."""
    if backend == "torch":
        return {}
    found: dict[str, Any] = {"backend": backend, "quantize": quantize}
    if backend == "openvino":
        found["precision"] = _precision(quantize)
    return found


def _precision(quantize: str | None) -> str:
    return "bf16" if quantize == "bf16" else "f32"


def exported(
    loader: Any, name: str, backend: str, quantize: str | None, pinned: str | None = None, **kw
) -> Any:
    """``loader`` (SentenceTransformer or CrossEncoder) with ``name``'s weights on ``backend``,
    from the cache's export, exporting it first when there is none."""
    import sentence_transformers

    check_backend(backend, quantize)
    cache = Cache()
    exporting = "int8" if quantize == "int8" else None  # bf16 is chosen when loading
    key = content_key(
        "export",
        name,
        revision(name, pinned),
        backend,
        exporting,
        sentence_transformers.__version__,
    )
    with cache.lock("models", key):
        if not cache.valid("models", key):
            with cache.writing("models", key) as entry:
                _export(loader, name, backend, exporting, entry, **kw)
    path = cache.path("models", key) / "model"
    options: dict[str, Any] = {}
    if quantize == "int8":
        options["file_name"] = next(path.glob(_INT8_FILES)).relative_to(path).as_posix()
    if backend == "openvino":
        options["ov_config"] = {"INFERENCE_PRECISION_HINT": _precision(quantize)}
    return loader(str(path), backend=backend, model_kwargs=options, **kw)


def _export(loader: Any, name: str, backend: str, quantize: str | None, entry: Path, **kw) -> None:
    """Export ``name`` to ``backend`` into ``entry/model`` (sentence-transformers converts the
    weights when it loads a model that has no file for the backend)."""
    try:
        with _quiet("sentence_transformers.backend.utils"):  # its advice: save the export
            model = load(loader, name, backend=backend, **kw)
    except ImportError as error:
        raise DaprError(
            f"backend {backend}: {error}; install it with: pip install "
            f'"sentence-transformers[{backend}]"'
        ) from None
    target = entry / "model"
    model.save(str(target))
    if quantize:
        from sentence_transformers.backend import export_dynamic_quantized_onnx_model

        export_dynamic_quantized_onnx_model(model, "avx2", str(target))


@contextmanager
def _quiet(name: str) -> Iterator[None]:
    """Logger ``name``'s warnings silenced meanwhile."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
