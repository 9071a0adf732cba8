"""``bench_tick.py`` with the tick's event recording timed on its own (issue 27).

Runs ``benchmarks/bench_tick.py`` unchanged (same arguments) after wrapping
``scheduler.tick.apply``'s ``change_event_rows``, ``state_event_rows`` and ``record_tick_events``:
each tick prints a line ``EVENTS <n> events: rows built in <cpu> ms cpu (inside the pipelined
writes), staged in <wall> ms wall, <cpu> ms cpu`` before its row: the CPU of building the events
from the kept changes, the budget limits and the queue (inside the tick's pipelined writes, so it
overlaps the server's work), and the one COPY that stages them, inside the tick's
transaction. Usage, from the repository root::

    IRIS_BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/iris_mine \\
        .venv/bin/python benchmarks/bench_tick_events.py --sizes 100000x10000 --ticks first second churn burst
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.argv = ["bench_tick.py", *sys.argv[1:]]

import django  # noqa: E402

import benchmarks.bench_tick as bench  # noqa: E402

_setup = django.setup


def _timed_setup(*args, **kwargs):
    _setup(*args, **kwargs)
    from scheduler.tick import apply

    build_changes, build_state, record = apply.change_event_rows, apply.state_event_rows, apply.record_tick_events
    built_cpu = [0.0]

    def timed_build(build):
        def timed(*a, **k):
            cpu = time.process_time()
            rows = build(*a, **k)
            built_cpu[0] += time.process_time() - cpu
            return rows

        return timed

    def timed_record(rows):
        wall, cpu = time.perf_counter(), time.process_time()
        n = record(rows)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(
            f"EVENTS {n} events: rows built in {built_cpu[0] * 1000:.0f} ms cpu (inside the pipelined writes), "
            f"staged in {wall * 1000:.0f} ms wall, {cpu * 1000:.0f} ms cpu",
            flush=True,
        )
        built_cpu[0] = 0.0
        return n

    apply.change_event_rows, apply.state_event_rows = timed_build(build_changes), timed_build(build_state)
    apply.record_tick_events = timed_record


django.setup = _timed_setup

if __name__ == "__main__":
    bench.main()
