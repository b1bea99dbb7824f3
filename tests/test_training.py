"""Training: examples from judgements (positives, same-document and mined negatives), `dapr train`
storing content-addressed models that `dapr run` uses as trained/<name>, bad input, resume."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from tiny_models import trained_card

from dapr.cli import main
from dapr.data import Corpus, Document, Passage, Run
from dapr.errors import DaprError
from dapr.training.examples import Example, examples, positives, uniform

CORPUS = Corpus(
    [
        Document("A", "Alpha", tuple(Passage(f"A-{i}", "A", i, f"a text {i}") for i in range(4))),
        Document("B", "Beta", tuple(Passage(f"B-{i}", "B", i, f"b text {i}") for i in range(2))),
    ]
)
TEXTS = {p.id: f"[{p.id}]" for d in CORPUS for p in d.passages}


def test_positives_follow_the_grade_threshold():
    qrels = {"q": {"A-0": 2, "A-1": 1, "A-2": 0}, "r": {"B-0": 1}}
    assert positives(qrels) == {"q": ["A-0", "A-1"], "r": ["B-0"]}
    assert positives(qrels, min_grade=2) == {"q": ["A-0"]}  # T2Ranking-style levels >= 2
    with pytest.raises(DaprError, match="min_grade must be at least 1"):
        positives(qrels, min_grade=0)


def test_same_document_negatives_are_unjudged_passages_of_the_positives_document():
    qrels = {"q": {"A-0": 1, "A-1": 0}}
    rows = examples({"q": "query"}, qrels, TEXTS, CORPUS, same_document=5, seed=1)
    (row,) = rows
    assert row.query == "query" and row.positive == "[A-0]"
    # A-1 is judged (grade 0): never a negative; B's passages are another document
    assert sorted(row.negatives) == ["[A-2]", "[A-3]"]


def test_mined_negatives_come_first_in_run_order_then_same_document():
    qrels = {"q": {"A-0": 1}}
    run = Run.from_dict({"q": {"A-0": 9.0, "B-1": 8.0, "A-3": 7.0, "B-0": 6.0}})
    rows = examples(
        {"q": "query"}, qrels, TEXTS, CORPUS, mined=run, mined_count=2, same_document=1, seed=0
    )
    mined, sibling = rows[0].negatives[:2], rows[0].negatives[2:]
    assert mined == ("[B-1]", "[A-3]")  # the best unjudged, the positive itself skipped
    assert len(sibling) == 1 and sibling[0] in {"[A-1]", "[A-2]"}
    ragged = [Example("q", "p", ("n1", "n2")), Example("r", "s", ("m1",))]
    assert [r.negatives for r in uniform(ragged)] == [("n1",), ("m1",)]


def test_a_row_that_denoising_left_without_negatives_is_left_out_not_everyones(capsys):
    rows = [Example("q", "p", ("n1",)), Example("r", "s", ()), Example("t", "u", ("m1", "m2"))]
    rows.append(Example("v", "w", ("k1",)))  # most rows have one negative: every kept row has it
    kept = uniform(rows)
    assert [(r.query, r.negatives) for r in kept] == [
        ("q", ("n1",)),
        ("t", ("m1",)),
        ("v", ("k1",)),
    ]
    assert "1 of 4 examples have fewer than 1 negatives" in capsys.readouterr().err


def test_sampled_mined_negatives_come_from_the_top_unjudged_at_random():
    qrels = {"q": {"A-0": 1}}
    ranked = ["A-0", "B-1", "A-3", "B-0", "A-1", "A-2"]  # five unjudged after the positive
    run = Run.from_dict({"q": {p: 10.0 - n for n, p in enumerate(ranked)}})
    drawn = set()
    for seed in range(40):
        (row,) = examples(
            {"q": "query"}, qrels, TEXTS, CORPUS, mined=run, mined_count=2, seed=seed,
            sample_from=3,
        )  # fmt: skip
        assert len(set(row.negatives)) == 2
        drawn.update(row.negatives)
        again = examples(
            {"q": "query"}, qrels, TEXTS, CORPUS, mined=run, mined_count=2, seed=seed,
            sample_from=3,
        )  # fmt: skip
        assert again[0].negatives == row.negatives  # the seed fixes the draw
    assert drawn == {"[B-1]", "[A-3]", "[B-0]"}  # all of the top three, never below them


def test_no_positive_is_one_clear_error():
    with pytest.raises(DaprError, match="no query has a passage judged 3 or better"):
        examples({"q": "query"}, {"q": {"A-0": 1}}, TEXTS, CORPUS, min_grade=3)


EXPERIMENT = """
name: tiny_training
dataset: wiki-sample
dataset_args: {{train_articles: 0.3}}
metrics: [nDCG@10]
train:
  tiny-title:
    model: {model}
    contextualizer: title
    negatives: {{same_document: 1}}
    args: {{max_steps: {steps}, batch_size: 8, save_steps: 2}}
retrievers:
  trained:
    name: dense
    args: {{model: trained/tiny-title, pooling: mean}}
    contextualizer: title
"""


def test_train_stores_the_model_and_run_uses_it_by_name(tiny_encoder, tmp_path, capsys):
    file = tmp_path / "training.yaml"
    file.write_text(EXPERIMENT.format(model=tiny_encoder, steps=4))
    assert main(["train", str(file)]) == 0
    first = capsys.readouterr().out
    assert "trained/tiny-title" in first and "computed" in first and "4 steps" in first
    pointer = Path(os.environ["DAPR_HOME"]) / "trained" / "tiny-title.json"
    model = Path(json.loads(pointer.read_text())["path"])
    card = json.loads((model / "dapr_training.json").read_text())
    assert card["base_model"] == str(tiny_encoder) and card["negatives"] == {"same_document": 1}
    assert card["steps"] == 4 and card["negatives_per_example"] == 1 and card["examples"] > 100
    assert not list(model.parent.glob("checkpoints/checkpoint-*"))  # only the final model kept
    # the same file again: found in the cache
    assert main(["train", str(file)]) == 0
    assert "cached" in capsys.readouterr().out
    assert main(["run", str(file), "--out", str(tmp_path / "out")]) == 0
    run = capsys.readouterr().out
    assert "train  tiny-title" in run and "index  trained" in run
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert 0 <= metrics["systems"]["trained"]["mean"]["nDCG@10"] <= 1
    # the same model under another name: its training and its runs are found by content
    file.write_text(EXPERIMENT.format(model=tiny_encoder, steps=4).replace("tiny-title", "other"))
    assert main(["run", str(file), "--out", str(tmp_path / "renamed")]) == 0
    renamed = capsys.readouterr().out
    steps = [line.split()[:3] for line in renamed.splitlines() if line.startswith("  ")]
    assert ["train", "other", "cached"] in steps and ["search", "trained", "cached"] in steps
    # another model under the same name: a new entry, and the runs that use it are redone
    file.write_text(EXPERIMENT.format(model=tiny_encoder, steps=2))
    assert main(["run", str(file), "--out", str(tmp_path / "again")]) == 0
    again = capsys.readouterr().out
    assert Path(json.loads(pointer.read_text())["path"]) != model
    assert [line.split()[2] for line in again.splitlines() if "trained " in line][:2] == [
        "computed",
        "computed",
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("dataset_args: {train_articles: 0.3}", "dataset_args: {}"), "has no 'train' split"),
        (("negatives: {same_document: 1}", "loss: triplet"), "unknown loss 'triplet'"),
        (("negatives: {same_document: 1}", "min_grade: 0"), "min_grade must be at least 1"),
        (("negatives: {same_document: 1}", "min_grade: 5"), "no query has a passage judged 5"),
        (
            ("batch_size: 8", "batch_size: 8, warmup_ratio: 1.5"),
            "warmup_ratio must be a number in [0, 1)",
        ),
        (("batch_size: 8", "batch_size: 8, epoch: 1"), "unknown key 'train.tiny-title.args.epoch'"),
        (("same_document: 1", "mined: nowhere"), "negatives.mined: 'nowhere' is not a passage"),
        (("same_document: 1}", "same_document: 1}\n    workers: 0"), "workers must be a positive"),
        (
            ("same_document: 1}", "same_document: 1}\n    kind: encoder"),
            "kind: 'encoder' is not one",
        ),
        (
            ("model: {model}", "model: no-org/no-such-model"),
            "cannot load model 'no-org/no-such-model'",
        ),
        (
            ("negatives: {same_document: 1}", "split: train\n    sources: [{split: train}]"),
            "give split or sources, not both",
        ),
        (
            ("negatives: {same_document: 1}", "sources: [{split: train, dataset: nowhere}]"),
            "sources[0].dataset: 'nowhere' is neither a registered dataset",
        ),
        (
            ("negatives: {same_document: 1}", "sources: [{split: train}, {split: nowhere}]"),
            "sources[1]: dataset 'wiki-sample' has no 'nowhere' split",
        ),
    ],
)
def test_bad_training_input_is_one_line(tiny_encoder, tmp_path, capsys, change, message):
    old, new = (part.replace("{model}", str(tiny_encoder)) for part in change)
    text = EXPERIMENT.format(model=tiny_encoder, steps=2)
    assert old in text
    text = text.replace(old, new)
    (tmp_path / "bad.yaml").write_text(text)
    assert main(["train", str(tmp_path / "bad.yaml")]) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1 and "Traceback" not in error


@pytest.mark.parametrize("name", ["SIGKILL", "SIGTERM"])
def test_a_killed_training_resumes_from_its_last_checkpoint(tiny_encoder, tmp_path, name):
    file = tmp_path / "training.yaml"
    file.write_text(
        EXPERIMENT.format(model=tiny_encoder, steps=12).replace("tiny-title", "resumed")
    )
    env = {**os.environ, "DAPR_HOME": str(tmp_path / "home")}
    command = [sys.executable, "-m", "dapr.cli", "train", str(file)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    partial = tmp_path / "home" / "cache" / "models"
    deadline = time.monotonic() + 240
    while not list(partial.glob(".*.partial/checkpoints/checkpoint-4/trainer_state.json")):
        assert process.poll() is None, process.communicate()[1].decode()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    process.send_signal(getattr(signal, name))
    _, stderr = process.communicate(timeout=30)
    if name == "SIGTERM":  # a scheduler's preemption: stopped with one line, status 143
        assert process.returncode == 143, stderr.decode()[-2000:]
        assert stderr.decode().strip().splitlines()[-1].startswith("dapr: terminated (SIGTERM)")
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    steps = [
        int(line.split("step ")[1].split("/")[0])
        for line in done.stdout.splitlines()
        if " step " in line
    ]
    assert steps and min(steps) > 4 and max(steps) == 12  # continued after checkpoint 4 at least
    (card,) = (tmp_path / "home" / "cache" / "models").glob("*/model/dapr_training.json")
    record = json.loads(card.read_text())
    assert record["resumed"] and record["steps"] == 12


def test_resume_takes_the_latest_complete_checkpoint_and_drops_half_written_ones(tmp_path):
    from dapr.training.dual import last_checkpoint

    for step, complete in [(2, True), (4, True), (6, False), (10, True), (12, False)]:
        (tmp_path / f"checkpoint-{step}").mkdir()
        if complete:  # the trainer writes its state file last
            (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    assert last_checkpoint(tmp_path) == tmp_path / "checkpoint-10"  # by step, not by name
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint-10",
        "checkpoint-2",
        "checkpoint-4",
    ]
    assert last_checkpoint(tmp_path / "none") is None


CROSS = """
name: tiny_cross
dataset: wiki-sample
dataset_args: {{train_articles: 0.3}}
metrics: [nDCG@10]
depth: 20
train:
  tiny-ce:
    kind: cross
    model: {model}
    negatives: {{mined: bm25, count: 2}}
    args: {{max_steps: 2, batch_size: 8, save_steps: 2}}
retrievers:
  bm25: {{name: bm25}}
  reranked: {{name: rerank, first_stage: bm25, args: {{model: trained/tiny-ce, top_k: 5}}}}
"""


def test_a_trained_cross_encoder_reranks_a_first_stage(tiny_encoder, tmp_path, capsys):
    file = tmp_path / "cross.yaml"
    file.write_text(CROSS.format(model=tiny_encoder))
    assert main(["run", str(file), "--out", str(tmp_path / "out")]) == 0
    log = capsys.readouterr().out
    assert "train  tiny-ce" in log and "rerank reranked" in log
    card = trained_card("tiny-ce")
    assert card["kind"] == "cross" and card["loss"] == "bce" and card["steps"] == 2
    # two BM25-mined negatives per example, labelled 0: three (query, passage) rows each
    assert card["negatives_per_example"] == 2 and card["examples"] % 3 == 0
    assert card["settings"]["learning_rate"] == 1e-5  # RocketQA's cross-encoder rate
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())["systems"]
    # only the top 5 are re-scored: the rest of the first stage's 20 is dropped
    run = (tmp_path / "out" / "runs" / "reranked.trec").read_text().splitlines()
    assert max(int(line.split()[3]) for line in run) == 5 and "reranked" in metrics
    # a cross-encoder needs negatives, and takes its own loss
    file.write_text(
        CROSS.format(model=tiny_encoder).replace(
            "negatives: {mined: bm25, count: 2}", "loss: cached_mnrl"
        )
    )
    assert main(["train", str(file)]) == 2
    assert (
        "unknown loss 'cached_mnrl' for a cross model; choose from: bce, listnet, mnrl"
        in capsys.readouterr().err
    )
    file.write_text(
        CROSS.format(model=tiny_encoder).replace(
            "negatives: {mined: bm25, count: 2}", "min_grade: 1"
        )
    )
    assert main(["train", str(file)]) == 2
    assert "a cross-encoder needs negatives" in capsys.readouterr().err


def test_a_model_with_separate_query_and_document_encoders_trains_both(tiny_encoder, tmp_path):
    import torch
    from sentence_transformers import SentenceTransformer, models

    from dapr.training.dual import Settings, train_dual_encoder

    def encoder():
        transformer = models.Transformer(str(tiny_encoder), max_seq_length=32)
        return [transformer, models.Pooling(transformer.get_word_embedding_dimension(), "mean")]

    router = models.Router.for_query_document(query_modules=encoder(), document_modules=encoder())
    model = SentenceTransformer(modules=[router], device="cpu")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    rows = [Example(f"question {i}", f"passage {i} text", (f"other {i}",)) for i in range(16)]
    train_dual_encoder(model, rows, tmp_path, settings=Settings(batch_size=8, max_steps=2))
    moved = {n.split(".")[2] for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert moved == {"query", "document"}  # each column went through its own encoder
    again = SentenceTransformer(str(tmp_path / "model"), device="cpu")
    assert type(again[0]).__name__ == "Router"


def test_the_card_counts_the_rows_left_out_for_too_few_negatives(tiny_encoder, tmp_path, capsys):
    from sentence_transformers import SentenceTransformer

    from dapr.experiment.summary import training_markdown
    from dapr.training.dual import Settings, train_dual_encoder

    model = SentenceTransformer(str(tiny_encoder), device="cpu")
    rows = [Example(f"question {i}", f"passage {i} text", (f"other {i}",)) for i in range(8)]
    rows.append(Example("short", "a row denoising emptied", ()))
    card = train_dual_encoder(model, rows, tmp_path, settings=Settings(batch_size=8, max_steps=1))
    assert (card["examples"], card["left_out"]) == (8, 1)
    assert json.loads((tmp_path / "training.json").read_text())["left_out"] == 1
    card |= {"base_model": "tiny"}
    assert "| 8 (1 short left out) | 1 |" in training_markdown({"m": card})
    assert "| 8 | 1 |" in training_markdown({"m": card | {"left_out": 0}})


@pytest.mark.parametrize("name", ["NaturalQuestions", "MIRACL", "ConditionalQA"])
def test_the_shared_samples_train_splits_give_examples_with_same_document_negatives(samples, name):
    from dapr.datasets.dump import read_dump

    dataset = read_dump(samples / "dapr-dump-sample" / name)
    split = dataset.split("train")
    texts = {p.id: p.text for d in dataset.corpus for p in d.passages if p.is_candidate}
    rows = examples(split.queries, split.qrels, texts, dataset.corpus, same_document=1)
    judged = {q for q, j in split.qrels.items() if any(g >= 1 and p in texts for p, g in j.items())}
    assert len(rows) >= len(judged) > 0
    positives_text = {texts[p] for j in split.qrels.values() for p, g in j.items() if p in texts}
    # most positives have another candidate passage in their document to serve as a negative
    assert sum(bool(r.negatives) for r in rows) > len(rows) / 2
    assert all(r.positive in positives_text for r in rows)


def test_graded_positives_carry_their_grade_over_the_highest_as_label():
    qrels = {"q": {"A-0": 3, "A-1": 2}, "r": {"B-0": 1}}  # T2Ranking-style levels
    rows = examples({"q": "query", "r": "other"}, qrels, TEXTS, CORPUS)
    assert {(r.positive, r.label) for r in rows} == {
        ("[A-0]", 1.0),
        ("[A-1]", 2 / 3),
        ("[B-0]", 1 / 3),
    }
    from dapr.training.cross import pairs

    table = pairs([Example("q", "pos", ("neg",), 2 / 3)])
    assert table == {"query": ["q", "q"], "passage": ["pos", "neg"], "label": [2 / 3, 0.0]}


def test_denoising_keeps_only_what_the_cross_encoder_scores_below_the_threshold():
    from dapr.training.denoise import denoise

    queries = {"q": "query", "r": "other"}
    qrels = {"q": {"A-0": 1}, "r": {"B-0": 1}}
    run = Run.from_dict(
        {"q": {"A-0": 9.0, "A-1": 8.0, "A-2": 7.0, "A-3": 6.0}, "r": {"B-1": 5.0, "B-0": 4.0}}
    )
    given = {"[A-1]": 0.05, "[A-2]": 0.1, "[A-3]": 0.9, "[B-1]": 0.0}  # exactly at 0.1

    def score(pairs):
        return [given[text] for _, text in pairs]

    done = denoise(run, queries, qrels, TEXTS, score, below=0.1, depth=3)
    assert done.run.to_dict() == {"q": {"A-1": 3.0}, "r": {"B-1": 1.0}}  # the judged A-0 not scored
    assert done.scored == (2, 1, 1) and done.removed == (0, 1, 1)
    # everything scored at or above the threshold: nothing left, and examples then have none
    empty = denoise(run, queries, qrels, TEXTS, lambda pairs: [0.5] * len(pairs), 0.1, 3)
    assert all(not ranked for ranked in empty.run.to_dict().values())
    rows = examples(queries, qrels, TEXTS, CORPUS, mined=empty.run, mined_count=2)
    assert all(r.negatives == () for r in rows)
    with pytest.raises(DaprError, match=r"denoise.below must be a probability in \(0, 1\]"):
        denoise(run, queries, qrels, TEXTS, score, below=1.5)


DENOISED = """
name: tiny_denoised
dataset: wiki-sample
dataset_args: {{train_articles: 0.3}}
train:
  tiny-ce:
    kind: cross
    model: {model}
    negatives: {{mined: bm25, count: 2}}
    args: {{max_steps: 2, batch_size: 8, save_steps: 2}}
  denoised:
    model: {model}
    negatives: {{mined: bm25, count: 2, denoise: {{model: trained/tiny-ce, below: 0.6, depth: 4}}}}
    args: {{max_steps: 2, batch_size: 8}}
retrievers:
  bm25: {{name: bm25}}
"""


def test_a_dual_encoder_trains_on_negatives_a_trained_cross_encoder_denoised(
    tiny_encoder, tmp_path, capsys
):
    file = tmp_path / "denoised.yaml"
    text = DENOISED.format(model=tiny_encoder)
    file.write_text(text)
    assert main(["train", str(file)]) == 0  # the cross-encoder first, then the dual encoder
    # the scoring before training is a step of its own in the log (output to a file)
    log = capsys.readouterr().out
    assert "denoise denoised: started (wiki-sample/train)" in log
    assert re.search(
        r"denoise denoised: computed in \d+\.\d s, [\d,]+ of [\d,]+ candidates removed", log
    )
    card = trained_card("denoised")
    counts = card["denoising"]
    assert (counts["model"], counts["below"], counts["depth"]) == ("trained/tiny-ce", 0.6, 4)
    assert len(counts["scored"]) == len(counts["removed"]) == 4 and counts["scored"][0] > 0
    assert all(0 <= r <= n for r, n in zip(counts["removed"], counts["scored"]))
    # dapr run writes the cards and RocketQA's Figure 5 with the results, and lists the models
    assert main(["run", str(file), "--out", str(tmp_path / "out")]) == 0
    out = tmp_path / "out"
    assert json.loads((out / "training.json").read_text())["denoised"]["denoising"] == counts
    assert (out / "denoising-denoised.png").stat().st_size > 0
    assert not (out / "denoising-tiny-ce.png").exists()  # nothing was denoised for it
    assert set(json.loads((out / "manifest.json").read_text())["trained"]) == {
        "tiny-ce",
        "denoised",
    }
    capsys.readouterr()
    for change, message in [
        (("below: 0.6", "below: 1.5"), "denoise.below must be a probability in (0, 1]"),
        (("mined: bm25, count: 2, denoise", "denoise"), "denoising filters mined negatives"),
    ]:
        file.write_text(text.replace(*change))
        assert main(["train", str(file)]) == 2
        assert message in capsys.readouterr().err


def test_pseudo_labelled_rows_get_the_negatives_most_labelled_rows_have(monkeypatch):
    from dapr.experiment import train_cross

    scores = {"[A-0]": 0.95, "[A-1]": 0.05, "[A-2]": 0.02, "[A-3]": 0.5}
    monkeypatch.setattr(train_cross, "cross_scorer", lambda name: lambda pairs: [
        scores[p] for _, p in pairs
    ])  # fmt: skip
    run = Run.from_dict({"q": {"A-0": 9.0, "A-1": 8.0, "A-2": 7.0, "A-3": 6.0}})
    labelled = [Example("a", "p", ("n",)), Example("b", "p", ("n",)), Example("c", "p", ())]
    augment = {"model": "trained/ce", "depth": 4}
    rows, counts = train_cross.pseudo(augment, run, {"q": "query"}, TEXTS, labelled)
    # one labelled row that denoising emptied does not leave the pseudo rows without negatives
    assert rows == [Example("query", "[A-0]", ("[A-1]",))] and counts["examples"] == 1


def test_pseudo_labels_follow_the_thresholds_strictly():
    from dapr.training.augment import pseudo_labelled

    queries = {"q": "query", "r": "other", "s": "third"}
    run = Run.from_dict(
        {
            "q": {"A-0": 9.0, "A-1": 8.0, "A-2": 7.0, "A-3": 6.0},
            "r": {"B-0": 5.0, "B-1": 4.0},
            "s": {"A-3": 1.0},
        }
    )
    given = {
        ("query", "[A-0]"): 0.95,  # positive
        ("query", "[A-1]"): 0.9,  # exactly at positive_above: not a positive
        ("query", "[A-2]"): 0.05,  # negative
        ("query", "[A-3]"): 0.1,  # exactly at negative_below: not a negative
        ("other", "[B-0]"): 0.5,  # neither: r has no pseudo-positive
        ("other", "[B-1]"): 0.0,
        ("third", "[A-3]"): 0.99,  # positive, but s has no negative to pair it with
    }
    rows, counts = pseudo_labelled(run, queries, TEXTS, lambda pairs: [given[p] for p in pairs])
    assert rows == [Example("query", "[A-0]", ("[A-2]",))]
    assert counts == {
        "queries": 3, "with_positive": 2, "positives": 2, "negatives": 2, "examples": 1
    }  # fmt: skip
    without = pseudo_labelled(run, queries, TEXTS, lambda p: [given[x] for x in p], negatives=0)
    assert [r.positive for r in without[0]] == ["[A-0]", "[A-3]"]
    for above, below, message in [(1.5, 0.1, "positive_above must be a probability"),
                                  (0.1, 0.9, "is below negative_below")]:  # fmt: skip
        with pytest.raises(DaprError, match=message):
            pseudo_labelled(
                run, queries, TEXTS, lambda p: [], positive_above=above, negative_below=below
            )
    with pytest.raises(DaprError, match="the augmentation source has no queries"):
        pseudo_labelled(run, {}, TEXTS, lambda p: [])


AUGMENTED = """
name: tiny_augmented
dataset: wiki-sample
dataset_args: {{train_articles: 0.3}}
train:
  tiny-ce:
    kind: cross
    model: {model}
    negatives: {{mined: bm25, count: 2}}
    args: {{max_steps: 2, batch_size: 8, save_steps: 2}}
  augmented:
    model: {model}
    augment:
      split: dev
      retriever: bm25
      model: trained/tiny-ce
      depth: 3
      positive_above: 0.0
      negative_below: 0.0
    args: {{max_steps: 2, batch_size: 8}}
retrievers:
  bm25: {{name: bm25}}
"""


def test_a_dual_encoder_trains_on_pseudo_labelled_queries_of_another_split(
    tiny_encoder, tmp_path, capsys
):
    text = AUGMENTED.format(model=tiny_encoder)
    file = tmp_path / "augmented.yaml"
    file.write_text(text)
    assert main(["train", str(file)]) == 0
    card = trained_card("augmented")
    counts = card["augmentation"]
    # every candidate scores above 0: each dev query's top 3 passages become positives
    assert counts["split"] == "dev" and counts["positives"] == counts["examples"] > 0
    assert counts["examples"] <= 3 * counts["queries"]
    assert card["examples"] == counts["examples"] + 1584  # beside the 1,584 labelled ones
    capsys.readouterr()
    for change, message in [
        (("split: dev", "split: nowhere"), "has no 'nowhere' split"),
        (("negative_below: 0.0", "negative_below: 0.5"), "is below negative_below"),
        (("negative_below: 0.0", "negative_below: 1.5"), "must be a probability in [0, 1]"),
    ]:
        file.write_text(text.replace(*change))
        assert main(["train", str(file)]) == 2
        assert message in capsys.readouterr().err


MIXED = """
name: tiny_mixed
dataset: COVID-QA
dataset_args: {{path: {covid}, train_articles: 0.5}}
train:
  mixed:
    model: {model}
    sources:
      - {{split: train}}
      - {{dataset: squad, dataset_args: {{path: {xquad}}}, split: test}}
    negatives: {{same_document: 1}}
    args: {{max_steps: 2, batch_size: 8}}
retrievers:
  trained: {{name: dense, args: {{model: trained/mixed, pooling: mean}}}}
"""


def test_a_model_trains_on_several_sources_and_its_card_names_them(
    tiny_encoder, covid_qa_file, xquad_en, tmp_path, capsys
):
    from dapr.datasets import load_dataset
    from dapr.experiment.config import load
    from dapr.experiment.spec import Experiment, RetrieverSpec
    from dapr.experiment.train_sources import DOCUMENTS_FILE, overlap_warnings

    covid, xquad = covid_qa_file, xquad_en
    file = tmp_path / "mixed.yaml"
    file.write_text(MIXED.format(model=tiny_encoder, covid=covid, xquad=xquad))
    assert main(["train", str(file)]) == 0
    assert "trained/mixed" in capsys.readouterr().out
    card = trained_card("mixed")
    covid_qa = load_dataset("COVID-QA", path=covid, train_articles=0.5)
    squad = load_dataset("squad", path=xquad)
    rows = [
        {k: v for k, v in row.items() if k != "dataset_fingerprint"} for row in card["trained_on"]
    ]
    assert rows == [
        {"dataset": "COVID-QA", "split": "train", "queries": 846, "documents": 55},
        {"dataset": "squad", "split": "test", "queries": 1190, "documents": 48},
    ]
    assert card["dataset"] == "COVID-QA + squad" and card["split"] == "train + test"
    pairs = sum(
        len(j) for d in (covid_qa.split("train"), squad.split("test")) for j in d.qrels.values()
    )
    assert card["examples"] == pairs
    model = Path(
        json.loads((Path(os.environ["DAPR_HOME"]) / "trained" / "mixed.json").read_text())["path"]
    )
    listed = json.loads((model / DOCUMENTS_FILE).read_text())
    assert [len(x["documents"]) for x in listed] == [55, 48]
    assert listed[0]["corpus"] == covid_qa.corpus.fingerprint

    # a split that shares documents with the training data gets one warning line, others none
    spec = RetrieverSpec("dense", args={"model": "trained/mixed"})
    experiment = Experiment("x", "COVID-QA", split="train", retrievers={"trained": spec})
    (line,) = overlap_warnings(experiment, covid_qa, covid_qa.split("train"))
    assert "model 'trained/mixed' was trained on 55 of the 55 documents" in line
    assert "(COVID-QA/train)" in line and "\n" not in line
    assert overlap_warnings(experiment, covid_qa, covid_qa.split("test")) == []
    whole = load_dataset("COVID-QA", path=covid)  # every article in test
    (line,) = overlap_warnings(experiment, whole, whole.split("test"))
    assert "55 of the 98 documents" in line
    squad_test = replace(experiment, dataset="squad", split="test")
    assert "48 of the 48" in overlap_warnings(squad_test, squad, squad.split("test"))[0]
    assert overlap_warnings(load(file), covid_qa, covid_qa.split("test")) == []


def test_single_split_training_keeps_its_cache_key_parts(tiny_encoder, tmp_path, monkeypatch):
    """Without sources: the key is made of the same parts as before mixed sources existed."""
    from dapr.experiment import training

    seen = []
    real = training.content_key
    monkeypatch.setattr(training, "content_key", lambda *parts: seen.append(parts) or real(*parts))
    file = tmp_path / "training.yaml"
    file.write_text(EXPERIMENT.format(model=tiny_encoder, steps=2))
    assert main(["train", str(file)]) == 0
    (parts,) = [p for p in seen if p[0] == "dual"]
    assert isinstance(parts[4], str) and parts[5] == "train" and isinstance(parts[6], str)
    assert parts[7] is not None and parts[10] is None  # the title chain; nothing mined
