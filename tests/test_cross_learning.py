"""A cross-encoder trained by dapr learns what its labels say, and what it learned is what the
saved model and the re-ranker use: a guard on the whole path (rows, labels, loss, save, load,
re-ranking order), not on any one function.

The task is one a 2-layer BERT from random weights learns in a few hundred steps: relevant
passages are about one set of topics, the others about another. (Matching the query's word in the
passage, the interaction a real cross-encoder learns, takes such a model thousands of steps.)"""

from __future__ import annotations

import random

import numpy as np
import pytest

from dapr.data import Run
from dapr.training.cross import train_cross_encoder
from dapr.training.dual import Settings
from dapr.training.examples import Example

FILLER = [
    "the",
    "of",
    "and",
    "in",
    "was",
    "for",
    "on",
    "with",
    "as",
    "by",
    "at",
    "from",
    "his",
    "that",
    "were",
    "which",
]


def sentence(word: str, rng: random.Random) -> str:
    """Six filler words with ``word`` among them."""
    words = rng.sample(FILLER, 6)
    words.insert(rng.randrange(7), word)
    return " ".join(words)


@pytest.fixture(scope="module")
def task():
    """Query: one word; relevant: a sentence holding a word of one set; not relevant: sentences
    holding words of another. Held-out sentences test what was learned."""
    rng = random.Random(0)
    relevant = ["river", "city", "music", "war", "king"]
    other = ["church", "school", "science", "game", "film"]

    def rows(count: int) -> list[Example]:
        found = []
        for _ in range(count):
            negatives = tuple(sentence(rng.choice(other), rng) for _ in range(2))
            found.append(
                Example(rng.choice(FILLER), sentence(rng.choice(relevant), rng), negatives)
            )
        return found

    return rows(240), rows(60)


@pytest.fixture(scope="module")
def trained(task, tiny_encoder, tmp_path_factory):
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(tiny_encoder), num_labels=1, device="cpu")
    out = tmp_path_factory.mktemp("learned-ce")
    settings = Settings(epochs=3, batch_size=16, learning_rate=3e-3, save_steps=50)
    record = train_cross_encoder(model, task[0], out, settings=settings)
    return model, out, record


def test_a_trained_cross_encoder_ranks_held_out_positives_first(task, trained):
    model, _, record = trained
    held_out = task[1]
    positive = model.predict([(r.query, r.positive) for r in held_out])
    negative = model.predict([(r.query, n) for r in held_out for n in r.negatives])
    wins = positive[:, None] > negative.reshape(len(held_out), -1)
    assert wins.mean() >= 0.9, f"pairwise accuracy {wins.mean():.2f}"
    # the loss fell well under that of predicting the base rate (one positive in three)
    base_rate = -(np.log(1 / 3) / 3 + 2 * np.log(2 / 3) / 3)
    assert record["log"][-1]["loss"] < 0.5 * base_rate


def test_the_saved_model_and_the_reranker_use_what_was_learned(task, trained):
    from sentence_transformers import CrossEncoder

    from dapr.retrievers.rerank import Rerank

    model, out, _ = trained
    held_out = task[1]
    pairs = [(r.query, r.positive) for r in held_out]
    again = CrossEncoder(str(out / "model"), device="cpu")
    assert np.allclose(again.predict(pairs), model.predict(pairs), atol=1e-6)
    # a first stage that ranks the positive last; the re-ranker must lift it to the top
    queries = {f"q{i}": r.query for i, r in enumerate(held_out)}
    texts, first = {}, {}
    for i, r in enumerate(held_out):
        items = [f"q{i}-neg{j}" for j in range(len(r.negatives))] + [f"q{i}-pos"]
        texts |= dict(zip(items, [*r.negatives, r.positive]))
        first[f"q{i}"] = {item: float(len(items) - rank) for rank, item in enumerate(items)}
    reranked = Rerank(model=str(out / "model"), top_k=3, device="cpu").rerank(
        queries, Run.from_dict(first), texts
    )
    best = [max(scores, key=scores.get) for scores in reranked.to_dict().values()]
    assert np.mean([item.endswith("-pos") for item in best]) >= 0.9
