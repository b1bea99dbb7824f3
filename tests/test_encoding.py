"""Shards that an interrupted index resumes from, and partial entries in the cache."""

from pathlib import Path

import pytest

from dapr.retrievers.support.encoding import shards
from dapr.store.cache import Cache
from dapr.store.housekeeping import entries, prune

ITEMS = [(f"p{i}", f"text {i}") for i in range(7)]


def _index(items, store: Path, encoded: list[str]) -> list[list[tuple[str, str]]]:
    def encode(chunk, path: Path) -> None:
        encoded.append(path.name)
        path.write_text("|".join(text for _, text in chunk))

    return list(shards(items, store, 3, ".txt", encode))


def test_a_second_pass_encodes_only_what_is_not_stored_yet(tmp_path):
    encoded: list[str] = []
    chunks = _index(ITEMS, tmp_path, encoded)
    assert [len(c) for c in chunks] == [3, 3, 1] and sum(chunks, []) == ITEMS
    assert encoded == ["shard-00000.txt", "shard-00001.txt", "shard-00002.txt"]
    encoded.clear()
    assert _index(ITEMS, tmp_path, encoded) == chunks and encoded == []
    # a chunk whose texts changed, and one whose shard is gone, are encoded again
    changed = [*ITEMS[:4], ("p4", "other"), *ITEMS[5:]]
    (tmp_path / "shard-00002.txt").unlink()
    _index(changed, tmp_path, encoded)
    assert encoded == ["shard-00001.txt", "shard-00002.txt"]
    assert (tmp_path / "shard-00001.txt").read_text() == "text 3|other|text 5"


def test_an_interrupted_pass_keeps_the_shards_it_stored(tmp_path):
    encoded: list[str] = []

    def stop_at_third(chunk, path: Path) -> None:
        if path.name == "shard-00002.txt":
            raise KeyboardInterrupt
        encoded.append(path.name)
        path.write_text("x")

    with pytest.raises(KeyboardInterrupt):
        list(shards(ITEMS, tmp_path, 3, ".txt", stop_at_third))
    encoded.clear()
    _index(ITEMS, tmp_path, encoded)
    assert encoded == ["shard-00002.txt"]


def test_resumable_writing_keeps_a_partial_entry_until_it_completes(tmp_path):
    cache = Cache(tmp_path)
    key = "0123456789abcdef0123"  # as dapr names entries
    with pytest.raises(KeyboardInterrupt), cache.writing("indexes", key, resume=True) as store:
        (store / "shard-00000.npy").write_text("stored")
        raise KeyboardInterrupt
    assert not cache.has("indexes", key)
    [partial] = entries(cache)
    assert (partial.kind, partial.key, partial.state) == ("indexes", key, "partial")
    assert prune(cache, older_than=None, kinds=["runs"]) == []  # another kind: kept
    with cache.writing("indexes", key, resume=True) as store:
        assert (store / "shard-00000.npy").read_text() == "stored"
    assert cache.has("indexes", key) and not cache.partial("indexes", key).exists()
    assert [e.state for e in entries(cache)] == ["complete"]
