"""Where one ``POST /api/v1/jobs/`` spends the web process's time: Django's test client, in this
process, against the database of the environment (e.g. the one ``bench_api.py`` left behind).

Usage (from the repository root)::

    IRIS_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/iris_bench_api IRIS_REDIS_URL=redis://127.0.0.1:6379/15 \\
        .venv/bin/python benchmarks/profile_submit.py --submissions 300 [--profile] [--sql]

Prints CPU milliseconds per submission of this process (``time.process_time``) and of its
PostgreSQL backend (from /proc), and wall milliseconds (``time.perf_counter``), over the loop; the statements per submission, the load average and the reference loop; with
``--profile`` the top of a cProfile (CPU-time timer) by cumulative time, with ``--sql`` the
statements of one submission. Each submission is a new single-task CPU job of one user with an API
token, exactly as ``bench_api.py`` sends it (the WSGI request is built by the test client: the
socket and gunicorn's HTTP parsing are not in these figures).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--submissions", type=int, default=300)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--sql", action="store_true")
    parser.add_argument("--top", type=int, default=45)
    parser.add_argument(
        "--direct",
        action="store_true",
        help="call the token check, the use case and the 201 body's rendering directly, without Django's "
        "handler, middleware or DRF (what a request pays beside them is the difference)",
    )
    parser.add_argument(
        "--wsgi",
        action="store_true",
        help="call the WSGI application (iris_web.wsgi) with an environ as gunicorn builds one for bench_api.py's "
        "request, instead of Django's test client (whose own request building is most of its cost): what a "
        "gunicorn worker runs per submission, less gunicorn's HTTP parsing and socket calls",
    )
    parser.add_argument(
        "--perf-backend", metavar="FILE", help="record the PostgreSQL backend with `perf record -g` into FILE"
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="under `valgrind --tool=callgrind --instr-atstart=no`: count only the loop (callgrind_control "
        "switches instrumentation on and off around it); CPU figures are then Valgrind's",
    )
    parser.add_argument(
        "--batch", type=int, default=0, help="send POST jobs:batch of this many jobs (bench_batch.py's sweep) instead"
    )
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "iris_web.settings")
    os.environ.setdefault("IRIS_LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from benchmarks.bench_decision import reference_seconds
    from scheduler.models import ApiToken

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user(username=f"prof-{uuid.uuid4().hex[:8]}")
    token = ApiToken.objects.create(user=user, name="profile")[1]
    client = Client(HTTP_AUTHORIZATION=f"Token {token}")
    tag = uuid.uuid4().hex[:6]

    # A batch is its own user's (as in bench_batch.py): the unfinished-task cap counts per user.
    batch_clients = {}
    if args.batch:
        for i in [*range(-3, 0), 10**6, *range(args.submissions)]:
            batch_user = get_user_model().objects.create_user(username=f"prof-{tag}-{i}")
            key = ApiToken.objects.create(user=batch_user, name="profile")[1]
            batch_clients[i] = Client(HTTP_AUTHORIZATION=f"Token {key}")

    def direct(i: int) -> None:
        from scheduler.api.authentication import ApiTokenAuthentication
        from scheduler.api.serializers import submitted_job_json
        from scheduler.jobs.submit import submit_job

        actor, _ = ApiTokenAuthentication().authenticate_credentials(token.encode())
        body = json.loads(json.dumps({"name": f"p{tag}-{i}", "command": ["true"], "cpu": 1}))
        json.dumps(submitted_job_json(submit_job(actor, body))).encode()

    from iris_web.wsgi import application

    def wsgi(i: int) -> None:
        body = json.dumps({"name": f"p{tag}-{i}", "command": ["true"], "cpu": 1}).encode()
        # The headers bench_api.py's clients send, as gunicorn puts them in the environ.
        environ = {
            "wsgi.errors": sys.stderr,
            "wsgi.version": (1, 0),
            "wsgi.multithread": False,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
            "wsgi.file_wrapper": None,
            "wsgi.input_terminated": True,
            "SERVER_SOFTWARE": "gunicorn/23.0.0",
            "wsgi.input": io.BytesIO(body),
            "gunicorn.socket": None,
            "REQUEST_METHOD": "POST",
            "QUERY_STRING": "",
            "RAW_URI": "/api/v1/jobs/",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_HOST": "127.0.0.1:8133",
            "HTTP_ACCEPT_ENCODING": "identity",
            "CONTENT_TYPE": "application/json",
            "HTTP_AUTHORIZATION": f"Token {token}",
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.url_scheme": "http",
            "REMOTE_ADDR": "127.0.0.1",
            "REMOTE_PORT": "40000",
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8133",
            "PATH_INFO": "/api/v1/jobs/",
            "SCRIPT_NAME": "",
        }
        statuses = []
        result = application(environ, lambda status, headers, exc_info=None: statuses.append(status))
        try:
            answer = b"".join(result)
        finally:
            if hasattr(result, "close"):
                result.close()
        assert statuses[0].startswith("201"), (statuses, answer)

    def one(i: int) -> None:
        if args.direct:
            return direct(i)
        if args.wsgi:
            return wsgi(i)
        if args.batch:
            from benchmarks.bench_batch import sweep_body

            body, path = sweep_body(f"p{tag}-{i}", args.batch, 1), "/api/v1/jobs:batch"
        else:
            body, path = json.dumps({"name": f"p{tag}-{i}", "command": ["true"], "cpu": 1}), "/api/v1/jobs/"
        response = batch_clients.get(i, client).post(path, body, content_type="application/json")
        assert response.status_code == 201, response.content

    for i in range(3 if args.batch else 20):  # warm: imports, connections, caches
        one(-1 - i)
    with CaptureQueriesContext(connection) as queries:
        one(10**6)
    print(f"load average {os.getloadavg()[0]:.2f}; reference loop {reference_seconds():.3f} s")
    print(f"statements per submission: {len(queries)}")
    if args.sql:
        for q in queries:
            print("   ", q["sql"][:300])
    import psutil

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()" if connection.vendor == "postgresql" else "SELECT NULL")
        backend_pid = cursor.fetchone()[0]
    backend = psutil.Process(backend_pid) if backend_pid else None

    def backend_cpu() -> float:
        if backend is None:
            return 0.0
        times = backend.cpu_times()
        return times.user + times.system

    profiler = cProfile.Profile(time.process_time) if args.profile else None
    perf = None
    if args.perf_backend and backend_pid:
        import subprocess

        perf = subprocess.Popen(["perf", "record", "-q", "-g", "-p", str(backend_pid), "-o", args.perf_backend])
        time.sleep(1.0)  # perf attaches

    def instrument(on: bool) -> None:
        if args.instructions:
            import subprocess

            subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(os.getpid())], check=True)

    db_cpu = backend_cpu()
    instrument(True)
    cpu, wall = time.process_time(), time.perf_counter()
    if profiler:
        profiler.enable()
    for i in range(args.submissions):
        one(i)
    if profiler:
        profiler.disable()
    instrument(False)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    db_cpu = backend_cpu() - db_cpu
    if perf is not None:
        perf.send_signal(2)  # SIGINT: perf writes its file and exits
        perf.wait()
    n = args.submissions
    if args.batch:
        print(f"batches of {args.batch}: per 1,000 jobs below")
        n = n * args.batch / 1000
    print(
        f"{n} submissions: web CPU {cpu * 1000 / n:.2f} ms, PostgreSQL backend CPU {db_cpu * 1000 / n:.2f} ms, "
        f"wall {wall * 1000 / n:.2f} ms per submission"
    )
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
