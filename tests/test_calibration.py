"""Calibrated cross-encoder scores (issue 42 item 2): Platt scaling and a temperature fitted on
held-out training questions, the expected calibration error before and after, the calibration
stored beside the model and checked when read, and denoising reading the calibrated
probabilities."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_models import trained_card

from dapr.cli import main
from dapr.data import Run, Split
from dapr.errors import DaprError
from dapr.training import calibration
from dapr.training.calibration import Calibration, expected_calibration_error, fit
from dapr.training.examples import Example

RNG = np.random.default_rng(0)
SCORES = RNG.normal(0, 2, 20_000)
LABELS = (RNG.random(20_000) < 1 / (1 + np.exp(-(1.5 * SCORES - 2)))).astype(float)
"""Labels drawn from the logistic sigmoid(1.5 s - 2) of the scores."""


def test_platt_recovers_a_known_logistic_and_temperature_its_slope():
    found = fit(SCORES, LABELS, "platt")
    assert found.slope == pytest.approx(1.5, abs=0.08)
    assert found.intercept == pytest.approx(-2.0, abs=0.08)
    unshifted = (RNG.random(20_000) < 1 / (1 + np.exp(-0.5 * SCORES))).astype(float)
    temperature = fit(SCORES, unshifted, "temperature")
    assert temperature.slope == pytest.approx(0.5, abs=0.04) and temperature.intercept == 0
    # labels that fall as the score rises: the order-keeping best is the base rate everywhere
    flat = fit([1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 0.0, 0.0])
    assert flat.slope == 0 and flat.probabilities([-9.0, 9.0]) == pytest.approx([0.5, 0.5])
    with pytest.raises(DaprError, match="unknown calibration 'isotonic'"):
        fit(SCORES, LABELS, "isotonic")


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.floats(-50, 50), min_size=2, max_size=40),
    st.lists(st.sampled_from([0.0, 1.0, 0.5]), min_size=2, max_size=40),
    st.sampled_from(["platt", "temperature"]),
)
def test_a_calibration_maps_scores_to_probabilities_in_order(scores, labels, method):
    n = min(len(scores), len(labels))
    found = fit(scores[:n], labels[:n], method)
    grid = np.linspace(-100, 100, 201)
    p = found.probabilities(grid)
    assert np.all((p >= 0) & (p <= 1)) and np.all(np.diff(p) >= 0)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 1), st.sampled_from([0.0, 1.0])), min_size=1, max_size=60),
    st.integers(1, 20),
)
def test_the_calibration_error_lies_between_the_overall_and_the_pairwise_gap(pairs, bins):
    p, y = np.array(pairs).T
    ece = expected_calibration_error(p, y, bins)
    assert abs(np.mean(y - p)) - 1e-12 <= ece <= np.mean(np.abs(y - p)) + 1e-12
    assert expected_calibration_error(p, y, 1) == pytest.approx(abs(np.mean(y - p)))


def test_the_calibration_error_of_a_fixture_by_hand():
    p = [0.05, 0.15, 0.95, 1.0, 0.92]
    y = [0.0, 1.0, 1.0, 0.0, 1.0]
    # bins [0, .1): 0.05 vs 0; [.1, .2): 0.15 vs 1; [.9, 1]: mean 0.9567 vs 2/3
    expected = (0.05 + 0.85 + 3 * abs(2 / 3 - (0.95 + 1.0 + 0.92) / 3)) / 5
    assert expected_calibration_error(p, y) == pytest.approx(expected)
    with pytest.raises(DaprError, match=r"probabilities in \[0, 1\]"):
        expected_calibration_error([1.2], [1.0])


def test_the_error_drops_after_calibrating_miscalibrated_scores():
    shifted = 4 * SCORES + 12  # ranks as well, but its sigmoid says ~1 for most pairs
    groups = [f"q{i // 5}" for i in range(len(shifted))]
    found, about = calibration.report(shifted, LABELS, groups, "platt")
    assert about["ece_before"] > 0.4 and about["ece_after"] < 0.02
    assert found.slope == pytest.approx(1.5 / 4, rel=0.06)
    assert about["questions"] == 4_000 and about["pairs"] == 20_000


def test_held_out_questions_are_seeded_and_keep_their_rows_together():
    rows = [Example(f"q{i % 10}", f"p{i}", ("n",)) for i in range(30)]
    kept, held = calibration.held_out(rows, 0.3, seed=1)
    held_questions = {r.query for r in held}
    assert len(held_questions) == 3 and len(held) == 9 and len(kept) == 21
    assert not held_questions & {r.query for r in kept}
    assert calibration.held_out(rows, 0.3, seed=1) == (kept, held)
    assert {r.query for r in calibration.held_out(rows, 0.3, seed=2)[1]} != held_questions
    with pytest.raises(DaprError, match="calibration_share 0.1 of 10 training questions"):
        calibration.held_out(rows, 0.1, seed=0)


@pytest.fixture(scope="module")
def tiny_ce(tmp_path_factory) -> Path:
    """A tiny randomly initialised cross-encoder saved as sentence-transformers saves one."""
    from sentence_transformers import CrossEncoder
    from tiny_models import tiny_bert

    root = tmp_path_factory.mktemp("tiny-ce")
    bert = tiny_bert(root / "bert", ["query alpha beta gamma delta passage"], head="classifier")
    CrossEncoder(str(bert), num_labels=1, device="cpu").save(str(root / "model"))
    return root / "model"


def _copy(model: Path, to: Path) -> Path:
    shutil.copytree(model, to)
    return to


def test_denoising_reads_the_calibrated_probability(tiny_ce, tmp_path):
    from dapr.experiment.train_cross import cross_scorer, denoised

    model = _copy(tiny_ce, tmp_path / "ce")
    split = Split({"q": "query alpha"}, {"q": {"p0": 1}})
    texts = {"p0": "alpha", "p1": "beta", "p2": "gamma"}
    mined = Run.from_dict({"q": {"p0": 3.0, "p1": 2.0, "p2": 1.0}})
    denoiser = {"model": str(model), "below": 0.1, "depth": 2}
    raw = cross_scorer(str(model))([("query alpha", "beta"), ("query alpha", "gamma")])
    assert np.all(np.asarray(raw) > 0.1)  # a random head: its sigmoid near 0.5
    run, counts = denoised(denoiser, mined, split, texts)
    assert counts["removed"] == [1, 1] and "calibration" not in counts
    # a calibration that puts both below 0.1 (its sigmoid still above): both kept as negatives
    about = {"method": "platt", "slope": 1.0, "intercept": -12.0}
    calibration.write(model, about)
    run, counts = denoised(denoiser, mined, split, texts)
    assert counts["removed"] == [0, 0] and counts["calibration"] == "platt"
    assert set(run.to_dict()["q"]) == {"p1", "p2"}


def test_probabilities_in_chunks_equal_one_call(tiny_ce, monkeypatch):
    from sentence_transformers import CrossEncoder

    from dapr.training import cross

    model = CrossEncoder(str(tiny_ce), device="cpu")
    pairs = [("query alpha", word) for word in ("alpha", "beta", "gamma", "delta", "passage")]
    whole = {
        "own": np.asarray(model.predict(pairs, show_progress_bar=False), dtype=np.float64),
        "platt": Calibration("platt", 2.0, -1.0).probabilities(cross.raw_scores(model, pairs)),
    }
    monkeypatch.setattr(cross, "SCORING_CHUNK", 2)  # three calls of 2, 2 and 1 pairs
    for name, calibrated in [("own", None), ("platt", Calibration("platt", 2.0, -1.0))]:
        chunked = cross.Probabilities(model, calibrated)(pairs)
        assert chunked.shape == (5,) and np.allclose(chunked, whole[name], atol=1e-6)
    assert cross.Probabilities(model)([]).shape == (0,)


def test_a_stored_calibration_is_checked_when_read(tiny_ce, tmp_path):
    model = _copy(tiny_ce, tmp_path / "entry" / "model")
    path = calibration.write(model, {"method": "platt", "slope": 0.5, "intercept": -1.0})
    assert calibration.read(model) == Calibration("platt", 0.5, -1.0)
    assert calibration.read(tmp_path) is None  # none there: the model's own scores
    from dapr.store.checksums import seal

    seal(model.parent)  # as a cache entry records it
    path.write_text(path.read_text().replace("-1.0", "-2.0"))
    with pytest.raises(DaprError, match="calibration.json: not what was written"):
        calibration.read(model)
    (model.parent / "CHECKSUMS").unlink()
    assert calibration.read(model) == Calibration("platt", 0.5, -2.0)
    other = _copy(tiny_ce, tmp_path / "other")
    (other / "model.safetensors").write_bytes(b"other weights")
    shutil.copy(path, other / calibration.FILE)
    with pytest.raises(DaprError, match="fitted for other weights than those beside it"):
        calibration.read(other)
    for bad in ('{"method": "platt", "slope": -1, "intercept": 0}', "[1]", "{"):
        path.write_text(bad)
        with pytest.raises(DaprError, match=r"calibration\.json: (a calibration|unreadable)"):
            calibration.read(model)


TRAINED = """
name: calibrated
dataset: wiki-sample
dataset_args: {{train_articles: 0.3}}
train:
  raw-ce:
    kind: cross
    model: {model}
    loss: mnrl
    negatives: {{mined: bm25, count: 2}}
    args: {{max_steps: 2, batch_size: 4, save_steps: 2, learning_rate: 1.0e-4}}
  platt-ce:
    kind: cross
    model: {model}
    loss: mnrl
    calibration: platt
    calibration_share: 0.25
    negatives: {{mined: bm25, count: 2}}
    args: {{max_steps: 2, batch_size: 4, save_steps: 2, learning_rate: 1.0e-4}}
retrievers:
  bm25: {{name: bm25}}
"""


def _model(name: str) -> Path:
    pointer = Path(os.environ["DAPR_HOME"]) / "trained" / f"{name}.json"
    return Path(json.loads(pointer.read_text())["path"])


def test_a_trained_cross_encoder_stores_its_calibration_and_its_key_says_so(
    tiny_encoder, tmp_path, capsys
):
    file = tmp_path / "calibrated.yaml"
    file.write_text(TRAINED.format(model=tiny_encoder))
    assert main(["train", str(file)]) == 0
    raw, platt = _model("raw-ce"), _model("platt-ce")
    assert raw != platt  # the same entry but for the calibration: another key
    assert not (raw / calibration.FILE).exists()
    card = trained_card("platt-ce")["calibration"]
    assert card["method"] == "platt" and card["slope"] >= 0 and card["questions"] >= 2
    assert 0 <= card["ece_before"] <= 1 and 0 <= card["ece_after"] <= 1
    stored = json.loads((platt / calibration.FILE).read_text())
    assert stored["slope"] == card["slope"] and "model.safetensors" in stored["weights"]
    found = calibration.read(platt)  # checked against the entry's checksums and weights
    assert found is not None and found.method == "platt"
    held, trained = card["questions"], trained_card("platt-ce")["examples"]
    assert trained < trained_card("raw-ce")["examples"] and held > 0
    # a share that holds out fewer than two questions stops before training, in one line
    file.write_text(TRAINED.format(model=tiny_encoder).replace("0.25", "0.001"))
    capsys.readouterr()
    assert main(["train", str(file)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("a calibration needs at least 2 held out and 1 left to train on")
    assert "train.platt-ce: training: calibration_share 0.001 of" in err[-1]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("calibration: platt", "platt-ce.calibration: 'sigmoid' is not one of: none, platt"),
        ("calibration_share: 0.25", "platt-ce.calibration_share must be a number in (0, 1)"),
        ("calibration: platt", "calibration_share: holds questions out for a calibration"),
        ("kind: cross\n    model: {model}\n    loss: mnrl\n    calibration",
         "platt-ce.calibration: only a cross-encoder (kind: cross) has it"),
    ],
)  # fmt: skip
def test_bad_calibration_keys_are_one_line(tiny_encoder, tmp_path, capsys, change, message):
    replacement = {
        "'sigmoid'": "calibration: sigmoid",
        "(0, 1)": "calibration_share: 1.5",
        "holds questions": "calibration: none",
        "only a cross-encoder": "kind: dual\n    model: {model}\n    loss: mnrl\n    calibration",
    }
    new = next(v for k, v in replacement.items() if k in message)
    file = tmp_path / "bad.yaml"
    file.write_text(TRAINED.replace(change, new).format(model=tiny_encoder))
    assert main(["train", str(file)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and str(file) in err
