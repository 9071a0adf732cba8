"""The task table's state indexes before and after migration 0035, on one database: the tick's
task UPDATE for a burst-sized batch (``EXPLAIN (ANALYZE, BUFFERS, WAL)``) and every reader of
those indexes (``EXPLAIN (ANALYZE, BUFFERS)``), each form in a transaction that is rolled back.

Usage (from the repository root; PostgreSQL only)::

    # build: a restored cluster, one tick, then a year of finished work, vacuumed
    IRIS_BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/iris_hist_NAME \\
      .venv/bin/python benchmarks/explain_task_indexes.py --build 100000x10000 --history-jobs 2000000
    # then, as often as wanted, on that database as built
    IRIS_BENCH_DATABASE_URL=... .venv/bin/python benchmarks/explain_task_indexes.py --forms before after

Each form first drops the task table's state indexes and builds its own set afresh inside the
transaction (so both are equally compact): "before" the full ``(state)`` and ``(worker_id,
state)`` of migration 0001, "after" the partial ``task_pending`` and ``task_active_by_worker``
of 0035. Then, still inside it:

- the tick's placement UPDATE (``scheduler.tick.apply``: by the locked rows' positions, the
  change stamp in its SET) of ``--tasks`` pending tasks onto the workers in turn, and the end of
  as many active tasks (a worker's report: active -> succeeded), each under ``EXPLAIN (ANALYZE,
  BUFFERS, WAL)``. WAL records and bytes do not depend on the host's load: each index entry
  written is one WAL record.
- each reader's statement, as the code sends it (its function called under a query capture,
  then that SQL explained, warm), with the indexes its plan used.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

ACTIVE = "('assigned', 'building', 'running')"
LIVE = "('assigned', 'building', 'pending', 'running')"
FORMS = {
    "before": [
        "CREATE INDEX scheduler_t_state_f7a5aa_idx ON scheduler_task (state)",
        "CREATE INDEX scheduler_t_worker__2f3cd0_idx ON scheduler_task (worker_id, state)",
    ],
    "after": [
        "CREATE INDEX task_pending ON scheduler_task (job_id) WHERE state = 'pending'",
        f"CREATE INDEX task_active_by_worker ON scheduler_task (worker_id) WHERE state IN {ACTIVE}",
    ],
}
STATE_INDEXES = (
    "scheduler_t_state_f7a5aa_idx",
    "scheduler_t_worker__2f3cd0_idx",
    "task_pending",
    "task_active_by_worker",
)


def build(size: str, history_jobs: int, tasks_per_job: int) -> None:
    from django.db import connection

    from benchmarks.history import add_history
    from benchmarks.restore import restore_snapshot
    from benchmarks.synthetic import generate
    from scheduler.core.wire import snapshot_from_json
    from scheduler.store import clock
    from scheduler.store.cluster_rows import forget_cluster_rows
    from scheduler.tick.run import run_tick

    pending, workers = (int(x) for x in size.lower().split("x"))
    snapshot = snapshot_from_json(generate(pending=pending, workers=workers, seed=0))
    restore_snapshot(snapshot)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    forget_cluster_rows()
    started = time.perf_counter()
    run_tick(snapshot.now_ms)
    print(f"# first tick in {time.perf_counter() - started:.1f} s", flush=True)
    if history_jobs:
        add_history(history_jobs, tasks_per_job, clock.now_ms())
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE)")
    print("# built and vacuumed", flush=True)


def set_indexes(cursor, form: str) -> None:
    for name in STATE_INDEXES:
        cursor.execute(f"DROP INDEX IF EXISTS {name}")
    for sql in FORMS[form]:
        cursor.execute(sql)
    cursor.execute("ANALYZE scheduler_task")


def wal_line(plan: list[str]) -> str:
    return next((line.strip() for line in plan if line.strip().startswith("WAL:")), "")


def explain_writes(cursor, n_tasks: int) -> None:
    """The placement UPDATE as scheduler.tick.apply sends it, then the end of active tasks."""
    from django.db import connection

    from scheduler.models import Task
    from scheduler.store import bulk
    from scheduler.store.cluster_rows import CHANGE_STAMP
    from scheduler.tick.apply import TASK_WRITE_COLUMNS

    cursor.execute(f"SELECT id, attempt_count FROM scheduler_task WHERE state = 'pending' ORDER BY id LIMIT {n_tasks}")
    tasks = cursor.fetchall()
    cursor.execute("SELECT id FROM scheduler_worker ORDER BY id")
    workers = [w for (w,) in cursor.fetchall()]
    cursor.execute(
        "SELECT id, ctid::text FROM scheduler_task WHERE id = ANY(%s::bigint[]) FOR UPDATE", [[pk for pk, _ in tasks]]
    )
    position = dict(cursor.fetchall())
    plans = []

    def explained(execute, sql, params, many, context):
        result = execute("EXPLAIN (ANALYZE, BUFFERS, WAL) " + sql, params, many, context)
        plans.append([line for (line,) in context["cursor"].fetchall()])
        return result

    from datetime import UTC, datetime

    now = datetime.now(UTC)
    cursor.execute("SELECT pg_current_wal_insert_lsn()")
    (start,) = cursor.fetchone()
    with connection.execute_wrapper(explained):
        bulk.update_rows(
            Task._meta.db_table,
            [("ctid", "tid"), ("id", "bigint")],
            TASK_WRITE_COLUMNS,
            [
                (position[pk], pk, "assigned", workers[i % len(workers)], 2, 0, attempts + 1, now)
                for i, (pk, attempts) in enumerate(tasks)
            ],
            postgresql_set=CHANGE_STAMP,
        )
    plan = plans[-1]
    print(f"placement UPDATE of {len(tasks):,} tasks: {wal_line(plan)}; {execution_time(plan)}")
    wal_records(cursor, start)
    # The end of as many active tasks (those placed before this transaction), as a worker's
    # reports finish them: one statement here, the same row versions.
    cursor.execute("SELECT pg_current_wal_insert_lsn()")
    (start,) = cursor.fetchone()
    cursor.execute(
        "EXPLAIN (ANALYZE, BUFFERS, WAL) UPDATE scheduler_task SET state = 'succeeded', updated_at = now() "
        f"WHERE id IN (SELECT id FROM scheduler_task WHERE state IN {ACTIVE} AND NOT id = ANY(%s::bigint[]) "
        f"ORDER BY id LIMIT {n_tasks})",
        [[pk for pk, _ in tasks]],
    )
    plan = [line for (line,) in cursor.fetchall()]
    print(f"end UPDATE of {n_tasks:,} active tasks: {wal_line(plan)}; {execution_time(plan)}")
    wal_records(cursor, start)


def wal_records(cursor, start) -> None:
    """This transaction's WAL records since ``start`` by kind (pg_walinspect, in this database):
    each index entry is one Btree INSERT_LEAF record, whatever else the server is doing (other
    transactions' records are left out by their xid). Full-page images, which depend on when
    the last checkpoint was, are counted apart."""
    cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    cursor.execute("SELECT pg_current_wal_insert_lsn()")
    (end,) = cursor.fetchone()
    for _ in range(100):  # PostgreSQL 15 reads only flushed WAL; the WAL writer flushes soon
        cursor.execute("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", [end])
        if cursor.fetchone()[0]:
            break
        time.sleep(0.1)
    cursor.execute(
        "SELECT resource_manager, record_type, count(*), sum(record_length - fpi_length), sum(fpi_length) "
        "FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn) "
        "WHERE xid::text::bigint = pg_current_xact_id()::text::bigint %% 4294967296 "
        "GROUP BY 1, 2 ORDER BY 3 DESC",
        [start, end],
    )
    rows = cursor.fetchall()
    kinds = "; ".join(f"{rm} {kind} {n:,} ({size / 1e6:.2f} MB)" for rm, kind, n, size, _ in rows)
    fpi = sum(f for *_, f in rows)
    total = sum(size for *_, size, _ in rows)
    print(
        f"    WAL of this transaction: {total / 1e6:.2f} MB without full-page images ({fpi / 1e6:.2f} MB of them): {kinds}"
    )


def execution_time(plan: list[str]) -> str:
    return next((line.strip() for line in plan if line.startswith("Execution Time")), "")


def reader_statements() -> list[tuple[str, str]]:
    """(label, SQL) of every reader of the task table's state indexes, as the code sends them."""
    from django.db import connection
    from django.db.models import Count, Q
    from django.test.utils import CaptureQueriesContext

    from scheduler.budgets.rules import live_spend
    from scheduler.core.types import TaskState
    from scheduler.execution.queries import with_active_tasks, worker_tasks, workers_with_load
    from scheduler.jobs.submit import _unfinished_tasks
    from scheduler.models import Job, Task, Worker
    from scheduler.provisioning.tpu import pending_tpu_jobs
    from scheduler.store import clock
    from scheduler.store.cluster_rows import LIVE_TASK_MATCH, TASK_SELECT, in_list
    from scheduler.store.states import ACTIVE_VALUES, LIVE_TASK_VALUES
    from scheduler.tick.queries import running_by_band_user, task_counts_by_state

    workers = list(Worker.objects.order_by("name")[:50])
    user = Job.objects.filter(finished_state__isnull=True).order_by("id").values_list("user", flat=True).first()
    calls = [
        ("full read, before: state IN live", None),
        ("full read, after: pending OR active", None),
        ("workers_with_load().get (API worker)", lambda: workers_with_load().get(pk=workers[0].pk)),
        (
            "workers_with_load, join form (before)",
            lambda: (
                Worker.objects.annotate(active_tasks=Count("tasks", filter=Q(tasks__state__in=ACTIVE_VALUES)))
                .filter(pk=workers[0].pk)
                .first()
            ),
        ),
        ("with_active_tasks (50 workers)", lambda: with_active_tasks(workers)),
        ("worker_tasks (50 workers)", lambda: worker_tasks([w.pk for w in workers])),
        ("running_by_band_user", running_by_band_user),
        ("live_spend", live_spend),
        (
            "metrics: running by band",
            lambda: dict(
                Task.objects.filter(state__in=ACTIVE_VALUES).order_by().values_list("band").annotate(n=Count("id"))
            ),
        ),
        (
            "feasibility holders (healthy)",
            lambda: list(
                Task.objects.filter(state__in=ACTIVE_VALUES, band__isnull=False)
                .filter(worker__healthy=True, worker__draining=False)
                .order_by()
                .values_list("job__user", "band")
                .annotate(n=Count("id"))
            ),
        ),
        (
            "what-if held per worker",
            lambda: list(
                Task.objects.filter(state__in=ACTIVE_VALUES, band__gt=1)
                .order_by()
                .values_list("worker__name")
                .annotate(n=Count("id"))
            ),
        ),
        ("pending_tpu_jobs", lambda: pending_tpu_jobs(clock.now_ms())),
        ("demo_load pending count", lambda: Task.objects.filter(state=TaskState.PENDING.value).count()),
        ("submit: user's unfinished tasks", lambda: _unfinished_tasks(user).count()),
        ("task_counts_by_state (tests only)", task_counts_by_state),
    ]
    statements = [
        (calls[0][0], f"{TASK_SELECT} WHERE t.state IN {in_list(LIVE_TASK_VALUES)} ORDER BY t.id"),
        (calls[1][0], f"{TASK_SELECT} WHERE {LIVE_TASK_MATCH} ORDER BY t.id"),
    ]
    for label, call in calls[2:]:
        with CaptureQueriesContext(connection) as captured:
            call()
        for query in captured.captured_queries:
            if "scheduler_task" in query["sql"]:
                statements.append((label, query["sql"]))
    return statements


def explain_readers(cursor, statements: list[tuple[str, str]]) -> None:
    print("| reader | indexes used | execution ms | buffers |")
    print("|---|---|---:|---|")
    for label, sql in statements:
        cursor.execute(sql)  # warm
        cursor.fetchall()
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
        plan = [line for (line,) in cursor.fetchall()]
        used = sorted(
            set(re.findall(r"(?:Index|Index Only|Bitmap Index) Scan (?:Backward )?(?:using|on) (\w+)", "\n".join(plan)))
        )
        seq = sorted(set(re.findall(r"Seq Scan on (\w+)", "\n".join(plan))))
        ms = re.search(r"Execution Time: ([\d.]+)", "\n".join(plan))
        buffers = next((line.strip().removeprefix("Buffers: ") for line in plan if "Buffers:" in line), "")
        scans = ", ".join(used + [f"seq {t}" for t in seq])
        print(f"| {label} | {scans} | {float(ms.group(1)):.1f} | {buffers} |", flush=True)
        PLANS.append((label, sql, plan))


PLANS: list[tuple[str, str, list[str]]] = []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", metavar="PENDINGxWORKERS", help="drop, recreate and fill the database first")
    parser.add_argument("--history-jobs", type=int, default=0)
    parser.add_argument("--history-tasks-per-job", type=int, default=5)
    parser.add_argument(
        "--forms", nargs="*", default=["before", "after"], choices=sorted(FORMS), help="in this order, e.g. alternated"
    )
    parser.add_argument("--tasks", type=int, default=30_000, help="tasks the placement UPDATE places (a burst's)")
    parser.add_argument("--writes-only", action="store_true", help="leave the readers out")
    parser.add_argument("--plans", help="write every reader's full plan to this file")
    args = parser.parse_args()

    from benchmarks.bench_tick import open_bench_database

    open_bench_database(recreate=bool(args.build))
    from django.db import connection, transaction

    if args.build:
        build(args.build, args.history_jobs, args.history_tasks_per_job)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT state IN ('succeeded', 'failed', 'killed', 'worker_failed', 'unschedulable', 'preempted', "
            "'cosched_failed'), count(*) FROM scheduler_task GROUP BY 1 ORDER BY 1"
        )
        counts = dict(cursor.fetchall())
    print(f"# tasks: {counts.get(False, 0):,} live, {counts.get(True, 0):,} finished; load {os.getloadavg()[0]:.2f}")
    for form in args.forms:
        print(f"\n## {form}: {'; '.join(FORMS[form])}", flush=True)
        with transaction.atomic(), connection.cursor() as cursor:
            set_indexes(cursor, form)
            cursor.execute(
                "SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes "
                "WHERE relname = 'scheduler_task' ORDER BY 1"
            )
            sizes = ", ".join(f"{name} {size / 2**20:.1f} MiB" for name, size in cursor.fetchall())
            print(f"# task indexes: {sizes}")
            if not args.writes_only:
                explain_readers(cursor, reader_statements())
            explain_writes(cursor, args.tasks)
            transaction.set_rollback(True)
    if args.plans:
        with open(args.plans, "w") as out:
            for label, sql, plan in PLANS:
                out.write(f"### {label}\n{sql}\n" + "\n".join(plan) + "\n\n")


if __name__ == "__main__":
    main()
