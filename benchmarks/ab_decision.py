"""Compare ``decide`` of two source trees in one process, alternately, on the same snapshots.

Usage (from the repository root)::

    git -C . archive main | (mkdir -p /tmp/before && tar -x -C /tmp/before)
    python benchmarks/ab_decision.py /tmp/before . --rounds 5 --mix squatters --squat-share 0.2 0.5 0.8
    python benchmarks/ab_decision.py /tmp/before . --rounds 5 --snapshot indep.json   # a snapshot file

``--snapshot FILE`` decides a snapshot document (for example the independent mix of
``/work/shared/perf/gen_snapshot.py --pending 100000 --workers 10000 --users 1000 --running 30000
--seed 1 --out indep.json``) instead of a generated mix.

On a shared, loaded host the CPU's speed drifts between runs of separate processes; running
the two trees' ``decide`` one after the other, round by round, in the same process lets both
see the same drift, so the ratio of their median CPU times is what can be compared.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import time


def load(tree: str):
    """``decide`` and ``snapshot_from_json`` of the tree at ``tree`` (its own module objects)."""
    for name in [m for m in sys.modules if m == "scheduler" or m.startswith("scheduler.")]:
        del sys.modules[name]
    sys.path.insert(0, os.path.abspath(tree))
    try:
        decision = importlib.import_module("scheduler.core.decision")
        wire = importlib.import_module("scheduler.core.wire")
    finally:
        sys.path.pop(0)
    return decision.decide, wire.snapshot_from_json


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mix", choices=("synthetic", "squatters"), default="synthetic")
    parser.add_argument("--squat-share", nargs="*", type=float, default=[0.5])
    parser.add_argument("--snapshot", help="a snapshot JSON file to decide instead of a generated mix")
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks import squatters, synthetic
    from benchmarks.bench_decision import reference_seconds

    before, after = load(args.before), load(args.after)
    print(
        f"# load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}; reference loop {reference_seconds():.3f} s"
    )
    print("| mix | before cpu s | after cpu s | after / before |")
    print("|---|---:|---:|---:|")
    shares = args.squat_share if args.mix == "squatters" else [None]
    if args.snapshot:
        shares = ["file"]
    for share in shares:
        if share == "file":
            with open(args.snapshot) as f:
                document, label = json.load(f), os.path.basename(args.snapshot)
        elif share is None:
            document, label = (
                synthetic.generate(pending=args.pending, workers=args.workers, seed=args.seed),
                "synthetic",
            )
        else:
            document = squatters.generate(pending=args.pending, workers=args.workers, seed=args.seed, squat_share=share)
            label = f"squatters {share:g}"
        snapshots = before[1](document), after[1](document)
        cpu: tuple[list[float], list[float]] = ([], [])
        for _ in range(args.rounds):
            for side, (decide, _) in enumerate((before, after)):
                started = time.process_time()
                decide(snapshots[side])
                cpu[side].append(time.process_time() - started)
        b, a = statistics.median(cpu[0]), statistics.median(cpu[1])
        print(f"| {label} | {b:.3f} | {a:.3f} | {a / b:.2f} |", flush=True)
    print(
        f"# load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}; reference loop {reference_seconds():.3f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
