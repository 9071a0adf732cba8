"""``bench_tick.py`` with the tick's event recording timed on its own (issue 27).

Runs ``benchmarks/bench_tick.py`` unchanged (same arguments) after wrapping
``scheduler.tick.apply.record_tick_events``: each tick prints a line
``EVENTS <n> events: <wall> ms wall, <cpu> ms cpu`` before its row, the staging of its events
(building them from the kept changes and the queue, and the one COPY), inside the tick's
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

    original = apply.record_tick_events

    def timed(*a, **k):
        wall, cpu = time.perf_counter(), time.process_time()
        n = original(*a, **k)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(f"EVENTS {n} events: {wall * 1000:.0f} ms wall, {cpu * 1000:.0f} ms cpu", flush=True)
        return n

    apply.record_tick_events = timed


django.setup = _timed_setup

if __name__ == "__main__":
    bench.main()
