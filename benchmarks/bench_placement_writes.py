"""The server's CPU for a placing tick's per-task writes, in the form before migration 0031 and
after, alternated on one database, each round rolled back.

Usage (from the repository root; on a database ``bench_tick.py`` left behind, with migration 0031
applied, e.g. after ``bench_tick.py --sizes 100000x10000 --ticks first burst``)::

    .venv/bin/python benchmarks/bench_placement_writes.py postgresql://postgres@127.0.0.1:5432/iris_bench --rounds 6

Each round, in one transaction that is rolled back, places ``--tasks`` pending tasks the way
``tick/apply.py`` writes them (attempts inserted, the tasks locked and updated, their jobs flipped
to running) and reads this connection's backend CPU (``/proc/<pid>/stat``; the server runs on
this host) before and after. "before": the triggers of migrations 0004/0026 put back inside the
transaction, the task UPDATE matched by id; "after": the schema as migrated, the UPDATE by the
locked rows' positions with the stamp in its SET. The host is shared, so the two forms run
alternately and the table is vacuumed between rounds (each rolled-back round leaves dead rows).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

STAMP_0031 = importlib.import_module("scheduler.migrations.0031_change_stamp_without_row_triggers")


def backend_cpu(conn) -> float:
    pid = conn.info.backend_pid
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def put_back_old_triggers(cur) -> None:
    """Migration 0031's BACKWARD, inside the round's transaction (rolled back with it)."""
    for sql in STAMP_0031.BACKWARD:
        cur.execute(sql)


def place(conn, form: str, n_tasks: int) -> tuple[float, float]:
    """One round: (backend CPU s, wall s) of the writes, rolled back."""
    with conn.transaction(force_rollback=True):
        cur = conn.cursor()
        if form == "before":
            put_back_old_triggers(cur)
        cur.execute(
            "SELECT t.id, t.attempt_count, t.job_id FROM scheduler_task t WHERE t.state = 'pending' ORDER BY t.id LIMIT %s",
            [n_tasks],
        )
        tasks = cur.fetchall()
        cur.execute("SELECT id FROM scheduler_worker ORDER BY id")
        workers = [w for (w,) in cur.fetchall()]
        cur.execute("SET LOCAL work_mem = '64MB'")
        started_cpu, started = backend_cpu(conn), time.perf_counter()
        with cur.copy(
            "COPY scheduler_attempt (task_id, number, worker_id, state, band, created_at, error) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["bigint", "integer", "bigint", "text", "smallint", "timestamptz", "text"])
            now = datetime.now(UTC)
            for i, (pk, attempts, _) in enumerate(tasks):
                copy.write_row((pk, attempts + 1, workers[i % len(workers)], "assigned", 2, now, ""))
        pks = [pk for pk, _, _ in tasks]
        if form == "before":
            cur.execute("SELECT id, state, worker_id FROM scheduler_task WHERE id = ANY(%s) FOR UPDATE", [pks])
            cur.fetchall()
            payload = [[pk, "assigned", workers[i % len(workers)], 2, 0, a + 1] for i, (pk, a, _) in enumerate(tasks)]
            cur.execute(
                "UPDATE scheduler_task SET state = v.state, worker_id = v.worker_id, band = v.band, "
                "preemption_count = v.pc, attempt_count = v.ac, updated_at = now() FROM (SELECT (r->>0)::bigint AS id, "
                "(r->>1)::text AS state, (r->>2)::bigint AS worker_id, (r->>3)::smallint AS band, (r->>4)::integer AS pc, "
                "(r->>5)::integer AS ac FROM jsonb_array_elements(%s::jsonb) AS r) AS v WHERE scheduler_task.id = v.id",
                [json.dumps(payload)],
            )
        else:
            cur.execute(
                "SELECT id, state, worker_id, ctid::text FROM scheduler_task WHERE id = ANY(%s) FOR UPDATE", [pks]
            )
            position = {pk: ctid for pk, _, _, ctid in cur.fetchall()}
            payload = [
                [position[pk], pk, "assigned", workers[i % len(workers)], 2, 0, a + 1]
                for i, (pk, a, _) in enumerate(tasks)
            ]
            cur.execute(
                "UPDATE scheduler_task SET state = v.state, worker_id = v.worker_id, band = v.band, "
                "preemption_count = v.pc, attempt_count = v.ac, updated_at = now(), "
                "change_xid = pg_current_xact_id()::text::bigint FROM (SELECT (r->>0)::tid AS ctid, (r->>1)::bigint AS id, "
                "(r->>2)::text AS state, (r->>3)::bigint AS worker_id, (r->>4)::smallint AS band, (r->>5)::integer AS pc, "
                "(r->>6)::integer AS ac FROM jsonb_array_elements(%s::jsonb) AS r) AS v "
                "WHERE scheduler_task.ctid = v.ctid AND scheduler_task.id = v.id",
                [json.dumps(payload)],
            )
        jobs = sorted({job for _, _, job in tasks})
        cur.execute(
            "UPDATE scheduler_job SET state = v.state FROM (SELECT (r->>0)::bigint AS id, (r->>1)::text AS state "
            "FROM jsonb_array_elements(%s::jsonb) AS r) AS v WHERE scheduler_job.id = v.id "
            "AND scheduler_job.state IN ('pending', 'running') AND scheduler_job.state IS DISTINCT FROM v.state",
            [json.dumps([[job, "running"] for job in jobs])],
        )
        return backend_cpu(conn) - started_cpu, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of each form, alternated")
    parser.add_argument("--tasks", type=int, default=30_000)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {"before": [], "after": []}
    print(f"# load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with psycopg.connect(args.url, autocommit=True) as conn:
        for round_ in range(args.rounds):
            for form in ("before", "after") if round_ % 2 == 0 else ("after", "before"):
                conn.execute("VACUUM scheduler_task, scheduler_job, scheduler_attempt")
                cpu, wall = place(conn, form, args.tasks)
                results[form].append((cpu, wall))
                print(f"round {round_ + 1} {form:6}: server cpu {cpu:.2f} s, wall {wall:.2f} s", flush=True)
    for form, runs in results.items():
        cpus = [cpu for cpu, _ in runs]
        print(f"# {form}: server cpu median {statistics.median(cpus):.3f} s (min {min(cpus):.2f}, max {max(cpus):.2f})")
    print(f"# load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
