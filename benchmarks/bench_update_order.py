"""The tick's task UPDATE with its rows in a set's order against sorted by their keys
(``scheduler.store.bulk.update_rows``, branch writes37): the backend's CPU time.

The UPDATE is sent as ``scheduler.tick.apply`` sends it (by each locked row's position and id,
from one jsonb payload, the change stamp in its SET) for ``--tasks`` pending tasks placed on
workers, the payload in a shuffled order (as a tick's, built from a set of task names); "unsorted"
joins the rows in that order, "sorted" sorts them by the keys on the server first (``ORDER BY``
in the rows' subquery, what ``update_rows`` now sends). Each trial runs on a fresh copy of the
cluster's template and is rolled back; the two forms alternate, swapping which goes first.

Usage (from the repository root; PostgreSQL only; the template is ``explain_tick_writes.py
--build``'s)::

    IRIS_BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/iris_bench_NAME \\
      .venv/bin/python benchmarks/explain_tick_writes.py --build 100000x10000
    IRIS_BENCH_DATABASE_URL=... .venv/bin/python benchmarks/bench_update_order.py --trials 6

Backend CPU is ``utime + stime`` of the server process (``/proc/<pid>/stat``, 10 ms ticks), so
the server must run on this host; it is the figure to compare on a shared host, where the
statement's wall time follows the load.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from urllib.parse import urlparse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

COLUMNS = [
    ("ctid", "tid"),
    ("id", "bigint"),
    ("state", "text"),
    ("worker_id", "bigint"),
    ("band", "smallint"),
    ("preemption_count", "integer"),
    ("attempt_count", "integer"),
    ("updated_at", "timestamptz"),
]


def backend_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def statement(form: str) -> str:
    relation = ", ".join(f"(r->>{i})::{pg_type} AS {name}" for i, (name, pg_type) in enumerate(COLUMNS))
    assignments = ", ".join(f"{name} = v.{name}" for name, _ in COLUMNS[2:])
    order = " ORDER BY 1, 2" if form == "sorted" else ""
    return (
        f"UPDATE scheduler_task SET {assignments}, change_xid = pg_current_xact_id()::text::bigint "
        f"FROM (SELECT {relation} FROM jsonb_array_elements(%s::jsonb) AS r{order}) AS v "
        "WHERE scheduler_task.ctid = v.ctid AND scheduler_task.id = v.id"
    )


def trial(url: str, form: str, seed: int, n_tasks: int) -> None:
    import psycopg

    from benchmarks.explain_tick_writes import admin, template_name

    name = urlparse(url).path.lstrip("/")
    with admin(url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template_name(url)}"')
    with psycopg.connect(url) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        conn.execute("SELECT count(*) FROM scheduler_task").fetchone()  # the table in the cache
        conn.execute("SET LOCAL work_mem = '64MB'")  # as the tick (bulk.keep_payloads_in_memory)
        ids = [row[0] for row in conn.execute("SELECT id FROM scheduler_task WHERE state = 'pending'")]
        random.Random(seed).shuffle(ids)
        ids = ids[:n_tasks]
        locked = conn.execute(
            "SELECT id, ctid::text, attempt_count FROM scheduler_task WHERE id = ANY(%s) FOR UPDATE", [ids]
        ).fetchall()
        at = {pk: (position, attempts) for pk, position, attempts in locked}
        payload = json.dumps(
            [
                [at[pk][0], pk, "assigned", pk % 10_000 + 1, 2, 0, at[pk][1] + 1, "2026-12-07T05:00:00+00:00"]
                for pk in ids
            ]
        )
        before, started = backend_cpu(pid), time.perf_counter()
        conn.execute(statement(form), [payload])
        wall, used = time.perf_counter() - started, backend_cpu(pid) - before
        conn.rollback()
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(
        f"{form:8s} trial {seed}: wall {wall * 1000:7.1f} ms, backend cpu {used * 1000:5.0f} ms, load {load}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=28_561, help="a first tick's placements")
    args = parser.parse_args()
    url = os.environ["IRIS_BENCH_DATABASE_URL"]
    forms = ["unsorted", "sorted"]
    for seed in range(args.trials):
        for form in forms if seed % 2 == 0 else forms[::-1]:
            trial(url, form, seed, args.tasks)


if __name__ == "__main__":
    main()
