"""Time the full tick on PostgreSQL (lease, snapshot load, decide, apply, commit) and count SQL
statements per tick, on synthetic clusters.

Usage (from the repository root; needs a PostgreSQL server)::

    .venv/bin/python benchmarks/bench_tick.py                      # 1k/10k/100k pending
    .venv/bin/python benchmarks/bench_tick.py --sizes 1000x100     # one size
    IRIS_BENCH_DATABASE_URL=postgresql://user@host:5432/iris_bench .venv/bin/python benchmarks/bench_tick.py

The benchmark database (default ``postgresql://postgres@127.0.0.1:5432/iris_bench``) is dropped
and recreated; the tick's broker is ``IRIS_REDIS_URL`` (default ``redis://127.0.0.1:6379/10``; the
benchmark exits if nothing answers there). For each size the synthetic cluster (``benchmarks/synthetic.py``) is written as
rows, then the ticks in ``TICKS`` run (see there). ``--repeat N`` restores the cluster and runs
them N times, then prints medians. "load", "decide" and "apply+commit" split each tick's wall
time (``TickOutcome``); "tick cpu s" is this process's CPU time and "server cpu s" the PostgreSQL
backend's (``/proc/<pid>/stat``, when the server runs on this host), the figures to compare on a
shared host. The reference loop of ``bench_decision.py`` is timed before and after,
to tell a slow host from a slow tick.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from contextlib import ExitStack, contextmanager, nullcontext
from urllib.parse import urlparse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/iris_bench"
# The broker a tick's after-commit requests go to when IRIS_REDIS_URL names none: without one
# reachable, kombu retries each request for seconds and the tick's wall time means nothing.
DEFAULT_REDIS = "redis://127.0.0.1:6379/10"
SIZES = [(1_000, 100), (10_000, 1_000), (100_000, 10_000)]
TARGET_TICK_SECONDS = 2.0
# What each size runs, in order. "first": a new tick process reads the whole cluster and places a
# full cluster's worth of work. "second", "third": the waves that follow, placing what the
# preemptions and the per-worker caps left, reading only the rows changed since. "churn": the
# steady state, after 1% of the pending count's running tasks ended and as many new tasks came.
# "restarted": a new tick process again, reading the whole cluster. "unchanged": a tick when
# nothing changed since the previous one (untimed ticks run first until one changes nothing, at
# most SETTLE_TICKS of them), so its decision is reused (scheduler.core.reuse). "burst": the same
# warm tick process after BURST_SHARE of the pending count's active tasks ended (spread over the
# workers) and as many new single-task jobs arrived at once: a burst of submissions into a busy
# cluster, placed by a tick process that has the cluster in memory already, as the beat's tick
# worker does.
TICKS = ("first", "second", "third", "churn", "churn", "churn", "restarted", "unchanged", "burst")
BURST_SHARE = 0.28
SETTLE_TICKS = 60


def recreate_database(url: str) -> None:
    import psycopg

    parsed = urlparse(url)
    name = parsed.path.lstrip("/")
    admin_url = parsed._replace(path="/postgres").geturl()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def require_broker() -> None:
    """Point the tick's broker at ``IRIS_REDIS_URL`` (default ``DEFAULT_REDIS``) and exit with a
    message if nothing answers there (``IRIS_BROKER_URL``, when set, is the broker instead)."""
    import redis

    if os.environ.get("IRIS_BROKER_URL"):
        return
    url = os.environ.setdefault("IRIS_REDIS_URL", DEFAULT_REDIS)
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as error:
        sys.exit(f"no Redis answers at IRIS_REDIS_URL={url} ({error}); the tick needs a broker: set IRIS_REDIS_URL")


def open_bench_database(*, recreate: bool = True) -> str:
    """Point Django at the benchmark database (``IRIS_BENCH_DATABASE_URL``; dropped and created
    again unless ``recreate`` is false), set Django up and migrate. Returns the database URL."""
    url = os.environ.get("IRIS_BENCH_DATABASE_URL", DEFAULT_URL)
    require_broker()
    if recreate:
        recreate_database(url)
    os.environ["IRIS_DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "iris_web.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return url


class WriteProfile:
    """Times every statement of one tick (and the commit). Statements that write through
    ``scheduler.store.bulk`` or stamp routes run under ``EXPLAIN (ANALYZE, BUFFERS)`` so the
    server's own time and buffer counts are printed beside this process's wall time. Pipelining is
    switched off for the profiled tick, so each statement's wall time is its own."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, str, str]] = []
        self.commit_s = 0.0
        self.stack = ExitStack()

    def __enter__(self):
        from django.db import connection

        from scheduler.store import bulk

        self.stack.enter_context(connection.execute_wrapper(self.time_statement))
        original_pipeline, original_commit = bulk.pipeline, connection._commit

        @contextmanager
        def unpipelined():
            # Foreign keys are checked at commit (deferred); checked here instead, their cost
            # shows in each statement's plan ("Trigger for constraint ...").
            with connection.cursor() as cursor:
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            yield

        def timed_commit():
            started = time.perf_counter()
            try:
                return original_commit()
            finally:
                self.commit_s += time.perf_counter() - started

        bulk.pipeline = unpipelined
        connection._commit = timed_commit

        def restore():
            bulk.pipeline = original_pipeline
            connection._commit = original_commit

        self.stack.callback(restore)
        return self

    def __exit__(self, *exc):
        return self.stack.__exit__(*exc)

    def time_statement(self, execute, sql, params, many, context):
        # Only writes whose row counts nobody reads (EXPLAIN returns the plan instead).
        explain = ("_array_elements(" in sql or "SET route" in sql) and not many  # json or jsonb
        started = time.perf_counter()
        if not explain:
            result = execute(sql, params, many, context)
            self.rows.append((time.perf_counter() - started, sql, ""))
            return result
        result = execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params, many, context)
        plan = "\n".join(line for (line,) in context["cursor"].fetchall())
        self.rows.append((time.perf_counter() - started, sql, plan))
        return result

    def report(self) -> None:
        total = sum(seconds for seconds, _, _ in self.rows)
        print(
            f"# profiled tick: {len(self.rows)} statements, {total:.2f} s in statements, commit {self.commit_s:.2f} s"
        )
        for seconds, sql, plan in sorted(self.rows, key=lambda row: -row[0])[:14]:
            print(f"#   {seconds * 1000:8.1f} ms  {' '.join(sql.split())[:150]}")
            lines = plan.splitlines()
            buffers = [line for line in lines if "Buffers:" in line][:1]
            timings = [line for line in lines if line.startswith(("Trigger", "Execution Time"))]
            for line in lines[:1] + buffers + timings:
                print(f"#              | {line.strip()[:140]}")


def backend_cpu_seconds() -> float:
    """This connection's PostgreSQL backend's CPU time so far (user + system, from
    ``/proc/<pid>/stat``; the server runs on this host), or NaN where it cannot be read."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="*", help="PENDINGxWORKERS, e.g. 100000x10000")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1, help="run each size's ticks this many times; medians follow")
    parser.add_argument(
        "--profile-writes",
        action="store_true",
        help="after each size's first tick, print where its write transaction spent its time: each statement's "
        "wall time in this process and, for the set-based writes, PostgreSQL's own execution time "
        "(EXPLAIN ANALYZE, BUFFERS); the profiled tick runs its writes unpipelined, so its total is not comparable",
    )
    parser.add_argument(
        "--profile",
        nargs="*",
        default=[],
        choices=sorted(set(TICKS)),
        metavar="TICK",
        help="print these ticks' cProfile (the 30 costliest functions, cumulative, and by own time); their times "
        "are then slower. (--profile unchanged was --profile-unchanged.)",
    )
    parser.add_argument(
        "--ticks", nargs="*", choices=sorted(set(TICKS)), help="run only these of TICKS (in their order)"
    )
    parser.add_argument("--unchanged-runs", type=int, default=1, help="time the unchanged tick this many times")
    args = parser.parse_args()
    ticks = [label for label in TICKS if not args.ticks or label in args.ticks]
    if "unchanged" in ticks:
        ticks += ["unchanged"] * (args.unchanged_runs - 1)
    sizes = [tuple(int(x) for x in s.lower().split("x")) for s in args.sizes] if args.sizes else SIZES

    open_bench_database()
    from django.db import connection

    from benchmarks.bench_decision import reference_seconds
    from benchmarks.restore import churn, restore_snapshot
    from benchmarks.synthetic import generate
    from scheduler.core.wire import snapshot_from_json
    from scheduler.store.cluster_rows import forget_cluster_rows
    from scheduler.tick.run import run_tick

    print(
        f"# full tick on PostgreSQL — {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} cores, {platform.machine()}"
    )
    print(f"# reference loop before: {reference_seconds():.3f} s")
    print(f"# load average: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    print(
        "| pending | workers | run | tick | read | total s | tick cpu s | server cpu s | load s | decide s | apply+commit s "
        "| assigned | preempted | SQL statements |"
    )
    print("|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    medians = []
    for pending, workers in sizes:
        snapshot = snapshot_from_json(generate(pending=pending, workers=workers, seed=args.seed))
        totals: dict[str, list[tuple[float, float, float, float]]] = {}
        for run in range(1, args.repeat + 1):
            restore_snapshot(snapshot)
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
            forget_cluster_rows()
            churned = 0
            for label in ticks:
                if label == "restarted":
                    forget_cluster_rows()
                elif label == "churn":
                    churned += 1
                    churn(snapshot.now_ms, pending // 100, pending // 100, label=f"run{run}-{churned}")
                elif label == "burst":
                    burst = int(pending * BURST_SHARE)
                    churn(snapshot.now_ms, burst, burst, label=f"run{run}-burst", spread=True)
                elif label == "unchanged":
                    for settle in range(1, SETTLE_TICKS + 1):
                        cpu_started = time.process_time()
                        settled = run_tick(snapshot.now_ms)
                        print(
                            f"# untimed tick {settle}: {settled.assigned} assigned, {settled.preempted} preempted, "
                            f"tick cpu {time.process_time() - cpu_started:.2f} s, decide {settled.decide_ms / 1000:.2f} s",
                            flush=True,
                        )
                        if not (settled.assigned or settled.preempted or settled.expired):
                            print(f"# {settle} untimed ticks before the unchanged one", flush=True)
                            break
                    else:
                        print(f"# still changing after {SETTLE_TICKS} ticks: the unchanged tick below is not one")
                statements = 0

                def count(execute, sql, params, many, context):
                    nonlocal statements
                    statements += 1
                    return execute(sql, params, many, context)

                profiler = WriteProfile() if args.profile_writes and label == "first" else None
                cprofile = None
                if label in args.profile:
                    import cProfile

                    cprofile = cProfile.Profile()
                server_started = backend_cpu_seconds()
                with connection.execute_wrapper(count), profiler or nullcontext(), cprofile or nullcontext():
                    started, cpu_started = time.perf_counter(), time.process_time()
                    outcome = run_tick(snapshot.now_ms)
                    total, cpu = time.perf_counter() - started, time.process_time() - cpu_started
                server_cpu = backend_cpu_seconds() - server_started
                if profiler:
                    profiler.report()
                if cprofile:
                    import io
                    import pstats

                    out = io.StringIO()
                    stats = pstats.Stats(cprofile, stream=out)
                    stats.sort_stats("cumulative").print_stats(30)
                    stats.sort_stats("tottime").print_stats(30)
                    print("\n".join("# " + line for line in out.getvalue().splitlines() if line.strip()))
                load, decide = outcome.load_ms / 1000, outcome.decide_ms / 1000
                apply = max(total - load - decide, 0)
                totals.setdefault(label, []).append((total, load, decide, apply))
                flag = "" if total <= TARGET_TICK_SECONDS else " (over target)"
                print(
                    f"| {pending:,} | {workers:,} | {run} | {label} | {outcome.refresh} | {total:.3f}{flag} | {cpu:.3f} | "
                    f"{server_cpu:.2f} | "
                    f"{load:.2f} | {decide:.2f} | {apply:.2f} | {outcome.assigned:,} | {outcome.preempted:,} | "
                    f"{statements} |",
                    flush=True,
                )
        for label, runs in totals.items():
            columns = [statistics.median(values) for values in zip(*runs)]
            medians.append((pending, workers, label, len(runs), columns))
    print(f"# reference loop after: {reference_seconds():.3f} s")
    print(f"# load average: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    if args.repeat > 1:
        print()
        print("| pending | workers | tick | runs | median total s | load s | decide s | apply+commit s |")
        print("|---:|---:|---|---:|---:|---:|---:|---:|")
        for pending, workers, label, n, (total, load, decide, apply) in medians:
            print(
                f"| {pending:,} | {workers:,} | {label} | {n} | {total:.2f} | {load:.2f} | {decide:.2f} | {apply:.2f} |"
            )


if __name__ == "__main__":
    main()
