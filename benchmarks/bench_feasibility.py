"""Time ``GET jobs/<id>:explain``'s "can it ever run?" (``scheduler.jobs.feasibility``) at a few
thousand workers, and count its SQL queries: the first request after a tick (reads the workers
once) and the ones after it (per-tick cache: no worker rows), against the uncached path every
request took before (read every worker, analyse the job).

Usage (from the repository root; a throw-away SQLite database in a temporary directory)::

    .venv/bin/python benchmarks/bench_feasibility.py --workers 1000,5000 --runs 20

Prints, per size, the median wall and CPU (process) time and the query count of one
``job_feasibility`` call: uncached (the old path), cold (first after a tick) and warm.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def setup_django(data_dir: str) -> None:
    os.environ["IRIS_DATA_DIR"] = data_dir
    os.environ.pop("IRIS_DATABASE_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "iris_web.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def measure(fn, runs: int) -> tuple[float, float, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    walls, cpus, queries = [], [], 0
    for _ in range(runs):
        with CaptureQueriesContext(connection) as captured:
            w, c = time.perf_counter(), time.process_time()
            fn()
            walls.append(time.perf_counter() - w)
            cpus.append(time.process_time() - c)
        queries = len(captured)
    return statistics.median(walls), statistics.median(cpus), queries


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", default="1000,5000")
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data_dir:
        setup_django(data_dir)
        from django.utils import timezone

        from scheduler.core.bands import Band
        from scheduler.jobs import feasibility
        from scheduler.models import Job, Worker

        job = Job.objects.create(
            name="/alice/wide",
            user="alice",
            band=Band.INTERACTIVE,
            depth=1,
            replicas=1,
            cpu_millicores=8000,
            memory_bytes=8 << 30,
            device_type="cpu",
            device_variant="",
            device_count=0,
            submitted_at_ms=0,
            root_submitted_at_ms=0,
            constraints=[{"key": "zone", "op": "eq", "value": "z1"}],
        )
        made = 0
        for n in (int(x) for x in args.workers.split(",")):
            now = timezone.now()
            Worker.objects.bulk_create(
                Worker(
                    name=f"w{i:06d}",
                    cpu_millicores=(4000, 16000)[i % 2],
                    memory_bytes=64 << 30,
                    device_type="cpu",
                    device_variant="",
                    device_count=0,
                    attributes={"zone": f"z{i % 5}", "pool": f"p{i % 3}"},
                    last_heartbeat=now,
                )
                for i in range(made, n)
            )
            made = n
            band = Band.INTERACTIVE

            def uncached():
                feasibility.job_feasibility(job, band, waiting=True, tick_key=None)

            def cold():
                feasibility.forget_feasibility_cache()
                feasibility.job_feasibility(job, band, waiting=True, tick_key=(1, 0))

            def warm():
                feasibility.job_feasibility(job, band, waiting=True, tick_key=(1, 0))

            for name, fn in (("uncached (before)", uncached), ("cold, first after a tick", cold), ("warm", warm)):
                wall, cpu, queries = measure(fn, args.runs)
                print(
                    f"{n:>6,} workers  {name:<26} median wall {wall * 1000:8.2f} ms  cpu {cpu * 1000:8.2f} ms  "
                    f"{queries} queries"
                )


if __name__ == "__main__":
    main()
