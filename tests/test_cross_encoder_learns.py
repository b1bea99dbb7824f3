"""A small cross-encoder trained on real text learns to rank: XQuAD's questions against their
answers' sentences, held-out articles' questions ranked above chance (issue 30)."""

from __future__ import annotations

import json
import random
import re

SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
CANDIDATES = 10
"""Each held-out question's answer sentence and nine other sentences of its article."""


def questions(articles: list[dict]) -> list[tuple[str, str, list[str]]]:
    """Per question: the question, the sentence holding its answer, and its article's sentences
    that do not hold the answer (more than four words each)."""
    found = []
    for article in articles:
        sentences = [s for p in article["paragraphs"] for s in SENTENCE_END.split(p["context"])]
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                answer = qa["answers"][0]["text"]
                holding = [s for s in SENTENCE_END.split(paragraph["context"]) if answer in s]
                others = [s for s in sentences if answer not in s and len(s.split()) > 4]
                if holding and len(others) >= CANDIDATES - 1:
                    found.append((qa["question"], holding[0], others))
    return found


def test_a_small_cross_encoder_trained_on_real_questions_ranks_held_out_ones_above_chance(
    xquad_en, tmp_path
):
    import torch
    from sentence_transformers import CrossEncoder

    from dapr.checkpoints import resolve
    from dapr.training.cross import train_cross_encoder
    from dapr.training.dual import Settings
    from dapr.training.examples import Example

    torch.manual_seed(0)
    rng = random.Random(0)
    articles = json.loads(xquad_en.read_text())["data"]
    train, held_out = questions(articles[:36]), questions(articles[36:])  # split by article
    rows = [Example(q, answer, tuple(rng.sample(others, 1))) for q, answer, others in train]
    model = CrossEncoder(resolve("all-MiniLM-L6-v2"), num_labels=1, device="cpu")
    model.model.bert.encoder.layer = model.model.bert.encoder.layer[:2]  # small: 2 of 6 layers
    # the two layers and the head learn; the word embeddings (11.7M of the 15.6M weights) stay
    # as trained, which spares each step their dense gradient and optimizer update (a fifth of
    # the training's CPU time, the held-out MRR unchanged: 0.394 against 0.390)
    model.model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    # the multiple-negatives loss (the sweep's finding), 57 steps of 8 questions, 40 tokens
    settings = Settings(
        epochs=0.5, batch_size=8, learning_rate=4e-4, max_length=40, save_steps=10**4
    )
    record = train_cross_encoder(model, rows, tmp_path, "mnrl", settings)
    assert len(rows) == 911 and record["steps"] == 57  # half an epoch of 114 batches
    assert (record["negatives_per_example"], record["left_out"]) == (1, 0)
    reciprocal = []
    for question, answer, others in held_out[:150]:
        candidates = [answer, *rng.sample(others, CANDIDATES - 1)]
        scores = model.predict([(question, c) for c in candidates], batch_size=32)
        reciprocal.append(1 / (1 + sum(s > scores[0] for s in scores[1:])))
    mrr = sum(reciprocal) / len(reciprocal)
    chance = sum(1 / r for r in range(1, CANDIDATES + 1)) / CANDIDATES  # a random order: 0.293
    print(f"MRR {mrr:.4f} against a random order's {chance:.4f}")
    assert len(reciprocal) == 150 and mrr > chance + 0.05, (mrr, chance)
