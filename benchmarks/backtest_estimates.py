"""Backtest the start-time estimates: how often does a task start before its p90, and how far
is the p50 from the real start?

Usage (from the repository root)::

    python benchmarks/backtest_estimates.py                 # exact durations, then noisy ones
    python benchmarks/backtest_estimates.py --hours 2 --noise 0.5 --seed 3

A synthetic workload runs through the real ``decide`` for simulated hours, with the tick's own
apply rules (an assignment starts the task; a preemption puts the victim back in the queue
with its run lost; a task ends when its true duration has passed). Jobs arrive at random
(Poisson, ``--rate`` jobs a minute) from 8 users in all three bands, on 40 workers of 8 cores; each user has three kinds of job, each kind its
own shape and its own true duration (10 to 120 minutes). With ``--noise`` a task's true
duration is the kind's times a log-normal factor (sigma = the noise), so history predicts it
only roughly. Every ``--every`` simulated minutes the estimator
(``scheduler.core.estimate.estimate_starts``) runs on the cluster as it is, with the history
of the runs and waits finished so far, exactly as the Celery task would; for each task the
*first* estimate made while it was pending is kept, and compared with when it really started.

Printed per band: tasks estimated, share with no estimate, coverage (share started at or
before the p90 estimate; target >= 80%), and the median absolute error of the p50 as a share
of the real wait from the estimate's time (tasks that waited at least a minute from then).
Tasks whose first estimate came in the first ``--warmup`` hours (history still empty) are
left out of the figures.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scheduler.core.bands import Band  # noqa: E402
from scheduler.core.decision import decide  # noqa: E402
from scheduler.core.estimate import RunHistory, apply_unassigned, estimate_starts, shape_key  # noqa: E402
from scheduler.core.types import (  # noqa: E402
    BudgetDefaults,
    ClusterSnapshot,
    JobSpec,
    Resources,
    SchedulerConfig,
    TaskSnapshot,
    TaskState,
    WorkerSpec,
)

GIB = 1 << 30
MINUTE = 60_000
HOUR = 60 * MINUTE
TICK_MS = 5_000
NOW0 = 1_800_000_000_000
BANDS = [(Band.PRODUCTION, 0.1), (Band.INTERACTIVE, 0.5), (Band.BATCH, 0.4)]


def workload(rng: random.Random, hours: float, noise: float, rate: float):
    """Arrivals ``(at_ms, JobSpec, [true duration ms per task])`` in time order."""
    users = [f"u{i}" for i in range(8)]
    kinds = {
        user: [
            (
                rng.choice([1, 2, 4]) * 1000,
                rng.choice([2, 4, 8]) * GIB + k,
                rng.choice([10, 20, 30, 45, 60, 90, 120]) * MINUTE,
            )
            for k in range(3)
        ]
        for user in users
    }
    arrivals = []
    t = NOW0
    end = NOW0 + int(hours * 60 * MINUTE)
    n = 0
    mean_gap = 60_000 / rate  # jobs a minute; 1.1 is about 95% of capacity in demand
    while t < end:
        t += int(rng.expovariate(1 / mean_gap))
        user = rng.choice(users)
        cpu, memory, base = rng.choice(kinds[user])
        band = rng.choices([b for b, _ in BANDS], [w for _, w in BANDS])[0]
        replicas = rng.choice([1, 1, 2, 3, 4])
        n += 1
        spec = JobSpec(
            id=f"/{user}/j{n}",
            user=user,
            band=band,
            parent=None,
            submitted_at_ms=t,
            root_submitted_at_ms=t,
            replicas=replicas,
            resources=Resources(cpu, memory),
        )
        durations = [max(MINUTE, int(base * math.exp(rng.gauss(0, noise)))) if noise else base for _ in range(replicas)]
        arrivals.append((t, spec, durations))
    return arrivals


def backtest(
    hours: float, noise: float, rate: float, seed: int, every_min: float, warmup_h: float, budget_s: float
) -> dict:
    rng = random.Random(seed)
    workers = tuple(WorkerSpec(f"w{i}", 8000, 32 * GIB) for i in range(40))
    config = SchedulerConfig(budget_defaults=BudgetDefaults(budget_limit=0))
    arrivals = workload(rng, hours, noise, rate)
    jobs: dict[str, JobSpec] = {}
    true_duration: dict[str, int] = {}
    tasks: dict[str, TaskSnapshot] = {}
    ends: dict[str, int] = {}  # running task -> true end
    started_at: dict[str, int] = {}  # running task -> when its current run took the slot
    queued_at: dict[str, int] = {}
    first_estimate: dict[str, tuple[int, int | None, int | None, str]] = {}
    real_start: dict[str, int] = {}
    runs: list = []
    waits: list = []
    next_arrival = 0
    t = NOW0
    end = NOW0 + int(hours * 60 * MINUTE)
    next_estimate = NOW0
    estimator_wall = []
    while t < end or any(task.state is TaskState.PENDING for task in tasks.values()):
        if t > end + int(6 * 60 * MINUTE):
            break  # drain at most six hours after the last arrival
        while next_arrival < len(arrivals) and arrivals[next_arrival][0] <= t:
            _, spec, durations = arrivals[next_arrival]
            next_arrival += 1
            jobs[spec.id] = spec
            for i, d in enumerate(durations):
                task_id = f"{spec.id}/{i}"
                tasks[task_id] = TaskSnapshot(task_id, spec.id, i)
                true_duration[task_id] = d
                queued_at[task_id] = t
        for task_id, finish in list(ends.items()):
            if finish <= t:
                spec = jobs[tasks[task_id].job_id]
                runs.append((spec.id, spec.user, shape_key(spec.resources), spec.band, finish - started_at[task_id]))
                del ends[task_id], tasks[task_id], started_at[task_id]
        snapshot = ClusterSnapshot(t, config, {}, workers, jobs, tuple(tasks.values()))
        if t >= next_estimate:
            history = RunHistory.build(runs[-5000:], waits[-5000:])
            deadline = time.monotonic() + budget_s
            wall = time.perf_counter()
            # The shell's replay: the last hour's submissions, an hour later.
            recent = [(spec.submitted_at_ms + HOUR, spec) for spec in jobs.values() if spec.submitted_at_ms > t - HOUR]
            estimates = estimate_starts(
                snapshot,
                history,
                started_at,
                tick_ms=TICK_MS,
                arrivals=recent,
                out_of_time=lambda: time.monotonic() >= deadline,
            )
            estimator_wall.append(time.perf_counter() - wall)
            for task_id, e in estimates.items():
                first_estimate.setdefault(task_id, (t, e.p50_ms, e.p90_ms, e.method))
            next_estimate = t + int(every_min * MINUTE)
        decision = decide(snapshot)
        for a in decision.assignments:
            old = tasks[a.task]
            tasks[a.task] = TaskSnapshot(
                a.task, old.job_id, old.index, TaskState.RUNNING, a.worker, a.band, old.preemption_count
            )
            ends[a.task] = t + true_duration[a.task]
            started_at[a.task] = t
            if a.task not in real_start:
                real_start[a.task] = t
                waits.append((jobs[old.job_id].band, t - jobs[old.job_id].submitted_at_ms))
        assigned = {a.task for a in decision.assignments}
        requeued, ended = apply_unassigned(tasks, decision, assigned)
        for task_id in requeued:
            ends.pop(task_id, None)
            started_at.pop(task_id, None)
        for task_id in ended:
            ends.pop(task_id, None)
        t += TICK_MS
    return summarise(jobs, first_estimate, real_start, NOW0 + int(warmup_h * 60 * MINUTE), estimator_wall)


def summarise(jobs, first_estimate, real_start, warm_from: int, estimator_wall: list[float]) -> dict:
    by_band: dict[Band, dict] = {}
    for task_id, (as_of, p50, p90, method) in first_estimate.items():
        if as_of < warm_from or task_id not in real_start:
            continue
        band = jobs[task_id.rsplit("/", 1)[0]].band
        row = by_band.setdefault(band, {"tasks": 0, "none": 0, "covered": 0, "errors": [], "methods": {}})
        row["tasks"] += 1
        if p50 is None:
            row["none"] += 1
            continue
        start = real_start[task_id]
        counts = row["methods"].setdefault(method, [0, 0])  # [tasks, covered]
        counts[0] += 1
        counts[1] += start <= p90
        row["covered"] += start <= p90
        wait = start - as_of
        if wait >= MINUTE:
            row["errors"].append(abs(p50 - start) / wait)
    return {"bands": by_band, "estimator_wall": estimator_wall}


def methods_text(methods: dict) -> str:
    return ", ".join(f"{m}: {n} ({c / n:.0%})" for m, (n, c) in sorted(methods.items()))


def report(label: str, result: dict) -> None:
    print(f"{label}:")
    print(
        f"  {'band':<12} {'tasks':>6} {'no est.':>8} {'coverage p90':>13} {'median |err|/wait':>18}  method: tasks (coverage)"
    )
    total = covered = estimated = 0
    for band in sorted(result["bands"], key=int, reverse=True):
        row = result["bands"][band]
        est = row["tasks"] - row["none"]
        total += row["tasks"]
        estimated += est
        covered += row["covered"]
        cover = f"{row['covered'] / est:.0%}" if est else "-"
        err = f"{statistics.median(row['errors']):.0%} (n={len(row['errors'])})" if row["errors"] else "-"
        print(
            f"  {band.name:<12} {row['tasks']:>6} {row['none'] / row['tasks']:>8.0%} {cover:>13} {err:>18}  {methods_text(row['methods'])}"
        )
    if estimated:
        print(f"  all bands: {total} tasks, coverage {covered / estimated:.0%} of the {estimated} estimated")
    walls = result["estimator_wall"]
    print(f"  estimator runs: {len(walls)}, median {statistics.median(walls):.2f} s, max {max(walls):.2f} s wall")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=4, help="simulated hours of arrivals")
    parser.add_argument(
        "--noise", type=float, default=None, help="one variant with this log-normal sigma (default: 0 and 0.5)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--rate",
        type=float,
        default=1.1,
        help="jobs submitted a minute (1.1: demand about 95%% of capacity; 1.5: about 130%%, the queue grows)",
    )
    parser.add_argument("--every", type=float, default=5, help="simulated minutes between estimator runs")
    parser.add_argument("--warmup", type=float, default=1, help="hours of history before figures count")
    parser.add_argument("--budget", type=float, default=10, help="the estimator's wall-time budget per run, seconds")
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()}")
    variants = [args.noise] if args.noise is not None else [0.0, 0.5]
    for noise in variants:
        wall, cpu = time.perf_counter(), time.process_time()
        result = backtest(args.hours, noise, args.rate, args.seed, args.every, args.warmup, args.budget)
        label = "exact durations" if not noise else f"noisy durations (log-normal sigma {noise})"
        report(f"{label}, {args.hours:g} h of arrivals at {args.rate:g} jobs/min, seed {args.seed}", result)
        print(f"  backtest: {time.perf_counter() - wall:.0f} s wall, {time.process_time() - cpu:.0f} s CPU")
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
