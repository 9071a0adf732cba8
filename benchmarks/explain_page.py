"""Every SQL statement of one console page or API request, with its server time: each SELECT the
request ran, run again under ``EXPLAIN (ANALYZE, BUFFERS)``.

Usage (from the repository root, on a database ``bench_console.py`` left, e.g. with history)::

    IRIS_BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/iris_history26_bench \\
      .venv/bin/python benchmarks/explain_page.py '/jobs/?user=user0000' /scheduler/ [--plans]

Each path is requested three times (signed in as the benchmark's operator, ``bench-admin``, or
with its API token for ``/api/`` paths) and the statements of the third are captured, so the
process's caches are as warm as ``bench_console.py``'s warm requests. Printed per statement: the
time Django measured in this process, PostgreSQL's execution and planning time and shared
buffers (hit and read) of the same statement run again (the second run of a statement is warm in
PostgreSQL's buffers too), and the statement's first 160 characters; ``--plans`` prints each
whole plan. Statements other than SELECTs (savepoints, session settings) and prepared statements (whose
text holds placeholders) are listed, not run again.
The database is read, never written (but for the login's session rows).
"""

from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", help="request paths, e.g. '/jobs/?user=user0000'")
    parser.add_argument("--plans", action="store_true", help="print each statement's whole plan")
    args = parser.parse_args()

    from benchmarks.bench_tick import open_bench_database

    open_bench_database(recreate=False)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from benchmarks.bench_console import admin_clients
    from benchmarks.bench_decision import reference_seconds

    console, api = admin_clients("explain")

    print(f"# reference loop: {reference_seconds():.3f} s; load average: {os.getloadavg()[0]:.2f}")
    for path in args.paths:
        client = api if path.startswith("/api/") else console
        for _ in range(2):
            client.get(path)
        with CaptureQueriesContext(connection) as queries:
            response = client.get(path)
        print(f"\n## GET {path}: {response.status_code}, {len(response.content):,} bytes, {len(queries)} statements\n")
        total_server = 0.0
        for number, query in enumerate(queries.captured_queries, 1):
            sql = query["sql"]
            head = " ".join(sql.split())[:160]
            if not sql.lstrip().upper().startswith(("SELECT", "WITH")) or "%s" in sql:
                # Not a read, or a prepared statement's text without its parameters.
                print(f"{number:2}. django {float(query['time']) * 1000:7.1f} ms | not run again | {head}")
                continue
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
                plan = [row[0] for row in cursor.fetchall()]
            execution = next(float(line.split()[2]) for line in plan if line.startswith("Execution Time"))
            planning = next(float(line.split()[2]) for line in plan if line.startswith("Planning Time"))
            buffers = next((line.strip() for line in plan if line.strip().startswith("Buffers")), "Buffers: none")
            total_server += execution
            print(
                f"{number:2}. django {float(query['time']) * 1000:7.1f} ms | server {execution:7.1f} ms "
                f"(+{planning:.1f} planning) | {buffers} | {head}"
            )
            if args.plans:
                print("\n".join(f"      {line}" for line in plan))
        print(f"\nserver execution in all: {total_server:.1f} ms")
    print(f"\n# reference loop: {reference_seconds():.3f} s; load average: {os.getloadavg()[0]:.2f} (at the end)")


if __name__ == "__main__":
    main()
