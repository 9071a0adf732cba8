"""Event watchers beside the submission benchmark (issue 27): ``bench_api.py``'s servers, clients
and cluster, plus ``--watchers`` concurrent long polls of ``GET /api/v1/events/``.

Usage (from the repository root; PostgreSQL and Redis, gunicorn: ``pip install -e '.[bench]'``)::

    .venv/bin/python benchmarks/bench_watchers.py --cluster 30000x3000 --watchers 200 --seconds 30

Served as README's "Production" ships it: the API on gunicorn's sync workers (``--web-workers``)
and the event stream on its own pool of threads (``gunicorn -k gthread -w --events-workers
--threads --events-threads``, on ``--port`` + 1), which a proxy would route ``/api/v1/events/``
to; here the watchers call it directly. One Celery worker with beat ticks (every
``IRIS_TICK_SECONDS``, 5).

One run measures three windows of ``--seconds`` each, on the same servers and cluster:
submissions alone, submissions with the watchers, submissions alone again (the two "alone"
windows bracket the other, so a drift, e.g. the queue growing with the submissions, shows).

The watchers run in a child process of their own (their client CPU is not the submitters'):
watcher ``i`` is its own researcher (``watch-<i>``) following one user's events, as ``iris job
watch --user U`` does (``user=U&wait=25&limit=1000``, resuming from ``next``); the users are the
cluster's and the submitters', round robin.

The delay of a tick's event: the moment the watcher process has read the answer holding it
(``time.time()``), minus the tick's end of writing, ``TickRecord.started_at + duration_ms``
(the tick's ``timezone.now()`` when it began, plus its ``perf_counter`` time until its last
write but one). Both are the host's wall clock, read by two processes on one host. The commit
comes after that moment (the tick's record update, its lease's release, COMMIT), so each delay
printed is at least the delay from the commit: an upper bound. Counted for every event with a
tick (queued, started, preempted, ...) received during the middle window.

Printed per window: bench_api's figures (rate, latency, CPU ms per submission of each server and
the clients; "events" is the stream's gunicorn), PostgreSQL's own counters for the benchmark
database (``pg_stat_database``: transactions committed, sessions opened, active time, which
count backends that exited in the window, unlike the CPU of the pids), the watchers' requests
and the watcher process's CPU; then the fall in submissions/s and the delays' p50/p99.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.bench_api import (  # noqa: E402
    WARMUP_PER_CLIENT,
    Clients,
    _backends,
    _cpu_seconds,
    _tree,
    _wait_for,
    add_server_arguments,
    celery_ticking,
    gunicorn,
    measure_window,
    percentile,
    prepare,
    stop,
    window_lines,
)

# The long poll each watcher asks for, as `iris job watch` does (cli/iris_cli/events.py: 20).
WAIT_SECONDS = 25


# --- the watcher process ---------------------------------------------------------------------


def watch(config: dict) -> None:
    """The child: ``config["watchers"]`` threads, each long-polling its user's events until
    stdin closes; then the received tick events and counts, as JSON, to ``config["out"]``."""
    received: list[tuple[int, int, float]] = []  # (watcher, tick, time.time() when read)
    counts = {"requests": 0, "events": 0, "errors": 0}
    statuses: dict[str, int] = {}
    lock = threading.Lock()
    started = time.process_time()

    def run(i: int) -> None:
        token, user = config["tokens"][i], config["users"][i % len(config["users"])]
        since: int | str = "now"
        headers = {"Authorization": f"Token {token}"}
        while True:
            path = f"/api/v1/events/?user={user}&since={since}&wait={WAIT_SECONDS}&limit=1000"
            try:
                conn = http.client.HTTPConnection("127.0.0.1", config["port"], timeout=WAIT_SECONDS + 30)
                conn.request("GET", path, headers=headers)
                response = conn.getresponse()
                body = response.read()
                at = time.time()
                conn.close()
                status = response.status
            except OSError:
                status, body, at = 0, b"", time.time()
            with lock:
                counts["requests"] += 1
                if status != 200:
                    counts["errors"] += 1
                    statuses[str(status)] = statuses.get(str(status), 0) + 1
            if status != 200:
                time.sleep(1)
                continue
            page = json.loads(body)
            with lock:
                counts["events"] += len(page["events"])
                received.extend((i, e["tick"], at) for e in page["events"] if e.get("tick") is not None)
            since = page["next"]

    for i in range(config["watchers"]):
        threading.Thread(target=run, args=(i,), daemon=True).start()
    sys.stdin.read()  # the parent closes it: stop
    with lock:
        result = {
            "received": list(received),
            "counts": dict(counts),
            "statuses": dict(statuses),
            "cpu": time.process_time() - started,
        }
    with open(config["out"], "w") as handle:
        json.dump(result, handle)


class Watchers:
    """The watcher process, started and stopped by the parent."""

    def __init__(self, port: int, tokens: list[str], users: list[str]):
        directory = tempfile.mkdtemp(prefix="iris-watchers-")
        self.out = os.path.join(directory, "received.json")
        config = os.path.join(directory, "config.json")  # tokens: a file, not the command line
        with open(config, "w") as handle:
            json.dump(
                {"port": port, "tokens": tokens, "users": users, "watchers": len(tokens), "out": self.out}, handle
            )
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--as-watchers", config],
            stdin=subprocess.PIPE,
            cwd=ROOT,
        )

    def stop(self) -> dict:
        self.process.stdin.close()
        self.process.wait(timeout=60)
        with open(self.out) as handle:
            return json.load(handle)


# --- the parent ------------------------------------------------------------------------------


def database_counters(database: str) -> dict:
    """PostgreSQL's own counters for the benchmark database (cumulative)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT xact_commit, sessions, active_time FROM pg_stat_database WHERE datname = %s", [database])
        commits, sessions, active = cursor.fetchone()
    return {"commits": commits, "sessions": sessions, "active_ms": active}


def window(args, tokens, servers, database, tag) -> dict:
    before = database_counters(database)
    measured = measure_window(args.port, tokens, args.submissions, args.seconds, tag, servers)
    time.sleep(1.2)  # PostgreSQL flushes a live backend's counters about once a second
    after = database_counters(database)
    measured["database"] = {key: after[key] - before[key] for key in before}
    return measured


def tick_ends() -> dict[int, float]:
    """Each tick's end of writing (``started_at + duration_ms``) as a Unix time."""
    from scheduler.models import TickRecord

    return {
        pk: started.timestamp() + duration / 1000
        for pk, started, duration in TickRecord.objects.values_list("pk", "started_at", "duration_ms")
    }


def wait_for_ticks(count: int, seconds: float) -> None:
    from scheduler.models import TickRecord

    deadline = time.monotonic() + seconds
    while TickRecord.objects.count() < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"fewer than {count} ticks within {seconds:.0f} s")
        time.sleep(0.5)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--as-watchers":
        with open(sys.argv[2]) as handle:
            watch(json.load(handle))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_arguments(parser)
    parser.add_argument("--watchers", type=int, default=200)
    parser.add_argument("--events-workers", type=int, default=2, help="gunicorn gthread workers of the stream")
    parser.add_argument("--events-threads", type=int, default=256, help="threads per stream worker")
    parser.set_defaults(seconds=30.0, submissions=100_000)
    args = parser.parse_args()
    if args.no_tick:
        parser.error("the watchers measure ticks' events: a tick worker is needed")

    watcher_names = [f"watch-{i}" for i in range(args.watchers)]
    env, database, tokens, watcher_tokens = prepare(args, users=watcher_names)
    from scheduler.models import Job, UserBudget

    followed = set(Job.objects.values_list("user", flat=True).distinct()) | set(
        UserBudget.objects.values_list("user_id", flat=True)
    )
    followed = sorted(followed | {f"bench-{c}" for c in range(args.clients)})
    events_port = args.port + 1
    processes = []
    try:
        web = gunicorn(args.port, env, "-w", str(args.web_workers))
        events = gunicorn(
            events_port, env, "-k", "gthread", "-w", str(args.events_workers), "--threads", str(args.events_threads)
        )
        ticker = celery_ticking(env)
        processes += [web, events, ticker]
        _wait_for(args.port, 60)
        _wait_for(events_port, 60)
        wait_for_ticks(2, 300)  # the first tick's burst of events is behind us
        Clients(args.port, tokens, WARMUP_PER_CLIENT * args.clients, 60, "warm").run()

        def servers() -> dict:
            return {
                "web": _tree(web.pid),
                "events": _tree(events.pid),
                "celery": _tree(ticker.pid),
                "postgres": _backends(database),
                "_database": database,
            }

        alone_1 = window(args, tokens, servers(), database, "a")
        watchers = Watchers(events_port, watcher_tokens, followed)
        time.sleep(5)  # every watcher has made its first poll ("now") and waits
        watcher_cpu_before = _cpu_seconds([watchers.process.pid])
        marks = {"start": time.time()}
        with_watchers = window(args, tokens, servers(), database, "w")
        marks["end"] = time.time()
        watcher_cpu = _cpu_seconds([watchers.process.pid]) - watcher_cpu_before
        watched = watchers.stop()
        alone_2 = window(args, tokens, servers(), database, "b")
    finally:
        stop(processes)

    ends = tick_ends()
    delays = sorted(
        at - ends[tick]
        for _, tick, at in watched["received"]
        if tick in ends and marks["start"] <= ends[tick] and at <= marks["end"]
    )
    ticks_seen = {tick for _, tick, at in watched["received"] if tick in ends and marks["start"] <= ends[tick]}

    print(
        f"clients {args.clients}, gunicorn sync workers {args.web_workers}, stream: gunicorn gthread "
        f"{args.events_workers} x {args.events_threads} threads, cluster {args.cluster or 'empty'}, "
        f"watchers {args.watchers} following {len(followed)} users"
    )
    for name, measured in (("alone (1)", alone_1), ("with watchers", with_watchers), ("alone (2)", alone_2)):
        print(f"== {name}")
        for line in window_lines(measured):
            print("  " + line)
        db = measured["database"]
        print(
            f"  PostgreSQL (benchmark database): {db['commits']} transactions ({db['commits'] / measured['wall']:.0f}/s), "
            f"{db['sessions']} sessions opened, active {db['active_ms'] / 1000:.2f} s"
        )
    counts = watched["counts"]
    wall = marks["end"] - marks["start"]
    print(
        f"watchers: {counts['requests']} requests in all ({counts['errors']} failed {watched['statuses'] or ''}), "
        f"{counts['events']} events received; watcher process CPU {watcher_cpu:.2f} s in the window "
        f"({wall:.1f} s)"
    )
    alone = (alone_1["rate"] + alone_2["rate"]) / 2
    fall = (alone - with_watchers["rate"]) / alone * 100 if alone else 0.0
    print(
        f"submissions/s: alone {alone_1['rate']:.1f} and {alone_2['rate']:.1f} (mean {alone:.1f}), with watchers "
        f"{with_watchers['rate']:.1f}: a fall of {fall:.1f}% (target at most 10%)"
    )
    if delays:
        print(
            f"tick end of writing -> watcher read, over {len(delays)} tick events of {len(ticks_seen)} ticks: "
            f"p50 {statistics.median(delays) * 1000:.0f} ms, p99 {percentile(delays, 0.99) * 1000:.0f} ms, "
            f"max {delays[-1] * 1000:.0f} ms (target p99 at most 2 s)"
        )
    else:
        print("no tick event reached a watcher in the window")


if __name__ == "__main__":
    main()
