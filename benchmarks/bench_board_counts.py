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
from scheduler.board.counts import LiveCounts, active_counts, after_key, snapshot_key, task_keys  # noqa: E402
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

    def of_every_task_at_once() -> LiveCounts:
        return LiveCounts.of_tasks(snapshot.tasks, jobs.__getitem__, decision.after, kept)

    base = of_every_task()
    assert of_every_task_at_once().published() == base.published()
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

    def timed(fn, setup=None) -> float:
        times = []
        for _ in range(args.runs):
            with collector_paused():
                given = setup() if setup is not None else None
                started = time.process_time()
                fn() if setup is None else fn(given)
                times.append(time.process_time() - started)
        return statistics.median(times)

    # A burst's counts: the snapshot's counts (none of the decision's changes), then the
    # decision's changes set, each task its own call, or all at once (what a tick does now).
    def before_the_changes() -> LiveCounts:
        return LiveCounts.of_tasks(snapshot.tasks, jobs.__getitem__, decision.after, ())

    ids = sorted(kept)

    def set_one_by_one(counts: LiveCounts) -> None:
        for task_id in ids:
            counts.set(task_id, after_key(jobs[task_id[: task_id.rfind("/")]], decision.after[task_id]))

    def set_at_once(counts: LiveCounts) -> None:
        job_ids = [task_id[: task_id.rfind("/")] for task_id in ids]
        counts.set_all(zip(ids, task_keys(jobs.__getitem__, job_ids, [decision.after[t] for t in ids])))

    one, other = before_the_changes(), before_the_changes()
    set_one_by_one(one)
    set_at_once(other)
    assert one.published() == other.published() == base.published()

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
    print(
        f"| LiveCounts.of_tasks every task (a new tick process, keyed in one loop) | {timed(of_every_task_at_once):.3f} |"
    )
    print(
        f"| the decision's {len(ids):,} changes set one by one (`set`, `after_key`) | {timed(set_one_by_one, before_the_changes):.3f} |"
    )
    print(
        f"| the decision's {len(ids):,} changes set at once (`set_all`, `task_keys`) | {timed(set_at_once, before_the_changes):.3f} |"
    )


if __name__ == "__main__":
    main()
