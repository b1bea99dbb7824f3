"""Bad-input cases: Environment variables, reader limits, spreadsheet formulas, small messages
(issue 38, classes 4, 7, 9, 10).

Each case registers itself in the catalogue (tests/bad_input_kit.py) and runs in
tests/test_bad_inputs.py like every other case.
"""

from __future__ import annotations

import json
import os

from bad_input_kit import Bad, Kit, case, edit_jsonl

# --------------------------------------------------------------------------- class 4: DAPR_*


@case
def grace_seconds_not_a_number(kit: Kit) -> Bad:
    """DAPR_GRACE_SECONDS is a word: refused at start, never parsed in the SIGTERM handler"""
    env = {"DAPR_GRACE_SECONDS": "soon"}
    names = ("DAPR_GRACE_SECONDS", "'soon'", "seconds > 0")
    return Bad(kit.run(kit.experiment()), names, "unset it or give one", env)


@case
def lock_stale_nan(kit: Kit) -> Bad:
    """DAPR_LOCK_STALE is NaN: refused before a lock is taken"""
    env = {"DAPR_LOCK_STALE": "nan"}
    return Bad(kit.run(kit.experiment()), ("DAPR_LOCK_STALE", "'nan'"), "unset it", env)


@case
def ray_timeout_negative(kit: Kit) -> Bad:
    """DAPR_RAY_TIMEOUT is negative"""
    env = {"DAPR_RAY_TIMEOUT": "-5"}
    return Bad(kit.run(kit.experiment()), ("DAPR_RAY_TIMEOUT", "'-5'"), "unset it", env)


@case
def grace_seconds_infinite(kit: Kit) -> Bad:
    """DAPR_GRACE_SECONDS is infinite (a timer cannot wait that long)"""
    env = {"DAPR_GRACE_SECONDS": "inf"}
    return Bad(["check", str(kit.experiment())], ("DAPR_GRACE_SECONDS", "'inf'"), "unset", env)


@case
def dapr_home_empty(kit: Kit) -> Bad:
    """DAPR_HOME is set but empty (a variable that expanded to nothing)"""
    env = {"DAPR_HOME": ""}
    names = ("DAPR_HOME=''", "is empty")
    return Bad(kit.run(kit.experiment()), names, "point DAPR_HOME at a directory", env)


@case
def dapr_home_below_a_file(kit: Kit) -> Bad:
    """DAPR_HOME is a path below a file"""
    (kit.tmp / "plain").write_text("a file\n")
    env = {"DAPR_HOME": str(kit.tmp / "plain" / "home")}
    names = ("DAPR_HOME", "plain/home", "Not a directory", "plain is a file")
    return Bad(kit.run(kit.experiment()), names, "point DAPR_HOME at a directory", env)


@case
def fault_tally_without_file(kit: Kit) -> Bad:
    """DAPR_FAULT=tally: with no file to append to"""
    env = {"DAPR_FAULT": "tally:"}
    names = ("DAPR_FAULT", "'tally:'", "needs the file")
    return Bad(kit.run(kit.experiment()), names, "tally:<file>", env)


@case
def fault_unknown_phase(kit: Kit) -> Bad:
    """DAPR_FAULT names a phase that has no checkpoints"""
    env = {"DAPR_FAULT": "indexing:2"}
    names = ("DAPR_FAULT", "unknown phase 'indexing'", "index")
    return Bad(kit.run(kit.experiment()), names, "give <phase>:<n>", env)


# --------------------------------------------------------------------------- class 7: readers


@case
def experiment_nested_too_deep(kit: Kit) -> Bad:
    """an experiment file nested 50,000 levels deep (`[[[[...`)"""
    path = kit.experiment(text="name: bad\nsplit: test\nretrievers:\n  x: " + "[" * 50_000 + "\n")
    return Bad(kit.run(path), ("bad.yaml:4", "nested more than 64 levels"), "flatten it")


@case
def experiment_mappings_nested_too_deep(kit: Kit) -> Bad:
    """an experiment file of mappings nested 30,000 levels deep (`{a: {a: ...`)"""
    path = kit.experiment(text="name: bad\nsplit: test\nargs: " + "{a: " * 30_000 + "1\n")
    return Bad(["check", str(path)], ("bad.yaml:3", "nested more than 64 levels"), "flatten it")


@case
def experiment_aliases_nested_too_deep(kit: Kit) -> Bad:
    """YAML aliases inside aliases that nest 300 levels deep in 300 short lines"""
    lines = ["x0: &a0 [1]", *(f"x{i}: &a{i} [*a{i - 1}]" for i in range(1, 300))]
    path = kit.experiment(text="\n".join(lines) + "\n")
    return Bad(kit.run(path), ("bad.yaml", "nested more than 64 levels"), "flatten it")


@case
def check_dev_zero(kit: Kit) -> Bad:
    """`dapr check /dev/zero`: a device of endless bytes, whose size says 0"""
    names = ("/dev/zero", "more than an experiment file holds")
    return Bad(["check", "/dev/zero"], names, "give the YAML file of the experiment")


@case
def experiment_a_pipe_without_writer(kit: Kit) -> Bad:
    """an experiment file that is a named pipe no one writes to (read as empty, not waited on)"""
    pipe = kit.tmp / "exp.yaml"
    os.mkfifo(pipe)
    return Bad(kit.run(pipe), ("exp.yaml", "nothing to read"), "give the YAML file")


@case
def report_metrics_nested_too_deep(kit: Kit) -> Bad:
    """a results folder whose metrics.json nests 100,000 levels deep"""
    results = kit.copy_results()
    (results / "metrics.json").write_text('{"dataset": "data", "systems": ' + "[" * 100_000)
    names = ("metrics.json", "not valid JSON", "nested too deeply")
    return Bad(["report", str(results)], names, "rerun `dapr run`")


@case
def corpus_line_nested_too_deep(kit: Kit) -> Bad:
    """a corpus line nested 100,000 levels deep"""
    data = kit.dataset()
    edit_jsonl(data / "corpus.jsonl", 2, lambda row: "[" * 100_000 + "]" * 100_000)
    names = ("corpus.jsonl:2", "nested too deeply")
    return Bad(kit.run(kit.experiment(data)), names, "one JSON object per line")


# --------------------------------------------------------------------------- class 10: wording


@case
def corpus_line_unterminated_string(kit: Kit) -> Bad:
    """a corpus line whose string runs into the line's end: "character at column", not "at at" """
    data = kit.dataset()
    edit_jsonl(data / "corpus.jsonl", 3, lambda row: json.dumps(row)[:-8])
    names = ("corpus.jsonl:3", "Invalid control character at column ")
    return Bad(kit.run(kit.experiment(data)), names, "one JSON object per line")


@case
def dataset_meta_unterminated_string(kit: Kit) -> Bad:
    """a dataset's meta.json whose string never ends"""
    data = kit.dataset()
    (data / "meta.json").write_text('{"notes": ["unfinished')
    names = ("meta.json", "Unterminated string starting at line 1 column 12")
    return Bad(kit.run(kit.experiment(data)), names, "meta.json holds")
