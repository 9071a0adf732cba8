"""Time the board's counts of live work: counted over every task (``active_counts``, what each
tick did before) against updated from what changed (``LiveCounts``, what a tick does now), on
a synthetic cluster.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_board_counts.py                  # 100,000 pending x 10,000 workers
    .venv/bin/python benchmarks/bench_board_counts.py --pending 10000 --workers 1000

The "changed" column is a tick that updates the counts with the decision's kept changes plus
``--changed`` tasks the rows' change log lists (a burst's worth by default); both are checked
equal to a full count before anything is timed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.synthetic import generate  # noqa: E402
from scheduler.board.counts import LiveCounts, active_counts, after_key, snapshot_key  # noqa: E402
from scheduler.core.decision import collector_paused, decide  # noqa: E402
from scheduler.core.wire import snapshot_from_json  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=10_000)
    parser.add_argument("--changed", type=int, default=1_000, help="tasks the change log lists besides the decision's")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    snapshot = snapshot_from_json(generate(pending=args.pending, workers=args.workers, seed=0))
    decision = decide(snapshot)
    jobs = snapshot.jobs
    kept = set(decision.after)
    changed = [t.id for t in snapshot.tasks[: args.changed]]

    def full() -> dict:
        return active_counts(snapshot, decision, kept, per_worker={})

    def of_every_task() -> LiveCounts:
        return LiveCounts.of(
            (t.id, after_key(jobs[t.job_id], decision.after[t.id]) if t.id in kept else snapshot_key(t, jobs[t.job_id]))
            for t in snapshot.tasks
        )

    base = of_every_task()
    holders: dict = {}
    assert base.published() == (active_counts(snapshot, decision, kept, per_worker=holders), holders)
    by_id = {t.id: t for t in snapshot.tasks}

    def update() -> None:
        for task_id in changed:
            task = by_id[task_id]
            base.set(task_id, snapshot_key(task, jobs[task.job_id]))
        for task_id in kept:
            job = jobs[task_id[: task_id.rfind("/")]]
            base.set(task_id, after_key(job, decision.after[task_id]))
        base.published()

    def timed(fn) -> float:
        times = []
        for _ in range(args.runs):
            with collector_paused():
                started = time.process_time()
                fn()
                times.append(time.process_time() - started)
        return statistics.median(times)

    reference = timed(lambda: sum(range(10_000_000)))
    print(
        f"{args.pending:,} pending x {args.workers:,} workers: {len(snapshot.tasks):,} tasks, "
        f"{len(kept):,} changed by the decision, {len(changed):,} more from the change log"
    )
    print(f"reference loop {reference:.3f} s")
    print("| counting | CPU s (median of %d) |" % args.runs)
    print("|---|---:|")
    print(f"| active_counts over every task (before) | {timed(full):.3f} |")
    print(f"| LiveCounts.of every task (a whole read, a new tick process) | {timed(of_every_task):.3f} |")
    print(f"| LiveCounts updated with what changed, then published (a tick now) | {timed(update):.3f} |")


if __name__ == "__main__":
    main()
