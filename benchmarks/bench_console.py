"""Time every console page and API list (and what-if) on PostgreSQL, on a synthetic cluster
after one tick: cold and warm, with SQL statement counts and response sizes.

Usage (from the repository root; needs a PostgreSQL server)::

    IRIS_BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/iris_wt_pages_bench \\
      .venv/bin/python benchmarks/bench_console.py                     # 100k pending x 10k workers
    .venv/bin/python benchmarks/bench_console.py --sizes 10000x1000 --requests 10
    .venv/bin/python benchmarks/bench_console.py --reuse              # keep the restored cluster

The benchmark database (``IRIS_BENCH_DATABASE_URL``) is dropped, recreated and filled by
``benchmarks/restore.py`` (``--reuse`` keeps it as a previous run left it, and runs one more
tick). ``--history-jobs`` then adds a year of finished work (``benchmarks/history.py``) and
vacuums the database, as autovacuum would have over that year (see ``main``). Each request goes
through Django's test client (the whole middleware and view stack, no network), as an operator
signed in to the console or holding an API token. "cold" is the first request after the tick
(when pages parse the newest tick's queue explanation); the median and p90 are of the requests
that follow. "cpu ms" is the median process time of the warm requests.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import sys
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SIZES = [(100_000, 10_000)]
TARGET_WARM_MS = 150
TARGET_BYTES = 300_000
TARGET_WHATIF_WARM_MS = 50
TARGET_WHATIF_COLD_MS = 250
# benchmarks/history.py gives the first of the cluster's users by name the most history.
HEAVY_USER = "user0000"


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass(frozen=True)
class Measured:
    status: int
    size: int
    cold_ms: float
    warm_ms: float
    p90_ms: float
    cpu_ms: float
    statements: int
    content: bytes


def measure(connection, client, method: str, path: str, body, requests: int) -> Measured:
    """One request (cold: the first), then ``requests`` more: wall and CPU time, SQL statements."""
    times, cpus = [], []
    statements = 0
    for _ in range(requests + 1):
        count = 0

        def counting(execute, sql, params, many, context):
            nonlocal count
            count += 1
            return execute(sql, params, many, context)

        with connection.execute_wrapper(counting):
            started, cpu = time.perf_counter(), time.process_time()
            if method == "GET":
                response = client.get(path)
            else:
                response = client.post(path, data=json.dumps(body), content_type="application/json")
            times.append((time.perf_counter() - started) * 1000)
            cpus.append((time.process_time() - cpu) * 1000)
        statements = count
    warm = sorted(times[1:]) or times
    return Measured(
        status=response.status_code,
        size=len(response.content),
        cold_ms=times[0],
        warm_ms=statistics.median(warm),
        p90_ms=warm[int(len(warm) * 0.9)],
        cpu_ms=statistics.median(cpus[1:] or cpus),
        statements=statements,
        content=response.content,
    )


def _history_endpoints(console, api, Job) -> list:
    """The pages a long history weighs on: a finished job's (its attempts and preemptions), the
    jobs of the user with the most history, the finished jobs, the fairness page."""
    finished = Job.objects.filter(state="succeeded").order_by("-submitted_at_ms").values_list("name", flat=True)
    half_a_year_ago = int(time.time() * 1000) - 182 * 86_400_000
    recent, old = finished.first(), finished.filter(submitted_at_ms__lt=half_a_year_ago).first()
    preempted = Job.objects.filter(state="preempted").order_by("-submitted_at_ms").values_list("name", flat=True)
    gone = preempted.first()
    return [
        (console, "GET", "/fairness/", None),
        (console, "GET", f"/jobs{recent}/", None),
        (console, "GET", f"/jobs{old}/", None),
        (console, "GET", f"/jobs{gone}/", None),
        (console, "GET", f"/jobs/?user={HEAVY_USER}", None),
        (console, "GET", "/jobs/?state=succeeded", None),
        (console, "GET", "/jobs/?sort=user", None),
        (console, "GET", f"/budgets/{HEAVY_USER}/", None),
        (api, "GET", "/api/v1/fairness/", None),
        (api, "GET", f"/api/v1/jobs{old}", None),
        (api, "GET", f"/api/v1/jobs{gone}", None),
        (api, "GET", f"/api/v1/jobs/?user={HEAVY_USER}", None),
        (api, "GET", "/api/v1/jobs/?state=failed", None),
        (api, "GET", f"/api/v1/budgets/{HEAVY_USER}", None),
        (api, "GET", "/api/v1/preemptions/?page=2", None),
    ]


def deep_pages(connection, api, follow: int, requests: int, keep_fresh) -> None:
    """``GET /api/v1/jobs/`` by its next links from the first page, ``follow`` of them, each
    timed once; then shareable URLs of pages deep down (a cursor made for the row at each
    depth, as a next link there would be), each timed cold and warm as the pages above.
    ``keep_fresh`` ticks when a beat is due (between requests, untimed)."""
    from urllib.parse import urlencode, urlsplit

    from scheduler.jobs import listing
    from scheduler.models import Job

    print("\n## Deep pages of `GET /api/v1/jobs/`\n")
    print("| page | via | status | KB | ms (first request) | warm median ms | warm cpu ms | SQL |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    path = "/api/v1/jobs/"
    walked = []
    for number in range(1, follow + 1):
        keep_fresh()
        m = measure(connection, api, "GET", path, None, 0)
        walked.append(m.cold_ms)
        if number in (1, 2, follow):
            print(
                f"| {number} | next links | {m.status} | {m.size / 1000:.1f} | {m.cold_ms:.1f} | | | {m.statements} |"
            )
        link = json.loads(m.content).get("next")
        if not link:
            break
        parts = urlsplit(link)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
    print(f"| 1-{len(walked)} | next links | | | median {statistics.median(walked):.1f} | | | |")
    total = Job.objects.count()
    for sort in ("-submitted", "user", "state"):
        view = listing.JobView(sort=sort)
        for depth in (0, total // 2, total - 100):
            if depth == 0:
                url = f"/api/v1/jobs/?{urlencode({'sort': sort})}"
            else:
                row = listing.ordered(Job.objects.all(), view)[depth]
                cursor = listing._cursor(view, row, listing.NEXT)
                url = f"/api/v1/jobs/?{urlencode({'sort': sort, 'cursor': cursor})}"
            keep_fresh()
            m = measure(connection, api, "GET", url, None, requests)
            print(
                f"| row {depth:,} of {total:,}, sort {sort} | {'first page' if not depth else 'shared URL'} | "
                f"{m.status} | {m.size / 1000:.1f} | {m.cold_ms:.1f} | {m.warm_ms:.1f} | {m.cpu_ms:.1f} | "
                f"{m.statements} |",
                flush=True,
            )


def admin_clients(token_name: str):
    """A console client signed in as the benchmarks' admin and an API client with a new token of
    theirs, on the database Django points at; static files served without the manifest (the
    pages link them, and the manifest needs ``collectstatic``, which a benchmark skips)."""
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import override_settings

    from scheduler.foundation.roles import ensure_groups
    from scheduler.models import ApiToken

    override_settings(
        STORAGES={
            "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
            "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
        }
    ).enable()
    admins, _ = ensure_groups()
    ops, _ = get_user_model().objects.get_or_create(username="bench-admin")
    ops.groups.add(admins)
    ops.is_staff = True
    ops.save()
    _, token = ApiToken.objects.create(user=ops, name=token_name)
    console = Client()
    console.force_login(ops)
    return console, Client(HTTP_AUTHORIZATION=f"Token {token}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="*", help="PENDINGxWORKERS, e.g. 100000x10000")
    parser.add_argument("--requests", type=int, default=10, help="warm requests per endpoint after the first")
    parser.add_argument("--reuse", action="store_true", help="keep the database a previous run restored")
    parser.add_argument("--only", help="only the endpoints whose path contains this text")
    parser.add_argument(
        "--history-jobs",
        type=int,
        default=0,
        help="also write this many finished jobs over the past year (benchmarks/history.py), then time the pages",
    )
    parser.add_argument("--history-tasks-per-job", type=int, default=5, help="finished tasks per history job (mean)")
    parser.add_argument(
        "--deep-pages", type=int, default=20, help="with history: next links of GET jobs/ followed from the first page"
    )
    args = parser.parse_args()
    sizes = [tuple(int(x) for x in s.lower().split("x")) for s in args.sizes] if args.sizes else SIZES

    from benchmarks.bench_tick import open_bench_database

    open_bench_database(recreate=not args.reuse)
    from django.conf import settings

    from django.contrib.auth import get_user_model
    from django.db import connection

    from benchmarks.history import add_history
    from benchmarks.restore import restore_snapshot
    from benchmarks.synthetic import generate
    from scheduler.core.wire import snapshot_from_json
    from scheduler.models import Job, Worker
    from scheduler.store import clock
    from scheduler.store.cluster_rows import forget_cluster_rows
    from scheduler.board.read import forget as forget_board
    from scheduler.tick.run import forget_decision, run_tick

    console, api = admin_clients("bench")

    from benchmarks.bench_decision import reference_seconds

    print(f"# reference loop: {reference_seconds():.3f} s; load average: {os.getloadavg()[0]:.2f}")
    print(
        "| pending | workers | request | status | KB | cold ms | warm median ms | warm p90 ms | warm cpu ms | SQL | at target |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for pending, workers in sizes:
        if not args.reuse:
            snapshot = snapshot_from_json(generate(pending=pending, workers=workers, seed=0))
            restore_snapshot(snapshot)
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
            now_ms = snapshot.now_ms
            del snapshot
            if args.history_jobs:
                # A first tick, so the history's tick records carry a real tick's samples; the
                # tick below is then the newest, after the history.
                forget_cluster_rows()
                run_tick(now_ms)
                started = time.perf_counter()
                add_history(args.history_jobs, args.history_tasks_per_job, clock.now_ms())
                # VACUUM, not only ANALYZE: a year-old table has been vacuumed many times over,
                # so its visibility map marks the history's pages all-visible and counts over an
                # index read the index alone. Freshly written rows have no map: the jobs table's
                # count of user0000's jobs then read 14,000 pages of the table (96-235 ms on the
                # server) instead of 100 of an index (2-9 ms). Autovacuum would set the map on
                # its own, but this shared server runs with it off.
                with connection.cursor() as cursor:
                    cursor.execute("VACUUM (ANALYZE)")
                print(f"# history written and vacuumed in {time.perf_counter() - started:.0f} s", flush=True)
        else:
            now_ms = clock.now_ms()

        def beat() -> float:
            """A tick, as the Celery beat runs one every ``IRIS_TICK_SECONDS``. The web process
            holds no copy of the cluster, as in production: neither the rows nor the decision
            the tick keeps for the next one (they live in the Celery worker). Kept here, they
            tripled the objects every full collection of the requests below rescans (a 200 ms
            collection landed in whichever cold request tipped the collector's count). One
            collection after forgetting them sets the collector's count to this smaller heap."""
            forget_cluster_rows()
            run_tick(now_ms)
            forget_cluster_rows()
            forget_decision()
            gc.collect()
            return time.monotonic()

        last_beat = beat()

        def keep_fresh() -> None:
            # The pages read the newest tick's spend while it is fresh (budgets.rules.spend_now),
            # as they do while the beat runs; minutes of requests after one tick would measure
            # the stopped scheduler's fallback (live spend summed per request) instead.
            nonlocal last_beat
            if time.monotonic() - last_beat > settings.TICK_SECONDS:
                last_beat = beat()

        job = Job.objects.filter(state="pending").order_by("id").values_list("name", flat=True).first()
        user = Job.objects.filter(state="pending").order_by("id").values_list("user", flat=True).first()
        worker = Worker.objects.order_by("name").values_list("name", flat=True).first()
        get_user_model().objects.get_or_create(username=user)  # what-if asks on this user's behalf
        whatif = {"name": "bench-whatif", "user": user, "cpu": 1, "memory": "1Gi"}
        endpoints = [
            (console, "GET", "/queue/", None),
            (console, "GET", "/jobs/", None),
            (console, "GET", f"/jobs{job}/", None),
            (console, "GET", "/budgets/", None),
            (console, "GET", f"/budgets/{user}/", None),
            (console, "GET", "/preemptions/", None),
            (console, "GET", "/workers/", None),
            (console, "GET", "/scheduler/", None),
            (console, "GET", "/manage/", None),
            (console, "GET", "/manage/tiers/", None),
            (console, "GET", "/manage/uplifts/", None),
            (console, "GET", "/manage/audit/", None),
            (console, "GET", "/what-if/", None),
            (api, "GET", "/api/v1/jobs/", None),
            (api, "GET", f"/api/v1/jobs{job}", None),
            (api, "GET", f"/api/v1/jobs{job}:explain", None),
            (api, "GET", "/api/v1/queue/", None),
            (api, "GET", "/api/v1/budgets/", None),
            (api, "GET", f"/api/v1/budgets/{user}", None),
            (api, "GET", "/api/v1/uplifts/", None),
            (api, "GET", "/api/v1/audit/", None),
            (api, "GET", "/api/v1/workers/", None),
            (api, "GET", "/api/v1/preemptions/", None),
            (api, "GET", "/api/v1/ticks/", None),
            (api, "GET", "/api/v1/scheduler/status", None),
            (api, "POST", "/api/v1/what-if/", whatif),
        ]
        del worker
        if args.history_jobs or args.reuse:
            endpoints += _history_endpoints(console, api, Job)
        rss_before = _rss_mib()
        for client, method, path, body in endpoints:
            if args.only and args.only not in path:
                continue
            keep_fresh()
            # Cold: this process has parsed nothing of the newest tick (queue index, what-if basis).
            forget_board()
            m = measure(connection, client, method, path, body, args.requests)
            is_whatif = "what-if" in path and method == "POST"
            if is_whatif:
                ok = m.warm_ms <= TARGET_WHATIF_WARM_MS and m.cold_ms <= TARGET_WHATIF_COLD_MS
            else:
                ok = m.warm_ms <= TARGET_WARM_MS and m.size <= TARGET_BYTES
            print(
                f"| {pending:,} | {workers:,} | `{method} {path}` | {m.status} | {m.size / 1000:.1f} | "
                f"{m.cold_ms:.1f} | {m.warm_ms:.1f} | {m.p90_ms:.1f} | {m.cpu_ms:.1f} | {m.statements} | "
                f"{'yes' if ok else 'NO'} |",
                flush=True,
            )

        if (args.history_jobs or args.reuse) and not args.only:
            deep_pages(connection, api, args.deep_pages, args.requests, keep_fresh)
        print(f"\npeak RSS {_rss_mib():.0f} MiB (before the requests: {rss_before:.0f} MiB)", flush=True)
        print(f"# reference loop: {reference_seconds():.3f} s; load average: {os.getloadavg()[0]:.2f} (at the end)")


if __name__ == "__main__":
    main()
