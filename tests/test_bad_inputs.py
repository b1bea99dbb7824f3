"""The bad-input catalogue: each mistake, driven through the real CLI, stops dapr with exit status
2 and one line naming the file / key / row and the fix; no traceback, no partial result files.

Bad datasets are a small good dataset with one file corrupted; experiments use BM25 (fast).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from bad_input_kit import (
    BASE,
    CASES,
    Bad,
    Kit,
    append_jsonl,
    case,
    edit_jsonl,
    good_dataset,
    truncate,
)

from dapr.cli import main

__all__ = ["BASE", "CASES", "Bad", "Kit", "good_dataset"]


@case
def malformed_yaml(kit: Kit) -> Bad:
    path = kit.experiment(text="name: bad\nretrievers:\n  bm25: {name: bm25\ndepth: 10\n")
    return Bad(kit.run(path), ("bad.yaml:4", "not valid YAML"), "fix the YAML")


@case
def unknown_key(kit: Kit) -> Bad:
    return Bad(kit.run(kit.experiment(colour="red")), ("bad.yaml", "'colour'"), "valid keys:")


@case
def unknown_component(kit: Kit) -> Bad:
    path = kit.experiment(retrievers={"bm25": {"name": "bm52"}}, fusion=None)
    return Bad(kit.run(path), ("retrievers.bm25.name", "'bm52'"), "choose from: ")


@case
def wrong_type(kit: Kit) -> Bad:
    return Bad(kit.run(kit.experiment(depth="deep")), ("bad.yaml", "depth"), "must be an integer")


@case
def alpha_outside_unit_interval(kit: Kit) -> Bad:
    fusion = {"fused": {**BASE["fusion"]["fused"], "args": {"alpha": 1.5}}}
    path = kit.experiment(fusion=fusion)
    return Bad(kit.run(path), ("fusion.fused.args", "alpha"), "must be a number in [0, 1]")


@case
def missing_dataset_directory(kit: Kit) -> Bad:
    path = kit.experiment(dataset=kit.tmp / "nowhere")
    return Bad(kit.run(path), ("bad.yaml", "nowhere"), "give a dataset directory")


@case
def sweep_over_unknown_parameter(kit: Kit) -> Bad:
    sweep = {"parameter": "fusion.fused.args.beta", "values": [0.1, 0.2], "tune_on": "dev"}
    path = kit.experiment(sweep=sweep)
    return Bad(kit.run(path), ("sweep.parameter", "beta"), "valid keys:")


@case
def sweep_over_unknown_system(kit: Kit) -> Bad:
    sweep = {"parameter": "fusion.nosuch.args.alpha", "values": [0.1], "tune_on": "dev"}
    path = kit.experiment(sweep=sweep)
    return Bad(kit.run(path), ("sweep.parameter", "nosuch"), "write fusion.<system>.args")


@case
def actors_not_a_number(kit: Kit) -> Bad:
    path = kit.experiment(resources={"actors": "four"})
    return Bad(kit.run(path, "--ray"), ("bad.yaml", "resources.actors"), "must be an integer")


@case
def split_the_dataset_lacks(kit: Kit) -> Bad:
    path = kit.experiment(split="train")
    return Bad(kit.run(path), ("'train'",), "choose from: dev, test")


@case
def depth_zero(kit: Kit) -> Bad:
    return Bad(kit.run(kit.experiment(depth=0)), ("bad.yaml", "depth"), "positive integer")


@case
def rrf_k_negative(kit: Kit) -> Bad:
    fusion = {
        "fused": {"name": "rrf", "document": "bm25-doc", "passage": "bm25", "args": {"k": -1}}
    }
    path = kit.experiment(fusion=fusion)
    return Bad(kit.run(path), ("fusion.fused.args", "k must be"), "non-negative integer")


@case
def metric_without_cutoff(kit: Kit) -> Bad:
    path = kit.experiment(metrics=["nDCG"])
    return Bad(kit.run(path), ("bad.yaml", "metrics", "'nDCG'"), "e.g. nDCG@10")


@case
def experiment_file_missing(kit: Kit) -> Bad:
    return Bad(kit.run(kit.tmp / "nosuch.yaml"), ("nosuch.yaml",), "check the path")


@case
def set_without_equals(kit: Kit) -> Bad:
    return Bad(kit.run(kit.experiment(), "--set", "split"), ("--set 'split'",), "key=value")


@case
def model_not_available_offline(kit: Kit) -> Bad:
    kit.copy_results("out")  # earlier results stay as they were
    retrievers = {"dense": {"name": "dense", "args": {"model": "nobody/no-such-model"}}}
    path = kit.experiment(retrievers=retrievers, fusion=None)
    # --overwrite: another configuration may replace them, but a failed run leaves them be
    argv = kit.run(path, "--overwrite")
    return Bad(argv, ("'nobody/no-such-model'",), "download it on a connected machine")


@case
def check_model_not_available_offline(kit: Kit) -> Bad:
    """`dapr check` on a file naming a model that is not on this machine"""
    retrievers = {"dense": {"name": "dense", "args": {"model": "nobody/no-such-model"}}}
    path = kit.experiment(retrievers=retrievers, fusion=None)
    names = ("bad.yaml", "retrievers.dense", "'nobody/no-such-model'")
    return Bad(["check", str(path)], names, "download it on a connected machine")


@case
def output_is_a_file(kit: Kit) -> Bad:
    (kit.tmp / "out").write_text("not a directory\n")
    return Bad(kit.run(kit.experiment()), ("out",), "choose another --out")


@case
def output_below_a_file(kit: Kit) -> Bad:
    (kit.tmp / "plain").write_text("a file\n")
    argv = ["run", str(kit.experiment()), "--out", str(kit.tmp / "plain" / "out")]
    return Bad(argv, ("plain/out", "is a file"), "choose another --out")


@case
def output_not_writable(kit: Kit) -> Bad:
    locked = kit.tmp / "locked"
    locked.mkdir(mode=0o500)
    try:
        (locked / "probe").mkdir()
    except PermissionError:
        pass
    else:
        pytest.skip("this user (root) writes to read-only directories")
    argv = ["run", str(kit.experiment()), "--out", str(kit.tmp / "locked" / "out")]
    return Bad(argv, ("locked/out", "Permission denied"), "choose a writable --out")


@case
def output_holds_other_files(kit: Kit) -> Bad:
    (kit.tmp / "out").mkdir()
    (kit.tmp / "out" / "thesis.tex").write_text("precious\n")
    return Bad(kit.run(kit.experiment()), ("out", "not a results directory"), "empty it")


@case
def system_name_with_space(kit: Kit) -> Bad:
    path = kit.experiment(retrievers={"bm 25": {"name": "bm25"}}, fusion=None)
    return Bad(kit.run(path), ("bad.yaml", "'bm 25'"), "use one without spaces")


@case
def experiment_not_utf8(kit: Kit) -> Bad:
    path = kit.experiment()
    path.write_bytes(path.read_bytes() + "# r\u00e9sum\u00e9\n".encode("latin-1"))
    return Bad(kit.run(path), ("bad.yaml", "UTF-8"), "save the file as UTF-8")


@case
def experiment_is_a_directory(kit: Kit) -> Bad:
    (kit.tmp / "exp.yaml").mkdir()
    return Bad(kit.run(kit.tmp / "exp.yaml"), ("exp.yaml",), "give an experiment file")


# --------------------------------------------------------------------------- datasets


@case
def run_dataset_not_fetched(kit: Kit) -> Bad:
    """`dapr run` on a file naming a dataset not fetched here: the file, as `dapr check` says"""
    path = kit.experiment(dataset="COVID-QA", dataset_args={"max_words": 80}, fusion=None)
    names = ("bad.yaml: dataset: ", "'COVID-QA' is not fetched yet")
    return Bad(kit.run(path), names, "dapr data build COVID-QA --download")


@case
def run_dataset_directory_unreadable(kit: Kit) -> Bad:
    """`dapr run` on a dataset directory that holds no dataset: the file and the directory"""
    (kit.tmp / "empty").mkdir()
    path = kit.experiment(dataset=kit.tmp / "empty")
    return Bad(kit.run(path), ("bad.yaml: dataset: ", "empty: not a dataset"), "hub layout")


@case
def duplicate_passage_ids(kit: Kit) -> Bad:
    data = kit.dataset()
    edit_jsonl(data / "corpus.jsonl", 6, lambda row: {**row, "_id": "d1-1"})
    return Bad(kit.run(kit.experiment(data)), ("corpus.jsonl:6", "'d1-1'"), "unique id")


@case
def duplicate_passage_ids_parquet(kit: Kit) -> Bad:
    data = kit.dataset("parquet")
    table = pq.read_table(data / "corpus.parquet")
    ids = table.column("_id").to_pylist()
    ids[4] = "d2-0"
    pq.write_table(table.set_column(0, "_id", [ids]), data / "corpus.parquet")
    return Bad(kit.run(kit.experiment(data)), ("corpus.parquet: row 5", "'d2-0'"), "unique id")


@case
def duplicate_document_ids(kit: Kit) -> Bad:
    data = kit.dataset()
    edit_jsonl(data / "corpus.jsonl", 6, lambda row: {**row, "doc_id": "d1"})
    return Bad(kit.run(kit.experiment(data)), ("corpus.jsonl:6", "'d1'"), "contiguous")


def dump(kit: Kit, second_doc: str, second_chunk: str) -> Path:
    """A DAPR dump of two documents, the first judged for query q1."""
    data = kit.tmp / "dump"
    data.mkdir()
    docs = [
        {"id": "d1", "title": "A", "chunks": [{"id": "c1", "text": "castle"}]},
        {"id": second_doc, "title": "B", "chunks": [{"id": second_chunk, "text": "lake"}]},
    ]
    (data / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    judged = {"chunk": docs[0]["chunks"][0], "judgement": 1, "belonging_doc": docs[0]}
    row = {"query": {"id": "q1", "text": "castle"}, "judged_chunks": [judged]}
    (data / "test.jsonl").write_text(json.dumps(row) + "\n")
    return data


@case
def duplicate_document_ids_dump(kit: Kit) -> Bad:
    data = dump(kit, "d1", "c2")
    return Bad(kit.run(kit.experiment(data)), ("corpus.jsonl:2", "'d1'"), "unique id")


@case
def duplicate_chunk_ids_dump(kit: Kit) -> Bad:
    data = dump(kit, "d2", "c1")
    return Bad(kit.run(kit.experiment(data)), ("corpus.jsonl:2: chunks[0]", "'c1'"), "unique id")


@case
def qrels_name_unknown_query(kit: Kit) -> Bad:
    data = kit.dataset()
    edit_jsonl(data / "qrels" / "test.jsonl", 2, lambda row: {**row, "query_id": "q9"})
    return Bad(kit.run(kit.experiment(data)), ("qrels/test.jsonl:2", "'q9'"), "judge only queries")


@case
def qrels_name_unknown_passage(kit: Kit) -> Bad:
    data = kit.dataset()
    append_jsonl(data / "qrels" / "dev.jsonl", {"query_id": "q3", "corpus_id": "d9-0", "score": 1})
    return Bad(
        kit.run(kit.experiment(data)), ("qrels/dev.jsonl:3", "'d9-0'"), "judge only passages"
    )


@case
def qrels_grade_not_an_integer(kit: Kit) -> Bad:
    data = kit.dataset()
    edit_jsonl(data / "qrels" / "test.jsonl", 1, lambda row: {**row, "score": 0.5})
    return Bad(kit.run(kit.experiment(data)), ("qrels/test.jsonl:1", "'score'"), "integer score")


@case
def empty_corpus(kit: Kit) -> Bad:
    data = kit.dataset()
    (data / "corpus.jsonl").write_text("")
    return Bad(kit.run(kit.experiment(data)), ("corpus.jsonl", "no passages"), "at least one row")


@case
def empty_query_text(kit: Kit) -> Bad:
    data = kit.dataset()
    edit_jsonl(data / "queries" / "test.jsonl", 2, lambda row: {**row, "text": "  "})
    return Bad(
        kit.run(kit.experiment(data)), ("queries/test.jsonl:2", "'q2'"), "give the query its text"
    )


@case
def corpus_row_missing_text(kit: Kit) -> Bad:
    data = kit.dataset()
    edit_jsonl(data / "corpus.jsonl", 3, lambda row: {k: v for k, v in row.items() if k != "text"})
    return Bad(kit.run(kit.experiment(data)), ("corpus.jsonl:3", "'text'"), "needs _id, text")


@case
def not_utf8(kit: Kit) -> Bad:
    data = kit.dataset()
    queries = data / "queries" / "test.jsonl"
    lines = queries.read_bytes().splitlines(keepends=True)
    queries.write_bytes(lines[0] + lines[1].replace(b"lake", "lac\u00e9".encode("latin-1")))
    return Bad(kit.run(kit.experiment(data)), ("queries/test.jsonl:2", "UTF-8"), "save the file")


@case
def truncated_parquet(kit: Kit) -> Bad:
    data = kit.dataset("parquet")
    truncate(data / "corpus.parquet")
    return Bad(
        kit.run(kit.experiment(data)), ("corpus.parquet", "not a readable parquet"), "rewrite it"
    )


@case
def truncated_json_lines(kit: Kit) -> Bad:
    data = kit.dataset()
    text = (data / "corpus.jsonl").read_text()
    (data / "corpus.jsonl").write_text(text[: text.rindex('"title"')])
    return Bad(
        kit.run(kit.experiment(data)),
        ("corpus.jsonl:7", "invalid JSON"),
        "one JSON object per line",
    )


@case
def meta_json_not_json(kit: Kit) -> Bad:
    data = kit.dataset()
    (data / "meta.json").write_text('{"relevance_level": 1,')
    return Bad(kit.run(kit.experiment(data)), ("meta.json", "not valid JSON"), '"relevance_level"')


# --------------------------------------------------------------------------- run files


def _run_file(kit: Kit, lines: list[str]) -> Path:
    path = kit.tmp / "bm25.trec"
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _evaluate(kit: Kit, run: Path, *extra: str) -> list[str]:
    return ["evaluate", str(run), "--dataset", str(kit.dataset()), *extra]


@case
def run_with_nan_score(kit: Kit) -> Bad:
    run = _run_file(kit, ["q1 Q0 d1-1 1 2.5 bm25", "q1 Q0 d1-0 2 NaN bm25"])
    return Bad(_evaluate(kit, run), ("bm25.trec:2", "'score'", "NaN"), "finite number")


@case
def run_with_infinite_score(kit: Kit) -> Bad:
    run = _run_file(kit, ["q1 Q0 d1-1 1 inf bm25", "q1 Q0 d1-0 2 1.0 bm25"])
    return Bad(_evaluate(kit, run), ("bm25.trec:1", "'inf'"), "finite number")


@case
def run_with_malformed_line(kit: Kit) -> Bad:
    run = _run_file(kit, ["q1 Q0 d1-1 1 2.5 bm25", "q1 Q0 d1-0 2 bm25"])
    return Bad(
        _evaluate(kit, run), ("bm25.trec:2", "expected 6 columns"), "one ranked item per line"
    )


@case
def run_with_duplicate_row(kit: Kit) -> Bad:
    run = _run_file(kit, ["q1 Q0 d1-1 1 2.5 bm25", "q1 Q0 d1-0 2 1.5 bm25", "q1 Q0 d1-1 3 1 bm25"])
    return Bad(_evaluate(kit, run), ("bm25.trec:3", "'d1-1'"), "at most once per query")


@case
def run_of_another_split(kit: Kit) -> Bad:
    run = _run_file(kit, ["q3 Q0 d3-0 1 2.5 bm25"])
    return Bad(_evaluate(kit, run), ("bm25.trec", "'test'"), "--split")


@case
def evaluate_unknown_metric(kit: Kit) -> Bad:
    run = _run_file(kit, ["q1 Q0 d1-1 1 2.5 bm25"])
    return Bad(_evaluate(kit, run, "--metrics", "Recall@5"), ("'Recall@5'",), "use nDCG@k")


# --------------------------------------------------------------------------- analysis commands


@case
def labels_tsv_bad_row(kit: Kit) -> Bad:
    results = kit.copy_results()
    labels = kit.tmp / "labels.tsv"
    labels.write_text("query_id\tcategory\nq1\tCR\nq2 MT\n")
    argv = ["plot", str(results), "--kind", "categories", "--labels", str(labels)]
    return Bad(argv, ("labels.tsv", "line 3"), "two non-empty fields")


@case
def report_without_metrics(kit: Kit) -> Bad:
    (kit.tmp / "empty").mkdir()
    return Bad(
        ["report", str(kit.tmp / "empty")], ("empty", "no metrics.json"), "give a results directory"
    )


@case
def report_unreadable_metrics(kit: Kit) -> Bad:
    results = kit.copy_results()
    (results / "metrics.json").write_text('{"dataset": "data", "systems": {')
    return Bad(["report", str(results)], ("metrics.json", "not valid JSON"), "rerun `dapr run`")


# --------------------------------------------------------------------------- hardening (issue 18)


@case
def name_climbs_out_of_results(kit: Kit) -> Bad:
    path = kit.experiment(name="../../escaped")
    return Bad(
        ["run", str(path)], ("name", "'../../escaped'"), "cannot name a folder under results/"
    )


@case
def out_holds_another_configuration(kit: Kit) -> Bad:
    kit.copy_results("out")
    return Bad(kit.run(kit.experiment(depth=5)), ("out", "depth"), "pass --overwrite")


@case
def metric_cutoff_zero(kit: Kit) -> Bad:
    path = kit.experiment(metrics=["nDCG@0"])
    return Bad(kit.run(path), ("bad.yaml", "metrics", "'nDCG@0'"), "at least 1")


@case
def evaluate_precision_at_zero(kit: Kit) -> Bad:
    run = _run_file(kit, ["q1 Q0 d1-1 1 2.5 bm25"])
    return Bad(_evaluate(kit, run, "--metrics", "P@0"), ("'P@0'",), "at least 1")


@case
def set_value_not_yaml(kit: Kit) -> Bad:
    return Bad([*kit.run(kit.experiment()), "--set", "name=[x"], ("'name=[x'",), "quote it")


@case
def argument_of_the_wrong_type(kit: Kit) -> Bad:
    argv = [*kit.run(kit.experiment()), "--set", "retrievers.bm25.args.k1=abc"]
    return Bad(argv, ("retrievers.bm25.args.k1", "'abc'"), "must be a number")


@case
def dapr_home_is_a_file(kit: Kit) -> Bad:
    home = kit.tmp / "home-file"
    home.write_text("not a directory\n")
    os.environ["DAPR_HOME"] = str(home)  # test_bad_input's monkeypatch restores it
    return Bad(kit.run(kit.experiment()), ("home-file", "Not a directory"), "check DAPR_HOME")


@case
def sweep_of_too_many_values(kit: Kit) -> Bad:
    sweep = {
        "parameter": "fusion.fused.args.alpha",
        "values": {"start": 0, "stop": 1, "step": 1e-4},
    }
    path = kit.experiment(sweep=sweep)
    return Bad(kit.run(path), ("sweep.values", "10,001"), "use a larger step")


@case
def evaluate_document_run_as_passages(kit: Kit) -> Bad:
    run = _run_file(kit, ["q1 Q0 d1 1 2.5 bm25", "q2 Q0 d2 1 2.0 bm25"])
    return Bad(_evaluate(kit, run), ("bm25.trec", "documents"), "--level document")


@case
def evaluate_passage_run_as_documents(kit: Kit) -> Bad:
    run = _run_file(kit, ["q1 Q0 d1-1 1 2.5 bm25"])
    return Bad(_evaluate(kit, run, "--level", "document"), ("bm25.trec",), "--level passage")


@case
def yaml_key_given_twice(kit: Kit) -> Bad:
    text = kit.experiment().read_text() + "split: dev\n"
    path = kit.experiment(text=text)
    return Bad(kit.run(path), ("bad.yaml", "'split'", "twice"), "keep one of them")


@case
def yaml_alias_bomb(kit: Kit) -> Bad:
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for n in range(1, 8):
        lines.append(f"l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 10) + "]")
    text = kit.experiment().read_text() + "dataset_args:\n" + "".join(f"  {x}\n" for x in lines)
    return Bad(
        kit.run(kit.experiment(text=text)), ("bad.yaml", "100,000"), "write the settings out"
    )


@case
def dataset_args_with_a_directory(kit: Kit) -> Bad:
    path = kit.experiment(dataset_args={"split": "paper"})
    return Bad(kit.run(path), ("bad.yaml", "dataset_args"), "remove dataset_args")


@case
def no_metrics(kit: Kit) -> Bad:
    return Bad(kit.run(kit.experiment(metrics=[])), ("bad.yaml", "metrics"), "at least one")


@case
def no_retrievers(kit: Kit) -> Bad:
    path = kit.experiment(retrievers={}, fusion=None)
    return Bad(kit.run(path), ("bad.yaml", "retrievers"), "at least one")


@case
def qrels_negative_grade(kit: Kit) -> Bad:
    data = kit.dataset()
    edit_jsonl(data / "qrels" / "test.jsonl", 1, lambda row: {**row, "score": -3})
    return Bad(kit.run(kit.experiment(data)), ("qrels/test.jsonl:1", "-3"), "from 0 (not relevant)")


@case
def qrels_grade_beyond_trec_eval(kit: Kit) -> Bad:
    data = kit.dataset()
    edit_jsonl(data / "qrels" / "test.jsonl", 1, lambda row: {**row, "score": 10**30})
    return Bad(kit.run(kit.experiment(data)), ("qrels/test.jsonl:1", "out of range"), "up to")


@case
def qrels_judge_a_pair_twice(kit: Kit) -> Bad:
    data = kit.dataset()
    append_jsonl(data / "qrels" / "test.jsonl", {"query_id": "q1", "corpus_id": "d1-1", "score": 2})
    argv = kit.run(kit.experiment(data))
    return Bad(argv, ("qrels/test.jsonl:3", "'q1'", "'d1-1'"), "one judgement per query and item")


@case
def passage_id_with_a_space(kit: Kit) -> Bad:
    data = kit.dataset()
    edit_jsonl(data / "corpus.jsonl", 3, lambda row: {**row, "_id": "d2 0"})
    return Bad(kit.run(kit.experiment(data)), ("corpus.jsonl:3", "'d2 0'"), "rename it")


@case
def query_id_with_a_tab(kit: Kit) -> Bad:
    data = kit.dataset()
    edit_jsonl(data / "queries" / "test.jsonl", 1, lambda row: {**row, "_id": "q\t1"})
    return Bad(kit.run(kit.experiment(data)), ("queries/test.jsonl:1", "'_id'"), "rename it")


@case
def experiment_too_large(kit: Kit) -> Bad:
    text = kit.experiment().read_text() + "# " + "x" * (1 << 20) + "\n"
    return Bad(kit.run(kit.experiment(text=text)), ("bad.yaml", "bytes"), "give the YAML file")


@case
def experiment_top_level_a_list(kit: Kit) -> Bad:
    path = kit.experiment(text="- dataset: x\n")
    return Bad(kit.run(path), ("bad.yaml",), "expected a mapping of settings")


@case
def sweep_values_a_string(kit: Kit) -> Bad:
    path = kit.experiment(sweep={"parameter": "fusion.fused.args.alpha", "values": "0.1 0.2"})
    return Bad(kit.run(path), ("bad.yaml", "sweep.values"), "a list of values or a mapping")


@case
def sweep_step_negative(kit: Kit) -> Bad:
    values = {"start": 0.0, "stop": 1.0, "step": -0.1}
    path = kit.experiment(sweep={"parameter": "fusion.fused.args.alpha", "values": values})
    return Bad(kit.run(path), ("bad.yaml", "sweep.values"), "need step > 0")


@case
def resources_negative(kit: Kit) -> Bad:
    path = kit.experiment(resources={"gpus_per_job": -1})
    return Bad(kit.run(path), ("bad.yaml", "resources.gpus_per_job"), "a number >= 0")


@case
def workers_zero(kit: Kit) -> Bad:
    return Bad(kit.run(kit.experiment(workers=0)), ("bad.yaml", "workers"), "positive integer")


@case
def maxp_of_a_document_system(kit: Kit) -> Bad:
    path = kit.experiment(maxp=["bm25-doc"])
    return Bad(kit.run(path), ("bad.yaml", "maxp", "'bm25-doc'"), "choose from")


@case
def contextualizer_on_documents(kit: Kit) -> Bad:
    retrievers = {
        **BASE["retrievers"],
        "bm25-doc": {"name": "bm25", "level": "document", "contextualizer": "title"},
    }
    path = kit.experiment(retrievers=retrievers)
    return Bad(kit.run(path), ("bad.yaml", "contextualizer"), "set level: passage")


@case
def unknown_preset(kit: Kit) -> Bad:
    retrievers = {**BASE["retrievers"], "bm25": {"name": "bm25", "args": {"preset": "fast"}}}
    return Bad(
        kit.run(kit.experiment(retrievers=retrievers)), ("bad.yaml", "'fast'"), "choose from"
    )


@case
def bm25_unknown_backend(kit: Kit) -> Bad:
    argv = [*kit.run(kit.experiment()), "--set", "retrievers.bm25.args.backend=elastic"]
    return Bad(argv, ("'elastic'",), "choose from: bm25s, pyserini")


@case
def contextualize_sample_zero(kit: Kit) -> Bad:
    argv = ["contextualize", str(kit.dataset()), "-c", "title", "--sample", "0"]
    return Bad(argv, ("--sample",), "positive integer")


@case
def build_unknown_dataset(kit: Kit) -> Bad:
    argv = ["data", "build", "Nope", "--source", str(kit.tmp)]
    return Bad(argv, ("'Nope'",), "choose from")


def _covid_qa(kit: Kit, raw: str | None = None, **answer: object) -> list[str]:
    """``dapr data build COVID-QA`` of a one-article file (``raw``, else one with ``answer``)."""
    path = kit.tmp / "covid.json"
    qa = {"id": 7, "question": "Where?", "answers": [answer]}
    article = {"paragraphs": [{"context": "Title\n\nIn the lung.", "document_id": 1, "qas": [qa]}]}
    path.write_text(raw or json.dumps({"data": [article]}), encoding="utf-8")
    return ["data", "build", "COVID-QA", "--source", str(path), "--out", str(kit.tmp / "built")]


@case
def covid_qa_malformed_json(kit: Kit) -> Bad:
    """COVID-QA: a malformed file"""
    argv = _covid_qa(kit, '{"data": [\n{"paragraphs": }]}')
    return Bad(argv, ("covid.json:2", "invalid JSON"), "each context a whole document")


@case
def covid_qa_missing_answer_start(kit: Kit) -> Bad:
    """COVID-QA: an answer without answer_start"""
    argv = _covid_qa(kit, text="lung")
    return Bad(argv, ("covid.json", "qas[0].answers[0]", "'answer_start'"), "answer_start")


@case
def covid_qa_answer_not_in_context(kit: Kit) -> Bad:
    """COVID-QA: an answer text its context does not hold"""
    argv = _covid_qa(kit, text="liver", answer_start=7)
    return Bad(argv, ("covid.json", "answers[0]", '"liver"'), "give the text as the context")


@case
def build_without_source_or_download(kit: Kit) -> Bad:
    """dapr data build NAME with neither --source nor --download"""
    return Bad(["data", "build", "XQuAD"], ("XQuAD", "--source"), "--download to fetch them")


@case
def dataset_by_name_not_fetched(kit: Kit) -> Bad:
    """an experiment names COVID-QA, whose file was never fetched"""
    path = kit.experiment(dataset="COVID-QA", dataset_args={"max_words": 80})
    return Bad(kit.run(path), ("'COVID-QA'", "not fetched"), "data build COVID-QA --download")


@case
def cost_on_unknown_device(kit: Kit) -> Bad:
    """dapr check --cost for a device the calibration table does not have"""
    argv = ["check", str(kit.experiment()), "--cost", "--device", "tpu"]
    return Bad(argv, ("bad.yaml", "--device tpu"), "choose cpu:N, h200, h100, v100")


@case
def plot_sweep_without_sweep(kit: Kit) -> Bad:
    results = kit.copy_results()
    return Bad(
        ["plot", str(results), "--kind", "sweep"],
        ("results", "sweep.json"),
        "run an experiment with a sweep block",
    )


@case
def prune_negative_days(kit: Kit) -> Bad:
    return Bad(["cache", "prune", "--older-than", "-1"], ("--older-than",), ">= 0")


@case
def evaluate_missing_run(kit: Kit) -> Bad:
    return Bad(_evaluate(kit, kit.tmp / "nowhere.trec"), ("nowhere.trec",), "give a TREC run")


# --------------------------------------------------------------------------- training recipes


def _augmented(kit: Kit, **augment) -> Path:
    source = {"split": "dev", "retriever": "bm25", "model": "trained/ce", **augment}
    source = {key: value for key, value in source.items() if value is not None}
    return kit.experiment(train={"de": {"split": "test", "augment": source}})


@case
def augment_thresholds_inverted(kit: Kit) -> Bad:
    path = _augmented(kit, positive_above=0.1, negative_below=0.9)
    return Bad(["train", str(path)], ("train.de.augment", "negative_below"), "RocketQA: 0.9, 0.1")


@case
def augment_threshold_outside_unit_interval(kit: Kit) -> Bad:
    path = _augmented(kit, positive_above=1.5)
    return Bad(["train", str(path)], ("train.de.augment", "positive_above"), "in [0, 1]")


@case
def augment_source_without_queries(kit: Kit) -> Bad:
    empty = kit.tmp / "unlabelled.tsv"
    empty.write_text("\n")
    path = _augmented(kit, split=None, queries=str(empty))
    return Bad(["train", str(path)], ("train.de.augment", "unlabelled.tsv"), "give a source that")


@case
def denoise_threshold_outside_unit_interval(kit: Kit) -> Bad:
    negatives = {"mined": "bm25", "denoise": {"model": "trained/ce", "below": 1.5}}
    path = kit.experiment(train={"de": {"split": "test", "negatives": negatives}})
    return Bad(["train", str(path)], ("train.de.negatives.denoise", "1.5"), "(RocketQA: 0.1)")


@case
def sampled_negatives_without_a_mining_run(kit: Kit) -> Bad:
    path = kit.experiment(train={"de": {"split": "test", "negatives": {"sample_from": 30}}})
    return Bad(["train", str(path)], ("train.de.negatives.sample_from",), "needs negatives.mined")


@case
def train_source_unknown_dataset(kit: Kit) -> Bad:
    """a training source names a dataset that does not exist"""
    sources = [{"split": "test"}, {"dataset": "nowhere", "split": "train"}]
    path = kit.experiment(train={"de": {"sources": sources}})
    return Bad(["train", str(path)], ("bad.yaml", "train.de.sources[1].dataset"), "choose from")


@case
def rerank_depth_zero(kit: Kit) -> Bad:
    retrievers = {**BASE["retrievers"], "ce": {"name": "rerank", "first_stage": "bm25"}}
    retrievers["ce"]["args"] = {"model": "trained/ce", "top_k": 0}
    path = kit.experiment(retrievers=retrievers)
    return Bad(kit.run(path), ("bad.yaml", "retrievers.ce", "top_k"), "")


@case
def rerank_unknown_precision(kit: Kit) -> Bad:
    retrievers = {**BASE["retrievers"], "ce": {"name": "rerank", "first_stage": "bm25"}}
    retrievers["ce"]["args"] = {"model": "trained/ce", "precision": "half"}
    path = kit.experiment(retrievers=retrievers)
    return Bad(kit.run(path), ("bad.yaml", "retrievers.ce", "'half'"), "fp32, bf16, fp16")


@case
def dense_unknown_batching(kit: Kit) -> Bad:
    retrievers = {**BASE["retrievers"], "dense": {"name": "dense", "args": {"batching": "sorted"}}}
    path = kit.experiment(retrievers=retrievers)
    return Bad(kit.run(path), ("bad.yaml", "retrievers.dense", "'sorted'"), "auto, exact, padded")


@case
def dense_search_memory_not_a_share(kit: Kit) -> Bad:
    retrievers = {**BASE["retrievers"], "dense": {"name": "dense", "args": {"search_memory": 2}}}
    path = kit.experiment(retrievers=retrievers)
    return Bad(kit.run(path), ("bad.yaml", "retrievers.dense", "search_memory"), "(0, 1]")


@case
def training_setting_of_the_wrong_type(kit: Kit) -> Bad:
    path = kit.experiment(train={"de": {"split": "test", "args": {"learning_rate": "abc"}}})
    return Bad(["train", str(path)], ("bad.yaml", "train.de.args", "'abc'"), "must be a number")


@case
def training_unknown_precision(kit: Kit) -> Bad:
    path = kit.experiment(train={"de": {"split": "test", "args": {"precision": "fp8"}}})
    return Bad(["train", str(path)], ("bad.yaml", "train.de.args", "'fp8'"), "auto, fp32, bf16")


@case
def published_value_as_a_percentage(kit: Kit) -> Bad:
    path = kit.experiment(published={"source": "a paper", "values": {"bm25": {"MRR@10": 32.39}}})
    return Bad(kit.run(path), ("published.values.bm25.MRR@10", "32.39"), "32.39% is 0.3239")


@case
def unknown_variant(kit: Kit) -> Bad:
    path = kit.experiment(variants={"full": {"split": "dev"}})
    return Bad(kit.run(path, "--variant", "fll"), ("bad.yaml", "fll"), "the file has: full")


# the hostile files and environments of issue 38, each class in a module of its own
import hostile_names  # noqa: E402, F401
import hostile_numbers  # noqa: E402, F401
import hostile_settings  # noqa: E402, F401
import hostile_training  # noqa: E402, F401

# --------------------------------------------------------------------------- the catalogue


@pytest.fixture(scope="module")
def good_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The results directory of a good BM25 run on the small dataset."""
    tmp = tmp_path_factory.mktemp("good")
    kit = Kit(tmp, tmp / "none")
    assert main(kit.run(kit.experiment())) == 0
    return tmp / "out"


def tree(root: Path, skip: Path) -> dict[str, str]:
    """Every file and directory under ``root`` (but ``skip``), with a hash of each file."""
    return {
        str(p.relative_to(root)): (
            hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "/"
        )
        for p in sorted(root.rglob("*"))
        if skip not in (p, *p.parents)
    }


PENDING: dict[str, str] = {}  # cases known to fail, with the reason


def test_catalogue_is_large_enough():
    assert len(CASES.keys() - PENDING.keys() - {"output_not_writable"}) >= 80


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(reason=PENDING[n], strict=True))
        if n in PENDING
        else n
        for n in CASES
    ],
)
def test_bad_input(name, good_results, tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    monkeypatch.setenv("DAPR_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    bad = CASES[name](Kit(tmp_path, good_results))
    for variable, value in bad.env.items():
        monkeypatch.setenv(variable, value)
    before = tree(tmp_path, home)
    capsys.readouterr()

    code = main(bad.argv)

    out, err = capsys.readouterr()
    assert code == 2, err
    assert "Traceback" not in out + err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("dapr: error: "), err
    for named in bad.names:
        assert named in lines[0], f"{named!r} not named"
    assert bad.fix in lines[0], f"fix {bad.fix!r} not given"
    assert tree(tmp_path, home) == before  # no partial results; earlier files unchanged
    assert [p for p in home.rglob("*") if p.name.endswith(".tmp")] == []


def test_check_output_accepts_what_write_can_replace_and_creates_nothing(good_results, tmp_path):
    from dapr.errors import DaprError
    from dapr.experiment.results import check_output

    (tmp_path / "empty").mkdir()
    for fine in (tmp_path / "a" / "b" / "new", tmp_path / "empty", good_results):
        check_output(fine)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]
    with pytest.raises(DaprError, match="working directory"):
        check_output(Path("."))


def test_rerun_replaces_earlier_results_whole(good_results, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    out = Path(shutil.copytree(good_results, tmp_path / "out"))
    (out / "runs" / "stale.trec").write_text("q1 Q0 d1-0 1 1.0 stale\n")
    kit = Kit(tmp_path, good_results)
    assert main(kit.run(kit.experiment(depth=3), "--overwrite")) == 0  # another configuration
    capsys.readouterr()
    assert json.loads((out / "metrics.json").read_text())["depth"] == 3
    assert sorted(p.name for p in (out / "runs").iterdir()) == [
        "bm25-doc.trec",
        "bm25.trec",
        "fused.trec",
    ]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_write_removes_scratch_left_by_a_killed_run(good_results, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    gone = _dead_pid()
    left = tmp_path / f".out.{gone}.0123abcd.tmp"
    (left / "runs").mkdir(parents=True)
    mine = tmp_path / f".out.{os.getpid()}.0123abcd.tmp"  # a live process's: kept
    mine.mkdir()
    kit = Kit(tmp_path, good_results)
    assert main(kit.run(kit.experiment())) == 0
    capsys.readouterr()
    assert not left.exists() and mine.exists()
    assert (tmp_path / "out" / "metrics.json").is_file()


def _dead_pid() -> int:
    """The id of a process that has exited."""
    import subprocess

    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


RUNS = {  # level -> (run lines, expected nDCG@10, R@100, MRR@10 by hand)
    # q1: the judged d1-1 at rank 2, q2: d2-1 at rank 1
    "passage": (
        ["q1 Q0 d1-0 1 9 s", "q1 Q0 d1-1 2 8 s", "q2 Q0 d2-1 1 5 s", "q2 Q0 d3-0 2 4 s"],
        ((1 / math.log2(3) + 1) / 2, 1.0, (1 / 2 + 1) / 2),
    ),
    # documents (judged: q1 d1, q2 d2): q1 finds d1 at rank 2, q2 misses d2
    "document": (
        ["q1 Q0 d2 1 9 s", "q1 Q0 d1 2 8 s", "q2 Q0 d3 1 5 s", "q2 Q0 d1 2 4 s"],
        (1 / math.log2(3) / 2, 0.5, 1 / 2 / 2),
    ),
}


@pytest.mark.parametrize("level", list(RUNS))
def test_evaluate_prints_the_means(tmp_path, capsys, level):
    lines, expected = RUNS[level]
    run = tmp_path / "mine.trec"
    run.write_text("".join(line + "\n" for line in lines))
    data = good_dataset(tmp_path / "data")
    argv = ["evaluate", str(run), "--dataset", str(data), "--level", level]
    assert main([*argv, "--metrics", "nDCG@10", "R@100", "MRR@10"]) == 0
    row = capsys.readouterr().out.splitlines()[-1]
    assert row == f"| mine | {level} | " + " | ".join(f"{v:.4f}" for v in expected) + " |"


def test_catalogue_is_documented():
    """docs/bad_inputs.md (written by tests/catalogue_doc.py) lists every case."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "bad_inputs.md").read_text()
    assert [name for name in CASES if f"| `{name}` |" not in doc] == []
