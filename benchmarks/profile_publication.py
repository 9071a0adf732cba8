"""Where a tick's publication spends this process's CPU, part by part, at bench_tick's sizes.

Usage (from the repository root; needs a PostgreSQL server; the database is recreated)::

    IRIS_BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/iris_bench \\
        .venv/bin/python benchmarks/profile_publication.py --sizes 100000x10000 --ticks first second churn

Runs ``benchmarks/bench_tick.py`` (same flags) with the publication's parts wrapped: after each
timed tick's row it prints one line of CPU milliseconds (``time.process_time``) per part of that
tick: the publication's steps (``Publication.__init__`` (begin), ``record_fields``, ``build``,
``finish``; their sum is printed as the total) and, inside them, the queue (``pending_queue``),
the explanation's build, the counts of live work, the what-if basis's build, the fairness
sample, the encoding and compression of the stored blobs; beside them the events' pass
(``record_tick_events``, not part of the publication) and the statement writing the blobs to
the tick record (wall ms: the server's share is not this process's CPU). Parts a tree does not
have are left out, so the same script profiles an older tree (copy it there). Then, outside the tick, what a reader pays for
the new publication: decompressing and parsing the queue and the basis.
"""

from __future__ import annotations

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.cpu_parts import cpu_ms, run_bench_tick, time_functions, time_methods  # noqa: E402


def install() -> None:
    from django.db import connection

    from scheduler.board import publish, read
    from scheduler.tick import apply, run

    time_functions(
        (
            publish,
            (
                "pending_queue",
                "queued_jobs",
                "fairness_sample",
                "compress_json",
                "explanation_to_json",
                "whatif_basis_to_json",
            ),
        ),
        (apply, ("record_tick_events",)),
    )
    time_methods(publish.Publication, ("__init__", "start_counts", "live_counts", "build", "finish", "record_fields"))
    original_run_tick = run.run_tick

    def blob_writes(execute, sql, params, many, context):
        if sql.lstrip().upper().startswith("UPDATE") and "explanation" in sql and "whatif_basis" in sql:
            started = time.perf_counter()
            try:
                return execute(sql, params, many, context)
            finally:
                cpu_ms["record write (wall)"] += (time.perf_counter() - started) * 1000
        return execute(sql, params, many, context)

    def run_tick(now_ms):
        cpu_ms.clear()
        with connection.execute_wrapper(blob_writes):
            outcome = run_tick_inner(now_ms)
        parts = dict(cpu_ms)
        total = sum(parts.get(f"Publication.{step}", 0.0) for step in ("__init__", "record_fields", "build", "finish"))
        print(
            f"# publication cpu ms: total {total:.1f} (begin + record_fields + build + finish); "
            + ", ".join(f"{k} {v:.1f}" for k, v in sorted(parts.items())),
            flush=True,
        )
        read.forget()
        started = time.process_time()
        index = read.queue_index()
        queue_ms = (time.process_time() - started) * 1000
        started = time.process_time()
        basis = read.whatif_basis()
        basis_ms = (time.process_time() - started) * 1000
        print(
            f"# readers cpu ms: queue_index {queue_ms:.1f} ({index.total} queued), "
            f"whatif_basis {basis_ms:.1f} ({len(basis.workers) if basis else 0} workers)",
            flush=True,
        )
        read.forget()
        return outcome

    run_tick_inner = original_run_tick
    run.run_tick = run_tick


if __name__ == "__main__":
    run_bench_tick(install)
