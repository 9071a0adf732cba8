"""Time the full tick on PostgreSQL (lease, snapshot load, decide, apply, commit) and count SQL
statements per tick, on synthetic clusters.

Usage (from the repository root; needs a PostgreSQL server)::

    .venv/bin/python benchmarks/bench_tick.py                      # 1k/10k/100k pending
    .venv/bin/python benchmarks/bench_tick.py --sizes 1000x100     # one size
    IRIS_BENCH_DATABASE_URL=postgresql://user@host:5432/iris_bench .venv/bin/python benchmarks/bench_tick.py

The benchmark database (default ``postgresql://postgres@127.0.0.1:5432/iris_bench``) is dropped
and recreated. For each size the synthetic cluster (``benchmarks/synthetic.py``) is written as
rows, then two ticks run: the first places a full cluster's worth of work, the second is the
steady state (little left that fits).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from urllib.parse import urlparse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/iris_bench"
SIZES = [(1_000, 100), (10_000, 1_000), (100_000, 10_000)]
TARGET_TICK_SECONDS = 2.0


def recreate_database(url: str) -> None:
    import psycopg

    parsed = urlparse(url)
    name = parsed.path.lstrip("/")
    admin_url = parsed._replace(path="/postgres").geturl()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="*", help="PENDINGxWORKERS, e.g. 100000x10000")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sizes = [tuple(int(x) for x in s.lower().split("x")) for s in args.sizes] if args.sizes else SIZES

    url = os.environ.get("IRIS_BENCH_DATABASE_URL", DEFAULT_URL)
    recreate_database(url)
    os.environ["IRIS_DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "iris_web.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from benchmarks.restore import restore_snapshot
    from benchmarks.synthetic import generate
    from scheduler.core.wire import snapshot_from_json
    from scheduler.snapshot import load_snapshot
    from scheduler.tick import run_tick

    call_command("migrate", verbosity=0)
    print(f"# full tick on PostgreSQL — {platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} cores, {platform.machine()}")
    print("| pending | workers | tick | total s | load s | decide s | apply+commit s | assigned | preempted | SQL statements |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for pending, workers in sizes:
        snapshot = snapshot_from_json(generate(pending=pending, workers=workers, seed=args.seed))
        restore_snapshot(snapshot)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        for label in ("first", "steady"):
            # The snapshot load alone, timed outside the tick (the tick then loads it again).
            load_started = time.perf_counter()
            load_snapshot(snapshot.now_ms)
            load = time.perf_counter() - load_started
            statements = 0

            def count(execute, sql, params, many, context):
                nonlocal statements
                statements += 1
                return execute(sql, params, many, context)

            with connection.execute_wrapper(count):
                started = time.perf_counter()
                outcome = run_tick(snapshot.now_ms)
                total = time.perf_counter() - started
            decide = _decide_seconds(outcome)
            flag = "" if total <= TARGET_TICK_SECONDS else " (over target)"
            print(
                f"| {pending:,} | {workers:,} | {label} | {total:.2f}{flag} | {load:.2f} | "
                f"{decide:.2f} | {max(total - load - decide, 0):.2f} | {outcome.assigned:,} | "
                f"{outcome.preempted:,} | {statements} |",
                flush=True,
            )


def _decide_seconds(outcome) -> float:
    from scheduler.models import TickRecord

    return TickRecord.objects.get(pk=outcome.tick_id).decide_ms / 1000


if __name__ == "__main__":
    main()
