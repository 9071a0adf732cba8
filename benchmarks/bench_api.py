"""Sustained ``POST /api/v1/jobs/`` throughput: real gunicorn, real PostgreSQL, a real Celery
worker (with beat) ticking, N concurrent clients, bounded in count and in time.

Usage (from the repository root; needs PostgreSQL and Redis, and gunicorn: ``pip install -e '.[bench]'``)::

    .venv/bin/python benchmarks/bench_api.py                                # 16 clients, 4,000 submissions
    .venv/bin/python benchmarks/bench_api.py --cluster 100000x10000         # on a pre-filled cluster
    .venv/bin/python benchmarks/bench_api.py --no-tick --submissions 2000   # the web path alone
    .venv/bin/python benchmarks/bench_api.py --web-threads 4 --keep-alive   # gthread, connections kept

The benchmark database (``IRIS_BENCH_DATABASE_URL``, default
``postgresql://postgres@127.0.0.1:5432/iris_bench_api``) is dropped and recreated; the broker and
cache are ``IRIS_REDIS_URL`` (default ``redis://127.0.0.1:6379/15``); gunicorn binds
``127.0.0.1:--port``. Each client is its own user (``bench-<n>``, a researcher with an API token)
submitting single-task CPU jobs one after another on a new connection each (gunicorn's sync
workers close every connection), or with ``--keep-alive`` on one connection while the server keeps
it open (``--web-threads N``: gunicorn's gthread workers, N threads each, which keep connections
alive). The run stops after ``--submissions`` answers or ``--seconds``, whichever comes first.

Printed: submissions/s over the measured window, p50/p99 latency, errors by status, and CPU seconds
per submission of the web workers, of the PostgreSQL backends of the benchmark database, of the
Celery worker and of the clients (this process), read from /proc before and after the window, so
a figure can be judged on a machine other work shares (the load average is printed too).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from urllib.parse import urlparse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/iris_bench_api"
DEFAULT_REDIS = "redis://127.0.0.1:6379/15"
# Submissions before the window opens: every web worker has connected and imported everything.
WARMUP_PER_CLIENT = 5


def _cpu_seconds(pids) -> float:
    """User + system CPU seconds of the given live processes (dead ones count 0)."""
    return sum(_cpu_by_pid(pids).values())


def _cpu_by_pid(pids) -> dict[int, float]:
    """User + system CPU seconds of each of the given processes still alive."""
    import psutil

    seconds = {}
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        seconds[pid] = times.user + times.system
    return seconds


def _cpu_spent(before: dict[int, float], pids) -> float:
    """CPU seconds spent since ``before`` by the processes alive now (one that exited in
    between counts nothing, rather than minus what it had spent before)."""
    return sum(now - before.get(pid, 0.0) for pid, now in _cpu_by_pid(pids).items())


def _tree(pid: int) -> list[int]:
    import psutil

    try:
        parent = psutil.Process(pid)
    except psutil.Error:
        return []
    return [parent.pid, *(child.pid for child in parent.children(recursive=True))]


def _backends(database: str, application: str | None = None) -> list[int]:
    """The PostgreSQL backend pids connected to the benchmark database (only those whose
    ``application_name`` is ``application``, when given: a server started with ``PGAPPNAME``)."""
    from django.db import connection

    sql = "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
    params = [database]
    if application is not None:
        sql += " AND application_name = %s"
        params.append(application)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


def _wait_for(port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"gunicorn did not answer on port {port} within {seconds:.0f} s")


class Clients:
    """``count`` threads submitting jobs; each records (start, latency, status) per submission."""

    def __init__(self, port: int, tokens: list[str], limit: int, seconds: float, tag: str, keep_alive: bool = False):
        self.port, self.tokens, self.limit, self.seconds, self.tag = port, tokens, limit, seconds, tag
        self.keep_alive = keep_alive
        self.results: list[tuple[float, float, int]] = []
        self.lock = threading.Lock()
        self.sent = 0
        self.errors: dict[int, str] = {}

    def _next(self) -> int | None:
        with self.lock:
            if self.sent >= self.limit:
                return None
            self.sent += 1
            return self.sent

    def _run(self, client: int, stop_at: float) -> None:
        headers = {"Authorization": f"Token {self.tokens[client]}", "Content-Type": "application/json"}
        i = 0
        conn = None
        while time.monotonic() < stop_at:
            if self._next() is None:
                break
            i += 1
            body = json.dumps({"name": f"{self.tag}{client}-{i}", "command": ["true"], "cpu": 1})
            started = time.monotonic()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                conn.request("POST", "/api/v1/jobs/", body=body, headers=headers)
                response = conn.getresponse()
                text = response.read()
                status = response.status
                # A server that keeps the connection open (gthread) serves the next one on it.
                if not self.keep_alive or response.will_close:
                    conn.close()
                    conn = None
            except OSError as exc:
                status, text = 0, str(exc).encode()
                if conn is not None:
                    conn.close()
                    conn = None
            latency = time.monotonic() - started
            with self.lock:
                self.results.append((started, latency, status))
                if status != 201 and status not in self.errors:
                    self.errors[status] = text[:300].decode(errors="replace")
        if conn is not None:
            conn.close()

    def run(self) -> None:
        stop_at = time.monotonic() + self.seconds
        threads = [threading.Thread(target=self._run, args=(c, stop_at), daemon=True) for c in range(len(self.tokens))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every benchmark built on this one shares (``bench_watchers.py``)."""
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--submissions", type=int, default=4000, help="at most this many in the window")
    parser.add_argument("--seconds", type=float, default=60.0, help="at most this long")
    parser.add_argument("--web-workers", type=int, default=4, help="gunicorn workers")
    parser.add_argument(
        "--web-threads",
        type=int,
        default=0,
        help="serve the API with gunicorn's gthread workers, this many threads each (0: sync workers)",
    )
    parser.add_argument(
        "--keep-alive",
        action="store_true",
        help="each client sends its submissions on one connection while the server keeps it open (gthread does)",
    )
    parser.add_argument("--port", type=int, default=int(os.environ.get("IRIS_BENCH_PORT", "8120")))
    parser.add_argument("--cluster", help="PENDINGxWORKERS: pre-fill a synthetic cluster (benchmarks/restore.py)")
    parser.add_argument("--no-tick", action="store_true", help="no Celery worker (the web path alone)")


def prepare(args, users: list[str] = ()) -> tuple[dict, str, list[str], list[str]]:
    """A fresh benchmark database (migrated, the cluster restored), Django set up on it, and an
    API token for each client (``bench-<n>``) and for each of ``users``. Returns the servers'
    environment, the database's name, the clients' tokens and the users' tokens."""
    from benchmarks.bench_tick import recreate_database

    url = os.environ.get("IRIS_BENCH_DATABASE_URL", DEFAULT_URL)
    database = urlparse(url).path.lstrip("/")
    recreate_database(url)
    data_dir = tempfile.mkdtemp(prefix="iris-bench-api-")
    env = {
        **os.environ,
        "IRIS_DATABASE_URL": url,
        "IRIS_REDIS_URL": os.environ.get("IRIS_REDIS_URL", DEFAULT_REDIS),
        "IRIS_DATA_DIR": data_dir,
        "DJANGO_SETTINGS_MODULE": "iris_web.settings",
        "IRIS_LOG_LEVEL": "WARNING",
    }
    if getattr(args, "estimates", "own-queue") == "own-queue":
        # Start estimates (a run takes up to IRIS_ESTIMATE_BUDGET_SECONDS of a worker process) go
        # to their own queue, as docs/operations.md advises, so ticks never wait behind one; no
        # worker here consumes it. With the tick worker's one process they held the ticks off
        # for most of a window on a busy host (issue 26, 2026-12-06).
        env["IRIS_ESTIMATE_QUEUE"] = "estimates"
    os.environ.update(env)
    import django

    django.setup()
    import redis
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from scheduler.models import ApiToken

    redis.Redis.from_url(env["IRIS_REDIS_URL"]).flushdb()
    call_command("migrate", verbosity=0)
    if args.cluster:
        from benchmarks.restore import restore_snapshot
        from benchmarks.synthetic import generate
        from scheduler.core.wire import snapshot_from_json

        pending, workers = (int(x) for x in args.cluster.lower().split("x"))
        restore_snapshot(snapshot_from_json(generate(pending=pending, workers=workers, seed=0)))

    def token(username: str) -> str:
        user = get_user_model().objects.create_user(username=username)
        return ApiToken.objects.create(user=user, name="bench")[1]

    tokens = [token(f"bench-{c}") for c in range(args.clients)]
    user_tokens = [token(name) for name in users]
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return env, database, tokens, user_tokens


def gunicorn(port: int, env: dict, *options: str) -> subprocess.Popen:
    """``gunicorn iris_web.wsgi`` on ``127.0.0.1:port`` with ``options`` (workers, class)."""
    return subprocess.Popen(
        [
            os.path.join(os.path.dirname(sys.executable), "gunicorn"),
            "-b",
            f"127.0.0.1:{port}",
            *options,
            "--log-level",
            "warning",
            "iris_web.wsgi",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )


def web_options(args) -> list[str]:
    """gunicorn's options for the API's workers: ``--web-workers`` sync workers, or gthread
    workers of ``--web-threads`` threads each."""
    options = ["-w", str(args.web_workers)]
    if args.web_threads:
        options += ["-k", "gthread", "--threads", str(args.web_threads)]
    return options


def celery_ticking(env: dict) -> subprocess.Popen:
    """A Celery worker with beat (one process): ticks, event moves, deliveries. Each task run's
    CPU goes to ``task-cpu.tsv`` in the data directory (``benchmarks/celery_task_cpu.py``)."""
    env = {**env, "IRIS_BENCH_TASK_CPU_LOG": task_cpu_log(env)}
    return subprocess.Popen(
        [
            os.path.join(os.path.dirname(sys.executable), "celery"),
            "-A",
            "benchmarks.celery_task_cpu",
            "worker",
            "--beat",
            "--concurrency",
            "1",
            "--loglevel",
            os.environ.get("IRIS_BENCH_CELERY_LOGLEVEL", "WARNING"),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        # Its warnings and errors (a failing tick) in the data directory, printed with the results.
        stderr=open(os.path.join(env["IRIS_DATA_DIR"], "celery.log"), "wb"),  # noqa: SIM115 -- the child holds it
        start_new_session=True,
    )


def task_cpu_log(env: dict) -> str:
    return os.path.join(env["IRIS_DATA_DIR"], "task-cpu.tsv")


def stop(processes: list[subprocess.Popen]) -> None:
    """Stop each server as an operator would: SIGTERM to its main process alone (Celery's warm
    shutdown lets the task under way finish and stops its pool; gunicorn's master stops its
    workers), then SIGKILL to whatever of its group is left after 20 s. (SIGTERM to the whole
    group killed the pool's children mid-task and left error lines in the Celery log.)"""
    for process in processes:
        try:
            process.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
    for process in processes:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def measure_window(
    port: int, tokens: list[str], submissions: int, seconds: float, tag: str, servers: dict, keep_alive: bool = False
) -> dict:
    """One measured window of submissions: rate, latencies, errors, and CPU seconds of each
    server (``{name: [pid, ...]}``; "postgres" re-read after the window, as backends come and
    go, and so is each group of backends named in ``servers["_applications"]``, ``{name:
    application_name}``, None naming the backends of no other group), of the clients (this process), with the load average and the reference
    loop around it."""
    from benchmarks.bench_decision import reference_seconds

    database = servers.pop("_database")
    applications = servers.pop("_applications", {})
    reference_before = reference_seconds()
    cpu_before = {name: _cpu_by_pid(pids) for name, pids in servers.items()}
    client_before = time.process_time()
    load_before = os.getloadavg()
    clients = Clients(port, tokens, submissions, seconds, tag, keep_alive)
    from django.utils import timezone

    backends = BackendPoller(database, cpu_before.get("postgres", {}))
    opened = timezone.now()
    wall_start = time.monotonic()
    backends.start()
    clients.run()
    backends.stop()
    wall = time.monotonic() - wall_start
    closed = timezone.now()
    # The window on the clock the Celery worker's task records use (benchmarks/celery_task_cpu.py).
    task_window = (opened.timestamp(), closed.timestamp())
    client_cpu = time.process_time() - client_before
    if "postgres" in servers:
        servers["postgres"] = sorted(set(servers["postgres"]) | set(_backends(database)))
    if applications:
        named = {name: set(_backends(database, app)) for name, app in applications.items() if app is not None}
        rest = set(_backends(database)).difference(*named.values())
        for name in applications:
            servers[name] = sorted(set(servers[name]) | named.get(name, rest))
    cpu = {name: _cpu_spent(cpu_before.get(name, {}), pids) for name, pids in servers.items()}
    if "postgres" in cpu:
        cpu["postgres"] = backends.spent()
    celery_processes = _cpu_by_process(cpu_before.get("celery", {}), servers.get("celery", []))
    servers["_database"] = database
    servers["_applications"] = applications
    ok = [r for r in clients.results if r[2] == 201]
    latencies = sorted(r[1] * 1000 for r in clients.results)
    return {
        "ok": len(ok),
        "wall": wall,
        "rate": len(ok) / wall,
        "latencies": latencies,
        "errors": {status: sum(1 for r in clients.results if r[2] == status) for status in clients.errors},
        "first_errors": dict(clients.errors),
        "cpu": cpu,
        "client_cpu": client_cpu,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "reference_before": reference_before,
        "reference_after": reference_seconds(),
        "ticks": _ticks_between(opened, closed),
        "task_window": task_window,
        "celery_processes": celery_processes,
    }


class BackendPoller:
    """The CPU seconds of every PostgreSQL backend of ``database`` over a window, backends that
    exit inside it included: a thread reads each backend's CPU every ``period`` seconds (found by
    its process title, ``postgres: [CLUSTER:] USER DATABASE HOST(PORT) ...``), so a backend replaced in the
    window (Django closes a connection after ``IRIS_DB_CONN_MAX_AGE``, 60 s) counts what it spent
    up to its last reading. Reading the backends only at the window's ends (as before
    2026-12-06's submit30) lost the CPU of those that exited: windows that opened a minute after
    the web workers connected showed 0.2 ms of PostgreSQL per submission instead of ~1.7."""

    def __init__(self, database: str, before: dict[int, float], period: float = 0.2):
        self.database, self.before, self.period = database, dict(before), period
        self.last: dict[int, float] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _pids(self) -> list[int]:
        import psutil

        pids = []
        for process in psutil.process_iter(["cmdline"]):
            words = " ".join(process.info["cmdline"] or []).split()
            if words[:1] == ["postgres:"] and self.database in words[1:5]:
                pids.append(process.pid)
        return pids

    def _read(self) -> None:
        self.last.update(_cpu_by_pid(self._pids()))

    def _run(self) -> None:
        while not self._done.wait(self.period):
            self._read()

    def start(self) -> None:
        self._read()
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        self._read()

    def spent(self) -> float:
        return sum(seconds - self.before.get(pid, 0.0) for pid, seconds in self.last.items())


def _cpu_by_process(before: dict[int, float], pids) -> list[tuple[str, float]]:
    """CPU seconds spent since ``before`` by each of ``pids``, named by its role in a Celery
    worker's tree (the main process, the pool's process, beat's process: Celery sets their titles)."""
    import psutil

    spent = []
    for pid, now in _cpu_by_pid(pids).items():
        try:
            title = " ".join(psutil.Process(pid).cmdline())[:60]
        except psutil.Error:
            title = "?"
        spent.append((f"{pid} {title}", now - before.get(pid, 0.0)))
    return spent


def _ticks_between(opened, closed) -> dict:
    """The ticks that started in the window: how many, the jobs' tasks they placed, their
    wall seconds in all (each tick's own record)."""
    from django.db.models import Count, Sum

    from scheduler.models import TickRecord

    return TickRecord.objects.filter(started_at__gte=opened, started_at__lt=closed).aggregate(
        n=Count("pk"), assigned=Sum("assigned"), seconds=Sum("duration_ms")
    )


def window_lines(window: dict) -> list[str]:
    """A window's figures as printed lines (load, reference loop, rate, latency, CPU)."""
    lb, la = window["load_before"], window["load_after"]
    lines = [
        f"load average before {lb[0]:.2f} {lb[1]:.2f} {lb[2]:.2f}, after {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}",
        f"reference loop before {window['reference_before']:.3f} s, after {window['reference_after']:.3f} s",
        f"submissions {window['ok']} in {window['wall']:.2f} s: {window['rate']:.1f}/s; "
        f"errors {window['errors'] or 'none'}",
    ]
    latencies = window["latencies"]
    if latencies:
        lines.append(
            f"latency ms: p50 {statistics.median(latencies):.1f}, p99 {percentile(latencies, 0.99):.1f}, "
            f"max {latencies[-1]:.1f}"
        )
    ticks = window["ticks"]
    lines.append(
        f"ticks started in the window {ticks['n']}: {window['ok'] / max(ticks['n'], 1):.0f} submissions a tick, "
        f"{ticks['assigned'] or 0} tasks placed, {(ticks['seconds'] or 0) / 1000:.2f} s of ticks"
    )
    n = max(window["ok"], 1)
    cpu, client_cpu = window["cpu"], window["client_cpu"]
    lines.append(
        "CPU ms per submission: "
        + ", ".join(f"{name} {seconds * 1000 / n:.2f}" for name, seconds in cpu.items())
        + f", clients {client_cpu * 1000 / n:.2f}, total {(sum(cpu.values()) + client_cpu) * 1000 / n:.2f}"
    )
    return lines


def percentile(ordered: list[float], share: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_server_arguments(parser)
    parser.add_argument(
        "--settle-ticks",
        type=int,
        default=2,
        help="before the window, wait for this many ticks (the restored backlog placed; 0: do not wait)",
    )
    parser.add_argument(
        "--settle-dispatch",
        type=int,
        default=-1,
        metavar="N",
        help="after the settling ticks, also wait until at most N dispatch intents are pending (the restored "
        "backlog's placements delivered: the tick worker's one process drains them between ticks, so until "
        "then the window's Celery share is mostly that drain); -1: do not wait",
    )
    parser.add_argument(
        "--estimates",
        choices=["own-queue", "tick-worker"],
        default="own-queue",
        help="start estimates on their own queue, not run here (default), or on the tick worker's one process",
    )
    args = parser.parse_args()

    env, database, tokens, _ = prepare(args)
    from scheduler.models import Job

    jobs_before = Job.objects.count()
    processes = []
    try:
        web = gunicorn(args.port, env, *web_options(args))
        processes.append(web)
        if not args.no_tick:
            ticker = celery_ticking(env)
            processes.append(ticker)
        _wait_for(args.port, 60)
        Clients(args.port, tokens, WARMUP_PER_CLIENT * args.clients, 60, "warm", args.keep_alive).run()
        if not args.no_tick and args.settle_ticks:
            settled = settle(args.settle_ticks)
            print(f"waited {settled:.1f} s for the first {args.settle_ticks} ticks (the restored backlog placed)")
        if not args.no_tick and args.settle_dispatch >= 0:
            settled, left = settle_dispatch(args.settle_dispatch)
            print(f"waited {settled:.1f} s for the dispatch backlog: {left} intents pending")
        servers = {"web": _tree(web.pid), "postgres": _backends(database), "_database": database}
        if not args.no_tick:
            servers["celery"] = _tree(ticker.pid)
        window = measure_window(args.port, tokens, args.submissions, args.seconds, "j", servers, args.keep_alive)
    finally:
        stop(processes)

    jobs_after = Job.objects.count()
    print(
        f"clients {args.clients}{' (keep-alive)' if args.keep_alive else ''}, gunicorn workers {args.web_workers} "
        f"{f'gthread x {args.web_threads} threads' if args.web_threads else 'sync'}, cluster {args.cluster or 'empty'}, "
        f"tick worker {'no' if args.no_tick else 'yes'}, start estimates {args.estimates}"
    )
    for line in window_lines(window):
        print(line)
    print(f"jobs written {jobs_after - jobs_before} (warm-up included); ticks recorded in all {_ticks_recorded()}")
    for status, text in window["first_errors"].items():
        print(f"first {status} answer: {text}")
    if not args.no_tick:
        from benchmarks.celery_task_cpu import summary

        print(
            "Celery CPU s in the window by process: "
            + "; ".join(f"{t}: {s:.2f}" for t, s in window["celery_processes"])
        )
        for line in summary(task_cpu_log(env), *window["task_window"]):
            print(line)
    celery_log = os.path.join(env["IRIS_DATA_DIR"], "celery.log")
    if os.path.exists(celery_log):
        with open(celery_log, errors="replace") as log:
            errors = [line.rstrip() for line in log if "ERROR" in line or "Traceback" in line]
        print(
            f"Celery worker: {len(errors)} error lines ({celery_log})" + "".join(f"\n  {e[:300]}" for e in errors[:5])
        )


# Seconds to wait at most for the settling ticks before measuring anyway.
SETTLE_SECONDS = 240.0


def settle(ticks: int) -> float:
    """Wait until ``ticks`` ticks have been recorded (the first ticks after a restore place the
    restored cluster's backlog: thousands of tasks, seconds each on a busy host), so the window
    measures the steady ticks a stream of submissions asks for. Returns the seconds waited."""
    started = time.monotonic()
    while _ticks_recorded() < ticks and time.monotonic() - started < SETTLE_SECONDS:
        time.sleep(0.5)
    return time.monotonic() - started


def settle_dispatch(pending: int) -> tuple[float, int]:
    """Wait until at most ``pending`` dispatch intents are pending (or SETTLE_SECONDS pass).
    Returns the seconds waited and the intents then pending."""
    from scheduler.models import DispatchIntent

    started = time.monotonic()
    while True:
        left = DispatchIntent.objects.filter(state=DispatchIntent.State.PENDING).count()
        if left <= pending or time.monotonic() - started >= SETTLE_SECONDS:
            return time.monotonic() - started, left
        time.sleep(1.0)


def _ticks_recorded() -> int:
    from scheduler.models import TickRecord

    return TickRecord.objects.count()


if __name__ == "__main__":
    main()
