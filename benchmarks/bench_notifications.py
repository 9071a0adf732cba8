"""What notifications cost (issue 27): the fan-out of a backlog of events into deliveries, their
delivery to a local webhook receiver and Django's in-memory mail backend, and one idle run of
the beat task (nothing to do), on PostgreSQL.

The receiver is a separate process (so this process's CPU time is the deliverer's alone),
answering 204 at once: the figures are our side's cost, not a receiver's. Prints the reference
loop (``bench_decision.reference_seconds``) and the load average before and after. Usage::

    IRIS_BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/iris_notify27_bench \\
        .venv/bin/python benchmarks/bench_notifications.py --events 20000 --users 200
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_decision import reference_seconds  # noqa: E402
from benchmarks.bench_tick import open_bench_database  # noqa: E402

SECRET = "bench-secret-0123456789"


class Server(ThreadingHTTPServer):
    # A listen backlog for every send thread (http.server's default of 5 drops connections
    # beyond it, and the client's SYN is retried a second later).
    request_queue_size = 128


def serve(port_queue) -> None:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = Server(("127.0.0.1", 0), Handler)
    port_queue.put(server.server_address[1])
    server.serve_forever()


def timed(label: str, fn, *, per: str = "", count_of=None):
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    n = count_of(result) if count_of else None
    extra = f", {cpu / n * 1e6:.0f} us cpu per {per} ({n:,} of them)" if n else ""
    print(f"{label}: {wall:.2f} s wall, {cpu:.2f} s cpu{extra}", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--users", type=int, default=200)
    args = parser.parse_args()

    open_bench_database()
    from django.conf import settings
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from scheduler.events.record import Draft, record
    from scheduler.events.sequence import sequence_events
    from scheduler.notifications.delivery import deliver_due, run_notifications
    from scheduler.notifications.fanout import fan_out
    from scheduler.notifications.preferences import update_preferences
    from django.contrib.auth import get_user_model

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    ports = multiprocessing.Queue()
    receiver = multiprocessing.Process(target=serve, args=(ports,), daemon=True)
    receiver.start()
    url = f"http://127.0.0.1:{ports.get(timeout=30)}/hook"

    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; reference loop {reference_seconds():.3f} s")
    users = []
    for i in range(args.users):
        user = get_user_model().objects.create(username=f"user{i:04d}", email=f"user{i:04d}@bench.example")
        update_preferences(
            user,
            {
                "email_events": ["failed"],
                "webhook_url": url,
                "webhook_secret": SECRET,
                "webhook_events": ["started", "failed"],
            },
        )
        users.append(user.username)
    now = timezone.now()
    drafts = []
    for i in range(args.events):
        user = users[i % len(users)]
        job = f"/{user}/j{i // len(users)}"
        kind, data = [
            ("queued", {}),
            ("queued", {}),
            ("started", {"worker": "w1"}),
            ("finished", {"outcome": "failed"}),
        ][i % 4]
        drafts.append(Draft(kind, now, user, job, task_index=0, attempt=1, data=data))
    record(drafts)
    sequence_events()
    print(f"{args.events:,} events ({args.events // 2:,} of notified kinds), {args.users} users with settings")

    made = timed("fan-out", fan_out, per="event", count_of=lambda _: args.events)
    print(f"  {made:,} deliveries made")
    done = timed("deliver", deliver_due, per="delivery", count_of=lambda d: d.sent + d.retrying + d.failed)
    print(f"  sent {done.sent:,}, retrying {done.retrying:,}, failed {done.failed:,}")
    with CaptureQueriesContext(connection) as queries:
        timed("idle run (nothing to do)", run_notifications)
    print(f"  {len(queries.captured_queries)} statements")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; reference loop {reference_seconds():.3f} s")
    receiver.terminate()


if __name__ == "__main__":
    main()
