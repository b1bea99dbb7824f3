"""Every file in experiments/ is valid and runs on wiki-sample by default."""

from pathlib import Path

import pytest

from dapr.experiment.config import load_grid

FILES = sorted((Path(__file__).resolve().parents[1] / "experiments").glob("*.yaml"))
PAPER = {
    "passage_only", "rank_fusion", "hierarchical", "prepending_titles", "keyphrases", "coref",
    "doc_retrieval", "alpha_sweep", "nq_hard", "paper_table3",
}  # fmt: skip


def test_every_experiment_of_the_paper_has_a_file():
    assert {f.stem for f in FILES} >= PAPER


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_experiment_file_is_valid_on_wiki_sample(path):
    experiments = load_grid(path)
    assert [e.dataset for e in experiments] == ["wiki-sample"]
    assert experiments[0].name.split("/")[0] == path.stem


def test_the_papers_settings_are_in_the_files():
    by_name = {f.stem: load_grid(f)[0] for f in FILES}
    sweep = by_name["alpha_sweep"].sweep
    assert sweep.values == tuple(round(0.1 * n, 1) for n in range(11))
    assert (sweep.tune_on, sweep.metric) == ("dev", "nDCG@10")
    assert by_name["hierarchical"].fusion["hierarchical"].args == {"alpha": 0.2, "documents": 100}
    assert by_name["doc_retrieval"].maxp == ("bm25", "dense", "dense+title")
    assert by_name["nq_hard"].categories == "title_mention"
    table3 = by_name["paper_table3"]
    approaches = {s.contextualizer[0].name for s in table3.retrievers.values() if s.contextualizer}
    assert approaches == {"title", "keyphrases", "coref"}
    assert {f.name for f in table3.fusion.values()} == {"convex", "hierarchical"}
