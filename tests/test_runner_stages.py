"""The runner's cache keys follow a component's identity(); rerankers re-score a first stage."""

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from dapr import registry
from dapr.data import Run
from dapr.errors import ConfigError, DaprError
from dapr.experiment.config import load
from dapr.experiment.runner import Runner
from dapr.store.cache import Cache


class Counting:
    """Ranks items by how often the query's first letter occurs in them; ``speed`` is a pure
    speed setting, so it is not part of identity(); ``poisoned`` scores every item NaN (a
    broken plugin: dapr refuses a NaN argument when it reads the file, not a NaN score)."""

    version = "1"
    indexed = 0

    def __init__(self, weight: float = 1.0, speed: int = 1, poisoned: bool = False):
        self.weight = float("nan") if poisoned else weight
        self.speed = speed

    def identity(self) -> dict:
        return {"weight": self.weight}

    def index(self, items, store: Path) -> None:
        Counting.indexed += 1
        self._items = list(items)

    def load(self, store: Path) -> None:
        pass

    def search(self, queries: Mapping[str, str], k: int) -> Run:
        ids = np.array([i for i, _ in self._items], dtype=object)
        rows = [
            np.array([t.lower().count(q[0].lower()) * self.weight for _, t in self._items])
            for q in queries.values()
        ]
        codes = [np.argsort(-r, kind="stable")[:k] for r in rows]
        return Run.from_lists(list(queries), codes, [r[c] for r, c in zip(rows, codes)], ids)


class ByLength:
    """A reranker: the shorter the text, the better; it records the texts it was given."""

    version = "1"
    seen: list[set[str]] = []

    def __init__(self, top_k: int = 3):
        self.top_k = top_k

    def rerank(self, queries, run: Run, texts: Mapping[str, str]) -> Run:
        ByLength.seen.append(set(texts))
        ranked = {}
        for qid, items in run.to_dict().items():
            head = list(items)[: self.top_k]
            ranked[qid] = {item: -float(len(texts[item])) for item in head}
        return Run.from_dict(ranked)


@pytest.fixture
def components():
    registry.retrievers.add("counting", Counting)
    registry.retrievers.add("by-length", ByLength)
    Counting.indexed = 0
    ByLength.seen.clear()
    yield
    registry.retrievers._extra.clear()


def _experiment(tmp_path: Path, dataset: Path, body: str, overrides=()):
    path = tmp_path / "exp.yaml"
    path.write_text(f"dataset: {dataset}\nmetrics: [nDCG@10]\n" + body)
    return load(path, list(overrides))


FIRST = "retrievers:\n  count: {name: counting}\n"


def test_speed_settings_reuse_the_index_and_identity_changes_rebuild_it(
    components, wiki_slice, tmp_path
):
    dataset, _ = wiki_slice
    cache = Cache(tmp_path / "cache")
    Runner(_experiment(tmp_path, dataset, FIRST), cache).run()
    faster = _experiment(tmp_path, dataset, FIRST, ["retrievers.count.args.speed=8"])
    steps = Runner(faster, cache).run().steps
    assert [(s.kind, s.status) for s in steps] == [("search", "cached")]
    heavier = _experiment(tmp_path, dataset, FIRST, ["retrievers.count.args.weight=2"])
    steps = Runner(heavier, cache).run().steps
    assert [(s.kind, s.status) for s in steps] == [("index", "computed"), ("search", "computed")]
    assert Counting.indexed == 2


RERANK = FIRST + "  short: {name: by-length, first_stage: count, args: {top_k: 2}}\n"


def test_a_reranker_rescores_the_head_of_its_first_stage(components, wiki_slice, tmp_path):
    dataset, split = wiki_slice
    cache = Cache(tmp_path / "cache")
    outcome = Runner(_experiment(tmp_path, dataset, RERANK), cache).run()
    first, reranked = outcome.runs["count"].to_dict(), outcome.runs["short"].to_dict()
    head = {item for items in first.values() for item in list(items)[:2]}
    assert ByLength.seen == [head]  # only the texts of each query's top 2
    for qid, items in first.items():
        assert set(reranked[qid]) == set(list(items)[:2])
        scores = list(reranked[qid].values())
        assert scores == sorted(scores, reverse=True)
    assert outcome.levels["short"] == "passage"
    assert set(outcome.evaluations) == {"count", "short"}
    steps = Runner(_experiment(tmp_path, dataset, RERANK), cache).run().steps
    assert ("rerank", "short", "cached") in [(s.kind, s.system, s.status) for s in steps]
    assert len(ByLength.seen) == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            FIRST + "  short: {name: by-length}\n",
            "retrievers.short: 'by-length' re-ranks another system's run; add first_stage: "
            "<system> naming one of: count",
        ),
        (
            FIRST + "  again: {name: counting, first_stage: count}\n",
            "retrievers.again.first_stage: 'counting' is a first-stage retriever, not a reranker",
        ),
        (
            FIRST + "  short: {name: by-length, first_stage: cuont}\n",
            "retrievers.short.first_stage: 'cuont' is not a system defined before it; "
            "choose from: count",
        ),
        (
            FIRST + "  short: {name: by-length, first_stage: count, level: document}\n",
            "retrievers.short.level: a reranker works at the level of its first stage 'count'",
        ),
        (
            "retrievers:\n  d: {name: dense, args: {preset: jinav2}}\n",
            "retrievers.d.args.preset: preset 'jinav2' of retriever 'dense' is for "
            "document-level retrieval, not passage",
        ),
    ],
)
def test_stage_and_preset_mistakes_are_one_line(components, wiki_slice, tmp_path, body, message):
    dataset, _ = wiki_slice
    with pytest.raises(ConfigError) as error:
        _experiment(tmp_path, dataset, body)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_bm25_then_a_cross_encoder_from_yaml(wiki_slice, tmp_path):
    """The real rerank component behind BM25, wired by the runner: the reranked run holds
    BM25's top 5 per query, scored by the cross-encoder on (query, passage text)."""
    import torch
    from sentence_transformers import CrossEncoder
    from tiny_models import tiny_bert

    from dapr.datasets import read_dataset

    dataset, split = wiki_slice
    texts = {p.id: p.text for d in read_dataset(dataset).corpus for p in d.passages}
    model = tiny_bert(tmp_path / "ce", [*texts.values(), *split.queries.values()], "classifier")
    body = (
        "retrievers:\n  bm25: {name: bm25}\n"
        f"  ce: {{name: rerank, first_stage: bm25, args: {{model: {model}, top_k: 5}}}}\n"
    )
    outcome = Runner(_experiment(tmp_path, dataset, body), Cache(tmp_path / "cache")).run()
    first, reranked = outcome.runs["bm25"].to_dict(), outcome.runs["ce"].to_dict()
    encoder = CrossEncoder(str(model))
    for qid in list(split.queries)[:5]:
        head = list(first[qid])[:5]
        assert set(reranked[qid]) == set(head)
        expected = encoder.predict(
            [(split.queries[qid], texts[p]) for p in head], activation_fn=torch.nn.Identity()
        )
        for passage, score in zip(head, expected):
            assert reranked[qid][passage] == pytest.approx(float(score), abs=1e-4)


@pytest.mark.parametrize(
    ("retriever", "message"),
    [
        (
            "{name: dense, args: {preset: dragon_plus}}",
            "dapr: error: cannot load model 'facebook/dragon-plus-query-encoder': no local copy",
        ),
        (
            "{name: dense, level: passage, args: {preset: jinav2}}",
            "preset 'jinav2' of retriever 'dense' is for document-level retrieval, not passage; "
            "set level: document or pick a passage-level preset: dragon_plus",
        ),
        ("{name: sparce}", "unknown retriever 'sparce'; choose from: bm25, dense,"),
    ],
)
def test_cli_stops_with_one_line_and_status_2(wiki_slice, tmp_path, capsys, retriever, message):
    from dapr.cli import main

    dataset, _ = wiki_slice
    path = tmp_path / "exp.yaml"
    path.write_text(f"dataset: {dataset}\nretrievers:\n  system: {retriever}\n")
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_a_run_with_nan_scores_is_refused_and_not_stored(components, wiki_slice, tmp_path):
    dataset, _ = wiki_slice
    cache = Cache(tmp_path / "cache")
    broken = _experiment(tmp_path, dataset, FIRST, ["retrievers.count.args.poisoned=true"])
    refused = r"^search count: item '.+' of query '.+' got the score nan; nothing was stored"
    with pytest.raises(DaprError, match=refused):
        Runner(broken, cache).run()
    assert not (tmp_path / "cache" / "runs").exists() or not [
        p for p in (tmp_path / "cache" / "runs").iterdir() if not p.name.startswith(".")
    ]
