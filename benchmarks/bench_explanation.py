"""Time the queue explanation a tick stores (``board.formats.explanation_to_json``) after the
decision, on the same synthetic clusters as ``bench_decision.py``. Pure CPU: no database.

Usage (from the repository root)::

    python benchmarks/bench_explanation.py --sizes 100000x10000 --runs 5

Prints the median and min CPU (process) time of ``--runs`` runs, with the cyclic collector
paused as in the tick, the number of pending tasks explained and of
distinct stored reasons. Run it on an older checkout (``git archive <rev> scheduler benchmarks``)
for the "before" column.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.synthetic import generate  # noqa: E402
from scheduler.core.decision import decide  # noqa: E402
from scheduler.core.wire import snapshot_from_json  # noqa: E402
from scheduler.board.formats import explanation_to_json  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100000x10000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    for size in args.sizes.split(","):
        pending, workers = (int(n) for n in size.split("x"))
        snapshot = snapshot_from_json(generate(pending=pending, workers=workers, seed=0))
        decision = decide(snapshot)
        times = []
        for _ in range(args.runs):
            # The tick runs with the cyclic collector paused (core.decision.collector_paused).
            gc.collect()
            gc.disable()
            start = time.process_time()
            doc = explanation_to_json(snapshot, decision)
            times.append(time.process_time() - start)
            gc.enable()
        print(
            f"{pending:>9,} pending x {workers:>6,} workers: median {statistics.median(times):.3f} s, "
            f"min {min(times):.3f} s; {sum(len(band['ids']) for band in doc['bands'].values()):,} tasks, "
            f"{len(doc['reasons']):,} reasons"
        )


if __name__ == "__main__":
    main()
