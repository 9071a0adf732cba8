"""What one ``POST jobs/`` costs PostgreSQL: the statements a submission runs (the token lookup,
the lock with the rules' reads, the write with its COMMIT), run by this process through the
submission use case, and its backend's CPU and instructions per submission.

Usage (from the repository root, on a database ``bench_api.py --cluster 30000x3000`` left behind)::

    IRIS_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/iris_bench_api \\
        .venv/bin/python benchmarks/profile_submission_pg.py --submissions 2000 --rounds 3

Each round submits ``--submissions`` single-task CPU jobs (the ``bench_api.py`` body), spread
over 16 users each with an API token, and looks the submitter's token up before each as the API
does. Printed per round: the backend's CPU ms per submission (``/proc``), with ``--perf`` a
``perf record`` file of the backend's samples (cpu-clock; root: ``perf report -i FILE``), this
process's CPU ms per submission (not the web's: no HTTP here), and the shared buffers the database's
backends hit or read per submission (``pg_stat_database``: nothing else may use the database
meanwhile; a host's load does not move it). The tick does not run: the pending jobs
pile up as they would between two ticks.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

USERS = 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--submissions", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--perf", action="store_true", help="sample the backend with perf record (cpu-clock; root): the file is printed"
    )
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "iris_web.settings")
    os.environ.setdefault("IRIS_LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection

    from benchmarks.bench_tick import backend_cpu_seconds
    from scheduler.api.authentication import tokens_with_key
    from scheduler.jobs.submit import submit_job
    from scheduler.models import ApiToken

    tag = uuid.uuid4().hex[:6]
    users = [get_user_model().objects.create_user(username=f"pgprof-{tag}-{u}") for u in range(USERS)]
    keys = [ApiToken.objects.create(user=user, name="bench")[1][:15] for user in users]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    sent = 0

    def submit(n: int) -> None:
        nonlocal sent
        for _ in range(n):
            sent += 1
            u = sent % USERS
            tokens_with_key(keys[u])
            submit_job(users[u], {"name": f"p{tag}-{sent}", "command": ["true"], "cpu": 1})

    def buffers() -> int:
        """Shared buffers this database's backends hit or read so far (its statistics, flushed
        by this backend first: nothing else should use the database meanwhile)."""
        time.sleep(1.1)  # a backend flushes its statistics at most once a second
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_force_next_flush()")
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute("SELECT blks_hit + blks_read FROM pg_stat_database WHERE datname = current_database()")
            return cursor.fetchone()[0]

    submit(50)  # every statement prepared on this connection
    print("round | backend CPU ms/submission | buffers/submission | perf samples | process CPU ms/submission")
    for r in range(args.rounds):
        perf = None
        if args.perf:
            out = f"/tmp/profile-submission-pg-{os.getpid()}.data"
            perf = subprocess.Popen(
                ["perf", "record", "-q", "-e", "cpu-clock", "-F", "2000", "-g", "-p", str(pid), "-o", out]
            )
            time.sleep(0.3)
        hits = buffers()
        db, cpu = backend_cpu_seconds(), time.process_time()
        submit(args.submissions)
        db, cpu = backend_cpu_seconds() - db, time.process_time() - cpu
        hits = buffers() - hits
        instructions = "-"
        if perf is not None:
            perf.send_signal(signal.SIGINT)
            perf.wait()
            instructions = out
        n = args.submissions
        print(f"{r + 1:5d} | {db * 1000 / n:6.3f} | {hits / n:6.1f} | {instructions} | {cpu * 1000 / n:6.3f}")


if __name__ == "__main__":
    main()
