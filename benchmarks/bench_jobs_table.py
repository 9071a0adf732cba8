"""Time the console's jobs table (/jobs/) and the API's job list at 100,000 jobs on PostgreSQL,
and show the query plans of its main filter and sort combinations.

Usage (from the repository root; needs a PostgreSQL server)::

    IRIS_BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/NAME_bench \\
        .venv/bin/python benchmarks/bench_jobs_table.py [--jobs 100000] [--requests 20]

The database named by ``IRIS_BENCH_DATABASE_URL`` is dropped and recreated. 100,000 jobs of
200 users (every band, state and route; 1 to 4 tasks each; 2% running, so some users are over
budget and the effective band has work to do) are written directly. Each request goes through
Django's test client (middleware, view, template; no network) signed in as an admin (who sees
every job). Reported per URL: the first request, the median and p90 of the warm ones (wall and
this process's CPU time), the median time spent waiting on SQL (as Django times it), the
response size and the SQL statements. Targets: <= 150 ms warm, <= 300 KB.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

URLS = [
    "/jobs/",
    "/jobs/?user=user007",
    "/jobs/?state=pending&sort=-submitted",
    "/jobs/?band=interactive&page=50",
    "/jobs/?effective=batch&group=user",
    "/jobs/?name=sweep-1&sort=name",
    "/jobs/?state=running&sort=user&group=band",
    "/jobs/?route=kubernetes&submitted_after=2027-01-10&submitted_before=2027-01-12",
    "/jobs/?sort=-tasks",
    "/api/v1/jobs/?user=user007&state=pending",
]
TARGET_MS, TARGET_BYTES = 150, 300_000
DAY_MS = 86_400_000


def populate(n: int) -> None:
    from django.utils import timezone

    from scheduler.models import Attempt, Job, Task, UserBudget, Worker
    from tests.personas import NOW_MS

    rng = random.Random(0)
    states = ["pending"] * 5 + ["succeeded"] * 3 + ["failed", "killed", "running"]
    routes = ["", "workers", "workers", "kubernetes"]
    worker = Worker.objects.create(
        name="bench-w", cpu_millicores=10**9, memory_bytes=10**15, last_heartbeat=timezone.now()
    )
    batch = 5_000
    for start in range(0, n, batch):
        jobs = []
        for i in range(start, min(n, start + batch)):
            user = f"user{rng.randrange(200):03d}"
            at = NOW_MS - rng.randrange(14 * DAY_MS)
            state = "running" if rng.random() < 0.02 else rng.choice(states[:-1])
            jobs.append(
                Job(
                    name=f"/{user}/{rng.choice(['train', 'sweep', 'eval'])}-{i}",
                    user=user,
                    band=rng.choice([0, 1, 2, 2, 2, 3, 3]),
                    state=state,
                    depth=0,
                    submitted_at_ms=at,
                    root_submitted_at_ms=at,
                    replicas=rng.randint(1, 4),
                    route=rng.choice(routes),
                    cpu_millicores=1000,
                    memory_bytes=1 << 30,
                )
            )
        Job.objects.bulk_create(jobs)
    tasks = []
    for pk, replicas, state in Job.objects.values_list("pk", "replicas", "state").iterator():
        task_state = {"running": "running", "pending": "pending"}.get(state, state)
        tasks += [
            Task(
                job_id=pk,
                index=i,
                state=task_state,
                worker=worker if task_state == "running" else None,
                band=2 if task_state == "running" else None,
            )
            for i in range(replicas)
        ]
        if len(tasks) >= batch:
            Task.objects.bulk_create(tasks)
            tasks = []
    Task.objects.bulk_create(tasks)
    now = timezone.now()
    Attempt.objects.bulk_create(
        Attempt(task_id=pk, number=1, worker=worker, state="running", band=2, created_at=now)
        for pk in Task.objects.filter(state="running").values_list("pk", flat=True)
    )
    UserBudget.objects.bulk_create(
        UserBudget(user_id=f"user{u:03d}", budget_limit=1, max_band=2) for u in range(0, 200, 5)
    )


def explain(sql_and_params) -> str:
    from django.db import connection

    sql, params = sql_and_params
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--plans", action="store_true", help="print the query plans of the main combinations")
    parser.add_argument(
        "--slowest", action="store_true", help="print each URL's three slowest statements (last request)"
    )
    parser.add_argument("--urls", nargs="*", help="only these URLs (default: the built-in list)")
    args = parser.parse_args()

    from benchmarks.bench_tick import DEFAULT_URL, recreate_database

    url = os.environ.get("IRIS_BENCH_DATABASE_URL", DEFAULT_URL)
    recreate_database(url)
    os.environ["IRIS_DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "iris_web.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection, reset_queries
    from django.test import Client

    from scheduler.jobs import listing
    from tests.personas import make_user

    settings.DEBUG = True  # count SQL statements
    settings.ALLOWED_HOSTS = ["*"]
    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    populate(args.jobs)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    print(f"populated {args.jobs:,} jobs in {time.perf_counter() - started:.1f} s; load {os.getloadavg()}")
    client = Client()
    client.force_login(make_user("bench-admin", "admin"))

    print("| URL | status | first ms | median ms | p90 ms | median CPU ms | median SQL ms | KB | SQL |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    slowest = []
    for path in args.urls or URLS:
        wall, cpu, sql = [], [], []
        for i in range(args.requests + 1):
            reset_queries()
            t0, c0 = time.perf_counter(), time.process_time()
            response = client.get(path)
            wall.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
            statements = len(connection.queries)
            sql.append(sum(float(q["time"]) for q in connection.queries) * 1000)
        slowest.append((path, sorted(connection.queries, key=lambda q: -float(q["time"]))[:3]))
        warm = sorted(wall[1:])
        print(
            f"| `{path}` | {response.status_code} | {wall[0]:.0f} | {statistics.median(warm):.0f} | "
            f"{warm[int(len(warm) * 0.9) - 1]:.0f} | {statistics.median(cpu[1:]):.0f} | {statistics.median(sql[1:]):.0f} | {len(response.content) / 1000:.0f} | "
            f"{statements} |"
        )
    print(f"load average after: {os.getloadavg()}")
    if args.slowest:
        for path, queries in slowest:
            print(f"\n-- {path}: slowest statements")
            for q in queries:
                print(f"{float(q['time']) * 1000:6.1f} ms  {q['sql'][:160]}")
    if args.plans:
        over = listing.over_budget_users()
        for params in (
            {},
            {"user": "user007"},
            {"state": "pending"},
            {"band": "interactive"},
            {"route": "kubernetes"},
            {"state": "running", "sort": "user"},
            {"effective": "batch"},
        ):
            qs = listing.ordered(listing.filtered_jobs(listing.parse_filter(params), over), listing.parse_view(params))
            print(f"\n-- {params or 'no filter'}: page query\n{explain(qs[:50].query.sql_with_params())}")


if __name__ == "__main__":
    main()
