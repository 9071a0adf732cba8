"""The first tick's write phase (``apply_decision``) of two trees, alternated in one process,
rolled back after each run (``--tick second``: the second tick's, after the first committed): an A/B of the writes that a loaded host's drift between separate
benchmark runs does not swamp (the two alternate within seconds, over the same rows).

Usage (from the repository root; PostgreSQL on this host; the database is recreated)::

    IRIS_BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/iris_bench_NAME \\
        .venv/bin/python benchmarks/ab_apply.py --base /work/wt-base --runs 8

The 100,000 x 10,000 cluster (``--sizes``) is restored, a first tick is loaded and decided,
then ``apply_decision`` of this tree and of ``--base``'s ``scheduler/tick/apply.py`` (loaded as
a module over this tree's other modules) run in turns, each inside the tick's transaction and
rolled back, with ``VACUUM`` of the written tables between runs. Each run prints its wall
time, this process's CPU and the PostgreSQL backend's; medians at the end. The commit is not
in these figures (both roll back).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib.util
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import bench_tick  # noqa: E402


class Rollback(Exception):
    pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the other tree (its scheduler/tick/apply.py)")
    parser.add_argument("--runs", type=int, default=6, help="runs of each tree")
    parser.add_argument("--sizes", default="100000x10000")
    parser.add_argument(
        "--tick",
        choices=("first", "second"),
        default="first",
        help="second: the first tick runs and commits (this tree), then the second is timed",
    )
    args = parser.parse_args()
    bench_tick.open_bench_database()
    from django.db import connection, transaction

    from benchmarks.restore import restore_snapshot
    from benchmarks.synthetic import generate
    from scheduler.core.wire import snapshot_from_json
    from scheduler.store.cluster_rows import forget_cluster_rows
    from scheduler.tick import apply, run

    spec = importlib.util.spec_from_file_location("base_apply", os.path.join(args.base, "scheduler/tick/apply.py"))
    base = importlib.util.module_from_spec(spec)
    sys.modules["base_apply"] = base
    spec.loader.exec_module(base)
    pending, workers = (int(x) for x in args.sizes.lower().split("x"))
    snapshot = snapshot_from_json(generate(pending=pending, workers=workers, seed=0))
    restore_snapshot(snapshot)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    forget_cluster_rows()
    kept_counts = None
    if args.tick == "second":
        from scheduler.board import publish

        run.run_tick(snapshot.now_ms)
        # The first tick's counts of live work, which each timed run starts from (a run's
        # ``publish.begin`` takes them, and a rolled-back run leaves none).
        kept_counts = publish._live
    loaded = run.load_snapshot(snapshot.now_ms)
    decision = run.decide(loaded.snapshot)
    print(
        f"# {pending:,} x {workers:,}: {len(decision.assignments):,} assigned, {len(decision.preemptions):,} preempted"
    )
    print(f"# load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| run | tree | apply wall s | tick cpu s | server cpu s | assigned | preempted |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    figures: dict[str, list[tuple[float, float, float]]] = {"this": [], "base": []}
    from django.utils import timezone

    for i in range(args.runs):
        for name, module in (("this", apply), ("base", base)) if i % 2 == 0 else (("base", base), ("this", apply)):
            with connection.cursor() as cursor:
                cursor.execute(
                    "VACUUM scheduler_task, scheduler_attempt, scheduler_dispatchintent, scheduler_job, "
                    "scheduler_preemptionevent, scheduler_tickrecord"
                )
            wall = timezone.now()
            if kept_counts is not None:
                publish._live = dataclasses.replace(kept_counts, counts=copy.deepcopy(kept_counts.counts))
            try:
                with transaction.atomic():
                    server = bench_tick.backend_cpu_seconds()
                    started, cpu = time.perf_counter(), time.process_time()
                    outcome = module.apply_decision(loaded, decision, wall, started, 0.0)
                    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
                    server = bench_tick.backend_cpu_seconds() - server
                    raise Rollback
            except Rollback:
                pass
            figures[name].append((elapsed, cpu, server))
            print(
                f"| {i + 1} | {name} | {elapsed:.3f} | {cpu:.3f} | {server:.2f} | "
                f"{outcome.assigned:,} | {outcome.preempted:,} |",
                flush=True,
            )
    print(f"# load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for name, runs in figures.items():
        wall, cpu, server = (statistics.median(column) for column in zip(*runs))
        print(f"# median {name}: apply wall {wall:.3f} s, tick cpu {cpu:.3f} s, server cpu {server:.2f} s")


if __name__ == "__main__":
    main()
