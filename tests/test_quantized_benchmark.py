"""benchmarks/quantized.py's quality on the synthetic corpus at a toy size: its static word
encoder ranks most queries' own passage in the top 10, and the table it writes is the runner's."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_hooks"))

import results_tables as rt  # noqa: E402  (docs/_hooks/results_tables.py)


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import quantized
        import scale
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return quantized, scale


@pytest.fixture(scope="module")
def encoder(bench, tmp_path_factory) -> Path:
    """The word encoder of seed 0, 128 dimensions (built once: 200,000 words)."""
    folder = tmp_path_factory.mktemp("encoder") / "word-encoder-seed0-128"
    assert bench[0].word_encoder(folder, 0, 128) == folder
    assert not folder.with_name(folder.name + ".partial").exists()
    return folder


def test_the_word_encoder_finds_a_query_s_passage_among_its_document_s(bench, encoder: Path):
    from sentence_transformers import SentenceTransformer

    _, scale = bench
    model = SentenceTransformer(str(encoder))
    synthetic = scale.Synthetic(600, 6, 0)
    queries, qrels = synthetic.queries(12)
    passages = [p for d in synthetic() for p in d.passages]
    vectors = model.encode([p.text for p in passages])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    ids = [p.id for p in passages]
    ranks = []
    for q, text in queries.items():
        scores = vectors @ model.encode(text)
        gold = ids.index(next(iter(qrels[q])))
        ranks.append(int((scores > scores[gold]).sum()))
    # 600 passages, 100 in the gold's document (sharing its title's topic words): chance puts
    # the gold at rank 300; a projection of the shared words' IDF puts most in the top 10
    assert np.median(ranks) < 10, ranks
    word = passages[0].text.split()[0].strip(",.")
    same = model.encode([f"{word}, {word}.", f"{word} {word.upper()}"])
    assert np.allclose(same[0], same[1], atol=1e-6)  # punctuation adds nothing; case is folded


def test_the_synthetic_quality_table_is_the_runner_s(
    bench, encoder: Path, tmp_path: Path, monkeypatch
):
    quantized, _ = bench
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / encoder.name).symlink_to(encoder)  # reused, as from an earlier run
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "user-home"))
    out = tmp_path / "quantized-synthetic.json"
    argv = ["--skip-speed", "--datasets", "--synthetic", "300", "--synthetic-documents", "12"]
    argv += ["--synthetic-queries", "6", "--synthetic-dim", "128", "--quality-lists", "4"]
    argv += ["--quality-probes", "2", "--depth", "20"]
    first = [*argv, "--workdir", str(tmp_path / "work"), "--multipliers", "1", "4", "10"]
    assert quantized.main([*first, "--json", str(out)]) == 0
    assert os.environ["DAPR_HOME"] == str(tmp_path / "user-home")  # restored
    assert not (tmp_path / "user-home").exists()  # the shards went to the workdir's cache
    assert any((tmp_path / "work" / "home").iterdir())
    found = rt.load_json(out)
    assert set(found["tables"]) == {"quantized-synthetic"}
    rows = found["tables"]["quantized-synthetic"]["rows"]
    assert [(r[1], r[2]) for r in rows] == [
        ("exact", "-"),
        *((kind, m) for kind in ("int8", "binary") for m in ("1", "4", "10")),
        ("binary IVF, 2 of 4 lists", "4"),
    ]
    assert {r[0] for r in rows} == {"synthetic (300)"}
    exact = float(rows[0][3])
    # six queries over 300 passages: chance scores about 0.01
    assert exact > 0.2 and rows[0][4:] == ["+0.0000", "100.0%"]
    for row in rows[1:]:
        assert float(row[4]) == pytest.approx(float(row[3]) - exact, abs=2e-4)  # each rounded
    assert rows[3][5] == "100.0%"  # int8 rescoring 200 candidates (depth 20 x 10) of 300
    # the same encoder named by --synthetic-model (as MiniLM would be on a GPU) gives the same
    # rows, and the workdir gains no word encoder of its own
    again = tmp_path / "named.json"
    named = [*argv, "--workdir", str(tmp_path / "named"), "--multipliers", "1"]
    assert quantized.main([*named, "--synthetic-model", str(encoder), "--json", str(again)]) == 0
    assert not list((tmp_path / "named").glob("word-encoder*"))
    rows_again = rt.load_json(again)["tables"]["quantized-synthetic"]["rows"]
    assert rows_again == [rows[i] for i in (0, 1, 4, 7)]  # exact, int8 x1, binary x1, the IVF
