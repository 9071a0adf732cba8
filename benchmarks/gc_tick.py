"""What Python's cyclic garbage collector costs around each tick, collection by collection.

Usage (from the repository root; needs a PostgreSQL server; the database is recreated)::

    IRIS_BENCH_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/iris_bench \\
        .venv/bin/python benchmarks/gc_tick.py --sizes 100000x10000 --ticks first second churn burst unchanged

Runs ``benchmarks/bench_tick.py`` (same flags) with a ``gc.callbacks`` hook that times every
collection (CPU, ``time.process_time``) and sorts it by where it ran: ``in tick`` (inside
``run_tick``, so inside bench_tick's timed region: the tick pauses the collector, so these are
the collections its first allocations after the pause start) or ``after`` (from ``run_tick``'s
return to the next tick: the benchmark's churn and restore, standing in for what a production tick
process, a Celery prefork pool process, does between ticks: dispatch, sequencing events).
After each tick's row of bench_tick it prints ``# gc in tick`` (the collections of that tick:
generation, count, CPU ms, objects scanned, objects collected) and how many objects each generation holds when
``run_tick`` returns (``gc.get_objects(generation)``, counted with the collector off, and the
frozen count), and on a tree with ``scheduler.tick.collector.collect_if_due`` the full collection
that runs if due (``# gc collect_if_due``: the tick's Celery task runs it after the tick); before
the next tick's row, ``# gc after`` the collections since. These reports run inside
bench_tick's timed region: take times from bench_tick.py itself. At the end it
times a full collection (``gc.collect()``) over what the last tick left alive. Works on any
tree (nothing here depends on the branch).
"""

from __future__ import annotations

import gc
import linecache
import os
import sys
import time
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.cpu_parts import run_bench_tick  # noqa: E402

# (generation, cpu ms, objects scanned, collected) of each collection, by where it ran.
collections: dict[str, list[tuple[int, float, int, int]]] = {"in tick": [], "after": [], "due": []}
where = ["after"]
started = [0.0]
scanned = [0]


def time_collections(phase: str, info: dict) -> None:
    if phase == "start":
        # The objects this collection scans: those in its generation and the younger ones
        # (counted before its clock starts; the steadier figure on a shared host).
        scanned[0] = sum(len(gc.get_objects(generation)) for generation in range(info["generation"] + 1))
        started[0] = time.process_time()
    else:
        collections[where[0]].append(
            (info["generation"], (time.process_time() - started[0]) * 1000, scanned[0], info["collected"])
        )


def summary(rows: list[tuple[int, float, int, int]]) -> str:
    if not rows:
        return "none"
    by_generation: dict[int, list[float]] = defaultdict(lambda: [0, 0.0, 0, 0])
    for generation, ms, objects, collected in rows:
        parts = by_generation[generation]
        parts[0] += 1
        parts[1] += ms
        parts[2] += objects
        parts[3] += collected
    total = sum(ms for _, ms, _, _ in rows)
    objects = sum(objects for _, _, objects, _ in rows)
    return (
        ", ".join(
            f"gen{g} {n}x {ms:.1f} ms, {count:,} scanned ({collected} collected)"
            for g, (n, ms, count, collected) in sorted(by_generation.items())
        )
        + f"; total {total:.1f} ms, {objects:,} objects scanned"
    )


def generation_sizes() -> str:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        sizes = [len(gc.get_objects(generation)) for generation in range(3)]
        return (
            f"gen0 {sizes[0]:,}, gen1 {sizes[1]:,}, gen2 {sizes[2]:,}, frozen {gc.get_freeze_count():,}; "
            f"counts {gc.get_count()}"
        )
    finally:
        if was_enabled:
            gc.enable()


def install() -> None:
    from scheduler.tick import run

    try:
        from scheduler.tick.collector import collect_if_due
    except ImportError:  # a tree from before it
        collect_if_due = None
    gc.callbacks.append(time_collections)
    run_tick_inner = run.run_tick
    ticks = [0]

    def run_tick(now_ms, label):
        ticks[0] += 1
        where[0] = "in tick"
        try:
            return run_tick_inner(now_ms)
        finally:
            where[0] = "after"
            # The previous tick's "after" list was printed when this one started (below).
            print(f"# gc in tick {ticks[0]} ({label}): {summary(collections['in tick'])}", flush=True)
            print(f"# gc objects when tick {ticks[0]} returned: {generation_sizes()}", flush=True)
            collections["in tick"].clear()
            if collect_if_due is not None:
                # What the tick's Celery task runs after the tick (scheduler.tasks.tick).
                where[0] = "due"
                collect_if_due()
                where[0] = "after"
                print(f"# gc collect_if_due after tick {ticks[0]}: {summary(collections['due'])}", flush=True)
                collections["due"].clear()

    def run_tick_reporting_after(now_ms):
        if ticks[0]:
            print(f"# gc after tick {ticks[0]}, before the next: {summary(collections['after'])}", flush=True)
        collections["after"].clear()
        # bench_tick's tick label; its untimed ticks (before "unchanged") are called on another line.
        caller = sys._getframe(1)
        untimed = "settled = run_tick" in linecache.getline(caller.f_code.co_filename, caller.f_lineno)
        label = caller.f_locals.get("label", "?")
        return run_tick(now_ms, f"untimed, before {label}" if untimed else label)

    run.run_tick = run_tick_reporting_after


def report_full_collection() -> None:
    print(f"# gc after the last tick: {summary(collections['after'])}", flush=True)
    print(f"# gc objects before a full collection: {generation_sizes()}", flush=True)
    cpu = time.process_time()
    found = gc.collect()
    print(
        f"# gc.collect() after the last tick: {(time.process_time() - cpu) * 1000:.1f} ms cpu, {found} collected; "
        f"now {generation_sizes()}",
        flush=True,
    )


if __name__ == "__main__":
    run_bench_tick(install)
    report_full_collection()
