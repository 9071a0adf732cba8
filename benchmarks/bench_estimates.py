"""Time the start-time estimator (``scheduler.core.estimate.estimate_starts``) on synthetic
clusters, within the time budget it runs under in production.

Usage (from the repository root)::

    python benchmarks/bench_estimates.py                          # 100k pending x 10k workers, 60 s budget
    python benchmarks/bench_estimates.py --sizes 10000x1000 --budget 20

The cluster comes from ``benchmarks/synthetic.py``. Run-time history is synthetic: for each
band, 500 durations drawn log-uniformly between 5 minutes and 4 hours, so every job has a
band-level prediction; every running task started at a random point in the last two hours.
Printed: wall and CPU seconds of the estimator, simulated ticks per run (two runs: p50 and p90
durations), and how many pending tasks got a range from the simulation, from observed waits,
or none. With ``--with-decide`` it also times ``decide`` alone on the same snapshot, before the
estimator and in a second process while the estimator runs, to show what a tick sharing the
machine with it sees; ``--nice 10`` runs the estimator at a lower CPU priority, as the niced
estimates worker of docs/operations.md does.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.synthetic import generate  # noqa: E402
from scheduler.core import estimate as estimate_module  # noqa: E402
from scheduler.core.bands import Band  # noqa: E402
from scheduler.core.decision import decide  # noqa: E402
from scheduler.core.estimate import RunHistory, estimate_starts  # noqa: E402
from scheduler.core.types import ACTIVE_STATES  # noqa: E402
from scheduler.core.wire import snapshot_from_json  # noqa: E402

TICK_MS = 5_000
MINUTE = 60_000


def synthetic_history(rng: random.Random) -> RunHistory:
    waits = []
    runs = []
    for band in Band:
        for _ in range(500):
            duration = int(math.exp(rng.uniform(math.log(5 * MINUTE), math.log(240 * MINUTE))))
            runs.append((f"/history/{band.name}", "history", (0, 0, "cpu", "", 0), band, duration))
            waits.append((band, int(rng.uniform(0, 120 * MINUTE))))
    return RunHistory.build(runs, waits)


def decide_times(snapshot, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        decide(snapshot)
        times.append(time.perf_counter() - started)
    return times


def _decide_in_child(size: tuple[int, int], seed: int, runs: int, out) -> None:
    snapshot = snapshot_from_json(generate(pending=size[0], workers=size[1], seed=seed))
    out.put(decide_times(snapshot, runs))


def measure(pending: int, workers: int, budget: float, seed: int, with_decide: bool, nice: int = 0) -> None:
    snapshot = snapshot_from_json(generate(pending=pending, workers=workers, seed=seed))
    rng = random.Random(seed)
    history = synthetic_history(rng)
    now = snapshot.now_ms
    running_since = {t.id: now - rng.randrange(0, 120 * MINUTE) for t in snapshot.tasks if t.state in ACTIVE_STATES}
    if with_decide:
        alone = decide_times(snapshot, 3)
        print(f"  decide alone: median {statistics.median(alone):.3f} s of {[round(t, 3) for t in alone]}")
        queue = multiprocessing.Queue()
        child = multiprocessing.Process(target=_decide_in_child, args=((pending, workers), seed, 5, queue))
        child.start()
        if nice:
            os.nice(nice)  # the estimator's process only, as a niced estimates worker would run

    ticks = {"n": 0}
    original = estimate_module.decide

    def counting(s):
        ticks["n"] += 1
        return original(s)

    estimate_module.decide = counting
    deadline = time.monotonic() + budget
    wall, cpu = time.perf_counter(), time.process_time()
    estimates = estimate_starts(
        snapshot,
        history,
        running_since,
        tick_ms=TICK_MS,
        max_steps=300,
        out_of_time=lambda: time.monotonic() >= deadline,
    )
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    estimate_module.decide = original
    methods: dict[str, int] = {}
    for e in estimates.values():
        methods[e.method or "none"] = methods.get(e.method or "none", 0) + 1
    print(
        f"  estimator: {wall:.1f} s wall, {cpu:.1f} s CPU, {ticks['n']} simulated ticks over two runs, "
        f"{len(estimates):,} pending tasks: {methods}"
    )
    if with_decide:
        during = queue.get()
        child.join()
        print(
            f"  decide in a second process while the estimator ran: median {statistics.median(during):.3f} s "
            f"of {[round(t, 3) for t in during]}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000x10000", help="comma-separated PENDINGxWORKERS")
    parser.add_argument("--budget", type=float, default=60, help="the estimator's time budget, seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--with-decide", action="store_true", help="also time decide beside the estimator")
    parser.add_argument(
        "--nice", type=int, default=0, help="with --with-decide: lower the estimator's CPU priority by this"
    )
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()}")
    for size in args.sizes.split(","):
        pending, _, workers = size.lower().partition("x")
        print(f"{int(pending):,} pending x {int(workers):,} workers, budget {args.budget:g} s:")
        measure(int(pending), int(workers), args.budget, args.seed, args.with_decide, args.nice)
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
