"""What one ``scheduler.dispatch`` drain costs per intent it delivers, alone: the Celery share of
a submission in ``bench_api.py`` that is not the tick, without the web path or the host's other
load in the way.

Usage (from the repository root; PostgreSQL and Redis)::

    # once: a settled copy of bench_api's cluster (restored, ticked until nothing more is placed,
    # its backlog of intents delivered), kept as the database SETTLED
    .venv/bin/python benchmarks/bench_dispatch.py setup --cluster 30000x3000
    # then, per tree (this file runs any tree's code: TREE's modules come first on the path):
    .venv/bin/python benchmarks/bench_dispatch.py run --tree /path/to/tree --jobs 250 --rounds 8
    .venv/bin/python benchmarks/bench_dispatch.py run --tree /path/to/tree --callgrind   # instructions
    .venv/bin/python benchmarks/bench_dispatch.py run --tree /path/to/tree --profile     # cProfile

``IRIS_BENCH_DATABASE_URL`` names the database a run works on (default
``postgresql://postgres@127.0.0.1:5432/iris_bench_dispatch``); it is created afresh from the
settled one (``<name>_settled``) for every run, so every run of every tree starts from the same
rows. ``IRIS_REDIS_URL`` is the broker the ticks' requests for drains go to (nothing consumes
them; the database is flushed at the end).

Each round submits ``--jobs`` single-task CPU jobs through the submission use case (as
``bench_api.py``'s clients do, spread over 16 users), runs one tick (which places them and writes
their START intents), then one drain, measured: CPU milliseconds of this process
(``time.process_time``) and of its PostgreSQL backend (/proc), wall milliseconds, statements
sent, and each per intent the drain handled. bench_api's ticks place about 250 tasks each, and a
drain follows each tick. The drains run on their own clock, ``--interval`` seconds apart from
the run's start, so each tree's drains find the same intents due whatever its speed (a held
START is due again 30 s after it was held: round 1 rechecks the settled database's, and a run
longer than 30 s of that clock rechecks again). ``--callgrind`` runs the whole thing under ``valgrind --tool=callgrind
--instr-atstart=no`` and switches instrumentation on for the drains alone: the instructions
this process executes for them (PostgreSQL's own are not counted; its CPU is printed).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from datetime import timedelta
from urllib.parse import urlparse

# bench_api's window starts after this many ticks (its --settle-ticks default).
BACKLOG_TICKS = 2
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/iris_bench_dispatch"
DEFAULT_REDIS = "redis://127.0.0.1:6379/12"
USERS = 16


def database_urls() -> tuple[str, str, str]:
    """The run's database URL, the settled one's and the backlog's."""
    url = os.environ.get("IRIS_BENCH_DATABASE_URL", DEFAULT_URL)
    parsed = urlparse(url)
    return (
        url,
        parsed._replace(path=parsed.path + "_settled").geturl(),
        parsed._replace(path=parsed.path + "_backlog").geturl(),
    )


def admin(url: str, *statements: str) -> None:
    import psycopg

    parsed = urlparse(url)
    with psycopg.connect(parsed._replace(path="/postgres").geturl(), autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def django_on(tree: str, url: str) -> None:
    sys.path.insert(0, tree)
    os.chdir(tree)
    os.environ["IRIS_DATABASE_URL"] = url
    os.environ.setdefault("IRIS_REDIS_URL", DEFAULT_REDIS)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "iris_web.settings")
    os.environ.setdefault("IRIS_LOG_LEVEL", "WARNING")
    import django

    django.setup()


def setup(args) -> None:
    _, settled, backlog = database_urls()
    name = urlparse(settled).path.lstrip("/")
    admin(settled, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}"')
    django_on(args.tree, settled)
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from benchmarks.restore import restore_snapshot
    from benchmarks.synthetic import generate
    from scheduler.core.wire import snapshot_from_json
    from scheduler.execution.dispatcher import drain
    from scheduler.tick.run import run_tick

    call_command("migrate", verbosity=0)
    pending, workers = (int(x) for x in args.cluster.lower().split("x"))
    restore_snapshot(snapshot_from_json(generate(pending=pending, workers=workers, seed=0)))
    for u in range(USERS):
        get_user_model().objects.create_user(username=f"bench-{u}")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    for i in range(args.settle):
        outcome = run_tick()
        print(f"settling tick {i + 1}: {outcome.assigned if outcome else '-'} placed")
        if i + 1 == BACKLOG_TICKS:
            # What bench_api's window starts from: its first two ticks' placements undelivered.
            connection.close()
            copy = urlparse(backlog).path.lstrip("/")
            admin(
                backlog, f'DROP DATABASE IF EXISTS "{copy}" WITH (FORCE)', f'CREATE DATABASE "{copy}" TEMPLATE "{name}"'
            )
            print(f"backlog database {copy} ready")
        if outcome is not None and outcome.assigned == 0:
            break
    while True:
        result = drain(max_batches=1000)
        if result is None or not result.batches:
            break
        print(f"backlog drain: {result}")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    connection.close()
    print(f"settled database {name} ready")


def copy_settled(backlog: bool = False) -> str:
    url, settled, backlog_url = database_urls()
    name, source = (urlparse(u).path.lstrip("/") for u in (url, backlog_url if backlog else settled))
    admin(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', f'CREATE DATABASE "{name}" TEMPLATE "{source}"')
    return url


def run(args) -> None:
    if args.callgrind and not args.under_callgrind:
        return run_under_callgrind(args)
    url = copy_settled(args.backlog)
    django_on(args.tree, url)
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    call_command("migrate", verbosity=0)  # the tree's own migrations, if it has more than the settled copy

    from benchmarks.bench_tick import backend_cpu_seconds
    from scheduler.execution.dispatcher import drain
    from scheduler.jobs.submit import submit_job
    from scheduler.models import DispatchIntent
    from scheduler.tick.run import run_tick

    users = list(get_user_model().objects.filter(username__startswith="bench-").order_by("username"))
    backend_cpu = backend_cpu_seconds

    statements = [0]
    by_statement: dict[str, list[float]] = {}

    def count(execute, sql, params, many, context):
        statements[0] += 1
        if not args.statements:
            return execute(sql, params, many, context)
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            spent = by_statement.setdefault(" ".join(sql.split())[:100], [0, 0.0])
            spent[0] += 1
            spent[1] += time.perf_counter() - started

    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
    pid = str(os.getpid())
    sent = 0
    clock = timezone.now()
    totals = [0, 0.0, 0.0, 0.0, 0]
    if args.backlog:
        return drain_backlog(args, backend_cpu, count, statements, by_statement, profiler, pid)
    print(f"tree {args.tree}; {args.jobs} jobs a round, {args.rounds} rounds")
    print("round | placed | due | drain: delivered held done | CPU ms process + PostgreSQL | wall ms | statements")
    for r in range(-args.warm, args.rounds):
        measured = r >= 0
        if r == 0:
            by_statement.clear()  # the warm rounds' statements are not counted
        for _ in range(args.jobs):
            sent += 1
            submit_job(users[sent % len(users)], {"name": f"d{sent}", "command": ["true"], "cpu": 1})
        outcome = run_tick()
        due = DispatchIntent.objects.filter(state=DispatchIntent.State.PENDING).count()
        statements[0] = 0
        db, cpu, wall = backend_cpu(), time.process_time(), time.perf_counter()
        with connection.execute_wrapper(count):
            if args.under_callgrind and measured:
                subprocess.run(["callgrind_control", "-i", "on", pid], stdout=subprocess.DEVNULL, check=True)
            if profiler is not None and measured:
                profiler.enable()
            result = drain(clock + timedelta(seconds=(r + args.warm) * args.interval))
            if profiler is not None:
                profiler.disable()
            if args.under_callgrind and measured:
                subprocess.run(["callgrind_control", "-i", "off", pid], stdout=subprocess.DEVNULL, check=True)
        cpu, db, wall = time.process_time() - cpu, backend_cpu() - db, time.perf_counter() - wall
        if not measured:
            print(f"  warm | {outcome.assigned if outcome else -1:6d} | {due:3d} | {result}")
            continue
        handled = result.delivered + result.done + result.held + result.retried + result.failed + result.finished
        print(
            f"{r + 1:5d} | {outcome.assigned if outcome else -1:6d} | {due:3d} | {result.delivered:5d} "
            f"{result.held:4d} {result.done:4d} | {cpu * 1000:7.1f} + {db * 1000:6.1f} | {wall * 1000:7.1f} | "
            f"{statements[0]}"
        )
        totals[0] += handled
        totals[1] += cpu
        totals[2] += db
        totals[3] += wall
        totals[4] += statements[0]
    report(args, totals, args.rounds, by_statement, profiler)
    connection.close()
    import redis

    redis.Redis.from_url(os.environ["IRIS_REDIS_URL"]).flushdb()


def drain_backlog(args, backend_cpu, count, statements, by_statement, profiler, pid) -> None:
    """Drain what bench_api's first two ticks placed, drain after drain (each at most
    ``MAX_BATCHES`` batches, as the Celery task runs it), until nothing is due."""
    from django.db import connection
    from django.utils import timezone

    from scheduler.execution.dispatcher import drain
    from scheduler.models import DispatchIntent

    due = DispatchIntent.objects.filter(state=DispatchIntent.State.PENDING).count()
    print(f"tree {args.tree}; the backlog of two ticks: {due} intents pending")
    print("drain | batches | delivered held done | CPU ms process + PostgreSQL | wall ms | statements")
    clock = timezone.now()
    totals = [0, 0.0, 0.0, 0.0, 0]
    for n in range(1, 100):
        statements[0] = 0
        db, cpu, wall = backend_cpu(), time.process_time(), time.perf_counter()
        with connection.execute_wrapper(count):
            if args.under_callgrind:
                subprocess.run(["callgrind_control", "-i", "on", pid], stdout=subprocess.DEVNULL, check=True)
            if profiler is not None:
                profiler.enable()
            result = drain(clock + timedelta(seconds=(n - 1) * args.interval))
            if profiler is not None:
                profiler.disable()
            if args.under_callgrind:
                subprocess.run(["callgrind_control", "-i", "off", pid], stdout=subprocess.DEVNULL, check=True)
        cpu, db, wall = time.process_time() - cpu, backend_cpu() - db, time.perf_counter() - wall
        if not result.batches:
            break
        handled = result.delivered + result.done + result.held + result.retried + result.failed + result.finished
        print(
            f"{n:5d} | {result.batches:7d} | {result.delivered:5d} {result.held:4d} {result.done:4d} | "
            f"{cpu * 1000:7.1f} + {db * 1000:6.1f} | {wall * 1000:7.1f} | {statements[0]}"
        )
        for i, value in enumerate((handled, cpu, db, wall, statements[0])):
            totals[i] += value
    report(args, totals, n - 1, by_statement, profiler)


def report(args, totals, drains: int, by_statement, profiler) -> None:
    n = max(totals[0], 1)
    drains = max(drains, 1)
    print(
        f"all drains: {totals[0]} intents handled; per intent: CPU {totals[1] * 1e3 / n:.3f} ms process + "
        f"{totals[2] * 1e3 / n:.3f} ms PostgreSQL, wall {totals[3] * 1e3 / n:.3f} ms, "
        f"{totals[4] / n:.3f} statements; per drain: CPU {totals[1] * 1e3 / drains:.1f} + "
        f"{totals[2] * 1e3 / drains:.1f} ms, {totals[4] / drains:.1f} statements"
    )
    for sql, (calls, seconds) in sorted(by_statement.items(), key=lambda item: -item[1][1]):
        print(f"{calls:5d} x {seconds * 1000 / calls:7.2f} ms = {seconds * 1000:8.1f} ms wall: {sql}")
    if profiler is not None:
        import pstats

        pstats.Stats(profiler).sort_stats(args.sort).print_stats(args.top)


def run_under_callgrind(args) -> None:
    argv = [a for a in sys.argv[1:] if a != "--callgrind"]
    proc = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            os.path.abspath(__file__),
            *argv,
            "--under-callgrind",
        ],
        env={**os.environ, "PYTHONHASHSEED": "0"},
        stderr=subprocess.PIPE,
        text=True,
    )
    found = re.search(r"Collected\s*:\s*(\d+)", proc.stderr)
    if proc.returncode or found is None:
        raise SystemExit(f"callgrind run failed:\n{proc.stderr[-3000:]}")
    print(f"instructions of the drains (callgrind, this process only): {int(found.group(1)):,}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("setup", "run"))
    parser.add_argument("--tree", default=os.path.dirname(HERE), help="the source tree whose code runs")
    parser.add_argument("--cluster", default="30000x3000", help="setup: PENDINGxWORKERS, synthetic, seed 0")
    parser.add_argument("--settle", type=int, default=6, help="setup: at most this many ticks")
    parser.add_argument("--jobs", type=int, default=250, help="run: jobs submitted before each tick and drain")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument(
        "--interval",
        type=float,
        default=1.0,
        help="run: seconds between drains on the drains' own clock (held STARTs are rechecked 30 s later on it)",
    )
    parser.add_argument("--warm", type=int, default=0, help="run: this many more rounds first, not measured")
    parser.add_argument("--profile", action="store_true", help="run: cProfile the drains")
    parser.add_argument(
        "--backlog", action="store_true", help="run: drain bench_api's starting backlog instead of rounds"
    )
    parser.add_argument("--statements", action="store_true", help="run: wall time by statement")
    parser.add_argument("--sort", default="tottime")
    parser.add_argument("--top", type=int, default=35)
    parser.add_argument("--callgrind", action="store_true", help="run: count the drains' instructions")
    parser.add_argument("--under-callgrind", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.tree = os.path.abspath(args.tree)
    if args.mode == "setup":
        setup(args)
    else:
        run(args)


if __name__ == "__main__":
    main()
