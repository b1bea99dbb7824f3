"""Corpus work spread over Ray actors: index shards written by Ray Data actors (in order,
resumable, the same embeddings as the job's own), documents contextualized by chain actors
(the same texts, nothing computed in the job)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from tiny_models import tiny_bert

from dapr.experiment.config import load
from dapr.experiment.schedule import actors, plan, run_job, run_jobs
from dapr.io.files import write_bytes_atomic
from dapr.ray_actors import Actors, on_actors
from dapr.retrievers.support.encoding import chunks, shards
from dapr.store.cache import Cache

ITEMS = [(f"p{i}", f"text {i}") for i in range(11)]


def _pid_writer(fail_on: str | None = None):
    """A writer that stores its process id beside the texts, and fails on the shard named
    ``fail_on`` (defined here so that Ray pickles it by value)."""

    class PidWriter:
        def write_shard(self, chunk, path):
            if path.name == fail_on:
                raise OSError(f"cannot write {path.name}")
            text = f"{os.getpid()}\n" + "|".join(t for _, t in chunk)
            write_bytes_atomic(path, [text.encode()])

    return PidWriter()


def _never(chunk, path):
    raise AssertionError(f"encoded {path} in the driver")


def test_without_ray_encoding_the_writer_is_not_used(tmp_path):
    encoded = []
    list(shards(ITEMS, tmp_path, 4, ".txt", lambda c, p: encoded.append(p.name), _pid_writer()))
    assert encoded == ["shard-00000.txt", "shard-00001.txt", "shard-00002.txt"]
    assert actors({"actors": 2}) is None  # Ray is not running yet: the first test of the module


def test_documents_are_contextualized_by_chain_actors(local_ray, wiki_slice, tmp_path, monkeypatch):
    from dapr.datasets import read_dataset
    from dapr.experiment import contextualize
    from dapr.experiment.chain import Chain, ContextStep
    from dapr.experiment.contextualize import Cost, contextualize_corpus

    corpus = read_dataset(wiki_slice[0]).corpus
    chain = Chain([ContextStep("keyphrases", {"n": 3}), ContextStep("title")])
    alone = list(contextualize_corpus(corpus, chain, tmp_path / "alone", Cost(chain.label)))
    monkeypatch.setattr(contextualize, "CHUNK", 4)  # 12 documents: 3 chunks for 2 actors
    monkeypatch.setattr(contextualize, "timed", _never)  # this process computes nothing
    cost = Cost(chain.label)
    # three actors of one CPU on a Ray of two: the third never starts, the others do the work
    with on_actors(Actors(count=3, cpus=1)):
        spread = list(contextualize_corpus(corpus, chain, tmp_path / "actors", cost))
    assert [(d.id, texts) for d, texts in spread] == [(d.id, texts) for d, texts in alone]
    assert cost.workers == 3 and cost.computed == cost.documents == 12


def _stored(store: Path) -> dict[str, tuple[int, str]]:
    """Shard name -> (writer pid, texts)."""
    out = {}
    for path in sorted(store.glob("shard-*.txt")):
        pid, texts = path.read_text().split("\n")
        out[path.name] = (int(pid), texts)
    return out


def test_shards_are_encoded_by_ray_actors_in_order_and_resume(local_ray, tmp_path):
    setting = Actors(count=2, cpus=1, window=4)
    with on_actors(setting):
        got = list(shards(ITEMS, tmp_path, 2, ".txt", _never, writer=_pid_writer()))
    assert got == list(chunks(ITEMS, 2))
    stored = _stored(tmp_path)
    assert [texts for _, texts in stored.values()] == [
        "|".join(t for _, t in chunk) for chunk in chunks(ITEMS, 2)
    ]
    # six shards in two windows, written by two actor processes, none by this one
    assert len(stored) == 6 and len(list(tmp_path.glob("*.done"))) == 6
    pids = {pid for pid, _ in stored.values()}
    assert len(pids) >= 2 and os.getpid() not in pids
    # a shard whose marker is gone is the only one written again
    (tmp_path / "shard-00004.txt.done").unlink()
    with on_actors(setting):
        assert list(shards(ITEMS, tmp_path, 2, ".txt", _never, writer=_pid_writer())) == got
    again = _stored(tmp_path)
    assert {n for n in stored if again[n] != stored[n]} <= {"shard-00004.txt"}
    assert [texts for _, texts in again.values()] == [texts for _, texts in stored.values()]


def _wait_for_free_cpus(ray, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while ray.available_resources().get("CPU", 0) < 2:
        assert time.monotonic() < deadline, f"CPUs still held: {ray.available_resources()}"
        time.sleep(0.2)


def test_a_failed_pass_keeps_the_shards_actors_stored_before(local_ray, tmp_path):
    items = [(f"p{i}", f"text {i}") for i in range(18)]  # nine shards
    setting = Actors(count=2, cpus=0.5)
    with on_actors(setting), pytest.raises(Exception, match="cannot write shard-00008"):
        list(shards(items, tmp_path, 2, ".txt", _never, writer=_pid_writer("shard-00008.txt")))
    kept = _stored(tmp_path)
    # the failed pass's actors are gone: later passes and jobs find the CPUs free
    _wait_for_free_cpus(local_ray)
    # each shard an actor wrote is marked at once, though its pass failed
    assert 1 <= len(kept) <= 8 and len(list(tmp_path.glob("*.done"))) == len(kept)
    with on_actors(setting):
        list(shards(items, tmp_path, 2, ".txt", _never, writer=_pid_writer()))
    again = _stored(tmp_path)
    assert len(again) == 9 and all(again[name] == kept[name] for name in kept)


EXPERIMENT = """
name: actors
dataset: {dataset}
resources: {{cpus_per_job: 1, actors: 2, cpus_per_actor: 1}}
retrievers:
  dense: {{name: dense, args: {{model: {model}, pooling: mean, shard_size: 3}}}}
"""


@pytest.fixture(scope="module")
def dense_job(wiki_slice, tmp_path_factory):
    from dapr.datasets import read_dataset

    dataset, _ = wiki_slice
    root = tmp_path_factory.mktemp("ray-encoding")
    texts = [p.text for p in read_dataset(dataset).corpus.passages()]
    path = root / "actors.yaml"
    model = tiny_bert(root / "tiny-bert", texts)
    path.write_text(EXPERIMENT.format(dataset=dataset, model=model))
    [job] = plan([load(path)])
    return job


def _index(cache: Path) -> tuple[list[str], np.ndarray]:
    [store] = [p for p in (cache / "indexes").iterdir() if not p.name.startswith(".")]
    ids = json.loads((store / "ids.json").read_text())
    vectors = np.concatenate([np.load(p) for p in sorted(store.glob("shard-*.npy"))])
    return ids, vectors


@pytest.fixture(scope="module")
def encoded_alone(dense_job, tmp_path_factory) -> tuple[list[str], np.ndarray]:
    """The index as the job encodes it by itself (no actors)."""
    cache = tmp_path_factory.mktemp("alone")
    alone = replace(dense_job, experiment=replace(dense_job.experiment, resources={}))
    assert run_job(alone, str(cache)).computed == ("index dense", "search dense")
    ids, vectors = _index(cache)
    assert len(ids) == len(vectors) > 24  # ten shards
    return ids, vectors


def test_a_dense_index_encoded_by_ray_actors_equals_one_encoded_by_the_job(
    encoded_alone, local_ray, dense_job, tmp_path, monkeypatch
):
    from dapr.retrievers.dense import Dense

    assert actors(dense_job.experiment.resources) == Actors(count=2, gpus=0, cpus=1)
    # in this (Ray-initialised) process the job hands every shard to the actors
    monkeypatch.setattr(Dense, "write_shard", _never)
    done = run_job(dense_job, str(tmp_path))
    assert done.computed == ("index dense", "search dense")
    ids, vectors = _index(tmp_path)
    assert ids == encoded_alone[0]
    np.testing.assert_array_equal(vectors, encoded_alone[1])


def test_a_job_on_ray_encodes_with_actors_of_its_own(encoded_alone, local_ray, dense_job, tmp_path):
    # the job holds one of the two CPUs: one actor of the two it asks for fits beside it
    [done] = run_jobs([dense_job], Cache(tmp_path), use_ray=True)
    assert done.computed == ("index dense", "search dense") and done.pid != os.getpid()
    ids, vectors = _index(tmp_path)
    assert ids == encoded_alone[0]
    np.testing.assert_array_equal(vectors, encoded_alone[1])


def _gated_dense(gate: Path) -> type:
    """A dense retriever whose actor holding shard 4 starts writing it, says so in ``gate``
    (``holding-<pid>``) and waits until ``gate/open`` exists (defined here so that Ray pickles
    it by value)."""
    from dapr.retrievers.dense import Dense

    class GatedDense(Dense):
        def write_shard(self, chunk, path, pool=None):
            if path.name == "shard-00004.npy" and not (gate / "open").exists():
                half = path.with_name(f".{path.name}.{os.getpid()}.0123abcd.tmp")
                half.write_bytes(b"\x93NUMPY half a shard")
                (gate / f"holding-{os.getpid()}").touch()
                while not (gate / "open").exists():
                    time.sleep(0.05)
            super().write_shard(chunk, path, pool)

    return GatedDense


def test_an_encoding_actor_killed_mid_shard_is_restarted_and_the_shard_written_again(
    encoded_alone, local_ray, dense_job, tmp_path, capfd
):
    """Ray Data restarts the actor (a bounded number of times, set by dapr) and retries its
    shard; the log names the shard and the lost process; the index equals the job's own, with
    nothing the dead actor half-wrote in it, and `cache verify` is clean."""
    import socket
    import threading

    from dapr import registry
    from dapr.store.housekeeping import verify

    gate = tmp_path / "gate"
    gate.mkdir()
    registry.retrievers.add("gated-dense", _gated_dense(gate))
    try:
        system = dense_job.experiment.retrievers["dense"]
        gated = replace(system, name="gated-dense")
        job = replace(
            dense_job, experiment=replace(dense_job.experiment, retrievers={"dense": gated})
        )
        killed: list[int] = []

        def kill_the_holder() -> None:
            deadline = time.monotonic() + 300  # a loaded machine starts actors slowly
            while not (holding := list(gate.glob("holding-*"))):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            else:
                killed.append(int(holding[0].name.split("-")[1]))
                os.kill(killed[0], 9)
            (gate / "open").touch()

        killer = threading.Thread(target=kill_the_holder, daemon=True)
        killer.start()
        done = run_job(job, str(tmp_path / "cache"))
        killer.join()
    finally:
        registry.retrievers._extra.pop("gated-dense", None)
    assert killed and done.computed == ("index dense", "search dense")
    err = capfd.readouterr().err
    assert (
        f"dapr: an encoding actor (process {killed[0]} on {socket.gethostname()}) was lost "
        "writing shard-00004.npy; Ray restarted it (up to 3 times) and the shard was written "
        "again"
    ) in err
    ids, vectors = _index(tmp_path / "cache")
    assert ids == encoded_alone[0]
    np.testing.assert_array_equal(vectors, encoded_alone[1])
    [store] = [p for p in (tmp_path / "cache" / "indexes").iterdir() if not p.name.startswith(".")]
    assert [p.name for p in store.iterdir() if p.name.startswith(".")] == []
    assert verify(Cache(tmp_path / "cache")) == (2, [])
