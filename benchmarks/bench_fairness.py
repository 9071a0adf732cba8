"""Time the fairness sample a tick stores (``core.fairness.fairness_sample``) after the decision,
on the synthetic clusters of ``bench_decision.py``. Pure CPU: no database.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_fairness.py --sizes 100000x10000 --runs 5

Prints the median CPU (process) and wall time of ``--runs`` runs, with the cyclic collector
paused as in the tick, and the sample's size (users x bands, JSON bytes).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.synthetic import generate  # noqa: E402
from scheduler.core.decision import decide  # noqa: E402
from scheduler.core.fairness import fairness_sample  # noqa: E402
from scheduler.core.wire import snapshot_from_json  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100000x10000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    for size in args.sizes.split(","):
        pending, workers = (int(n) for n in size.split("x"))
        snapshot = snapshot_from_json(generate(pending=pending, workers=workers, seed=0))
        decision = decide(snapshot)
        cpu, wall = [], []
        for _ in range(args.runs):
            gc.collect()
            gc.disable()
            c, w = time.process_time(), time.perf_counter()
            sample = fairness_sample(snapshot, decision)
            cpu.append(time.process_time() - c)
            wall.append(time.perf_counter() - w)
            gc.enable()
        rows = sum(len(b["users"]) for b in sample["bands"].values())
        print(
            f"{pending:>9,} pending x {workers:>6,} workers: cpu median {statistics.median(cpu):.3f} s, "
            f"wall median {statistics.median(wall):.3f} s; {rows:,} (band, user) rows, "
            f"{len(json.dumps(sample)):,} JSON bytes"
        )


if __name__ == "__main__":
    main()
