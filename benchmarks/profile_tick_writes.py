"""Where a tick's write phase (``apply_decision``) spends this process's CPU, part by part.

Usage (from the repository root; needs a PostgreSQL server; the database is recreated)::

    IRIS_BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/iris_bench \\
        .venv/bin/python benchmarks/profile_tick_writes.py --sizes 100000x10000 --ticks first burst

Runs ``benchmarks/bench_tick.py`` (same flags) with the write phase's parts wrapped in
``time.process_time``: after each timed tick's row it prints one line of CPU milliseconds per
part: ``apply_decision`` (all of the write phase but the commit), the publication's steps
(``Publication.*``; ``start_counts`` is the change log's part of ``__init__``, ``live_counts``
the counts' part of ``build``), the metrics of
the placements (``record_placements``, run at commit), the events' pass
(``record_tick_events``) and its staging insert (``record``; ``record_rows`` where the started
events are staged as rows), each bulk statement by table (``insert <table>`` is a COPY, ``update <table>`` a
set-based UPDATE, whose server time runs pipelined and is not in these figures), the re-read and
the locks; and, though the line says "write-phase", the phases around it: ``load_snapshot``
(of which the rows taken in, ``ClusterRows._take_tasks`` and ``_take_jobs``) and ``decide``.
``--profile-writes`` (bench_tick's) gives the server's side of the first tick. ``gc`` is the
CPU of the cyclic garbage collector's runs inside the timed tick: the tick pauses the collector
(``scheduler.tick.run``), so on trees before ``gc33`` this is mostly the collection that its first
allocation after the pause starts, over what the tick left alive (since ``gc33`` that is made old
without a scan: ``scheduler.tick.collector``; ``benchmarks/gc_tick.py`` times every collection). ``ClusterRows._read_workers`` is the workers' part
of a whole read.
Parts a tree does not have are left out, so the same script profiles an older tree.
"""

from __future__ import annotations

import gc
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.cpu_parts import cpu_ms, run_bench_tick, time_functions, time_methods, timed  # noqa: E402


def install() -> None:
    from scheduler.board import publish
    from scheduler.events import record
    from scheduler.foundation import instruments
    from scheduler.store import bulk, cluster_rows
    from scheduler.tick import apply, events, run

    time_functions(
        (run, ("apply_decision",)),
        (apply, ("record_tick_events", "current_task_states", "lock_jobs", "hold_workers")),
        (apply, ("live_job_states", "limits_sample", "task_writes")),
        (events, ("record", "record_rows")),
        (record, ("record",)),
        (instruments, ("record_placements", "placement_tallies", "record_placement_tallies")),
    )
    bulk.insert_rows = timed(lambda args: f"insert {args[0]}", bulk.insert_rows)
    bulk.update_rows = timed(lambda args: f"update {args[0]}", bulk.update_rows)
    time_methods(publish.Publication, ("__init__", "record_fields", "build", "finish", "start_counts", "live_counts"))
    # The phases around the write phase: the load (and its row passes) and the decision.
    time_functions((run, ("load_snapshot", "decide")))
    time_methods(cluster_rows.ClusterRows, ("_take_tasks", "_take_jobs", "_read_workers"))
    collection_started = [0.0]

    def time_collections(phase: str, info: dict) -> None:
        if phase == "start":
            collection_started[0] = time.process_time()
        else:
            cpu_ms["gc"] += (time.process_time() - collection_started[0]) * 1000

    gc.callbacks.append(time_collections)
    run_tick_inner = run.run_tick

    def run_tick(now_ms):
        cpu_ms.clear()
        outcome = run_tick_inner(now_ms)
        print(
            "# write-phase cpu ms: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(cpu_ms.items())),
            flush=True,
        )
        return outcome

    run.run_tick = run_tick


if __name__ == "__main__":
    run_bench_tick(install)
