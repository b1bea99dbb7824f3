"""Property-based fuzzing with hypothesis: mutated experiment files, dataset files and run files
never end in a traceback. Reading them either works or raises a DaprError (which the CLI turns
into one line and exit status 2); through the CLI, the exit status is 0 or 2."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bad_inputs import BASE, good_dataset

from dapr.cli import main
from dapr.datasets import read_dataset
from dapr.errors import DaprError
from dapr.experiment.config import load
from dapr.io import read_trec_run

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,  # the same examples on every run: a failure is reproducible
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return good_dataset(tmp_path_factory.mktemp("fuzz") / "data")


def _paths(node: object, prefix: tuple = ()) -> list[tuple]:
    """Every key path into a nested dict (the places a mutation can hit)."""
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    return found


def _set(node: dict, path: tuple, value: object) -> None:
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _drop(node: dict, path: tuple) -> None:
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]


@FUZZ
@given(data=st.data())
def test_mutated_experiment_files_validate_or_say_why(dataset, tmp_path_factory, data):
    raw = json.loads(json.dumps({**BASE, "dataset": str(dataset)}))
    _mutate_and_load(raw, _paths(raw), tmp_path_factory, data)


def _mutate_and_load(raw: dict, places: list[tuple], tmp_path_factory, data) -> None:
    """Set or drop one to three of ``places`` in ``raw``, then load it as an experiment file:
    it validates, or says why in one line naming the file."""
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(places))
        with contextlib.suppress(KeyError, TypeError):
            if data.draw(st.booleans()):
                _set(raw, path, data.draw(values))
            else:
                _drop(raw, path)
    file = tmp_path_factory.mktemp("exp") / "exp.yaml"
    file.write_text(yaml.safe_dump(raw, allow_unicode=True))
    try:
        load(file)
    except DaprError as error:
        assert "\n" not in str(error) and str(error).startswith(str(file))


@FUZZ
@given(
    text=st.text(
        alphabet=st.sampled_from(list("abc:{}[]-,&*!|>'\" \n\t0123456789.#%@")), max_size=80
    )
)
def test_any_text_as_an_experiment_file_is_one_line_at_most(tmp_path_factory, text):
    file = tmp_path_factory.mktemp("exp") / "exp.yaml"
    file.write_text("dataset: wiki-sample\nretrievers: {b: {name: bm25}}\n" + text)
    with contextlib.suppress(DaprError):
        load(file)


TABLES = ("corpus.jsonl", "queries/test.jsonl", "qrels/test.jsonl", "queries/dev.jsonl")


@FUZZ
@given(data=st.data())
def test_mutated_dataset_files_read_or_say_where(dataset, tmp_path_factory, data):
    copy = Path(shutil.copytree(dataset, tmp_path_factory.mktemp("ds") / "data"))
    table = copy / data.draw(st.sampled_from(TABLES))
    lines = table.read_text(encoding="utf-8").splitlines()
    n = data.draw(st.integers(0, len(lines) - 1))
    row = json.loads(lines[n])
    kind = data.draw(st.sampled_from(["value", "drop", "raw"]))
    if kind == "value":
        row[data.draw(st.sampled_from(sorted(row)))] = data.draw(values)
        lines[n] = json.dumps(row)
    elif kind == "drop":
        row.pop(data.draw(st.sampled_from(sorted(row))))
        lines[n] = json.dumps(row)
    else:
        lines[n] = data.draw(st.text(max_size=30))
    table.write_text("\n".join(lines) + "\n", encoding="utf-8")
    try:
        loaded = read_dataset(copy)
        for _ in loaded.corpus:
            pass
        for name in loaded.splits:
            loaded.split(name)
        loaded.corpus.fingerprint  # noqa: B018 - a full pass with every check
    except DaprError as error:
        assert "\n" not in str(error)


run_lines = st.lists(
    st.one_of(
        st.builds(
            lambda q, d, r, s: f"{q} Q0 {d} {r} {s} sys",
            st.sampled_from(["q1", "q2", "q3", "q9", ""]),
            st.sampled_from(["d1-0", "d1-1", "d2-1", "d3-0", "d1", "x"]),
            st.integers(-2, 5),
            st.one_of(st.floats(allow_nan=True), st.sampled_from(["1e400", "-inf", "abc", ""])),
        ),
        st.text(max_size=20),
    ),
    max_size=6,
)


@FUZZ
@given(lines=run_lines)
def test_run_files_read_or_say_which_line(tmp_path_factory, lines):
    path = tmp_path_factory.mktemp("run") / "run.trec"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with contextlib.suppress(DaprError):
        read_trec_run(path)


@settings(FUZZ, max_examples=25)
@given(lines=run_lines, level=st.sampled_from(["passage", "document"]))
def test_evaluate_exits_0_or_2(dataset, tmp_path_factory, monkeypatch, lines, level):
    tmp = tmp_path_factory.mktemp("eval")
    monkeypatch.setenv("DAPR_HOME", str(tmp / "home"))
    path = tmp / "run.trec"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["evaluate", str(path), "--dataset", str(dataset), "--level", level])
    assert code in (0, 2)
    assert "Traceback" not in err.getvalue() and err.getvalue().count("\n") <= 1


TRAIN = {
    "de": {
        "split": "test",
        "kind": "dual",
        "loss": "mnrl",
        "min_grade": 1,
        "workers": 1,
        "negatives": {"same_document": 1, "mined": "bm25", "count": 2},
        "args": {
            "epochs": 1.0,
            "batch_size": 8,
            "learning_rate": 3e-5,
            "warmup_ratio": 0.1,
            "max_steps": 2,
            "seed": 0,
            "mini_batch_size": 4,
            "save_steps": 10,
            "max_length": 64,
            "precision": "auto",
        },
    }
}


@FUZZ
@given(data=st.data())
def test_mutated_train_entries_validate_or_say_why(dataset, tmp_path_factory, data):
    raw = json.loads(json.dumps({**BASE, "dataset": str(dataset), "train": TRAIN}))
    _mutate_and_load(raw, [p for p in _paths(raw) if p[0] == "train"], tmp_path_factory, data)
