"""What gunicorn itself costs per request, beside what the application does: the floor under
``bench_api.py``'s web share (issue 26).

Usage (from the repository root; gunicorn from ``pip install -e '.[bench]'``)::

    .venv/bin/python benchmarks/bench_wsgi_floor.py --requests 8000 --seconds 20 [--app trivial|django]

Starts gunicorn with ``--web-workers`` sync workers (as ``bench_api.py`` does) serving one of:

- ``trivial``: a WSGI callable that reads the body and answers ``201`` with a fixed JSON body of
  the submission answer's size (no Django at all): gunicorn's accept, HTTP parsing, the environ,
  the response's writing and the close;
- ``full``: the project's application as ``bench_api.py`` serves it (``iris_web.wsgi``), on the
  database of ``IRIS_DATABASE_URL`` (migrated; e.g. the one ``bench_api.py`` left), each client a
  user of its own with a token, no Celery worker (the prompt tick's flag stays set: each
  submission asks Redis once, as while a requested tick waits);
- ``django``: Django's WSGI handler (``iris_web.wsgi``, the project's settings and middleware)
  in front of ``POST /api/v1/jobs/``, but with the lean route's answer replaced by that fixed
  body (``IRIS_BENCH_FLOOR=1`` in the workers: see :func:`_floor_django`): gunicorn plus
  Django's handler, the middleware kept for the lean route, with no token check, no SQL, no Redis.

The clients are ``bench_api.py``'s (the same headers and bodies, a new connection each). Printed:
requests/s, latency, and CPU ms per request of the gunicorn processes and of the clients.
``trivial`` and ``django`` write no database; ``django`` needs the project's settings to import
(SQLite by default) and touches no database. ``--profile DIR``: each gunicorn worker runs under
cProfile with a CPU-time timer (``time.process_time``) from its fork to its exit and writes
``DIR/worker-<pid>.prof`` (read them with ``pstats``; the profiler's overhead inflates Python
calls, so use the shares, not the milliseconds).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# About the size of a submission's 201 body (a single-task job).
BODY = (
    b'{"id":"/bench-0/j0-1","user":"bench-0","band":"interactive","replicas":1,"tasks":["/bench-0/j0-1/0"],'
    b'"submitted_at":"2026-12-06T15:00:00.000000Z","warnings":[]}'
)


def trivial(environ, start_response):
    """A WSGI application that does nothing but read the body and answer."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if length:
        environ["wsgi.input"].read(length)
    start_response("201 Created", [("Content-Type", "application/json"), ("Content-Length", str(len(BODY)))])
    return [BODY]


def _floor_django():
    """Django's WSGI application with the lean route's answer replaced by the fixed body."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "iris_web.settings")
    import django

    django.setup(set_prefix=False)
    from django.http import HttpResponse

    from scheduler.api import lean

    def submit(request):
        request.body  # noqa: B018 -- read as the lean route reads it
        return HttpResponse(BODY, status=201, content_type="application/json")

    lean.submit = submit  # before the middleware is built, which binds lean.submit
    from django.core.wsgi import get_wsgi_application

    return get_wsgi_application()


if os.environ.get("IRIS_BENCH_FLOOR") == "1":
    django_app = _floor_django()


def _tokens(count: int) -> list[str]:
    """An API token for each of ``count`` new users (the database of ``IRIS_DATABASE_URL``)."""
    import uuid

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "iris_web.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from scheduler.models import ApiToken

    tag = uuid.uuid4().hex[:6]
    users = [get_user_model().objects.create_user(username=f"floor-{tag}-{c}") for c in range(count)]
    return [ApiToken.objects.create(user=user, name="floor")[1] for user in users]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--app", choices=["trivial", "django", "full"], default="trivial")
    parser.add_argument("--profile", metavar="DIR", help="cProfile each worker (CPU time) into DIR")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=8000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--web-workers", type=int, default=4)
    parser.add_argument("--port", type=int, default=int(os.environ.get("IRIS_BENCH_PORT", "8120")))
    args = parser.parse_args()

    import subprocess

    from benchmarks.bench_api import Clients, _cpu_by_pid, _cpu_spent, _tree, percentile, stop
    from benchmarks.bench_decision import reference_seconds

    env = {**os.environ, "IRIS_LOG_LEVEL": "WARNING", "IRIS_BENCH_FLOOR": "1" if args.app == "django" else "0"}
    targets = {"trivial": "benchmarks.bench_wsgi_floor:trivial", "django": "benchmarks.bench_wsgi_floor:django_app"}
    target = targets.get(args.app, "iris_web.wsgi")
    tokens = [f"floor{c}" for c in range(args.clients)]
    if args.app == "full":
        tokens = _tokens(args.clients)
    options = []
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
        env["IRIS_BENCH_PROFILE_DIR"] = os.path.abspath(args.profile)
        options = ["-c", os.path.join(ROOT, "benchmarks", "gunicorn_profile.py")]
    web = subprocess.Popen(
        [
            os.path.join(os.path.dirname(sys.executable), "gunicorn"),
            "-b",
            f"127.0.0.1:{args.port}",
            "-w",
            str(args.web_workers),
            *options,
            "--log-level",
            "warning",
            target,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            warm = Clients(args.port, tokens[:1], 1, 5, "u")
            warm.run()
            if warm.results and warm.results[0][2] == 201:
                break
            time.sleep(0.3)
        Clients(args.port, tokens, 5 * args.clients, 30, "w").run()
        reference_before = reference_seconds()
        pids = _tree(web.pid)
        before = _cpu_by_pid(pids)
        client_before = time.process_time()
        load_before = os.getloadavg()[0]
        clients = Clients(args.port, tokens, args.requests, args.seconds, "f")
        started = time.monotonic()
        clients.run()
        wall = time.monotonic() - started
        client_cpu = time.process_time() - client_before
        web_cpu = _cpu_spent(before, pids)
        load_after = os.getloadavg()[0]
        reference_after = reference_seconds()
    finally:
        stop([web])
    ok = [r for r in clients.results if r[2] == 201]
    latencies = sorted(r[1] * 1000 for r in clients.results)
    n = max(len(ok), 1)
    print(
        f"app {args.app}, gunicorn workers {args.web_workers} sync, clients {args.clients}; load average "
        f"{load_before:.2f} -> {load_after:.2f}; reference loop {reference_before:.3f} / {reference_after:.3f} s"
    )
    print(f"requests {len(ok)} in {wall:.2f} s: {len(ok) / wall:.1f}/s; errors {dict(clients.errors) or 'none'}")
    if latencies:
        print(f"latency ms: p50 {latencies[len(latencies) // 2]:.1f}, p99 {percentile(latencies, 0.99):.1f}")
    print(f"CPU ms per request: web {web_cpu * 1000 / n:.3f}, clients {client_cpu * 1000 / n:.3f}")


if __name__ == "__main__":
    main()
