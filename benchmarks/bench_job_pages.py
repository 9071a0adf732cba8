"""Keyset pages of the jobs table deep in a long history, on PostgreSQL: the first page against a
page that starts at row 900,000 of 1,000,000, under each sort, with the database's own plan.

Usage (from the repository root; needs a PostgreSQL server)::

    IRIS_BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/NAME_bench \\
        .venv/bin/python benchmarks/bench_job_pages.py [--jobs 1000000]

The database is dropped and recreated, migrated, and filled with ``--jobs`` finished and pending
jobs of 1,000 users by one ``INSERT ... SELECT generate_series`` (every band; states and replica
counts with many ties, the worst case for a sort column), then analysed. For each sort the page
query (``listing.page_of``, 50 rows) runs warm five times at the first page and at a cursor on the
row 90% of the way down; printed: the median wall time of each, the same page read by ``OFFSET``
(as ``?page=N`` paging would, for comparison; once, warm), and for the deep page the plan's scan,
buffers and execution time (``EXPLAIN (ANALYZE, BUFFERS)``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/iris_bench_pages"
SORTS = ["-submitted", "submitted", "user", "-user", "name", "state", "-tasks", "band", "route"]

FILL = """
INSERT INTO scheduler_job (name, "user", band, state, depth, submitted_at_ms, root_submitted_at_ms, replicas,
    cpu_millicores, memory_bytes, device_type, device_variant, device_count, constraints, max_retries_preemption,
    max_retries_failure, command, submission_argv, request, system_reason, route, created_at)
SELECT '/u' || (i %% 1000) || '/j' || i, 'u' || (i %% 1000), i %% 4,
       (ARRAY['succeeded', 'failed', 'killed', 'pending'])[1 + i %% 4], 1, 1700000000000 + i, 1700000000000 + i,
       1 + i %% 5, 1000, 1073741824, 'cpu', '', 0, '[]', 100, 0, '["true"]', '[]', '{}', '',
       (ARRAY['workers', 'kubernetes', ''])[1 + i %% 3], now()
FROM generate_series(1, %s) AS i
"""


def timed(fn, runs: int = 5) -> float:
    fn()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    args = parser.parse_args()

    from benchmarks.bench_tick import recreate_database

    url = os.environ.get("IRIS_BENCH_DATABASE_URL", DEFAULT_URL)
    recreate_database(url)
    os.environ.update(
        {
            "IRIS_DATABASE_URL": url,
            "IRIS_DATA_DIR": tempfile.mkdtemp(prefix="iris-bench-pages-"),
            "DJANGO_SETTINGS_MODULE": "iris_web.settings",
            "IRIS_LOG_LEVEL": "WARNING",
        }
    )
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduler.jobs import listing

    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(FILL, [args.jobs])
        cursor.execute("ANALYZE scheduler_job")
    print(f"{args.jobs:,} jobs written and analysed in {time.perf_counter() - started:.0f} s")
    qs = listing.filtered_jobs(listing.JobFilter(), frozenset())
    deep_row = int(args.jobs * 0.9)
    print(f"{'sort':12} {'first page':>11} {'row ' + format(deep_row, ','):>13} {'by OFFSET':>11}   deep page's plan")
    for sort in SORTS:
        view = listing.JobView(sort=sort)
        row = listing.ordered(qs, view)[deep_row]
        cursor_at = listing._cursor(view, row, listing.NEXT)
        first = timed(lambda: listing.page_of(qs, view))
        deep = timed(lambda: listing.page_of(qs, view, cursor=cursor_at))
        offset = timed(lambda: list(listing.ordered(qs, view)[deep_row : deep_row + listing.PAGE_SIZE + 1]), runs=1)
        with CaptureQueriesContext(connection) as queries:
            listing.page_of(qs, view, cursor=cursor_at)
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + queries.captured_queries[-1]["sql"])
            plan = [line[0].strip() for line in cursor.fetchall()]
        scan = next((line for line in plan if "Scan" in line), plan[0]).split("  (")[0].lstrip("-> ")
        buffers = next((line for line in plan if line.startswith("Buffers")), "")
        execution = next(line for line in plan if line.startswith("Execution Time"))
        print(f"{sort:12} {first:8.1f} ms {deep:10.1f} ms {offset:8.0f} ms   {scan}; {buffers}; {execution}")


if __name__ == "__main__":
    main()
