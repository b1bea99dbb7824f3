"""The calibration table of ``dapr check --cost``: rates per device, from the benchmarks' results.

Every measured rate is read from a results file the benchmarks wrote
(``docs/results/gpu-h200.json``, ``python benchmarks/gpu.py``) or from the tables and figures of
docs/benchmarks.md (each table under its ``results:`` marker, rendered from docs/results/), with
the script, the machine and the date (the commit that recorded the figure, from ``git blame``).
A device without a measurement (h100, v100, a CPU with more cores) is derived from a measured one
by a stated factor and its source. The figures that are not rates (tokens per word, bytes on
disk) are measured here, on wiki-sample, with dapr's own tokenizer and cache. The table is
written to ``dapr/experiment/calibration.json``, which :mod:`dapr.experiment.estimate` reads.

    python benchmarks/calibration.py [--out dapr/experiment/calibration.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "benchmarks.md"
GPU = ROOT / "docs" / "results" / "gpu-h200.json"
OUT = ROOT / "dapr" / "experiment" / "calibration.json"
CPU2 = "2-core AMD EPYC (the project's development machine)"

REFERENCE_MODEL = {"name": "sentence-transformers/all-MiniLM-L6-v2", "layers": 6, "hidden": 384}
"""The model every measured encoding rate was taken with."""
TOUR_RUNS = 4
"""Runs the quick tour (experiments/rank_fusion.yaml) writes: three searches and a fusion."""


def blame_date(text: str, path: Path = DOCS) -> str:
    """The date of the commit that last changed the line of ``path`` holding ``text``."""
    lines = path.read_text().splitlines()
    number = next(n for n, line in enumerate(lines, 1) if text in line)
    out = subprocess.run(
        ["git", "blame", "-L", f"{number},{number}", "--date=short", "--", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return re.search(r"\d{4}-\d{2}-\d{2}", out).group(0)  # type: ignore[union-attr]


def find(pattern: str, text: str) -> re.Match:
    """``pattern`` in ``text``, or a one-line exit naming what moved."""
    found = re.search(pattern, text)
    if found is None:
        raise SystemExit(
            f"calibration: {DOCS.name} no longer holds /{pattern}/; update this script"
        )
    return found


def number(text: str) -> float:
    return float(text.replace(",", ""))


def measured(value: float, unit: str, source: str, machine: str, date: str) -> dict[str, Any]:
    return {
        "value": value,
        "unit": unit,
        "status": "measured",
        "source": source,
        "machine": machine,
        "date": date,
    }


def derived(base: dict[str, Any], factor: float, why: str) -> dict[str, Any]:
    return {
        "value": base["value"] * factor,
        "unit": base["unit"],
        "status": "derived",
        "source": f"{base['source']}, times {factor:.3g}: {why}",
        "machine": base["machine"],
        "date": base["date"],
    }


def cpu_rates() -> dict[str, dict[str, Any]]:
    """The 2-core rates, from docs/benchmarks.md."""
    docs = DOCS.read_text()
    tour = find(
        r"takes (\d+) s wall,\s+(\d+) s of it in the MiniLM forward passes over the "
        r"([\d,]+) passages \((\d+) tokens on average",
        docs,
    )
    cold, forward, passages, tokens = (number(g) for g in tour.groups())
    warm = number(find(r"Warm it takes ([\d.]+) s wall", docs).group(1))
    queries = number(find(r"passages and its ([\d,]+) test queries", docs).group(1))
    start = model_start()
    date = blame_date("s of it in the MiniLM forward passes")
    profile = (
        "dapr run --profile of the cold quick tour (docs/benchmarks.md, 'Where a run's time goes')"
    )
    scale = find(r"\(([\d,]+) passages in ([\d,]+) documents, about (\d+) words a passage", docs)
    words = number(scale.group(1)) * number(scale.group(3))
    step = {
        name: number(find(rf"\| {name}[^|]*\| ([\d.]+) \| ([\d.]+) GB \|", docs).group(1))
        for name in ("index documents", "index passages")
    }
    searches = {
        name: find(rf"\| search {name} \(([\d,]+) queries\) \| ([\d.]+) \| ([\d.]+) GB \|", docs)
        for name in ("documents", "passages")
    }
    memory = {
        name: number(find(rf"\| {name}[^|]*\| [\d.]+ \| ([\d.]+) GB \|", docs).group(1))
        for name in ("index documents", "index passages")
    }
    read = find(
        r"reads the corpus once, for its fingerprint and its id arrays\s+together "
        r"\(([\d.]+) s, (\d+) MB at this size\)",
        docs,
    )
    scale_date, scale_src = (
        blame_date("| index passages |"),
        "python benchmarks/scale.py (NQ-sized)",
    )
    exact = find(r"--documents (\d+) --queries (\d+) --k (\d+)", docs)
    exact_s = number(find(r"\| dapr `exact_search` [^|]*\| ([\d.]+) \|", docs).group(1))
    dim = number(find(r"random\s+(\d+)-dimensional vectors", docs).group(1))
    fusion = find(r"fuses ([\d,]+) queries x \(([\d,]+) BM25 documents \+ ([\d,]+) dense", docs)
    fused = number(fusion.group(1)) * (number(fusion.group(2)) + number(fusion.group(3)))
    fuse_s = number(find(r"\| `dapr.fusion.Convex` \| ([\d.]+) \|", docs).group(1))
    rates = {
        "encode_tokens_per_s": measured(
            passages * tokens / forward, "tokens/s", profile, CPU2, date
        ),
        "start_s": measured(warm, "s", profile + ": the warm rerun, every step cached", CPU2, date),
        "model_start_s": start,
        "query_run_s": {
            **measured(
                (cold - warm - forward - start["value"]) / (queries * TOUR_RUNS),
                "s per query and run",
                profile
                + ": the cold run's wall time less the warm rerun's, the forward passes and "
                f"a model's start, spread over its {queries:,.0f} queries x {TOUR_RUNS} runs "
                "(query encoding, searching, writing and evaluating runs)",
                CPU2,
                date,
            ),
            "status": "derived",
        },
        "read_words_per_s": measured(
            words / number(read.group(1)), "words/s", scale_src, CPU2, scale_date
        ),
        "exact_macs_per_s": measured(
            number(exact.group(1)) * number(exact.group(2)) * dim / exact_s,
            "multiply-adds/s",
            "python benchmarks/exact_search.py (dapr exact_search)",
            CPU2,
            blame_date("| dapr `exact_search`"),
        ),
        "fuse_entries_per_s": measured(
            fused / fuse_s,
            "run entries/s",
            "python benchmarks/fusion.py (dapr.fusion.Convex)",
            CPU2,
            blame_date("| `dapr.fusion.Convex` |"),
        ),
    }
    for level in ("documents", "passages"):
        key = level[:-1]
        rates[f"bm25_{key}_index_words_per_s"] = measured(
            words / step[f"index {level}"], "words/s", scale_src, CPU2, scale_date
        )
        found = searches[level]
        per = number(found.group(2)) / number(found.group(1)) / words
        rates[f"bm25_{key}_search_s_per_query_word"] = measured(
            per, "s per query and corpus word", scale_src, CPU2, scale_date
        )
        rates[f"bm25_{key}_index_bytes_per_word"] = measured(
            memory[f"index {level}"] * 1e9 / words,
            "bytes of peak RSS per corpus word",
            scale_src,
            CPU2,
            scale_date,
        )
    return rates


def model_start(repeats: int = 3) -> dict[str, Any]:
    """A fresh process importing torch and sentence-transformers and loading the reference
    model: its CPU seconds (user and system), the least of ``repeats``. CPU time, not wall time:
    on a shared machine the wall time counts other processes' work; these steps run on one core,
    so on an idle machine they take about their CPU time."""
    code = (
        "from sentence_transformers import SentenceTransformer\n"
        "from dapr.checkpoints import offline_copy\n"
        f"SentenceTransformer(str(offline_copy({REFERENCE_MODEL['name']!r})), device='cpu')\n"
    )
    best = float("inf")
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(
            [sys.executable, "-c", code], check=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        best = min(best, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return measured(
        best,
        "s",
        "benchmarks/calibration.py: CPU seconds of a fresh process "
        "importing torch and sentence-transformers and loading the reference model, "
        f"least of {repeats}",
        this_machine(),
        datetime.date.today().isoformat(),
    )


def this_machine() -> str:
    """The cores and the processor's name of this machine."""
    cpuinfo = Path("/proc/cpuinfo")
    text = cpuinfo.read_text() if cpuinfo.is_file() else ""
    found = re.search(r"model name\s*:\s*(.+)", text)
    name = found.group(1).strip() if found else platform.machine()
    return f"{os.cpu_count()}-core {name}"


def gpu_rates() -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The H200's rates, from docs/results/gpu-h200.json (wiki-sample's passages: ``tokens``)."""
    result = json.loads(GPU.read_text())["data"]  # the raw result beside the rendered table
    machine = f"{result['device_name']} (torch {result['torch']})"
    rows = {row["measure"]: row for row in result["rows"]}
    source = "python benchmarks/gpu.py (docs/results/gpu-h200.json)"

    def row(start: str) -> dict[str, Any]:
        return next(r for m, r in rows.items() if m.startswith(start))

    encode = row("index step")
    search = row("1,000,000 x 768, 10,000 queries, top 100: dapr on cuda vs bare")
    size = re.match(r"([\d,]+) x (\d+), ([\d,]+) queries", search["measure"])
    assert size is not None
    macs = number(size.group(1)) * number(size.group(2)) * number(size.group(3))
    fp32, bf16 = row("20,000 pairs (fp32)")["dapr"], row("20,000 pairs (bf16)")["dapr"]
    rates = {
        "encode_texts_per_s": measured(
            encode["dapr"], "texts/s", source + ": " + encode["measure"], machine, result["date"]
        ),
        "exact_macs_per_s": measured(
            macs / search["dapr"],
            "multiply-adds/s",
            source + ": " + search["measure"],
            machine,
            result["date"],
        ),
        "bf16_factor": measured(
            bf16 / fp32,
            "x fp32",
            source + ": the re-ranking rows, bf16 against fp32 pairs/s",
            machine,
            result["date"],
        ),
    }
    return result, rates


def tokens_per_word() -> dict[str, Any]:
    """Tokens (special tokens included) per whitespace word of wiki-sample's passages, with
    the reference model's WordPiece tokenizer (BERT's vocabulary, which the paper's models
    share)."""
    from dapr.data_loaders.wiki_sample import adapter
    from transformers import AutoTokenizer

    from dapr.checkpoints import offline_copy

    texts = [p.text for d in adapter.load().corpus for p in d.passages]
    path = offline_copy(REFERENCE_MODEL["name"])
    tokenizer = AutoTokenizer.from_pretrained(str(path or REFERENCE_MODEL["name"]))
    tokens = sum(len(ids) for ids in tokenizer(texts)["input_ids"])
    words = sum(len(t.split()) for t in texts)
    return {
        "value": tokens / words,
        "unit": "tokens/word",
        "status": "measured",
        "source": f"wiki-sample's {len(texts):,} passages, {REFERENCE_MODEL['name']}'s "
        "tokenizer (benchmarks/calibration.py)",
        "machine": "any",
        "date": datetime.date.today().isoformat(),
    }


def table() -> dict[str, Any]:
    cpu = cpu_rates()
    result, h200 = gpu_rates()
    per_word = tokens_per_word()
    # the H200 encoded wiki-sample's passages: its texts/s in tokens/s with their mean length
    mean_tokens = number(find(r"\((\d+) tokens on average", DOCS.read_text()).group(1))
    h200["encode_tokens_per_s"] = derived(
        h200.pop("encode_texts_per_s"),
        mean_tokens,
        f"wiki-sample's passages average {mean_tokens:.0f} tokens (docs/benchmarks.md)",
    )
    host = {
        k: v for k, v in cpu.items() if k.startswith(("bm25_", "read_", "fuse_", "start", "query_"))
    }
    host["model_start_s"] = cpu["model_start_s"]
    h100_factor = (
        "same dense FP32 and BF16 peaks as the H200 (67 / 989 TFLOPS, NVIDIA's H100 SXM and "
        "H200 datasheets)"
    )
    v100_fp32 = 15.7 / 67.0
    v100_why = (
        "V100 SXM2 against H100 SXM peak FP32, 15.7 / 67 TFLOPS (NVIDIA's V100 and H100 datasheets)"
    )
    gpu_of = {"h200": h200}
    gpu_of["h100"] = {k: derived(v, 1.0, h100_factor) for k, v in h200.items()}
    gpu_of["v100"] = {
        k: derived(v, v100_fp32, v100_why)
        if k != "bf16_factor"
        else derived(v, 1.0, "no bf16 on a V100: fp16, assumed to gain what bf16 gains on the H200")
        for k, v in gpu_of["h100"].items()
    }
    memory = {"h200": 139.8, "h100": 79.6, "v100": 32.0}
    devices: dict[str, Any] = {
        "cpu:2": {"about": CPU2, "kind": "cpu", "cores": 2, "rates": cpu},
    }
    for name, rates in gpu_of.items():
        devices[name] = {
            "about": {
                "h200": result["device_name"],
                "h100": "NVIDIA H100 SXM (80 GB)",
                "v100": "NVIDIA Tesla V100 SXM2 (32 GB), the paper's GPU",
            }[name],
            "kind": "gpu",
            "gpu_memory_gib": memory[name],
            "rates": {**host, **rates},
            "host": "BM25, reading, fusion and start-up at the 2-core rates (cpu:2)",
        }
    return {
        "generated_by": "python benchmarks/calibration.py",
        "reference_model": REFERENCE_MODEL,
        "tokens_per_word": per_word,
        "devices": devices,
        "cpu_scaling": "cpu:N is cpu:2 with every rate times N/2 (derived: assumes the work "
        "spreads over the cores as on two)",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.out.write_text(json.dumps(table(), indent=2) + "\n")
    print(f"calibration written to {args.out}")


if __name__ == "__main__":
    main()
