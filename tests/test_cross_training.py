"""Cross-encoders that learn from little data: the teacher's warm start (MarginMSE on a
retriever's standardised scores), the listwise losses, the head's start, and their train: keys."""

from __future__ import annotations

import math

import pytest
from tiny_models import trained_card

from dapr.cli import main
from dapr.errors import DaprError
from dapr.training.cross import check, lists, teacher_rows, triples
from dapr.training.examples import Example

TEXTS = {f"p{i}": f"passage {i}" for i in range(8)}
RUN = {
    "q1": {f"p{i}": float(10 - i) for i in range(8)},
    "q2": {"p0": 3.0, "p1": 3.0, "p2": 3.0},  # one score: nothing to learn from
    "q3": {"p0": 1.0, "p1": 0.5},  # too few candidates
}


def test_teacher_rows_put_the_best_first_with_standardised_scores():
    rows = teacher_rows(RUN, {"q1": "one", "q2": "two", "q3": "three"}, TEXTS, depth=5, count=2)
    assert [r.query for r in rows] == ["one"]
    (row,) = rows
    assert row.passages[0] == "passage 0" and len(row.passages) == 3
    # the top 5 scores 10..6 standardised: mean 8, population deviation sqrt(2)
    assert row.scores[0] == pytest.approx(2 / math.sqrt(2))
    assert list(row.scores) == sorted(row.scores, reverse=True)
    drawn = {int(p.split()[1]) for p in row.passages[1:]}
    assert drawn <= {1, 2, 3, 4}  # from the top 5 only
    # seeded: the same draw again, another seed may differ but stays in the top
    assert teacher_rows(RUN, {"q1": "one"}, TEXTS, 5, 2) == [row]


def test_listwise_columns_keep_each_query_with_its_passages_and_labels():
    rows = [Example("q", "pos", ("n1", "n2"), 0.5), Example("r", "pos2", ("m1", "m2", "m3"))]
    found = lists(rows)
    assert found["docs"] == [["pos", "n1", "n2"], ["pos2", "m1", "m2"]]  # cut to the fewest
    assert found["labels"] == [[0.5, 0.0, 0.0], [1.0, 0.0, 0.0]]
    assert list(triples(rows)) == ["query", "positive", "negative_1", "negative_2"]


def test_unknown_loss_or_head_and_rows_without_negatives_are_one_line():
    rows = [Example("q", "p", ("n",))]
    with pytest.raises(DaprError, match="choose from: bce, listnet, mnrl"):
        check("margin", "fresh", rows)
    with pytest.raises(DaprError, match="unknown head 'zero'; choose from: fresh, prior"):
        check("bce", "zero", rows)
    with pytest.raises(DaprError, match="needs negatives"):
        check("bce", "fresh", [Example("q", "p")])


WARM = """
name: warm_cross
dataset: wiki-sample
dataset_args: {{train_articles: 0.3}}
metrics: [MRR@10]
depth: 20
train:
  warm-ce:
    kind: cross
    model: {model}
    loss: {loss}
    head: prior
    negatives: {{mined: bm25, count: 2}}
    distill: {{teacher: bm25, depth: 8, count: 2, epochs: 1}}
    args: {{max_steps: 2, batch_size: 4, save_steps: 2, learning_rate: 1.0e-4}}
retrievers:
  bm25: {{name: bm25}}
"""


def test_a_cross_encoder_distils_its_teacher_then_learns_the_labels(tiny_encoder, tmp_path):
    file = tmp_path / "warm.yaml"
    file.write_text(WARM.format(model=tiny_encoder, loss="listnet"))
    assert main(["train", str(file)]) == 0
    card = trained_card("warm-ce")
    assert card["loss"] == "listnet" and card["head"] == "prior" and card["steps"] == 2
    distilled = card["distilled"]
    assert distilled["loss"] == "margin_mse" and distilled["steps"] == 2
    assert distilled["teacher_rows"] > 0


@pytest.mark.parametrize("loss", ["bce", "mnrl"])
def test_each_loss_trains_and_saves_a_model(tiny_cross, tmp_path, loss):
    from sentence_transformers import CrossEncoder

    from dapr.training.cross import train_cross_encoder
    from dapr.training.dual import Settings

    rows = [Example(f"query {i}", f"passage {i}", (f"other {i}", f"more {i}")) for i in range(8)]
    model = CrossEncoder(str(tiny_cross), num_labels=1, device="cpu")
    settings = Settings(max_steps=2, batch_size=4, save_steps=2, learning_rate=1e-4)
    record = train_cross_encoder(model, rows, tmp_path, loss, settings, head="prior")
    assert record["steps"] == 2 and (tmp_path / "model").is_dir()
    if loss == "bce":  # two negatives a positive: the loss of always predicting a 1/3 share
        expected = -(math.log(1 / 3) / 3 + math.log(2 / 3) * 2 / 3)
        assert record["base_rate_loss"] == pytest.approx(expected)
    else:
        assert "base_rate_loss" not in record


@pytest.fixture(scope="module")
def tiny_cross(tmp_path_factory) -> object:
    """A 2-layer BERT classifier with one output, over the words of the rows above."""
    from tiny_models import tiny_bert

    words = [f"query passage other more {i}" for i in range(8)]
    return tiny_bert(tmp_path_factory.mktemp("tiny-cross"), words, head="classifier")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("head: prior", "head: 'sharp' is not one of: fresh, prior"),
        ("distill: {teacher: bm25, depth: 8, count: 2, epochs: 1}",
         "warm-ce.distill.teacher: 'dense' is not a passage-level retriever"),
        ("distill: {teacher: bm25, depth: 8, count: 2, epochs: 1}",
         "unknown key 'train.warm-ce.distill.steps'"),
        ("distill: {teacher: bm25, depth: 8, count: 2, epochs: 1}", "count must be below depth"),
        ("kind: cross", "warm-ce.head: only a cross-encoder (kind: cross) has it"),
    ],
)  # fmt: skip
def test_bad_cross_encoder_keys_are_one_line(tiny_encoder, tmp_path, capsys, change, message):
    replacement = {
        "head: 'sharp'": "head: sharp",
        "'dense' is": "distill: {teacher: dense}",
        "distill.steps": "distill: {teacher: bm25, steps: 3}",
        "below depth": "distill: {teacher: bm25, depth: 3, count: 3}",
        "only a cross-encoder": "kind: dual",
    }
    new = next(v for k, v in replacement.items() if k in message)
    file = tmp_path / "warm.yaml"
    file.write_text(WARM.format(model=tiny_encoder, loss="mnrl").replace(change, new))
    assert main(["train", str(file)]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and str(file) in err
