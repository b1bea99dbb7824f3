"""Issue 38, classes 4, 7, 9 and 10 beyond the catalogue's shape: a real SIGTERM and the grace
period, environment values fuzzed, spreadsheet formulas in every CSV dapr writes, the wording of
JSON errors, and readers of files that are no regular file."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from bad_input_kit import BASE, good_dataset
from hypothesis import given, settings
from hypothesis import strategies as st

from dapr import settings as dapr_settings
from dapr.cli import main
from dapr.errors import DaprError
from dapr.io import spreadsheet
from dapr.io.rows import json_problem
from dapr.paths import home

ROOT = Path(__file__).resolve().parents[1]
GATED = "[dapr.retrievers]\ngated-bm25 = gated_components:GatedBM25\n"


def _gated_run(tmp_path: Path, grace: str) -> tuple[subprocess.Popen, Path]:
    """``dapr run`` of a BM25 that waits halfway through indexing at a gate that stays shut,
    with ``DAPR_GRACE_SECONDS=grace``; the process and the gate folder."""
    plugins = tmp_path / "plugins"
    info = plugins / "gated_components-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gated-components\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(GATED)
    gate = tmp_path / "gate"
    gate.mkdir()
    experiment = {**BASE, "dataset": str(good_dataset(tmp_path / "data")), "fusion": None}
    experiment["retrievers"] = {"gated": {"name": "gated-bm25"}}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump({k: v for k, v in experiment.items() if v}))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(plugins), str(ROOT / "tests"), str(ROOT)]),
        "DAPR_HOME": str(tmp_path / "home"),
        "DAPR_TEST_GATE": str(gate),
        "DAPR_GRACE_SECONDS": grace,
    }
    argv = [sys.executable, "-m", "dapr.cli", "run", "exp.yaml", "--out", "out"]
    process = subprocess.Popen(argv, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    return process, gate


def test_sigterm_with_a_good_grace_period_stops_the_run(tmp_path):
    """SIGTERM in the middle of indexing: exit 143 and one line, as before."""
    process, gate = _gated_run(tmp_path, "5")
    deadline = time.monotonic() + 120
    while not list(gate.glob("waiting-*")):
        assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143, stderr
    assert stderr.strip().splitlines()[-1].startswith("dapr: terminated (SIGTERM); ")
    assert not (tmp_path / "out").exists()


def test_a_bad_grace_period_is_refused_before_any_work(tmp_path):
    """DAPR_GRACE_SECONDS=soon: exit 2 with one line naming it, before the index starts (it
    used to be parsed in the SIGTERM handler: a traceback, or a SIGTERM ignored)."""
    process, gate = _gated_run(tmp_path, "soon")
    try:
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:  # it reached the work: stop it as a scheduler would
            process.send_signal(signal.SIGTERM)
            process.communicate(timeout=60)
    assert process.returncode == 2, stderr
    assert stderr.splitlines() == [
        "dapr: error: DAPR_GRACE_SECONDS='soon': must be a number of seconds > 0 and <= 604800 "
        "(default 10); unset it or give one, e.g. DAPR_GRACE_SECONDS=30"
    ]
    assert list(gate.iterdir()) == []
    assert not (tmp_path / "out").exists() and not (tmp_path / "home").exists()


def test_the_sigterm_handler_reads_no_variable():
    """The grace period is resolved when the handler is installed: a value set later (even a
    bad one) is not read by the handler, which raises Terminated."""
    code = (
        "import os, signal\n"
        "from dapr.cli import Terminated, _terminate_gracefully\n"
        "with _terminate_gracefully():\n"
        "    os.environ['DAPR_GRACE_SECONDS'] = 'soon'\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "    except Terminated:\n"
        "        print('terminated')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "terminated\n", "")


VALUES = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=12),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.integers(-(10**9), 10**9).map(str),
    st.sampled_from(["0", "-0", "1e400", "nan", "+inf", " 5 ", "0x10", "1_0", "tally:", "index:0"]),
    st.sampled_from(dapr_settings.FAULT_PHASES).map(lambda p: f"{p}:"),
)


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from([v.name for v in dapr_settings.VARIABLES]), raw=VALUES)
def test_every_variable_is_accepted_in_range_or_refused_in_one_line(tmp_path_factory, name, raw):
    saved = os.environ.get(name)
    os.environ[name] = str(tmp_path_factory.getbasetemp() / raw) if name == "DAPR_HOME" else raw
    if name == "DAPR_HOME" and not raw:
        os.environ[name] = raw
    try:
        try:
            dapr_settings.check()
        except DaprError as error:
            message = str(error)
            assert message.startswith(f"{name}=") and "\n" not in message
            assert "; " in message  # the fix
            return
        value = {
            "DAPR_HOME": dapr_settings.home,
            "DAPR_GRACE_SECONDS": dapr_settings.grace_seconds,
            "DAPR_LOCK_STALE": dapr_settings.lock_stale,
            "DAPR_RAY_TIMEOUT": dapr_settings.ray_timeout,
            "DAPR_FAULT": dapr_settings.fault,
        }[name]()
        if isinstance(value, float):
            assert 0 < value <= dapr_settings.MAX_SECONDS
        elif value is None:  # empty counts as unset
            assert name == "DAPR_FAULT" and raw == ""
        elif isinstance(value, dapr_settings.Fault):
            assert value.tally is not None or (
                value.phase in dapr_settings.FAULT_PHASES and value.n >= 1
            )
        else:
            assert isinstance(value, Path) and not value.is_file()
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def test_the_home_follows_the_environment_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "one"))
    assert home() == tmp_path / "one"
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "two"))
    assert home() == tmp_path / "two"
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "file"))
    with pytest.raises(DaprError, match=r"^DAPR_HOME='.*file': Not a directory; check DAPR_HOME"):
        home()
    monkeypatch.delenv("DAPR_HOME")
    assert home() == Path.home() / ".cache" / "dapr"


def test_a_misspelt_variable_is_a_warning_and_others_pass(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAPR_HOMES", "/elsewhere")
    monkeypatch.setenv("DAPR_HTTP_PORT", "3500")  # the Dapr runtime's: not a typo of dapr's
    assert main(["cache", "ls"]) == 0
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "dapr: warning: DAPR_HOMES is set but dapr reads no such variable; did you mean "
        "DAPR_HOME? (ignored)"
    ]


def test_fault_values_read():
    assert dapr_settings.parse_fault("index:2") == dapr_settings.Fault("index", 2)
    assert dapr_settings.parse_fault("tally:/x/t") == dapr_settings.Fault("tally", 0, Path("/x/t"))
    for bad in ("tally:", "tally: ", "index", "index:0", "index:-1", "index:x", "nowhere:1"):
        with pytest.raises(DaprError, match=r"^DAPR_FAULT="):
            dapr_settings.parse_fault(bad)


def test_the_environment_page_lists_every_variable():
    """docs/environment.md holds the generated table: every variable with its default."""
    sys.path.insert(0, str(ROOT / "docs" / "_hooks"))
    try:
        import reference
    finally:
        sys.path.remove(str(ROOT / "docs" / "_hooks"))
    assert "<!-- reference: environment -->" in (ROOT / "docs" / "environment.md").read_text()
    table = reference.environment()
    for variable in dapr_settings.VARIABLES:
        assert f"| `{variable.name}` |" in table and f"| `{variable.default}` |" in table


# --------------------------------------------------------------------------- spreadsheets


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20), st.floats(allow_nan=False, allow_infinity=False))
def test_no_cell_starts_a_formula_and_reading_gives_the_text_back(text, number):
    written = spreadsheet.csv_text(["system", "value"], [[text, number]])
    header, (cell, value) = list(csv.reader(io.StringIO(written, newline="")))
    assert header == ["system", "value"]
    formula = text.startswith(spreadsheet.FORMULA_STARTS)
    numeric = text == "-" or spreadsheet._NUMBER.fullmatch(text) is not None
    assert cell == ("'" + text if formula and not numeric else text)
    assert not cell.startswith(spreadsheet.FORMULA_STARTS) or numeric
    assert value == f"{number:.6f}"  # numbers stay numbers, a negative one too
    assert float(value) == pytest.approx(number, abs=1e-6)


def test_a_negative_number_stays_a_number():
    written = spreadsheet.csv_text(["a", "b", "c"], [[-0.25, "-1.5e3", "-x"]])
    assert written.splitlines()[1] == "-0.250000,-1.5e3,'-x"


NAMES = ("=SUM(1+1)", "@SUM(1)", "-x", "+x")


def test_every_csv_of_a_run_with_formula_names_is_safe(tmp_path, monkeypatch, capsys):
    """summary.csv, contextualization.csv, sweep.csv and the report's table3.csv of a run whose
    systems are named like formulas: each such cell is written behind a quote."""
    monkeypatch.setenv("DAPR_HOME", str(tmp_path / "home"))
    passage, document, plain, fused = NAMES
    experiment = {
        **BASE,
        "dataset": str(good_dataset(tmp_path / "data")),
        "metrics": ["nDCG@10"],
        "retrievers": {
            passage: {"name": "bm25", "contextualizer": "title"},
            document: {"name": "bm25", "level": "document"},
            plain: {"name": "bm25"},
        },
        "fusion": {
            fused: {
                "name": "convex",
                "document": document,
                "passage": passage,
                "args": {"alpha": 0.5},
            }
        },
        "sweep": {"parameter": f"fusion.{fused}.args.alpha", "values": [0.2], "tune_on": "dev"},
    }
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(experiment))
    assert main(["run", str(tmp_path / "exp.yaml"), "--out", str(tmp_path / "out")]) == 0
    assert main(["report", str(tmp_path / "out"), "--out", str(tmp_path / "report")]) == 0
    capsys.readouterr()
    files = [
        tmp_path / "out" / "summary.csv",
        tmp_path / "out" / "contextualization.csv",
        tmp_path / "out" / "sweep.csv",
        tmp_path / "report" / "table3.csv",
    ]
    cells = {}
    for file in files:
        rows = list(csv.reader(io.StringIO(file.read_text(), newline="")))
        cells[file.name] = [cell for row in rows for cell in row]
        for cell in cells[file.name]:
            number = spreadsheet._NUMBER.fullmatch(cell) is not None
            assert not cell.startswith(spreadsheet.FORMULA_STARTS) or number, (file.name, cell)
    assert {"'" + name for name in NAMES} <= set(cells["summary.csv"])
    assert "'" + passage in cells["contextualization.csv"]
    assert "'+ title" in cells["table3.csv"]  # dapr's own label, no formula either


# --------------------------------------------------------------------------- JSON wording


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"a": "open', "Unterminated string starting at line 1 column 7"),
        ('{"a": "x\ny"}', "Invalid control character at line 1 column 9"),
        ('{"a": }', "Expecting value at line 1 column 7"),
        ("[" * 100_000, "nested too deeply to read"),
    ],
)
def test_json_errors_say_where_once(text, said):
    try:
        json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        assert json_problem(error) == said
        assert " at at " not in json_problem(error, line=False)
    else:
        pytest.fail("the text is valid JSON")


def test_a_report_of_dev_zero_stops_at_the_limit(monkeypatch):
    """A results file that is a device of endless bytes is read up to the limit, then refused."""
    from dapr.experiment import results

    monkeypatch.setattr(results, "MAX_JSON_BYTES", 1 << 16)
    with pytest.raises(DaprError, match=r"^/dev/zero: more than 65,536 bytes"):
        results._json(Path("/dev/zero"))
