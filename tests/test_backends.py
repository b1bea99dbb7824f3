"""CPU inference backends for dense retrieval: ONNX Runtime and OpenVINO exports of a model
give the torch embeddings within float tolerance (int8 within a looser one), are exported once
into the cache, and bad settings are one clear error."""

from __future__ import annotations

import numpy as np
import pytest

from dapr.errors import DaprError
from dapr.retrievers.dense import Dense
from dapr.retrievers.support import backends
from dapr.retrievers.support.batches import encode_unpadded

TEXTS = [
    "anarchism is a political philosophy",
    "the autism spectrum and its diagnosis",
    "albedo is the fraction of sunlight reflected",
    "a cat and a kitten in the park",
]


def _vectors(dense: Dense) -> np.ndarray:
    vectors = dense._model(dense.document_name).encode(TEXTS, convert_to_numpy=True)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


@pytest.mark.parametrize(
    ("backend", "quantize", "least"),
    [
        ("onnx", None, 0.99999),
        ("openvino", None, 0.99999),
        ("onnx", "int8", 0.9),
        ("openvino", "bf16", 0.99),
    ],
)
def test_an_exported_model_encodes_as_torch_does_and_is_exported_once(
    tiny_encoder, backend, quantize, least, monkeypatch, caplog
):
    torch_vectors = _vectors(Dense(model=str(tiny_encoder)))
    exported = Dense(model=str(tiny_encoder), backend=backend, quantize=quantize)
    cosines = (_vectors(exported) * torch_vectors).sum(axis=1)
    # dapr saves the export itself: sentence-transformers' advice to do so is not shown
    assert not [r for r in caplog.records if "heavily recommended" in r.getMessage()]
    assert cosines.min() >= least
    assert exported.identity()["backend"] == backend
    assert exported.identity()["quantize"] == quantize
    if quantize != "int8":  # as with torch, an embedding does not depend on its batch
        model = exported._model(exported.document_name)
        same_length = [f"{w} is a word here" for w in ("cat", "river", "music", "albedo")]
        alone = [
            encode_unpadded(model, [t], "document", convert_to_numpy=True)[0] for t in same_length
        ]
        together = encode_unpadded(
            model, same_length, "document", batch_size=4, convert_to_numpy=True
        )
        np.testing.assert_array_equal(together, np.stack(alone))

    def no_export(*args, **kwargs):
        raise AssertionError("exported again")

    monkeypatch.setattr(backends, "_export", no_export)  # the second load reads the cache
    again = Dense(model=str(tiny_encoder), backend=backend, quantize=quantize)
    assert np.array_equal(_vectors(again), _vectors(exported))


def test_openvino_runs_in_float32_unless_asked_for_bfloat16(tiny_encoder):
    import openvino

    supported = "BF16" in openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    expected = {None: openvino.Type.f32, "bf16": openvino.Type.bf16 if supported else None}
    identities = set()
    for quantize, precision in expected.items():
        dense = Dense(model=str(tiny_encoder), backend="openvino", quantize=quantize)
        compiled = dense._model(dense.document_name)[0].auto_model.request
        if precision is not None:  # bfloat16 where the processor has it
            assert compiled.get_property("INFERENCE_PRECISION_HINT") == precision
        identities.add(dense.identity()["precision"])
    assert identities == {"f32", "bf16"}  # cache keys apart


def test_torch_keeps_its_identity_and_bad_backends_are_named(tiny_encoder):
    assert "backend" not in Dense(model=str(tiny_encoder)).identity()  # cache keys unchanged
    for kwargs, message in [
        ({"backend": "tensorrt"}, "backend 'tensorrt' is not one of: torch, onnx, openvino"),
        ({"backend": "openvino", "quantize": "int8"}, "int8 is for backend onnx"),
        ({"backend": "onnx", "quantize": "bf16"}, "bf16 is for backend openvino"),
        ({"backend": "onnx", "quantize": "int4"}, r"quantize 'int4': give int8 \(onnx\) or bf16"),
        ({"backend": "onnx", "pooling": "mean"}, "give a sentence-transformers model"),
    ]:
        with pytest.raises(DaprError, match=message):
            Dense(model=str(tiny_encoder), **kwargs)
