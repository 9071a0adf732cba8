"""The server's side of a placing tick's write transaction under schema variants: every statement's
WAL (records, full-page images, bytes; each index entry written is one WAL record) and, for the
set-based UPDATEs, ``EXPLAIN (ANALYZE, BUFFERS, WAL)``; and the PostgreSQL backend's CPU.

Usage (from the repository root; PostgreSQL only)::

    # once: the 100,000 x 10,000 cluster restored and analysed, as bench_tick.py runs it, kept
    # as a template database
    IRIS_BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/iris_bench_NAME \\
      .venv/bin/python benchmarks/explain_tick_writes.py --build 100000x10000
    # then each variant on a fresh copy of it (``CREATE DATABASE ... TEMPLATE``)
    IRIS_BENCH_DATABASE_URL=... .venv/bin/python benchmarks/explain_tick_writes.py --variants main task_ff80

A variant is DDL run on the copy before its ticks (``VARIANTS``; "main" is none: the schema the
tree migrates). Each copy then runs the ticks of ``--ticks`` (bench_tick.py's names; "first"
and "burst" profiled, unpipelined), with a ``CHECKPOINT`` just before each profiled tick. WAL
records and buffer counts do not move with the host's load; milliseconds do, and so do WAL
bytes on a shared server (other databases' checkpoints add full-page images).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from urllib.parse import urlparse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# Each variant's DDL, run on the copy before its first tick (then ANALYZE, as bench_tick.py does).
VARIANTS: dict[str, list[str]] = {
    "main": [],  # the schema as this tree migrates it
    # A lower fillfactor on the task table, its pages rewritten (VACUUM FULL) as if the rows had
    # been inserted under it.
    **{
        f"task_ff{ff}": [f"ALTER TABLE scheduler_task SET (fillfactor = {ff})", "VACUUM FULL scheduler_task"]
        for ff in (90, 80, 70)
    },
    # The preemption events without their five foreign-key constraints (each checked per row at
    # commit; tried by writes37 and not kept: docs/benchmarks.md).
    "events_nofk": [
        "ALTER TABLE scheduler_preemptionevent "
        + ", ".join(
            f"DROP CONSTRAINT IF EXISTS scheduler_preemption_{name}_fk_scheduler"
            for name in (
                "victim_id_f0d5298d",
                "tick_id_fa854b1d",
                "preemptor_id_fc6c9915",
                "worker_id_dbb56b18",
                "victim_job_id_d2d35dab",
            )
        )
    ],
}

PROFILED = ("first", "burst")
# Print each UPDATE's whole plan (``--plans``), not only its first line, buffers and WAL.
FULL_PLANS = False


def template_name(url: str) -> str:
    return urlparse(url).path.lstrip("/") + "_template"


def admin(url: str):
    import psycopg

    parsed = urlparse(url)
    return psycopg.connect(parsed._replace(path="/postgres").geturl(), autocommit=True)


def build(url: str, size: str) -> None:
    from benchmarks.bench_tick import open_bench_database

    open_bench_database()
    from django.db import connection

    from benchmarks.restore import restore_snapshot
    from benchmarks.synthetic import generate
    from scheduler.core.wire import snapshot_from_json

    pending, workers = (int(x) for x in size.lower().split("x"))
    restore_snapshot(snapshot_from_json(generate(pending=pending, workers=workers, seed=0)))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    connection.close()
    name, template = urlparse(url).path.lstrip("/"), template_name(url)
    with admin(url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{template}" TEMPLATE "{name}"')
    print(f"# built {size} into {template}", flush=True)


class StatementWal:
    """Per statement of a tick: wall ms, the WAL it wrote (``pg_current_wal_insert_lsn()`` read
    before and after it, by a cursor of its own) and, for the set-based UPDATEs, the plan's
    buffer and WAL lines. Other connections' WAL written meanwhile counts too: on a shared
    server, compare the plans' WAL records rather than these bytes."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, int, str, list[str]]] = []

    def __call__(self, execute, sql, params, many, context):
        if sql.startswith("SET TRANSACTION"):  # must come first in its transaction
            return execute(sql, params, many, context)
        cursor = context["cursor"]
        # A cursor of psycopg's own: not through this wrapper again, and not the statement's
        # (whose results its caller reads).
        raw = context["connection"].connection.cursor()
        raw.execute("SELECT pg_current_wal_insert_lsn()")
        (before,) = raw.fetchone()
        explain = "_array_elements(" in sql and sql.lstrip().startswith("UPDATE") and not many
        started = time.perf_counter()
        if explain:
            result = execute("EXPLAIN (ANALYZE, BUFFERS, WAL) " + sql, params, many, context)
            plan = [line for (line,) in cursor.fetchall()]
        else:
            result = execute(sql, params, many, context)
            plan = []
        seconds = time.perf_counter() - started
        raw.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s::pg_lsn)", [str(before)])
        (wal,) = raw.fetchone()
        self.rows.append((seconds, int(wal), sql, plan))
        return result

    def report(self, label: str) -> None:
        total = sum(seconds for seconds, _, _, _ in self.rows)
        wal = sum(w for _, w, _, _ in self.rows)
        print(f"# {label}: {len(self.rows)} statements, {total:.2f} s in statements, WAL {wal / 1e6:.2f} MB")
        for seconds, wal, sql, plan in sorted(self.rows, key=lambda row: -row[0])[:12]:
            print(f"#   {seconds * 1000:8.1f} ms  WAL {wal / 1e6:6.2f} MB  {' '.join(sql.split())[:110]}")
            keep = [line.strip() for line in plan if line.strip().startswith(("Buffers:", "WAL:", "Execution Time"))]
            for line in plan if FULL_PLANS else plan[:1] + keep[:2] + keep[-1:]:
                print(f"#              | {line.rstrip()[:160]}")


class CommitTimer:
    """The wall time of the tick's deferred constraint checks and of its COMMIT (the WAL flush),
    both outside every statement: the connection's ``_commit`` is wrapped until ``stop`` to run
    ``SET CONSTRAINTS ALL IMMEDIATE`` (which runs the checks queued so far) before committing."""

    def __init__(self, connection) -> None:
        self.connection, self.seconds, self.checks = connection, 0.0, 0.0
        original = connection._commit

        def timed():
            # The deferred constraint checks first, as a statement of their own (what the
            # commit would run before flushing the WAL), then the commit itself.
            started = time.perf_counter()
            with connection.connection.cursor() as cursor:
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            self.checks += time.perf_counter() - started
            started = time.perf_counter()
            try:
                return original()
            finally:
                self.seconds += time.perf_counter() - started

        connection._commit = timed

    def stop(self) -> None:
        del self.connection._commit


def run_variant(url: str, variant: str, ticks: list[str]) -> None:
    import psycopg

    name, template = urlparse(url).path.lstrip("/"), template_name(url)
    with admin(url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    with psycopg.connect(url, autocommit=True) as conn:
        for sql in VARIANTS[variant]:
            conn.execute(sql)
        conn.execute("ANALYZE")
        size = conn.execute(
            "SELECT pg_relation_size('scheduler_task'), pg_relation_size('scheduler_job'), "
            "pg_relation_size('scheduler_attempt'), pg_relation_size('scheduler_dispatchintent')"
        ).fetchone()
    print(f"## variant {variant}: {'; '.join(VARIANTS[variant]) or 'as migrated'}")
    print(
        f"# heap pages before: task {size[0] // 8192}, job {size[1] // 8192}, attempt {size[2] // 8192}, "
        f"intent {size[3] // 8192}"
    )

    from benchmarks.bench_tick import BURST_SHARE, backend_cpu_seconds, open_bench_database

    open_bench_database(recreate=False)
    from django.db import connection

    from benchmarks.restore import churn
    from benchmarks.synthetic import generate
    from scheduler.core.wire import snapshot_from_json
    from scheduler.store import bulk
    from scheduler.store.cluster_rows import forget_cluster_rows
    from scheduler.tick.run import run_tick

    snapshot = snapshot_from_json(generate(pending=100_000, workers=10_000, seed=0))
    pending = 100_000
    forget_cluster_rows()
    churned = 0
    for label in ticks:
        if label == "churn":
            churned += 1
            churn(snapshot.now_ms, pending // 100, pending // 100, label=f"run1-{churned}")
        elif label == "burst":
            burst = int(pending * BURST_SHARE)
            churn(snapshot.now_ms, burst, burst, label="run1-burst", spread=True)
        profiled = label in PROFILED
        if profiled:
            with connection.cursor() as cursor:
                cursor.execute("CHECKPOINT")
        profile = StatementWal()
        commits = CommitTimer(connection)
        server = backend_cpu_seconds()
        started = time.perf_counter()
        if profiled:
            # Unpipelined, so each statement's WAL is its own.
            pipelined, bulk.pipeline = bulk.pipeline, contextlib.nullcontext
            try:
                with connection.execute_wrapper(profile):
                    outcome = run_tick(snapshot.now_ms)
            finally:
                bulk.pipeline = pipelined
        else:
            outcome = run_tick(snapshot.now_ms)
        total = time.perf_counter() - started
        server = backend_cpu_seconds() - server
        commits.stop()
        print(
            f"# {variant} {label}: {outcome.assigned} assigned, {outcome.preempted} preempted, total {total:.2f} s, "
            f"server cpu {server:.2f} s, deferred checks {commits.checks * 1000:.1f} ms, "
            f"commit {commits.seconds * 1000:.1f} ms (profiled: {profiled})",
            flush=True,
        )
        if profiled:
            profile.report(f"{variant} {label}")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname IN "
            "('scheduler_task', 'scheduler_job', 'scheduler_attempt') ORDER BY relname"
        )
        print("# updates (hot): " + ", ".join(f"{r} {u} ({h})" for r, u, h in cursor.fetchall()))
        cursor.execute("SELECT pg_relation_size('scheduler_task') / 8192, pg_relation_size('scheduler_job') / 8192")
        print("# heap pages after: task %s, job %s" % cursor.fetchone())
    connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", metavar="PENDINGxWORKERS")
    parser.add_argument("--variants", nargs="*", default=[], choices=sorted(VARIANTS))
    parser.add_argument("--ticks", nargs="*", default=["first", "second", "churn", "churn", "churn", "burst"])
    parser.add_argument("--plans", action="store_true", help="print each UPDATE's whole plan")
    args = parser.parse_args()
    global FULL_PLANS
    FULL_PLANS = args.plans
    url = os.environ["IRIS_BENCH_DATABASE_URL"]
    if args.build:
        build(url, args.build)
    for variant in args.variants:
        run_variant(url, variant, args.ticks)


if __name__ == "__main__":
    main()
