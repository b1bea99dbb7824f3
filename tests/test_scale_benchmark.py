"""benchmarks/scale.py end to end at a toy size: every step in its own process, the cache reused
as it claims, and its ``--json`` a results file the docs' renderer and the cost calibration read."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "_hooks"))

import results_tables as rt  # noqa: E402  (docs/_hooks/results_tables.py)


def test_scale_writes_a_results_file_the_docs_render(tmp_path: Path):
    out = tmp_path / "scale.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "scale.py"), "--passages", "240"]
    command += ["--documents", "12", "--queries", "4", "--index-memory", "1MB"]
    command += ["--workdir", str(tmp_path / "work"), "--json", str(out)]
    env = {**os.environ, "DAPR_HOME": str(tmp_path / "unused")}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    found = rt.load_json(out)  # stamped: command, date, commit, hardware, source
    assert found["source"] == "measured" and found["passages"] == 240
    steps = found["tables"]["steps"]
    labels = [row[0] for row in steps["rows"]]
    assert labels == [
        "read the corpus (fingerprint, ids)",
        "start-up from the corpus record",
        "index documents",
        "index passages",
        "search documents (4 queries)",
        "search passages (4 queries)",
        "fuse (and evaluate)",
    ]
    # the raw measurements beside the table agree with it
    index = found["data"]["index passage"]
    assert float(steps["rows"][3][3].replace(",", "")) == round(index["seconds"], 1)
    assert {kind for kind, _, status, _ in index["steps"] if status != "cached"} == {
        "index",
        "search",
    }
    # the rows keep the shape benchmarks/calibration.py reads: | name | seconds | n GB |
    text = "\n".join(rt.table_lines(steps))
    assert re.search(r"\| index passages[^|]*\| ([\d.]+) \| ([\d.]+) GB \|", text)
    assert re.search(r"\| search passages \(([\d,]+) queries\) \| ([\d.]+) \| ([\d.]+) GB \|", text)
    assert json.loads(out.read_text())["data"]["read"]["fingerprint"]


def test_a_reused_corpus_is_reported_as_reused_not_as_written_in_0_s(tmp_path: Path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import scale
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    first, wrote = scale.write_corpus(tmp_path, 60, 3, 2, 0)
    again, wrote_again = scale.write_corpus(tmp_path, 60, 3, 2, 0)
    assert first == again and (wrote, wrote_again) == (True, False)
    assert scale._corpus(None) == "corpus reused from --workdir"
    assert scale._corpus(12.4) == "corpus written in 12 s"
