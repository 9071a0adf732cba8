"""Event watchers beside the submission benchmark (issue 27): ``bench_api.py``'s servers, clients
and cluster, plus ``--watchers`` concurrent watchers of ``GET /api/v1/events/`` (long polls or
server-sent event streams).

Usage (from the repository root; PostgreSQL and Redis, gunicorn: ``pip install -e '.[bench]'``)::

    .venv/bin/python benchmarks/bench_watchers.py --cluster 30000x3000 --watchers 200 --seconds 30 --modes poll,sse

Served as README's "Production" ships it: the API on gunicorn's sync workers (``--web-workers``)
and the event stream on its own pool of threads (``gunicorn -k gthread -w --events-workers
--threads --events-threads``, on ``--port`` + 1), which a proxy would route ``/api/v1/events/``
to; here the watchers call it directly. One Celery worker with beat ticks (every
``IRIS_TICK_SECONDS``, 5).

Every window starts from the same database. The benchmark database is prepared once (migrated,
the cluster restored, the tokens written), the servers run it until two ticks have recorded (the
first tick's burst is behind) and the warm-up's submissions are in, and it is then kept as a
PostgreSQL template (``<database>_template``). Before each window the servers are stopped, the
benchmark database is dropped and created again from the template (``CREATE DATABASE ...
TEMPLATE ...``), the Redis database is flushed and the servers are started again; then the same
steps: two ticks, the warm-up, 5 s (the watchers' first polls, or nothing), the window. So a
window's submissions do not make the next window's cluster larger. The windows alternate, alone
and with the watchers, ``--rounds`` times each (alone first), so a drift of the host shows as
a drift between windows of one kind.

The watchers run in a child process of their own (their client CPU is not the submitters'):
watcher ``i`` is its own researcher (``watch-<i>``) following one user's events; the users are
the cluster's and the submitters', round robin. ``--modes`` says how they follow them (one kind
of window each per round, after the window alone): ``poll``, long polls as ``iris job watch
--user U`` makes them (``user=U&wait=25&limit=1000``, resuming from ``next``); ``sse``, one
server-sent event stream each (``Accept: text/event-stream``, ``user=U&limit=1000``,
reconnecting with ``Last-Event-ID`` when the stream ends after ``IRIS_EVENTS_STREAM_SECONDS``).

The delay of a tick's event: the moment the watcher process has read the answer holding it
(``time.time()``), minus the tick's end of writing, ``TickRecord.started_at + duration_ms``
(the tick's ``timezone.now()`` when it began, plus its ``perf_counter`` time until its last
write but one). Both are the host's wall clock, read by two processes on one host. The commit
comes after that moment (the tick's record update, its lease's release, COMMIT), so each delay
printed is at least the delay from the commit: an upper bound. Counted for every event with a
tick (queued, started, preempted, ...) of a tick that ended inside a watcher window and
received inside it.

Printed per window: bench_api's figures (rate, latency, CPU ms per submission of each server and
the clients; "events" is the stream's gunicorn), PostgreSQL's own counters for the benchmark
database (``pg_stat_database``: transactions committed, sessions opened, active time, which
count backends that exited in the window, unlike the CPU of the pids), and in the watcher
windows the watchers' requests, the watcher process's CPU and the delays; then the
submissions/s of each kind, the fall (1 - mean with watchers / mean alone), the mean CPU ms per
submission of each part by kind, and the delays' p50/p99 over every watcher window.

Bounded: ``--rounds`` x 2 windows of at most ``--seconds`` each, with a minute or two of
restarts around each; every request goes to 127.0.0.1; the template is dropped at the end.
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
from urllib.parse import urlparse

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
    answers: list[float] = []  # time.time() of each answer (poll) or stream opened (sse)
    lock = threading.Lock()
    started = time.process_time()

    def count(status: int, at: float) -> None:
        with lock:
            counts["requests"] += 1
            answers.append(at)
            if status != 200:
                counts["errors"] += 1
                statuses[str(status)] = statuses.get(str(status), 0) + 1

    def follow(i: int) -> None:
        """Watcher ``i`` on server-sent events: one stream at a time, each frame's event
        received when its blank line is read."""
        token, user = config["tokens"][i], config["users"][i % len(config["users"])]
        headers = {"Authorization": f"Token {token}", "Accept": "text/event-stream"}
        path = f"/api/v1/events/?user={user}&limit=1000"
        last_id = None
        while True:
            if last_id is not None:
                headers["Last-Event-ID"] = last_id
            try:
                conn = http.client.HTTPConnection("127.0.0.1", config["port"], timeout=WAIT_SECONDS + 30)
                conn.request("GET", path if last_id is not None else path + "&since=now", headers=headers)
                response = conn.getresponse()
                count(response.status, time.time())
                if response.status != 200:
                    response.read()
                    conn.close()
                    time.sleep(1)
                    continue
                data = None
                while line := response.readline():
                    line = line.rstrip(b"\r\n")
                    if line.startswith(b"id:"):
                        last_id = line[3:].strip().decode()
                    elif line.startswith(b"data:"):
                        data = line[5:].strip()
                    elif not line and data is not None:
                        event = json.loads(data)
                        at = time.time()
                        with lock:
                            counts["events"] += 1
                            if event.get("tick") is not None:
                                received.append((i, event["tick"], at))
                        data = None
                conn.close()
            except OSError:
                count(0, time.time())
                time.sleep(1)

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
            count(status, at)
            if status != 200:
                time.sleep(1)
                continue
            page = json.loads(body)
            with lock:
                counts["events"] += len(page["events"])
                received.extend((i, e["tick"], at) for e in page["events"] if e.get("tick") is not None)
            since = page["next"]

    for i in range(config["watchers"]):
        threading.Thread(target=follow if config["mode"] == "sse" else run, args=(i,), daemon=True).start()
    sys.stdin.read()  # the parent closes it: stop
    with lock:
        result = {
            "received": list(received),
            "counts": dict(counts),
            "statuses": dict(statuses),
            "answers": list(answers),
            "cpu": time.process_time() - started,
        }
    with open(config["out"], "w") as handle:
        json.dump(result, handle)


class Watchers:
    """The watcher process, started and stopped by the parent."""

    def __init__(self, port: int, tokens: list[str], users: list[str], mode: str):
        directory = tempfile.mkdtemp(prefix="iris-watchers-")
        self.out = os.path.join(directory, "received.json")
        config = os.path.join(directory, "config.json")  # tokens: a file, not the command line
        with open(config, "w") as handle:
            json.dump(
                {
                    "port": port,
                    "tokens": tokens,
                    "users": users,
                    "watchers": len(tokens),
                    "mode": mode,
                    "out": self.out,
                },
                handle,
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


def tick_ends() -> dict[int, float]:
    """Each tick's end of writing (``started_at + duration_ms``) as a Unix time."""
    from scheduler.models import TickRecord

    return {
        pk: started.timestamp() + duration / 1000
        for pk, started, duration in TickRecord.objects.values_list("pk", "started_at", "duration_ms")
    }


def tick_count() -> int:
    from scheduler.models import TickRecord

    return TickRecord.objects.count()


def wait_for_ticks(count: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while tick_count() < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"fewer than {count} ticks within {seconds:.0f} s")
        time.sleep(0.5)


# The PostgreSQL backends of each server, by their ``application_name``; "pg other": the rest
# (autovacuum, the benchmark's own reads).
APPLICATIONS = {"pg web": "iris-bench-web", "pg events": "iris-bench-events", "pg celery": "iris-bench-celery"}


class Servers:
    """The API's gunicorn, the stream's gunicorn and the ticking Celery worker, on the benchmark
    database; started and stopped around each window."""

    def __init__(self, args, env: dict, database: str):
        self.args, self.env, self.database = args, env, database
        self.processes: list[subprocess.Popen] = []

    def start(self) -> None:
        args = self.args
        self.web = gunicorn(args.port, self._env("web"), "-w", str(args.web_workers))
        self.events = gunicorn(
            args.port + 1,
            self._env("events"),
            "-k",
            "gthread",
            "-w",
            str(args.events_workers),
            "--threads",
            str(args.events_threads),
        )
        self.ticker = celery_ticking(self._env("celery"))
        self.processes = [self.web, self.events, self.ticker]
        _wait_for(args.port, 60)
        _wait_for(args.port + 1, 60)

    def _env(self, server: str) -> dict:
        """The server's environment: its PostgreSQL backends carry its name (libpq's
        ``PGAPPNAME``), so their CPU is told apart from the other servers'."""
        return {**self.env, "PGAPPNAME": APPLICATIONS[f"pg {server}"]}

    def pids(self) -> dict:
        everyone = set(_backends(self.database))
        named = {name: set(_backends(self.database, app)) for name, app in APPLICATIONS.items()}
        return {
            "web": _tree(self.web.pid),
            "events": _tree(self.events.pid),
            "celery": _tree(self.ticker.pid),
            **{name: sorted(pids) for name, pids in named.items()},
            "pg other": sorted(everyone.difference(*named.values())),
            "_database": self.database,
            "_applications": {**APPLICATIONS, "pg other": None},
        }

    def stop(self) -> None:
        stop(self.processes)
        self.processes = []


def admin_execute(url: str, *statements: str) -> None:
    """Statements on the server's ``postgres`` database (creating and dropping databases)."""
    import psycopg

    admin_url = urlparse(url)._replace(path="/postgres").geturl()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def restore_from_template(url: str, database: str, template: str) -> None:
    """The benchmark database dropped and created again from the template; Redis flushed."""
    import redis
    from django.db import connections

    connections.close_all()  # this process's connection to the database being dropped
    admin_execute(
        url, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)', f'CREATE DATABASE "{database}" TEMPLATE "{template}"'
    )
    redis.Redis.from_url(os.environ["IRIS_REDIS_URL"]).flushdb()


def settle(args, servers: Servers, tokens: list[str], ticks: int, tag: str) -> None:
    """The servers up, ``ticks`` ticks recorded, and the warm-up's submissions in (their names
    start with ``tag``: each window's are new to the template)."""
    servers.start()
    wait_for_ticks(ticks, 300)
    Clients(args.port, tokens, WARMUP_PER_CLIENT * args.clients, 60, tag).run()


def run_window(args, servers: Servers, tokens, watcher_tokens, followed, mode: str, tag: str) -> dict:
    """One window on a database just restored from the template: settle, 5 s (the watchers'
    first polls or streams, or nothing), the submissions; with the watchers (``mode`` "poll" or
    "sse"; "alone": none), their counts and delays."""
    with_watchers = mode != "alone"
    settle(args, servers, tokens, tick_count() + 2, f"warm-{tag}")
    watchers = Watchers(args.port + 1, watcher_tokens, followed, mode) if with_watchers else None
    time.sleep(5)  # every watcher has made its first poll ("now") and waits
    watcher_cpu_before = _cpu_seconds([watchers.process.pid]) if watchers else 0.0
    switched = {"web": servers.web.pid, "events": servers.events.pid, "celery": servers.ticker.pid}
    if watchers:
        switched["watchers"] = watchers.process.pid
    switches_before = {name: context_switches(_tree(pid)) for name, pid in switched.items()}
    before = database_counters(servers.database)
    start = time.time()
    measured = measure_window(args.port, tokens, args.submissions, args.seconds, tag, servers.pids())
    end = time.time()
    switches = {name: context_switches(_tree(pid)) for name, pid in switched.items()}
    time.sleep(1.2)  # PostgreSQL flushes a live backend's counters about once a second
    after = database_counters(servers.database)
    measured["database"] = {key: after[key] - before[key] for key in before}
    measured["with_watchers"] = with_watchers
    measured["switches"] = {
        name: tuple(now - then for now, then in zip(switches[name], switches_before[name], strict=True))
        for name in switched
    }
    measured["mode"] = mode
    if watchers:
        measured["watcher_cpu"] = _cpu_seconds([watchers.process.pid]) - watcher_cpu_before
        watched = watchers.stop()
        ends = tick_ends()  # this database's ticks (the ids start again at each restore)
        measured["delays"] = sorted(
            at - ends[tick] for _, tick, at in watched["received"] if tick in ends and start <= ends[tick] and at <= end
        )
        measured["ticks_seen"] = len(
            {tick for _, tick, _ in watched["received"] if tick in ends and start <= ends[tick]}
        )
        measured["watched"] = watched
        measured["watch_wall"] = end - start
        measured["answers_in_window"] = sum(1 for at in watched["answers"] if start <= at <= end)
    servers.stop()
    return measured


def context_switches(pids) -> tuple[int, int]:
    """Voluntary and involuntary context switches of the processes' threads, summed (an
    involuntary one: the thread was preempted while it could run, a sign of a busy host)."""
    import psutil

    voluntary = involuntary = 0
    for pid in pids:
        try:
            for thread in psutil.Process(pid).threads():
                counts = _thread_switches(pid, thread.id)
                voluntary, involuntary = voluntary + counts[0], involuntary + counts[1]
        except psutil.Error:
            continue
    return voluntary, involuntary


def _thread_switches(pid: int, tid: int) -> tuple[int, int]:
    try:
        with open(f"/proc/{pid}/task/{tid}/status") as handle:
            fields = dict(line.split(":", 1) for line in handle if "ctxt_switches" in line)
    except OSError:
        return 0, 0
    return int(fields["voluntary_ctxt_switches"]), int(fields["nonvoluntary_ctxt_switches"])


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


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
    parser.add_argument("--rounds", type=int, default=2, help="windows of each kind (alone, with watchers), alternated")
    parser.add_argument(
        "--modes",
        default="poll",
        help="how the watchers follow, comma-separated, a window of each per round: poll (long polls), sse",
    )
    parser.set_defaults(seconds=30.0, submissions=100_000)
    args = parser.parse_args()
    if args.no_tick:
        parser.error("the watchers measure ticks' events: a tick worker is needed")
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    if not modes or set(modes) - {"poll", "sse"}:
        parser.error("--modes: poll, sse or both (comma-separated)")

    watcher_names = [f"watch-{i}" for i in range(args.watchers)]
    env, database, tokens, watcher_tokens = prepare(args, users=watcher_names)
    from scheduler.models import Job, UserBudget

    followed = set(Job.objects.values_list("user", flat=True).distinct()) | set(
        UserBudget.objects.values_list("user_id", flat=True)
    )
    followed = sorted(followed | {f"bench-{c}" for c in range(args.clients)})
    url = env["IRIS_DATABASE_URL"]
    template = f"{database}_template"
    servers = Servers(args, env, database)
    windows = []
    try:
        settle(args, servers, tokens, 2, "warm-")  # the first tick's burst of events is behind the template
        servers.stop()
        from django.db import connections

        connections.close_all()
        admin_execute(
            url, f'DROP DATABASE IF EXISTS "{template}"', f'CREATE DATABASE "{template}" TEMPLATE "{database}"'
        )
        for n in range(args.rounds):
            for mode in ("alone", *modes):
                restore_from_template(url, database, template)
                windows.append(run_window(args, servers, tokens, watcher_tokens, followed, mode, f"{mode[0]}{n}-"))
    finally:
        servers.stop()
        from django.db import connections

        connections.close_all()
        admin_execute(url, f'DROP DATABASE IF EXISTS "{template}"')

    print(
        f"clients {args.clients}, gunicorn sync workers {args.web_workers}, stream: gunicorn gthread "
        f"{args.events_workers} x {args.events_threads} threads, cluster {args.cluster or 'empty'}, "
        f"watchers {args.watchers} following {len(followed)} users; every window from the template {template}"
    )
    for number, measured in enumerate(windows, 1):
        print(f"== window {number}: {KIND_NAMES[measured['mode']]}")
        for line in window_lines(measured):
            print("  " + line)
        print("  " + window_cpu_line(measured))
        print(
            "  context switches in the window (voluntary / involuntary): "
            + ", ".join(f"{name} {v} / {i}" for name, (v, i) in measured["switches"].items())
        )
        db = measured["database"]
        print(
            f"  PostgreSQL (benchmark database): {db['commits']} transactions ({db['commits'] / measured['wall']:.0f}/s), "
            f"{db['sessions']} sessions opened, active {db['active_ms'] / 1000:.2f} s"
        )
        if measured["with_watchers"]:
            watched, delays = measured["watched"], measured["delays"]
            counts = watched["counts"]
            requests = measured["answers_in_window"]
            stream_cpu = measured["cpu"]["events"]
            print(
                f"  watchers: {counts['requests']} requests in all ({counts['errors']} failed "
                f"{watched['statuses'] or ''}), {requests} of them "
                f"{'answered' if measured['mode'] == 'poll' else 'opened'} in the window, "
                f"{counts['events']} events received; watcher process CPU "
                f"{measured['watcher_cpu']:.2f} s in the window ({measured['watch_wall']:.1f} s); stream CPU "
                f"{stream_cpu:.2f} s in the window"
                + (f", {stream_cpu * 1000 / requests:.2f} ms per request answered" if requests else "")
            )
            if delays:
                print(
                    f"  delay over {len(delays)} tick events of {measured['ticks_seen']} ticks: p50 "
                    f"{statistics.median(delays) * 1000:.0f} ms, p99 {percentile(delays, 0.99) * 1000:.0f} ms, "
                    f"max {delays[-1] * 1000:.0f} ms"
                )
            else:
                print("  no tick event reached a watcher in the window")

    alone = [w for w in windows if w["mode"] == "alone"]
    alone_rate = mean(w["rate"] for w in alone)
    print("submissions/s: alone " + ", ".join(f"{w['rate']:.1f}" for w in alone) + f" (mean {alone_rate:.1f})")
    for mode in modes:
        group = [w for w in windows if w["mode"] == mode]
        rate = mean(w["rate"] for w in group)
        fall = (1 - rate / alone_rate) * 100 if alone_rate else 0.0
        print(
            f"submissions/s, {KIND_NAMES[mode]}: "
            + ", ".join(f"{w['rate']:.1f}" for w in group)
            + f" (mean {rate:.1f}): a fall of {fall:.1f}% (target at most 10%)"
        )
    per_submission = {}
    for mode in ("alone", *modes):
        group = [w for w in windows if w["mode"] == mode]
        parts = {
            part: mean(window_cpu(w)[part] * 1000 / max(w["ok"], 1) for w in group) for part in window_cpu(group[0])
        }
        per_submission[mode] = parts
        print(
            f"mean CPU ms per submission, {KIND_NAMES[mode]}: "
            + ", ".join(f"{part} {value:.2f}" for part, value in parts.items())
            + f"; servers {servers_total(parts):.2f}, total {sum(parts.values()):.2f}"
        )
    for mode in modes:
        alone_parts, with_parts = per_submission["alone"], per_submission[mode]
        print(
            f"implied fall, {KIND_NAMES[mode]} (a CPU-bound host: submissions/s in inverse proportion to CPU per "
            f"submission): servers {implied_fall(servers_total(alone_parts), servers_total(with_parts)):.1f}%, "
            f"with the benchmark's clients and watchers {implied_fall(sum(alone_parts.values()), sum(with_parts.values())):.1f}%; "
            "added CPU ms per submission by part: "
            + ", ".join(f"{part} {with_parts[part] - alone_parts.get(part, 0.0):+.2f}" for part in with_parts)
        )
    for mode in modes:
        group = [w for w in windows if w["mode"] == mode]
        delays = sorted(d for w in group for d in w["delays"])
        if delays:
            print(
                f"{KIND_NAMES[mode]}: tick end of writing -> watcher read, over {len(delays)} tick events of "
                f"{sum(w['ticks_seen'] for w in group)} ticks in {len(group)} windows: "
                f"p50 {statistics.median(delays) * 1000:.0f} ms, p99 {percentile(delays, 0.99) * 1000:.0f} ms, "
                f"max {delays[-1] * 1000:.0f} ms (target p99 at most 2 s)"
            )
        else:
            print(f"{KIND_NAMES[mode]}: no tick event reached a watcher in any window")


# Parts that are the benchmark's own load, not the service's.
HARNESS = ("clients", "watchers")


def window_cpu(window: dict) -> dict[str, float]:
    """CPU seconds of each part in a window: the servers, their PostgreSQL backends by server,
    the submitting clients and the watcher process (0 in a window alone)."""
    return {**window["cpu"], "clients": window["client_cpu"], "watchers": window.get("watcher_cpu", 0.0)}


def window_cpu_line(window: dict) -> str:
    cpu = window_cpu(window)
    return (
        f"CPU s in the window ({window['wall']:.1f} s): "
        + ", ".join(f"{part} {seconds:.2f}" for part, seconds in cpu.items())
        + f"; all {sum(cpu.values()):.2f} ({sum(cpu.values()) / window['wall']:.2f} cores)"
    )


def servers_total(parts: dict[str, float]) -> float:
    return sum(value for part, value in parts.items() if part not in HARNESS)


def implied_fall(alone: float, with_watchers: float) -> float:
    return (1 - alone / with_watchers) * 100 if with_watchers else 0.0


KIND_NAMES = {"alone": "alone", "poll": "with watchers (long polls)", "sse": "with watchers (server-sent events)"}


if __name__ == "__main__":
    main()
