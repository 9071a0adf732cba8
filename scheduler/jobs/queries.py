"""Read side of jobs: job lists, one job's detail and its tasks, for the API and the console."""

from __future__ import annotations

from django.db.models import Count, Prefetch, QuerySet

from scheduler.core.bands import Band
from scheduler.models import Attempt, Job, Task
from scheduler.store.states import ACTIVE_VALUES, NON_TERMINAL_VALUES

# Each function runs a fixed number of queries whatever the number of tasks.


def jobs(*, user: str | None = None, band: Band | None = None, state: str | None = None) -> QuerySet[Job]:
    """Jobs newest first, filtered. Pair with ``task_counts`` for the page shown."""
    qs = Job.objects.select_related("parent").order_by("-submitted_at_ms", "-pk")
    if user:
        qs = qs.filter(user=user)
    if band is not None:
        qs = qs.filter(band=int(band))
    if state:
        qs = qs.filter(state=state)
    return qs


def task_counts(job_pks: list[int]) -> dict[int, dict[str, int]]:
    """``{job pk: {state: n}}`` for the given jobs, one grouped query."""
    counts: dict[int, dict[str, int]] = {pk: {} for pk in job_pks}
    for job_pk, state, n in (
        Task.objects.filter(job_id__in=job_pks).order_by().values_list("job_id", "state").annotate(n=Count("id"))
    ):
        counts[job_pk][state] = n
    return counts


def job_detail(name: str) -> Job | None:
    """A job with its tasks (by index), their workers and attempts: four queries."""
    attempts = Attempt.objects.select_related("worker").order_by("number")
    tasks = Task.objects.select_related("worker").order_by("index").prefetch_related(Prefetch("attempts", attempts))
    return (
        Job.objects.select_related("parent")
        .prefetch_related(
            Prefetch("tasks", tasks), Prefetch("children", Job.objects.order_by("name").only("name", "parent"))
        )
        .filter(name=name)
        .first()
    )


def job_tasks_window(job: Job, *, offset: int = 0, limit: int = 50) -> list[Task]:
    """A window of a job's tasks by index, with workers and attempts. Two queries."""
    attempts = Attempt.objects.select_related("worker").order_by("number")
    return list(
        Task.objects.filter(job=job)
        .select_related("worker")
        .order_by("index")
        .prefetch_related(Prefetch("attempts", attempts))[offset : offset + limit]
    )


def shown_placement(
    state: str, band: int | None, worker: str | None, last_band: int | None, last_worker: str | None
) -> tuple[Band | None, str | None]:
    """The band and worker a task shows: while placed, the band stamped at its assignment and
    its worker; once finished, those of its last attempt (what it ran as, and where; the task
    row forgets both when it ends); while pending, none (its queued band is the tick's)."""
    if state in ACTIVE_VALUES:
        return (Band(band) if band is not None else None), worker
    if state in NON_TERMINAL_VALUES:
        return None, None
    return (Band(last_band) if last_band is not None else None), last_worker


def task_placement(task: Task) -> tuple[Band | None, str | None]:
    """:func:`shown_placement` of a task row whose attempts (with their workers) are prefetched."""
    attempts = task.attempts.all()
    last = attempts[len(attempts) - 1] if attempts else None
    return shown_placement(
        task.state,
        task.band,
        task.worker.name if task.worker_id else None,
        last.band if last is not None else None,
        last.worker.name if last is not None and last.worker_id else None,
    )
