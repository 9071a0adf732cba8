"""Sweeps through ``POST /api/v1/jobs:batch``: jobs/s in batches of 1,000, on SQLite and PostgreSQL.

Usage (from the repository root; PostgreSQL for that run, gunicorn: ``pip install -e '.[bench]'``)::

    .venv/bin/python benchmarks/bench_batch.py                          # both databases, 30 batches each
    .venv/bin/python benchmarks/bench_batch.py --database postgresql --batches 60 --clients 2

Each run starts from an empty database (PostgreSQL: ``IRIS_BENCH_DATABASE_URL``, default
``postgresql://postgres@127.0.0.1:5432/iris_bench_batch``, dropped and recreated; SQLite: a new
file in a temporary data dir), serves the API with gunicorn (``--web-workers`` sync workers), and
sends ``--batches`` batches of ``--batch-size`` distinct jobs (names, arguments and memory differ,
as in a sweep; ``--replicas`` tasks each) from ``--clients`` concurrent clients. Every batch is
its own user's (a researcher with an API token), so the unfinished-task cap
(``IRIS_MAX_ACTIVE_TASKS_PER_USER``, default) counts a realistic history rather than one user's
growing pile. No Celery worker runs: a prompt tick is requested per batch as in production, and
waits in the broker (``IRIS_REDIS_URL``, default ``redis://127.0.0.1:6379/14``); the tick's cost is
not part of this figure (``bench_tick.py`` measures ticks).

With ``--tick-workers N`` (PostgreSQL), the database also holds N healthy CPU workers (32 cores,
256 GiB each: 32 of these jobs apiece), and this process is the tick process: it ticks once after
the warm-up batches (a warm tick process, as the scheduler's is between beats) and, after the
window, runs the next tick and prints its time and how many of the window's tasks it placed: the
second half of issue 26's batch target ("the next tick places them within the tick target").

Printed per database: jobs/s (and tasks/s) over the measured window (warm-up batches excluded),
p50/p99 batch latency, errors by status, and CPU milliseconds per 1,000 jobs of the web workers,
of the PostgreSQL backends and of the clients (this process), from /proc before and after the
window, with the load average, so a figure can be judged on a machine other work shares.
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

from benchmarks.bench_api import _backends, _cpu_seconds, _tree, _wait_for, gunicorn  # noqa: E402
from benchmarks.bench_decision import reference_seconds  # noqa: E402

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/iris_bench_batch"
DEFAULT_REDIS = "redis://127.0.0.1:6379/14"
WARMUP_BATCHES_PER_WORKER = 2


def sweep_body(tag: str, size: int, replicas: int) -> bytes:
    """One batch: ``size`` distinct jobs, as a hyperparameter sweep would send them."""
    jobs = [
        {
            "name": f"{tag}-{i}",
            "command": ["python", "train.py", f"--lr={0.0001 * (i + 1):.4f}", f"--seed={i}"],
            "cpu": 1,
            "memory": f"{1 + i % 4}Gi",
            "replicas": replicas,
            "priority": "batch",
        }
        for i in range(size)
    ]
    return json.dumps({"jobs": jobs}).encode()


class Clients:
    """Threads sending prepared batches; each records (latency, status, jobs accepted)."""

    def __init__(self, port: int, batches: list[tuple[str, bytes]], clients: int):
        self.port, self.batches, self.clients = port, batches, clients
        self.results: list[tuple[float, int, int]] = []
        self.errors: dict[int, str] = {}
        self.lock = threading.Lock()
        self.next = 0

    def _take(self) -> tuple[str, bytes] | None:
        with self.lock:
            if self.next >= len(self.batches):
                return None
            self.next += 1
            return self.batches[self.next - 1]

    def _run(self) -> None:
        while (batch := self._take()) is not None:
            token, body = batch
            headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
            started = time.monotonic()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
                conn.request("POST", "/api/v1/jobs:batch", body=body, headers=headers)
                response = conn.getresponse()
                text = response.read()
                status = response.status
                conn.close()
                accepted = json.loads(text)["count"] if status == 201 else 0
            except OSError as exc:
                status, text, accepted = 0, str(exc).encode(), 0
            latency = time.monotonic() - started
            with self.lock:
                self.results.append((latency, status, accepted))
                if status != 201 and status not in self.errors:
                    self.errors[status] = text[:300].decode(errors="replace")

    def run(self) -> float:
        started = time.monotonic()
        threads = [threading.Thread(target=self._run, daemon=True) for _ in range(self.clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return time.monotonic() - started


def prepare(url: str) -> None:
    """Empty the database named by ``url`` (PostgreSQL: drop and create; SQLite: a new file)."""
    if url.startswith("postgresql"):
        from benchmarks.bench_tick import recreate_database

        recreate_database(url)


def run_one(kind: str, args) -> None:
    data_dir = tempfile.mkdtemp(prefix=f"iris-bench-batch-{kind}-")
    url = (
        os.environ.get("IRIS_BENCH_DATABASE_URL", DEFAULT_URL)
        if kind == "postgresql"
        else f"sqlite:///{data_dir}/bench.sqlite3"
    )
    prepare(url)
    env = {
        **os.environ,
        "IRIS_DATABASE_URL": url,
        "IRIS_REDIS_URL": os.environ.get("IRIS_REDIS_URL", DEFAULT_REDIS),
        "IRIS_DATA_DIR": data_dir,
        "DJANGO_SETTINGS_MODULE": "iris_web.settings",
        "IRIS_LOG_LEVEL": "WARNING",
        "IRIS_MAX_JOBS_PER_BATCH": str(max(args.batch_size, 1000)),
    }
    # Set up in a child process: this one runs two databases, and Django is set up once per process.
    setup = subprocess.run(
        [
            sys.executable,
            __file__,
            "--setup-only",
            "--batches",
            str(args.batches + args.web_workers * WARMUP_BATCHES_PER_WORKER),
            "--tick-workers",
            str(args.tick_workers if kind == "postgresql" else 0),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    tokens = json.loads(setup.stdout.strip().splitlines()[-1])
    warm_n = args.web_workers * WARMUP_BATCHES_PER_WORKER
    bodies = [(tokens[b], sweep_body(f"sweep{b}", args.batch_size, args.replicas)) for b in range(len(tokens))]
    port = args.port
    web = gunicorn(port, env, "-w", str(args.web_workers), "--timeout", "300")
    try:
        _wait_for(port, 60)
        Clients(port, bodies[:warm_n], args.clients).run()
        servers = {"web": _tree(web.pid)}
        ticking = kind == "postgresql" and args.tick_workers > 0
        if kind == "postgresql":
            os.environ.update({"IRIS_DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "iris_web.settings"})
            import django

            django.setup()
            database = urlparse(url).path.lstrip("/")
            if ticking:
                warm_tick = _timed_tick()
            servers["postgres"] = _backends(database)
        reference_before = reference_seconds()
        cpu_before = {name: _cpu_seconds(pids) for name, pids in servers.items()}
        client_before = time.process_time()
        load_before = os.getloadavg()
        clients = Clients(port, bodies[warm_n:], args.clients)
        wall = clients.run()
        client_cpu = time.process_time() - client_before
        if kind == "postgresql":
            servers["postgres"] = sorted(set(servers["postgres"]) | set(_backends(database)))
        cpu = {name: _cpu_seconds(pids) - cpu_before.get(name, 0.0) for name, pids in servers.items()}
        load_after = os.getloadavg()
        reference_after = reference_seconds()
        if ticking:
            next_tick = _timed_tick()
    finally:
        try:
            os.killpg(web.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            web.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(web.pid, signal.SIGKILL)

    jobs = sum(r[2] for r in clients.results)
    latencies = sorted(r[0] * 1000 for r in clients.results)
    errors = {status: sum(1 for r in clients.results if r[1] == status) for status in clients.errors}
    per_k = 1000 / max(jobs, 1)
    print(
        f"{kind}: {len(clients.results)} batches of {args.batch_size} jobs x {args.replicas} task(s), "
        f"{args.clients} clients, {args.web_workers} gunicorn workers"
    )
    print(
        f"  load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
        f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}"
    )
    print(f"  reference loop before {reference_before:.3f} s, after {reference_after:.3f} s")
    print(
        f"  jobs {jobs} in {wall:.2f} s: {jobs / wall:,.0f} jobs/s ({jobs * args.replicas / wall:,.0f} tasks/s); "
        f"errors {errors or 'none'}"
    )
    if latencies:
        p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        print(f"  batch latency ms: p50 {statistics.median(latencies):.0f}, p99 {p99:.0f}, max {latencies[-1]:.0f}")
    print(
        "  CPU ms per 1,000 jobs: "
        + ", ".join(f"{name} {seconds * 1000 * per_k:.0f}" for name, seconds in cpu.items())
        + f", clients {client_cpu * 1000 * per_k:.0f}"
    )
    for status, text in clients.errors.items():
        print(f"  first {status} answer: {text}")
    if ticking:
        print(f"  warm-up tick (before the window): {warm_tick}")
        print(f"  the next tick after the window: {next_tick}")
    sys.stdout.flush()


def _timed_tick() -> str:
    """One tick in this process (PostgreSQL, Django set up), as a line: wall and CPU seconds, its
    phases, what it placed, and the tasks still pending after it."""
    from scheduler.models import Task
    from scheduler.tick.run import run_tick

    started, cpu_started = time.perf_counter(), time.process_time()
    outcome = run_tick()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    if outcome is None:
        return "skipped (another tick held the lease)"
    pending = Task.objects.filter(state="pending").count()
    return (
        f"{wall:.2f} s wall, {cpu:.2f} s CPU (load {outcome.load_ms / 1000:.2f}, decide "
        f"{outcome.decide_ms / 1000:.2f}, apply+commit {wall - (outcome.load_ms + outcome.decide_ms) / 1000:.2f}); "
        f"{outcome.assigned:,} assigned, {pending:,} tasks still pending"
    )


def setup_only(batches: int, tick_workers: int) -> None:
    """Migrate the database of the environment, add ``tick_workers`` CPU workers, and print one
    API token per batch (JSON)."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from scheduler.models import ApiToken, Worker

    call_command("migrate", verbosity=0)
    Worker.objects.bulk_create(
        Worker(name=f"bench-cpu-{w}", cpu_millicores=32_000, memory_bytes=256 << 30) for w in range(tick_workers)
    )
    users = get_user_model().objects.bulk_create(get_user_model()(username=f"bench-{b}") for b in range(batches))
    print(json.dumps([ApiToken.objects.create(user=user, name="bench")[1] for user in users]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--batches", type=int, default=30, help="batches in the measured window")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--replicas", type=int, default=1, help="tasks per job")
    parser.add_argument("--clients", type=int, default=2, help="concurrent clients")
    parser.add_argument("--web-workers", type=int, default=2, help="gunicorn sync workers")
    parser.add_argument("--port", type=int, default=int(os.environ.get("IRIS_BENCH_PORT", "8126")))
    parser.add_argument(
        "--tick-workers",
        type=int,
        default=0,
        help="PostgreSQL: add this many 32-core workers and time the tick after the window (see above)",
    )
    parser.add_argument("--setup-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.setup_only:
        setup_only(args.batches, args.tick_workers)
        return
    kinds = ["sqlite", "postgresql"] if args.database == "both" else [args.database]
    if "postgresql" in kinds and kinds[0] != "postgresql":
        kinds = ["sqlite", "postgresql"]
    for kind in kinds:
        run_one(kind, args)


if __name__ == "__main__":
    main()
