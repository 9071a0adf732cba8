"""Instruments: the Prometheus counters and histograms updated where an event happens.

Imported by the tick, the dispatcher and the submission service, so it imports nothing of
theirs (see ``scheduler.observability.metrics`` for the scrape). In multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR``, set in settings) each process writes its values to files there
and the scrape sums them. Counters are incremented after the tick's transaction commits, so a
rolled-back tick counts only as ``iris_ticks_total{outcome="failed"}``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter as Tally
from collections.abc import Callable, Collection, Iterable
from functools import lru_cache, wraps
from operator import attrgetter
from typing import NamedTuple

from prometheus_client import CollectorRegistry, Counter, Histogram

from scheduler.core.bands import Band
from scheduler.foundation.errors import ServiceError

# Seconds. Ticks take milliseconds idle and a few seconds at 100,000 pending tasks; above 30 s
# the tick lease (60 s by default) is in danger.
TICK_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# Seconds from submission to first placement: from "placed at the next tick" to a day queued.
WAIT_BUCKETS = (1, 5, 10, 30, 60, 300, 600, 1800, 3600, 3 * 3600, 12 * 3600, 24 * 3600)

# Event metrics live in their own registry: in multiprocess mode the scrape reads the files, and
# the live objects must not be collected a second time.
EVENTS = CollectorRegistry(auto_describe=True)

TICK_DURATION = Histogram(
    "iris_tick_duration_seconds",
    "Scheduling tick duration by phase: load (snapshot), decide (pure core), apply (writes), total.",
    ["phase"],
    buckets=TICK_BUCKETS,
    registry=EVENTS,
)
TICKS = Counter(
    "iris_ticks_total",
    "Scheduling ticks by outcome: ran, skipped (another tick held the lease), failed (raised, rolled back).",
    ["outcome"],
    registry=EVENTS,
)
ASSIGNMENTS = Counter(
    "iris_assignments_total",
    "Tasks placed on a worker by a tick, by the band they were placed in.",
    ["band"],
    registry=EVENTS,
)
PREEMPTIONS = Counter(
    "iris_preemptions_total",
    "Tasks evicted by a tick, by the victim's and the preemptor's band.",
    ["victim_band", "preemptor_band"],
    registry=EVENTS,
)
DOWNGRADES = Counter(
    "iris_budget_downgrades_total",
    "Tasks placed in a lower band than requested because their user was over budget.",
    ["requested_band", "band"],
    registry=EVENTS,
)
TASK_WAIT = Histogram(
    "iris_task_wait_seconds",
    "Seconds from a job's submission to its task's first placement, by the band it was placed in.",
    ["band"],
    buckets=WAIT_BUCKETS,
    registry=EVENTS,
)
DELIVERY_FAILURES = Counter(
    "iris_dispatch_delivery_failures_total",
    "Failed deliveries of start/stop intents by backend; outcome retry (will retry) or failed (gave up).",
    ["backend", "outcome"],
    registry=EVENTS,
)
SUBMISSIONS = Counter(
    "iris_submissions_total",
    "Job submissions by result code (OK or the error code returned).",
    ["code"],
    registry=EVENTS,
)


@lru_cache(maxsize=64)
def band_label(rank) -> str:
    try:
        return Band(int(rank)).wire
    except (TypeError, ValueError):
        return "none"


# --- recording events -----------------------------------------------------------------------------


def record_tick(outcome) -> None:
    """Count a tick that returned: ``None`` (skipped on the lease) or its ``TickOutcome``."""
    if outcome is None:
        TICKS.labels(outcome="skipped").inc()
        return
    TICKS.labels(outcome="ran").inc()
    apply_ms = max(outcome.duration_ms - outcome.load_ms - outcome.decide_ms, 0.0)
    for phase, ms in (
        ("load", outcome.load_ms),
        ("decide", outcome.decide_ms),
        ("apply", apply_ms),
        ("total", outcome.duration_ms),
    ):
        TICK_DURATION.labels(phase=phase).observe(ms / 1000)


def record_tick_failure() -> None:
    TICKS.labels(outcome="failed").inc()


def record_placements(loaded, assignments: Collection, preemptions: Iterable) -> None:
    """After a tick commits: its assignments (with downgrades and first-placement waits) and
    preemptions. ``loaded`` is the tick's ``LoadedSnapshot``. Counted by band, labelled once per
    band (a burst places tens of thousands of tasks in a handful of bands)."""
    record_placement_tallies(placement_tallies(loaded, assignments, preemptions))


class PlacementTallies(NamedTuple):
    """What :func:`record_placement_tallies` adds to the metrics, counted by
    :func:`placement_tallies` (the tick counts them while its writes run, and records them once
    it commits)."""

    placed: Tally  # per band
    downgraded: Tally  # per (requested band, band)
    waits: dict[Band, list[float]]  # per band, the waits of first placements (s)
    evicted: Tally  # per (victim band label, preemptor band label)


def placement_tallies(loaded, assignments: Collection, preemptions: Iterable) -> PlacementTallies:
    """The tallies of :func:`record_placements`, in this process only (no metric written)."""
    jobs, rows = loaded.snapshot.jobs, loaded.tasks
    now_ms = loaded.snapshot.now_ms
    placed: Tally = Tally(map(_band_of, assignments))
    downgraded: Tally = Tally()
    # Per band, the waits of first placements: observed together (each observation writes two
    # shared values).
    waits: dict[Band, list[float]] = {}
    for a in assignments:
        task = a.task
        job = jobs.get(task[: task.rfind("/")])
        if job is None:
            continue
        band = a.band
        if job.band != band:
            downgraded[(job.band, band)] += 1
        row = rows.get(task)
        if row is not None and row.attempt_count == 0:
            seconds = max(now_ms - job.submitted_at_ms, 0) / 1000
            in_band = waits.get(band)
            if in_band is None:
                waits[band] = [seconds]
            else:
                in_band.append(seconds)
    evicted = Tally((band_label(p.victim_band), band_label(p.preemptor_band)) for p in preemptions)
    return PlacementTallies(placed, downgraded, waits, evicted)


def record_placement_tallies(tallies: PlacementTallies) -> None:
    """Add a committed tick's :class:`PlacementTallies` to the metrics."""
    for band, seconds in tallies.waits.items():
        observe_all(TASK_WAIT.labels(band=band_label(band)), seconds)
    for band, n in tallies.placed.items():
        ASSIGNMENTS.labels(band=band_label(band)).inc(n)
    for (requested, band), n in tallies.downgraded.items():
        DOWNGRADES.labels(requested_band=band_label(requested), band=band_label(band)).inc(n)
    for (victim, preemptor), n in tallies.evicted.items():
        PREEMPTIONS.labels(victim_band=victim, preemptor_band=preemptor).inc(n)


_band_of = attrgetter("band")


def observe_all(histogram, amounts: list[float]) -> None:
    """``histogram.observe(amount)`` for each amount, writing each bucket and the sum once (in
    multiprocess mode every write is to a shared file). Uses the client's ``_upper_bounds``,
    ``_buckets`` and ``_sum``, as ``Histogram.observe`` does; ``tests/observability`` checks the
    result equals observing one by one."""
    bounds = histogram._upper_bounds
    in_bucket = Tally(bisect_left(bounds, amount) for amount in amounts)
    for index, n in sorted(in_bucket.items()):
        histogram._buckets[index].inc(n)
    histogram._sum.inc(sum(amounts))


def intent_backend(intent) -> str:
    """The backend label of a dispatch intent (an ``outbox.IntentRow``): its worker's backend,
    "unknown" when its worker row is gone."""
    return intent.worker_backend if intent.worker_backend is not None else "unknown"


def record_delivery_failure(intent, *, gave_up: bool) -> None:
    DELIVERY_FAILURES.labels(backend=intent_backend(intent), outcome="failed" if gave_up else "retry").inc()


def counted_submissions(submit: Callable) -> Callable:
    """Decorate ``submit_job``: count each call by its result code."""

    @wraps(submit)
    def counted(*args, **kwargs):
        try:
            job = submit(*args, **kwargs)
        except ServiceError as exc:
            SUBMISSIONS.labels(code=exc.code).inc()
            raise
        SUBMISSIONS.labels(code="OK").inc()
        return job

    return counted
