"""A year of finished work written beside a restored cluster, in set-based SQL (PostgreSQL only).

``add_history(jobs, tasks_per_job, now_ms)`` adds ``jobs`` finished jobs submitted over the year
before ``now_ms``, their finished tasks (``tasks_per_job`` on average: 1 to ``2k - 1`` replicas)
and attempts, preemption events over the retention window (``IRIS_PREEMPTION_HISTORY_DAYS``) and
one tick record per beat interval over the tick records' window (``IRIS_TICK_HISTORY_DAYS``), each
as one ``INSERT ... SELECT ... FROM generate_series`` statement. The mix:

- states: about 72% succeeded, 14% failed (the first task failed, the others killed with it), 9%
  killed, 3% preempted (out of preemption retries), 1% unschedulable (never ran: no attempt), 1%
  cosched_failed;
- users: the cluster's users (those of its jobs), the first by name far more often (the square of a uniform
  draw: ``user0000`` owns about 5% of the history), and 50 users who have left (``alumni000``...), who own history and nothing live;
- bands: SYSTEM 1%, PRODUCTION 14%, INTERACTIVE 45%, BATCH 40%;
- attempts run on the cluster's workers (any of them); one task in twelve was preempted once
  before its final attempt (two attempts, the first ``preempted``), and each of those preempted
  within the preemption window has its ``PreemptionEvent`` (by a task of a higher band, linked to
  the tick of its time while that tick record is kept).

The rows go in after the cluster's (their ids are higher though their times are older; every
page sorts by time or by a column, so only the id order is unrealistic). The same arguments give
the same rows (``setseed``). Nothing here goes through the services: it writes states directly.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.db import connection

from scheduler.models import Attempt, Job, PreemptionEvent, Task, TickRecord, Worker

YEAR_MS = 365 * 86_400_000
ALUMNI = 50


def _run(cursor, label: str, sql: str, params=None) -> None:
    started = time.perf_counter()
    cursor.execute(sql, params)
    print(f"# history: {label}: {cursor.rowcount:,} rows in {time.perf_counter() - started:.1f} s", flush=True)


def add_history(jobs: int, tasks_per_job: int, now_ms: int, *, seed: float = 0.26) -> None:
    """Write the history (see the module docstring). Runs in autocommit, one statement per table."""
    if connection.vendor != "postgresql":
        raise RuntimeError("the history fill is PostgreSQL SQL")
    job_t, task_t, attempt_t = Job._meta.db_table, Task._meta.db_table, Attempt._meta.db_table
    event_t, tick_t, worker_t = PreemptionEvent._meta.db_table, TickRecord._meta.db_table, Worker._meta.db_table
    max_replicas = 2 * tasks_per_job - 1
    tick_ms = int(settings.TICK_SECONDS * 1000)
    ticks = int(settings.TICK_HISTORY_DAYS * 86_400_000 // tick_ms)
    events_since_ms = now_ms - int(settings.PREEMPTION_HISTORY_DAYS * 86_400_000)
    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit = off")
        cursor.execute("SET maintenance_work_mem = '256MB'")
        cursor.execute("SELECT setseed(%s)", [seed])
        cursor.execute(f"SELECT COALESCE(MAX(id), 0) FROM {job_t}")
        (first_job,) = cursor.fetchone()
        cursor.execute(f"SELECT COALESCE(MAX(id), 0) FROM {task_t}")
        (first_task,) = cursor.fetchone()
        cursor.execute(f"SELECT COALESCE(MAX(id), 0) FROM {tick_t}")
        (first_tick,) = cursor.fetchone()
        # Jobs: g spreads submissions evenly over the year (with up to an hour of jitter); each
        # job draws its user, band, state, size and run time once.
        _run(
            cursor,
            "jobs",
            f"""
            WITH users AS (
                SELECT array_agg(u ORDER BY gone, u) AS names FROM (
                    SELECT DISTINCT "user" AS u, false AS gone FROM {job_t}
                    UNION ALL SELECT 'alumni' || lpad(i::text, 3, '0'), true FROM generate_series(0, {ALUMNI - 1}) AS i
                ) AS all_users
            ), draws AS (
                SELECT g, random() AS ru, random() AS rb, random() AS rs, random() AS rr, random() AS rw,
                       random() AS rd, random() AS rj
                FROM generate_series(1, %(jobs)s) AS g
            ), picked AS (
                SELECT g,
                       users.names[1 + floor(ru * ru * array_length(users.names, 1))::int] AS usr,
                       CASE WHEN rb < 0.01 THEN 0 WHEN rb < 0.15 THEN 1 WHEN rb < 0.60 THEN 2 ELSE 3 END AS band,
                       CASE WHEN rs < 0.72 THEN 'succeeded' WHEN rs < 0.86 THEN 'failed' WHEN rs < 0.95 THEN 'killed'
                            WHEN rs < 0.98 THEN 'preempted' WHEN rs < 0.99 THEN 'unschedulable'
                            ELSE 'cosched_failed' END AS state,
                       1 + floor(rr * %(max_replicas)s)::int AS replicas,
                       %(now)s - %(year)s + (g::bigint * %(year)s) / %(jobs)s - floor(rj * 3600000)::bigint
                           AS submitted,
                       floor(rw * rw * 7200000)::bigint AS wait_ms,
                       60000 + floor(rd * rd * rd * 172800000)::bigint AS run_ms
                FROM draws, users
            )
            INSERT INTO {job_t} (name, parent_id, "user", submitted_by_id, band, state, depth, submitted_at_ms,
                root_submitted_at_ms, replicas, cpu_millicores, memory_bytes, device_type, device_variant,
                device_count, group_by, constraints, scheduling_deadline_ms, max_retries_preemption,
                max_retries_failure, command, submission_argv, request, system_reason, route, created_at,
                finished_at)
            SELECT '/' || usr || '/hist-' || lpad(g::text, 8, '0'), NULL, usr, NULL, band, state, 1, submitted,
                submitted, replicas, (1 + g %% 8) * 1000, (2 + g %% 15)::bigint * 1073741824,
                CASE WHEN g %% 10 = 0 THEN 'gpu' ELSE 'cpu' END,
                CASE WHEN g %% 10 = 0 THEN 'h100' ELSE '' END,
                CASE WHEN g %% 10 = 0 THEN 8 ELSE 0 END,
                NULL, '[]'::jsonb, NULL, 100, 0,
                jsonb_build_array('python', 'train.py', '--seed', g), '[]'::jsonb, '{{}}'::jsonb,
                CASE WHEN band = 0 THEN 'cluster upkeep' ELSE '' END, 'workers',
                to_timestamp(submitted / 1000.0),
                to_timestamp((submitted + wait_ms + CASE WHEN state = 'unschedulable' THEN 0 ELSE run_ms END)
                    / 1000.0)
            FROM picked ORDER BY g
            """,
            {"jobs": jobs, "max_replicas": max_replicas, "now": now_ms, "year": YEAR_MS},
        )
        # Tasks: each job's replicas, in its final state; one in twelve preempted once before.
        _run(
            cursor,
            "tasks",
            f"""
            INSERT INTO {task_t} (job_id, index, state, worker_id, band, preemption_count, failure_count,
                attempt_count, updated_at)
            SELECT j.id, i,
                CASE WHEN j.state = 'failed' THEN CASE WHEN i = 0 THEN 'failed' ELSE 'killed' END ELSE j.state END,
                NULL, j.band,
                CASE WHEN j.state = 'preempted' THEN 1 + (j.id %% 3)
                     WHEN j.state <> 'unschedulable' AND j.band > 0 AND (j.id + i) %% 12 = 0 THEN 1 ELSE 0 END,
                CASE WHEN j.state = 'failed' AND i = 0 THEN 1 ELSE 0 END,
                CASE WHEN j.state = 'unschedulable' THEN 0
                     WHEN j.state = 'preempted' THEN 1 + (j.id %% 3)
                     WHEN j.band > 0 AND (j.id + i) %% 12 = 0 THEN 2 ELSE 1 END,
                j.finished_at
            FROM {job_t} AS j, generate_series(0, j.replicas - 1) AS i
            WHERE j.id > %(first_job)s
            """,
            {"first_job": first_job},
        )
        # Attempts: 1..attempt_count per task, on a worker of the cluster; every attempt before
        # the last was preempted, the last ended as the task did.
        _run(
            cursor,
            "attempts",
            f"""
            WITH w AS (SELECT array_agg(id ORDER BY id) AS ids FROM {worker_t})
            INSERT INTO {attempt_t} (task_id, number, worker_id, state, band, created_at, started_at, finished_at,
                exit_code, error)
            SELECT t.id, n, w.ids[1 + ((t.id * 7919 + n * 104729) %% array_length(w.ids, 1))::int],
                CASE WHEN n < t.attempt_count THEN 'preempted' ELSE t.state END, t.band,
                j.created_at + (j.finished_at - j.created_at) * (n - 1) / t.attempt_count,
                j.created_at + (j.finished_at - j.created_at) * (n - 1) / t.attempt_count + interval '20 seconds',
                j.created_at + (j.finished_at - j.created_at) * n / t.attempt_count,
                CASE WHEN n < t.attempt_count THEN NULL WHEN t.state = 'succeeded' THEN 0
                     WHEN t.state = 'failed' THEN 1 WHEN t.state = 'killed' THEN 137 ELSE NULL END,
                CASE WHEN n = t.attempt_count AND t.state = 'failed' THEN 'exit status 1' ELSE '' END
            FROM {task_t} AS t JOIN {job_t} AS j ON j.id = t.job_id, w, generate_series(1, t.attempt_count) AS n
            WHERE t.id > %(first_task)s
            """,
            {"first_task": first_task},
        )
        # Tick records: one per beat over the kept window, each carrying the newest tick's
        # spend, limits and fairness samples (their size is what the charts read).
        _run(
            cursor,
            "tick records",
            f"""
            WITH newest AS (SELECT spend, limits, fairness FROM {tick_t} ORDER BY id DESC LIMIT 1)
            INSERT INTO {tick_t} (started_at, now_ms, duration_ms, decide_ms, pending, left_pending, assigned,
                preempted, expired, spend, spend_change, limits, fairness, explanation, whatif_basis,
                explanation_tick_id)
            SELECT to_timestamp((%(now)s - (%(ticks)s - k + 1)::bigint * %(tick)s) / 1000.0),
                %(now)s - (%(ticks)s - k + 1)::bigint * %(tick)s,
                200 + random() * 800, 100 + random() * 300, 100000, 99000 + floor(random() * 1000)::int,
                floor(random() * 500)::int, floor(random() * 20)::int, 0,
                COALESCE(newest.spend, '{{}}'::jsonb), '{{}}'::jsonb, COALESCE(newest.limits, '{{}}'::jsonb),
                COALESCE(newest.fairness, '{{}}'::jsonb), NULL, NULL, NULL
            FROM generate_series(1, %(ticks)s) AS k LEFT JOIN newest ON true ORDER BY k
            """,
            {"now": now_ms, "ticks": ticks, "tick": tick_ms},
        )
        # Preemption events: each history task's preempted attempts within the window, by a
        # task of another history job (its band one higher), on the attempt's worker; linked to
        # the tick record of that moment while one is kept.
        _run(
            cursor,
            "preemption events",
            f"""
            INSERT INTO {event_t} (tick_id, victim_id, preemptor_id, victim_band, preemptor_band, worker_id, reason,
                created_at, victim_user, lost_point_ms, victim_job_id)
            SELECT CASE WHEN k BETWEEN 1 AND %(ticks)s THEN %(first_tick)s + k END,
                a.task_id, p.id, a.band, a.band - 1, a.worker_id,
                'Preempted by ' || pj.name || '/' || p.index || ' ('
                    || (ARRAY['SYSTEM', 'PRODUCTION', 'INTERACTIVE', 'BATCH'])[a.band] || ' over '
                    || (ARRAY['SYSTEM', 'PRODUCTION', 'INTERACTIVE', 'BATCH'])[a.band + 1] || ')',
                a.finished_at, vj."user",
                COALESCE(round((1000 * (CASE WHEN vj.device_type IN ('gpu', 'tpu') THEN vj.device_count ELSE 0 END)
                    + vj.memory_bytes / 1073741824 + 5 * (vj.cpu_millicores / 1000))
                    * extract(epoch FROM a.finished_at - a.started_at) * 1000)::bigint, 0), vj.id
            FROM (
                SELECT a.*, %(ticks)s + 1 - ceil((%(now)s - extract(epoch FROM a.finished_at) * 1000) / %(tick)s)::bigint
                    AS k
                FROM {attempt_t} AS a
                WHERE a.task_id > %(first_task)s AND a.state = 'preempted' AND a.band > 0
                  AND a.finished_at >= to_timestamp(%(since)s / 1000.0)
            ) AS a
            JOIN {task_t} AS p ON p.id = %(first_task)s + 1 + (a.task_id * 31 + 17) %% %(tasks)s
            JOIN {job_t} AS pj ON pj.id = p.job_id
            JOIN {task_t} AS vt ON vt.id = a.task_id
            JOIN {job_t} AS vj ON vj.id = vt.job_id
            ORDER BY a.finished_at, a.id
            """,
            {
                "ticks": ticks,
                "first_tick": first_tick,
                "now": now_ms,
                "tick": tick_ms,
                "first_task": first_task,
                "since": events_since_ms,
                "tasks": _count(cursor, task_t, first_task),
            },
        )
        cursor.execute("SET synchronous_commit = on")


def _count(cursor, table: str, after_id: int) -> int:
    cursor.execute(f"SELECT COUNT(*) FROM {table} WHERE id > %s", [after_id])
    return cursor.fetchone()[0]
