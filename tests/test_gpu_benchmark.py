"""``benchmarks/gpu.py`` runs its small CPU version end to end (so it cannot rot): every section
measures, the device search's run equals the CPU search's, and the splits give identical runs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu.py"


def _two_layers(out: Path) -> Path:
    """MiniLM's config and tokenizer (``--shape``) with 2 of its 6 layers: every section runs as
    it does at 6, on a third of the encoder's work."""
    from dapr.checkpoints import resolve

    source = Path(resolve("sentence-transformers/all-MiniLM-L6-v2"))
    shutil.copytree(source, out, ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.md"))
    config = json.loads((out / "config.json").read_text())
    assert config["num_hidden_layers"] == 6
    (out / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 2}))
    return out


def test_the_gpu_benchmark_runs_small_on_a_cpu(tmp_path):
    out = tmp_path / "gpu.json"
    shape = _two_layers(tmp_path / "shape")
    command = [sys.executable, str(BENCHMARK), "--small", "--shape", str(shape), "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["device"] == "cpu" and result["failed"] == []
    sections = {row["section"] for row in result["rows"]}
    assert sections == {"encode", "search", "compressed", "training", "rerank", "determinism"}
    checks = [row for row in result["rows"] if row["unit"] == "bool"]
    assert len(checks) == 5 and all(row["dapr"] == 1.0 for row in checks)
    assert all(row["dapr"] > 0 for row in result["rows"])
    search = [row for row in result["rows"] if "dapr's CPU path" in row["measure"]]
    assert "runs identical: True" in search[0]["note"]
    table = subprocess.run(
        [sys.executable, str(BENCHMARK), "--markdown", str(out)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert table.count("\n| ") == len(result["rows"]) + 1  # header and one line per row
