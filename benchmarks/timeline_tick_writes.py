"""A placing tick's write phase as a timeline: for each step of ``apply_decision`` (and the
commit after it), its wall time, this process's CPU and the PostgreSQL backend's CPU, so the
wall time a step spends waiting on the server (or the server idle while Python works) shows.

Usage (from the repository root; PostgreSQL on this host)::

    IRIS_BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/iris_bench_NAME \\
        .venv/bin/python benchmarks/timeline_tick_writes.py --sizes 100000x10000 --ticks first second

Runs ``benchmarks/bench_tick.py`` (same flags); before each timed tick's row it prints
``# timeline`` lines: ``step wall_ms py_cpu_ms server_cpu_ms`` from the start of the
transaction (the backend's CPU is read from ``/proc``, in clock ticks of 10 ms), and a total:
the wall time against the CPU of the two sides, from which the time one side waited on the
other follows. Parts a tree lacks are left out, so the same script times an older tree. Since
``first38`` the publication and the events are built in a second thread while the writes run
(``scheduler.store.overlap``): a step's line then comes when it ends in either thread, and its
"py cpu" is the whole process's since the line before (both threads').
"""

from __future__ import annotations

import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.cpu_parts import run_bench_tick  # noqa: E402

marks: list[tuple[str, float, float, float]] = []
backend = [0]


def server_cpu() -> float:
    try:
        with open(f"/proc/{backend[0]}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def mark(name: str) -> None:
    marks.append((name, time.perf_counter(), time.process_time(), server_cpu()))


def wrap(module, name: str, label: str | None = None) -> None:
    if not hasattr(module, name):
        return
    function = getattr(module, name)

    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        finally:
            mark(label(args) if callable(label) else (label or name))

    setattr(module, name, wrapper)


def install() -> None:
    from contextlib import contextmanager

    from django.db import connection
    from django.db.backends.base import base

    from scheduler.board import publish
    from scheduler.store import bulk
    from scheduler.tick import apply, run

    wrap(apply, "lock_jobs")
    wrap(apply, "current_task_states")
    wrap(apply, "task_writes")
    wrap(apply, "hold_workers")
    wrap(apply, "read_prior")
    wrap(apply, "change_event_rows")
    wrap(apply, "state_event_rows")
    wrap(apply, "record_tick_events")
    wrap(bulk, "insert_rows", lambda a: f"insert {a[0]}")
    wrap(bulk, "update_rows", lambda a: f"update {a[0]}")
    wrap(bulk, "keep_payloads_in_memory")
    for method in ("record_fields", "build", "finish"):
        if hasattr(publish.Publication, method):
            original = getattr(publish.Publication, method)

            def timed(self, *a, _original=original, _name=method, **k):
                try:
                    return _original(self, *a, **k)
                finally:
                    mark(f"publication.{_name}")

            setattr(publish.Publication, method, timed)
    wrap(publish, "begin", "publish.begin")
    pipeline = bulk.pipeline

    @contextmanager
    def timed_pipeline():
        mark("pipeline: enter")
        with pipeline():
            yield
            mark("pipeline: body done")
        mark("pipeline: results in")

    bulk.pipeline = timed_pipeline
    commit = base.BaseDatabaseWrapper._commit

    def timed_commit(self):
        mark("commit: sent")
        try:
            return commit(self)
        finally:
            mark("commit")

    base.BaseDatabaseWrapper._commit = timed_commit
    apply_decision = run.apply_decision

    def timed_apply(*args, **kwargs):
        marks.clear()
        if not backend[0]:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                backend[0] = cursor.fetchone()[0]
        mark("start")
        outcome = apply_decision(*args, **kwargs)
        mark("apply_decision returned")
        return outcome

    run.apply_decision = timed_apply
    run_tick = run.run_tick

    def timed_run_tick(now_ms):
        outcome = run_tick(now_ms)
        if marks:
            _, w0, c0, s0 = marks[0]
            _, pw, pc, ps = marks[0]
            print("# timeline: step | at ms | wall ms | py cpu ms | server cpu ms", flush=True)
            for name, w, c, s in marks[1:]:
                print(
                    f"# timeline: {name:32s} {1000 * (w - w0):7.1f} {1000 * (w - pw):7.1f} "
                    f"{1000 * (c - pc):7.1f} {s - ps:6.0f}",
                    flush=True,
                )
                pw, pc, ps = w, c, s
            name, w, c, s = marks[-1]
            print(
                f"# timeline: total {1000 * (w - w0):.1f} ms wall, {1000 * (c - c0):.1f} py cpu, {s - s0:.0f} server",
                flush=True,
            )
        return outcome

    run.run_tick = timed_run_tick


if __name__ == "__main__":
    run_bench_tick(install)
