"""Start-time estimates, the shell half: read the history, run the pure estimator
(:func:`scheduler.core.estimate.estimate_starts`) on the newest snapshot, store the answer.

This runs as its own Celery task (``scheduler.estimate_starts``) on its own beat schedule, off
the tick's critical path: it takes no lease and writes only ``EstimatedStart`` rows, which the
tick never reads. Readers get them through the board (:mod:`scheduler.board.estimates`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from django.conf import settings
from django.db import transaction

from scheduler.board.estimates import estimator_schedule
from scheduler.core.bands import Band
from scheduler.core.estimate import RunHistory, StartEstimate, estimate_starts, shape_key
from scheduler.core.types import JobSpec
from scheduler.models import Attempt, EstimatedStart, EstimateWaits, Job
from scheduler.store.bulk import insert_rows
from scheduler.store.job_rows import (
    JOB_SPEC_FIELDS,
    ResourceCache,
    job_spec_from_row,
    resource_fields,
    resources_from_columns,
)
from scheduler.store.clock import now_ms as clock_now_ms
from scheduler.store.states import TaskState
from scheduler.tick.load import load_snapshot

logger = logging.getLogger(__name__)

SUBMITTED = JOB_SPEC_FIELDS.index("submitted_at_ms")

# Runs that ended on their own: their length is the work's length. Killed, preempted and lost
# attempts were cut short and would bias the durations low.
_NATURAL_ENDS = (TaskState.SUCCEEDED.value, TaskState.FAILED.value)


def _ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


def read_history(now_ms: int) -> tuple[RunHistory, dict[str, int]]:
    """Finished runs and first-start waits of the last ``IRIS_ESTIMATE_HISTORY_HOURS`` (at most
    ``IRIS_ESTIMATE_HISTORY_RUNS`` of each, newest first), and when each unfinished attempt took
    its slot (task name -> ms). Three queries."""
    since = datetime.fromtimestamp(now_ms / 1000, tz=timezone.utc) - timedelta(hours=settings.ESTIMATE_HISTORY_HOURS)
    limit = settings.ESTIMATE_HISTORY_RUNS
    finished = (
        Attempt.objects.filter(state__in=_NATURAL_ENDS, finished_at__gte=since)
        .order_by("-finished_at")
        .values_list(
            "task__job__name",
            "task__job__user",
            "task__job__band",
            *resource_fields("task__job__"),
            "created_at",
            "finished_at",
        )[:limit]
    )
    runs = []
    for job, user, band, cpu, memory, device_type, variant, count, created, ended in finished:
        shape = shape_key(resources_from_columns(cpu, memory, device_type, variant, count))
        runs.append((job, user, shape, Band(band), max(0, _ms(ended) - _ms(created))))
    first_starts = (
        Attempt.objects.filter(number=1, created_at__gte=since)
        .order_by("-created_at")
        .values_list("task__job__band", "task__job__submitted_at_ms", "created_at")[:limit]
    )
    waits = [(Band(band), max(0, _ms(created) - submitted)) for band, submitted, created in first_starts]
    unfinished = Attempt.objects.filter(finished_at__isnull=True).values_list(
        "task__job__name", "task__index", "created_at"
    )
    running_since = {f"{job}/{index}": _ms(created) for job, index, created in unfinished}
    return RunHistory.build(runs, waits), running_since


def recent_submissions(now_ms: int) -> list[tuple[int, JobSpec]]:
    """The jobs submitted in the last ``IRIS_ESTIMATE_ARRIVALS_MINUTES`` (at most
    ``IRIS_ESTIMATE_HISTORY_RUNS``), each arriving once more, one span later: the future
    submissions the estimator assumes. The span is the window, or less on a cluster younger
    than the window (its first job was submitted less than a window ago; at least a minute): a
    cluster ten minutes old assumes its last ten minutes' jobs come again in the next ten, not
    an hour from now. (Repeated further than one span, a young cluster's opening burst would
    flood the simulation: in the demo that put p50s about an hour out for tasks that started in
    four minutes.) Two queries."""
    window = int(settings.ESTIMATE_ARRIVALS_MINUTES * 60_000)
    limit = settings.ESTIMATE_HISTORY_RUNS
    rows = (
        Job.objects.filter(submitted_at_ms__gt=now_ms - window, submitted_at_ms__lte=now_ms)
        .order_by("-submitted_at_ms")
        .values_list(*JOB_SPEC_FIELDS)[:limit]
    )
    rows = list(rows)
    if not rows:
        return []
    first = Job.objects.order_by("submitted_at_ms").values_list("submitted_at_ms", flat=True).first()
    span = max(min(window, now_ms - first), 60_000)
    out = []
    shapes = ResourceCache()
    for row in rows:
        # Each arrives again as a root job, now, with no deadline (a repeat of the work, not the job).
        spec = replace(
            job_spec_from_row(row, shapes),
            parent=None,
            root_submitted_at_ms=row[SUBMITTED],
            scheduling_deadline_ms=None,
        )
        out.append((spec.submitted_at_ms + span, spec))
    out.reverse()
    return out


@dataclass(frozen=True)
class EstimateRun:
    """What one estimator run did: how many tasks it estimated, how many got a range, and its
    wall and CPU seconds (``history_s`` the history's part)."""

    as_of_ms: int
    pending: int
    estimated: int
    wall_s: float
    cpu_s: float
    history_s: float


def estimate_start_times(now_ms: int | None = None, *, budget_seconds: float | None = None) -> EstimateRun:
    """Estimate every pending task's start from the newest cluster state and replace the
    stored estimates with the answer, in one transaction.

    ``budget_seconds`` (default ``IRIS_ESTIMATE_BUDGET_SECONDS``) bounds the simulation's wall
    time; tasks it had not placed by then fall back to observed waits or get no estimate.
    """
    started, started_cpu = time.monotonic(), time.process_time()
    now = clock_now_ms() if now_ms is None else now_ms
    budget = settings.ESTIMATE_BUDGET_SECONDS if budget_seconds is None else budget_seconds
    history, running_since = read_history(now)
    history_s = time.monotonic() - started
    snapshot = load_snapshot(now).snapshot
    deadline = started + budget
    estimates = estimate_starts(
        snapshot,
        history,
        running_since,
        tick_ms=int(settings.TICK_SECONDS * 1000),
        max_steps=settings.ESTIMATE_MAX_STEPS,
        arrivals=recent_submissions(now),
        out_of_time=lambda: time.monotonic() >= deadline,
    )
    run_ms = int((time.monotonic() - started) * 1000)
    store_estimates(estimates, waits=history.waits_by_band, as_of_ms=now, run_ms=run_ms)
    run = EstimateRun(
        as_of_ms=now,
        pending=len(estimates),
        estimated=sum(1 for e in estimates.values() if e.p50_ms is not None),
        wall_s=time.monotonic() - started,
        cpu_s=time.process_time() - started_cpu,
        history_s=history_s,
    )
    logger.info(
        "start estimates: %d pending, %d with a range, %.1f s wall (%.1f s CPU, history %.1f s)",
        run.pending,
        run.estimated,
        run.wall_s,
        run.cpu_s,
        run.history_s,
    )
    return run


_COLUMNS = (
    ("task", "text"),
    ("job", "text"),
    ("p50_ms", "bigint"),
    ("p90_ms", "bigint"),
    ("method", "text"),
    ("reason", "text"),
    ("as_of_ms", "bigint"),
)


# Most observed waits kept per band for conditioning shown estimates (evenly spaced ranks of
# the sorted waits: quantiles to within a fraction of a percent, in a few kilobytes).
KEPT_WAITS = 400


def estimate_start_times_if_due(now_ms: int | None = None) -> EstimateRun | None:
    """:func:`estimate_start_times` when the next run is due (``board.estimates.estimator_schedule``:
    sooner after a cheap run, later after a costly one); None when it is not due yet.

    Called by a beat entry every ``IRIS_ESTIMATE_MIN_SECONDS``: a run starts a little after its
    beat, so a run due one period after the last one is taken by the beat up to half a period
    before it is due, not one whole period late."""
    now = clock_now_ms() if now_ms is None else now_ms
    schedule = estimator_schedule()
    if schedule is not None and now < schedule.next_ms - settings.ESTIMATE_MIN_SECONDS * 500:
        return None
    return estimate_start_times(now)


def store_estimates(
    estimates: dict[str, StartEstimate],
    *,
    waits: Mapping[Band, Sequence[int]] | None = None,
    as_of_ms: int = 0,
    run_ms: int = 0,
) -> None:
    """Replace every stored estimate with ``estimates`` (task name -> estimate), and the band
    waits shown estimates are conditioned on with ``waits`` (band -> ascending waits, ms), kept
    with the run's time ``as_of_ms`` and duration ``run_ms``."""
    rows = [
        (task, task.rsplit("/", 1)[0], e.p50_ms, e.p90_ms, e.method, e.reason[:300], e.as_of_ms)
        for task, e in estimates.items()
    ]
    with transaction.atomic():
        EstimatedStart.objects.all().delete()
        insert_rows(EstimatedStart._meta.db_table, _COLUMNS, rows)
        EstimateWaits.objects.all().delete()
        if waits is not None:
            EstimateWaits.objects.create(
                as_of_ms=as_of_ms,
                run_ms=run_ms,
                waits={str(int(band)): thinned(values) for band, values in waits.items() if values},
            )


def thinned(values: Sequence[int], keep: int = KEPT_WAITS) -> list[int]:
    """At most ``keep`` of the ascending ``values``, at evenly spaced ranks (first and last kept)."""
    if len(values) <= keep:
        return list(values)
    last = len(values) - 1
    return [values[round(i * last / (keep - 1))] for i in range(keep)]
