"""Inference backends for sentence-transformers models on a CPU: ``torch`` (the default),
``onnx`` (ONNX Runtime) and ``openvino``; ``int8`` adds dynamic int8 quantization to ONNX.

A model is exported to the backend once and stored in dapr's cache (kind ``models``) under a key
of the model's name and revision, the backend, the quantization and the sentence-transformers
version; later loads read the stored export. Exports give slightly different embeddings than
torch (OpenVINO fp32 about 1e-5 in cosine; int8 much more), so the backend is part of a
retriever's identity and of its cache keys, and ``benchmarks/dense.py`` reports each backend's
speed and its nDCG@10 difference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dapr.checkpoints import load, revision
from dapr.errors import DaprError
from dapr.store.cache import Cache, content_key

BACKENDS = ("torch", "onnx", "openvino")
QUANTIZATIONS = (None, "int8")
_INT8_FILES = "onnx/model_*int8_avx2.onnx"
"""Where sentence-transformers writes an ``avx2`` dynamically quantized ONNX model."""


def check_backend(backend: str, quantize: str | None) -> None:
    if backend not in BACKENDS:
        raise DaprError(f"backend {backend!r} is not one of: {', '.join(BACKENDS)}")
    if quantize not in QUANTIZATIONS:
        raise DaprError(f"quantize {quantize!r}: give int8, or leave it out")
    if quantize and backend != "onnx":
        raise DaprError(f"quantize: int8 is for backend onnx (dynamic quantization), not {backend}")


def backend_identity(backend: str, quantize: str | None) -> dict[str, Any]:
    """The backend for a component's identity; nothing for torch, so torch's cache keys stay
    those from before backends existed."""
    return {} if backend == "torch" else {"backend": backend, "quantize": quantize}


def exported(
    loader: Any, name: str, backend: str, quantize: str | None, pinned: str | None = None, **kw
) -> Any:
    """``loader`` (SentenceTransformer or CrossEncoder) with ``name``'s weights on ``backend``,
    from the cache's export, exporting it first when there is none."""
    import sentence_transformers

    check_backend(backend, quantize)
    cache = Cache()
    key = content_key(
        "export", name, revision(name, pinned), backend, quantize, sentence_transformers.__version__
    )
    with cache.lock("models", key):
        if not cache.valid("models", key):
            with cache.writing("models", key) as entry:
                _export(loader, name, backend, quantize, entry, **kw)
    path = cache.path("models", key) / "model"
    options = (
        {"file_name": next(path.glob(_INT8_FILES)).relative_to(path).as_posix()} if quantize else {}
    )
    return loader(str(path), backend=backend, model_kwargs=options, **kw)


def _export(loader: Any, name: str, backend: str, quantize: str | None, entry: Path, **kw) -> None:
    """Export ``name`` to ``backend`` into ``entry/model`` (sentence-transformers converts the
    weights when it loads a model that has no file for the backend)."""
    try:
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
