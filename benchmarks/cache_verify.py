"""What verifying the cache costs a warm rerun: the quick tour, every step cached, with the time
spent in checking entries against their checksums measured inside the same run.

Runs the experiment once to fill the cache (skipped when it is warm), then ``--repeats`` warm
reruns in this process, each with a fresh Cache so that every entry it reads is verified again,
and prints the verification time as a share of the whole rerun. Exits 1 above ``--limit``.

    python benchmarks/cache_verify.py [experiments/rank_fusion.yaml --repeats 3 --limit 0.05]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import results_json  # benchmarks/results_json.py, beside this script

from dapr.cli import main
from dapr.store.cache import Cache


def measured(experiment: Path, out: Path) -> tuple[float, float]:
    """(whole rerun, verification) seconds of one warm rerun."""
    spent = [0.0]
    original = Cache.valid

    def timed(self: Cache, kind: str, key: str) -> bool:
        started = time.perf_counter()
        try:
            return original(self, kind, key)
        finally:
            spent[0] += time.perf_counter() - started

    Cache.valid = timed  # type: ignore[method-assign]
    try:
        started = time.perf_counter()
        if main(["run", str(experiment), "--out", str(out)]) != 0:
            raise SystemExit("the experiment failed")
        return time.perf_counter() - started, spent[0]
    finally:
        Cache.valid = original  # type: ignore[method-assign]


def run(experiment: Path, repeats: int, limit: float, json_path: str | None = None) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        main(["run", str(experiment), "--out", str(out)])  # fills the cache if it is cold
        results = [measured(experiment, out) for _ in range(repeats)]
    total = median(r[0] for r in results)
    verify = median(r[1] for r in results)
    share = verify / total
    lines = [
        f"| warm rerun of `{experiment.name}` | verification | share |",
        "|---:|---:|---:|",
        f"| {total:.2f} s | {verify * 1000:.1f} ms | {share:.2%} |",
    ]
    print("\n" + "\n".join(lines))
    print(f"\nmedian of {repeats} warm reruns; target: under {limit:.0%}")
    if json_path:
        results_json.write(json_path, {"verify": lines}, notes=f"median of {repeats} warm reruns")
    return 0 if share < limit else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "experiment", nargs="?", type=Path, default=Path("experiments/rank_fusion.yaml")
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=float, default=0.05)
    parser.add_argument("--json", help="also write the table as a results file (docs/results/)")
    args = parser.parse_args()
    sys.exit(run(args.experiment, args.repeats, args.limit, args.json))
