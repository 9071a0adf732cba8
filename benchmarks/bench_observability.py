"""Time what operators and orchestrators poll (/readyz, /metrics, the scheduler status) on
PostgreSQL, on a synthetic cluster after one tick.

Usage (from the repository root; needs a PostgreSQL server)::

    .venv/bin/python benchmarks/bench_observability.py                   # 10k and 100k pending
    .venv/bin/python benchmarks/bench_observability.py --sizes 1000x100 --requests 50

The benchmark database (``IRIS_BENCH_DATABASE_URL``, default
``postgresql://postgres@127.0.0.1:5432/iris_bench``) is dropped and recreated. Each request goes
through Django's test client (the whole middleware and view stack, no network). "first" is the
first request after the tick, when /metrics and the status parse the newest tick's queue
explanation; the median and p90 are of the requests that follow.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SIZES = [(10_000, 1_000), (100_000, 10_000)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="*", help="PENDINGxWORKERS, e.g. 100000x10000")
    parser.add_argument("--requests", type=int, default=30, help="requests per endpoint after the first")
    args = parser.parse_args()
    sizes = [tuple(int(x) for x in s.lower().split("x")) for s in args.sizes] if args.sizes else SIZES

    from benchmarks.bench_tick import open_bench_database

    open_bench_database()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from benchmarks.restore import restore_snapshot
    from benchmarks.synthetic import generate
    from scheduler.store.cluster_rows import forget_cluster_rows
    from scheduler.core.wire import snapshot_from_json
    from scheduler.models import ApiToken
    from scheduler.foundation.roles import ensure_groups
    from scheduler.tick.run import run_tick

    _, operators = ensure_groups()
    ops, _ = get_user_model().objects.get_or_create(username="bench-ops")
    ops.groups.add(operators)
    _, token = ApiToken.objects.create(user=ops, name="bench")
    client = Client(HTTP_AUTHORIZATION=f"Token {token}")
    endpoints = [
        ("/healthz", {}),
        ("/readyz", {}),
        ("/metrics", {"REMOTE_ADDR": "127.0.0.1"}),
        ("/api/v1/scheduler/status", {}),
    ]

    print("| pending | workers | request | status | first ms | median ms | p90 ms | SQL statements |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for pending, workers in sizes:
        snapshot = snapshot_from_json(generate(pending=pending, workers=workers, seed=0))
        restore_snapshot(snapshot)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        forget_cluster_rows()
        run_tick(snapshot.now_ms)
        for path, extra in endpoints:
            times = []
            statements = 0
            for i in range(args.requests + 1):
                count = 0

                def counting(execute, sql, params, many, context):
                    nonlocal count
                    count += 1
                    return execute(sql, params, many, context)

                with connection.execute_wrapper(counting):
                    started = time.perf_counter()
                    response = client.get(path, **extra)
                    times.append((time.perf_counter() - started) * 1000)
                statements = count
            warm = sorted(times[1:])
            print(
                f"| {pending:,} | {workers:,} | `GET {path}` | {response.status_code} | {times[0]:.1f} | "
                f"{statistics.median(warm):.1f} | {warm[int(len(warm) * 0.9)]:.1f} | {statements} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
