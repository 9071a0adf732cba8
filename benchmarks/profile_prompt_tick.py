"""What one prompt tick costs as a function of the submissions it serves: the tick worker's
share of a submission in ``bench_api.py``, measured without the web path or a shared host's
scheduling in the way.

Usage (from the repository root, on the database ``bench_api.py --cluster 30000x3000`` left behind)::

    IRIS_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/iris_bench_api IRIS_REDIS_URL=redis://127.0.0.1:6379/15 \\
        .venv/bin/python benchmarks/profile_prompt_tick.py --arrivals 0 50 100 200 400 --rounds 2

This process ticks until the cluster settles (as the Celery worker's warm process would have),
then, for each ``--arrivals`` count in turn, submits that many single-task CPU jobs through the
submission use case (``submit_job``, the ``bench_api.py`` body, spread over 16 users) and runs
one tick, as a prompt tick that starts after them would. Printed per tick: the tick's CPU
milliseconds in this process (``time.process_time``) and in its PostgreSQL backend (/proc),
its wall milliseconds, and its CPU per arrival. A tick's cost is about ``fixed + per_arrival * n``:
the fixed part is what each prompt tick costs, spread over the submissions it serves.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

USERS = 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arrivals", type=int, nargs="+", default=[0, 50, 100, 200, 400])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--settle", type=int, default=8, help="at most this many ticks before measuring")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "iris_web.settings")
    os.environ.setdefault("IRIS_LOG_LEVEL", "WARNING")
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from benchmarks.bench_decision import reference_seconds
    from benchmarks.bench_tick import backend_cpu_seconds
    from scheduler.jobs.submit import submit_job
    from scheduler.tick.run import run_tick

    tag = uuid.uuid4().hex[:6]
    users = [get_user_model().objects.create_user(username=f"tickprof-{tag}-{u}") for u in range(USERS)]
    backend_cpu = backend_cpu_seconds

    def tick() -> tuple[float, float, float, int]:
        db, cpu, wall = backend_cpu(), time.process_time(), time.perf_counter()
        outcome = run_tick()
        assigned = outcome.assigned if outcome is not None else -1
        return time.process_time() - cpu, backend_cpu() - db, time.perf_counter() - wall, assigned

    for i in range(args.settle):
        cpu, db, wall, assigned = tick()
        print(f"settling tick {i + 1}: {assigned} placed, CPU {cpu * 1000:.0f} ms + PostgreSQL {db * 1000:.0f} ms")
        if assigned == 0:
            break
    print(f"load average {os.getloadavg()[0]:.2f}; reference loop {reference_seconds():.3f} s")
    print("arrivals | placed | tick CPU ms: process + PostgreSQL = all | wall ms | all CPU ms per arrival")
    sent = 0
    for _ in range(args.rounds):
        for n in args.arrivals:
            for _ in range(n):
                sent += 1
                submit_job(users[sent % USERS], {"name": f"t{tag}-{sent}", "command": ["true"], "cpu": 1})
            cpu, db, wall, assigned = tick()
            per = f"{(cpu + db) * 1000 / n:.2f}" if n else "-"
            print(
                f"{n:8d} | {assigned:6d} | {cpu * 1000:7.1f} + {db * 1000:6.1f} = {(cpu + db) * 1000:7.1f} | "
                f"{wall * 1000:7.1f} | {per}"
            )


if __name__ == "__main__":
    main()
