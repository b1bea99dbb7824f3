"""Precision of re-ranking and training: fp32 by default and unchanged, bf16 on the CPU (close to
fp32, its own cache key), ``auto`` training precision resolved by the device (CUDA patched in),
recorded in the model card, and bad choices refused in one line."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from test_rerank import FIRST_STAGE, QUERIES, TEXTS
from tiny_models import tiny_bert, trained_card

from dapr import precision
from dapr.cli import main
from dapr.errors import DaprError
from dapr.retrievers.rerank import Rerank
from dapr.training.dual import Settings
from dapr.training.examples import Example


@pytest.fixture(scope="module")
def sharp(tmp_path_factory) -> str:
    """A tiny cross-encoder whose weights (all but the layer norms) are scaled up 8 times, so
    that its random scores spread far wider than bfloat16 rounds them."""
    from transformers import BertForSequenceClassification

    path = tiny_bert(
        tmp_path_factory.mktemp("sharp"), [*TEXTS.values(), *QUERIES.values()], head="classifier"
    )
    model = BertForSequenceClassification.from_pretrained(path)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "LayerNorm" not in name:
                weight.mul_(8.0)
    model.save_pretrained(path)
    return str(path)


def test_fp32_reranks_exactly_as_before_and_keeps_the_cache_key(sharp):
    before = Rerank(model=sharp, device="cpu")
    explicit = Rerank(model=sharp, device="cpu", precision="fp32")
    assert explicit.identity() == before.identity() and "precision" not in before.identity()
    old = before.rerank(QUERIES, FIRST_STAGE, TEXTS)
    new = explicit.rerank(QUERIES, FIRST_STAGE, TEXTS)
    assert np.array_equal(new.scores, old.scores) and np.array_equal(new.items, old.items)


def test_bf16_reranks_on_the_cpu_close_to_fp32_under_its_own_key(sharp):
    full = Rerank(model=sharp, device="cpu")
    half = Rerank(model=sharp, device="cpu", precision="bf16")
    assert half.identity() == full.identity() | {"precision": "bf16"}
    exact = full.rerank(QUERIES, FIRST_STAGE, TEXTS)
    rounded = half.rerank(QUERIES, FIRST_STAGE, TEXTS)
    assert next(half.model().parameters()).dtype == torch.bfloat16
    assert rounded.scores.dtype == np.float64
    error = np.abs(rounded.scores - exact.scores).max()
    assert 0 < error < 0.02  # bfloat16 keeps about 3 significant digits
    gaps = [min(-np.diff(list(ranked.values()))) for ranked in exact.to_dict().values()]
    assert min(gaps) > 2 * error  # a clear case: rounding cannot swap two items
    assert {q: list(r) for q, r in rounded.to_dict().items()} == {
        q: list(r) for q, r in exact.to_dict().items()
    }


def test_bad_reranking_precisions_are_one_line(sharp):
    with pytest.raises(DaprError, match=r"precision 'half' is not one of: fp32, bf16, fp16$"):
        Rerank(model=sharp, precision="half")
    with pytest.raises(DaprError, match="precision bf16 is for backend torch, not onnx"):
        Rerank(model=sharp, backend="onnx", precision="bf16")
    on_cpu = Rerank(model=sharp, device="cpu", precision="fp16")
    for _ in range(2):  # refused each time: an unconverted model is not kept
        with pytest.raises(DaprError, match="precision fp16 needs a GPU") as error:
            on_cpu.rerank(QUERIES, FIRST_STAGE, TEXTS)
        assert "\n" not in str(error.value)


def cuda(monkeypatch: pytest.MonkeyPatch, bf16: bool | None) -> None:
    """Pretend a CUDA GPU is there (None: none is), with native bfloat16 or without."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: bf16 is not None)
    monkeypatch.setattr(
        torch.cuda, "is_bf16_supported", lambda including_emulation=True: bool(bf16)
    )


def test_auto_precision_is_bf16_only_on_a_cuda_gpu_that_has_it(monkeypatch, tmp_path):
    def used(device: str, setting: str = "auto") -> tuple[bool, bool]:
        arguments = Settings(precision=setting).trainer_arguments(tmp_path, device)
        assert arguments["use_cpu"] == (device == "cpu")
        return arguments["bf16"], arguments["fp16"]

    cuda(monkeypatch, None)
    assert precision.resolve("auto", "cpu", "training") == "fp32" and used("cpu") == (False, False)
    assert used("cpu", "bf16") == (True, False)
    cuda(monkeypatch, True)
    assert precision.resolve("auto", "cuda", "training") == "bf16"
    assert used("cuda") == (True, False) and used("cpu") == (False, False)
    assert used("cuda", "fp32") == (False, False) and used("cuda", "fp16") == (False, True)
    cuda(monkeypatch, False)  # a GPU before Ampere: bfloat16 emulated at best
    assert used("cuda") == (False, False)
    with pytest.raises(DaprError, match="precision bf16 needs a GPU with bfloat16"):
        used("cuda", "bf16")
    with pytest.raises(DaprError, match="training: precision fp16 needs a GPU"):
        used("cpu", "fp16")


def test_an_explicit_training_precision_changes_the_cache_key_auto_does_not():
    defaults_left_out = {"precision", "encoding", "late_window", "late_overlap"}
    assert Settings().identity() == {
        f.name: getattr(Settings(), f.name)
        for f in dataclasses.fields(Settings)
        if f.name not in defaults_left_out
    }
    assert Settings(precision="bf16").identity()["precision"] == "bf16"
    assert Settings(precision="fp32").identity() != Settings().identity()
    with pytest.raises(DaprError, match="precision 'fp8' is not one of: auto, fp32, bf16, fp16"):
        Settings(precision="fp8")


@pytest.mark.parametrize("kind", ["dual", "cross"])
@pytest.mark.parametrize("setting", ["auto", "bf16"])
def test_training_on_the_cpu_records_the_precision_used(tiny_encoder, tmp_path, kind, setting):
    from sentence_transformers import CrossEncoder, SentenceTransformer

    from dapr.training.cross import train_cross_encoder
    from dapr.training.dual import train_dual_encoder

    rows = [Example(f"question {i}", f"passage {i} text", (f"other {i}",)) for i in range(16)]
    settings = Settings(batch_size=8, max_steps=2, save_steps=2, precision=setting)
    if kind == "dual":
        model = SentenceTransformer(str(tiny_encoder), device="cpu")
        record = train_dual_encoder(model, rows, tmp_path, settings=settings)
    else:
        model = CrossEncoder(str(tiny_encoder), num_labels=1, device="cpu")
        record = train_cross_encoder(model, rows, tmp_path, settings=settings)
    expected = "fp32" if setting == "auto" else "bf16"  # the trainer's own arguments say so
    assert record["precision"] == expected and record["settings"]["precision"] == setting
    assert record["steps"] == 2 and np.isfinite(record["training_loss"])
    assert json.loads((tmp_path / "training.json").read_text())["precision"] == expected
    assert next(model.parameters()).dtype == torch.float32  # mixed precision: weights stay fp32


EXPERIMENT = """
name: tiny_precision
dataset: wiki-sample
dataset_args: {{train_articles: 0.3}}
metrics: [nDCG@10]
train:
  tiny-bf16:
    model: {model}
    negatives: {{same_document: 1}}
    args: {{max_steps: 2, batch_size: 8, save_steps: 2, precision: {precision}}}
retrievers:
  bm25: {{name: bm25}}
"""


def test_dapr_train_writes_the_precision_into_the_model_card(tiny_encoder, tmp_path, capsys):
    file = tmp_path / "train.yaml"
    file.write_text(EXPERIMENT.format(model=tiny_encoder, precision="bf16"))
    assert main(["train", str(file)]) == 0
    card = trained_card("tiny-bf16")
    assert card["precision"] == "bf16" and card["settings"]["precision"] == "bf16"
    assert card["steps"] == 2
    file.write_text(EXPERIMENT.format(model=tiny_encoder, precision="half"))
    capsys.readouterr()
    assert main(["train", str(file)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "Traceback" not in error
    assert f"{file}: train.tiny-bf16.args: training: precision 'half' is not one of" in error


def test_precision_names_its_dtypes():
    assert [precision.dtype(p) for p in precision.PRECISIONS] == [
        torch.float32,
        torch.bfloat16,
        torch.float16,
    ]
    assert precision.check("bf16", "x") == "bf16"
    with pytest.raises(DaprError, match=r"^x: precision \['bf16'\] is not one of"):
        precision.check(["bf16"], "x")
