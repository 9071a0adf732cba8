"""Cancelling jobs: one job, or many (a list of ids or a whole filtered set), each with its
unfinished tasks and every unfinished descendant, with STOP intents for what still runs.

Single and bulk cancels share one kill path (``_kill``) and one audit record per cancelled job
(a log record with ``action=job.cancel``; a bulk cancel adds one ``job.cancel_bulk`` record).
A bulk cancel is all or nothing: an unknown id, a job the actor may not cancel, or a bad filter
refuses the whole request before anything is written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from scheduler.foundation import roles
from scheduler.foundation.access import owns_job, require_authenticated
from scheduler.core.types import JobState, TaskState
from scheduler.foundation.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from scheduler.events.record import record_cancelled
from scheduler.execution.outbox import write_stop_intents
from scheduler.jobs.listing import JobFilter, filtered_jobs, over_budget_users
from scheduler.jobs.request import normalize_job_id
from scheduler.models import Attempt, Job, Task
from scheduler.store.states import ACTIVE_VALUES, NON_TERMINAL_VALUES, TERMINAL_JOB_VALUES

log = logging.getLogger(__name__)

# The most jobs one bulk cancel may name or match (roots; their descendants come along). One
# transaction locks every row it kills; a larger set is refused with a message to narrow it.
MAX_BULK_CANCEL_JOBS = 10_000


@dataclass(frozen=True)
class CancelOutcome:
    job: str
    killed_jobs: list[str]
    killed_tasks: int


@dataclass(frozen=True)
class BulkCancel:
    """What a bulk cancel touches (a preview) or touched: the selected unfinished jobs, every
    job killed with them (descendants included) and their unfinished tasks."""

    selected: list[str]
    jobs: int
    tasks: int

    @property
    def descendants(self) -> int:
        """Jobs killed with the selected ones: their unfinished descendants (often none)."""
        return max(self.jobs - len(self.selected), 0)

    def summary(self) -> str:
        """``5 job(s)``, or ``5 job(s) and 3 descendant job(s)``: descendants named only if any."""
        text = f"{len(self.selected):,} job(s)"
        return text + (f" and {self.descendants:,} descendant job(s)" if self.descendants else "")


@dataclass(frozen=True)
class Selection:
    """Jobs chosen for a bulk cancel: ``names`` (ids) or ``filter`` (a whole filtered set)."""

    names: tuple[str, ...] = ()
    filter: JobFilter | None = None


def cancel_job(actor, job_id: str) -> CancelOutcome:
    """Kill a job, its unfinished tasks and every unfinished descendant job.

    Active attempts are marked killed but keep ``finished_at`` empty: the worker still runs the
    process and its resources stay committed until the worker confirms it ended.
    """
    require_authenticated(actor)
    name = normalize_job_id(job_id)
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(name=name).first()
        if job is None:
            raise NotFound(f"job {name} does not exist", field="job")
        if not owns_job(actor, job):
            raise PermissionDenied(f"job {name} belongs to '{job.user}'; only its owner or an admin may cancel it")
        if job.state in TERMINAL_JOB_VALUES:
            raise FailedPrecondition(f"job {name} has already finished ({job.state})", field="job")
        jobs, killed_tasks = _kill(actor, [(job.pk, name)], timezone.now())
    return CancelOutcome(job=name, killed_jobs=sorted(jobs.values()), killed_tasks=killed_tasks)


def preview_cancel(actor, selection: Selection) -> BulkCancel:
    """How many jobs and tasks ``cancel_jobs(actor, selection)`` would kill now, refusing what it
    would refuse. Reads only."""
    require_authenticated(actor)
    roots = _selected_roots(actor, selection, lock=False)
    pks = list(
        Job.objects.filter(pk__in=_with_descendants([pk for pk, _ in roots]))
        .exclude(state__in=TERMINAL_JOB_VALUES)
        .values_list("pk", flat=True)
    )
    tasks = Task.objects.filter(job_id__in=pks, state__in=NON_TERMINAL_VALUES).count()
    return BulkCancel(selected=sorted(name for _, name in roots), jobs=len(pks), tasks=tasks)


def cancel_jobs(actor, selection: Selection) -> BulkCancel:
    """Kill every unfinished job of ``selection`` (and their unfinished descendants) in one
    transaction. Finished jobs in a selection are left as they are."""
    require_authenticated(actor)
    now = timezone.now()
    with transaction.atomic():
        roots = _selected_roots(actor, selection, lock=True)
        jobs, killed_tasks = _kill(actor, roots, now)
    log.info(
        "%d job(s) cancelled in bulk by %s (%d jobs with descendants, %d tasks)",
        len(roots),
        actor.username,
        len(jobs),
        killed_tasks,
        extra={
            "actor": actor.username,
            "jobs": len(jobs),
            "tasks": killed_tasks,
            "action": "job.cancel_bulk",
            "target": "filter" if selection.filter is not None else "ids",
        },
    )
    return BulkCancel(selected=sorted(name for _, name in roots), jobs=len(jobs), tasks=killed_tasks)


def _selected_roots(actor, selection: Selection, *, lock: bool) -> list[tuple[int, str]]:
    """``(pk, name)`` of the unfinished jobs selected, after every refusal check."""
    if selection.filter is not None:
        if selection.names:
            raise InvalidArgument("give ids or a filter, not both", field="ids")
        if selection.filter.empty:
            raise InvalidArgument("give at least one filter; an empty filter would match every job", field="filter")
        matched = filtered_jobs(selection.filter, over_budget_users())
        if not roles.is_admin(actor):
            others = matched.exclude(user=actor.username).values_list("user", flat=True).distinct()[:3]
            if others:
                raise PermissionDenied(
                    f"the filter matches jobs of {', '.join(repr(u) for u in others)}; researchers may cancel only "
                    f"their own jobs (add user={actor.username})"
                )
        rows = matched.exclude(state__in=TERMINAL_JOB_VALUES)
    else:
        if not selection.names:
            raise InvalidArgument("give at least one job id, or a filter", field="ids")
        names = sorted({normalize_job_id(n, "ids") for n in selection.names})
        found = dict(Job.objects.filter(name__in=names).values_list("name", "user"))
        missing = [n for n in names if n not in found]
        if missing:
            raise NotFound(f"no such job(s): {', '.join(missing[:5])}", field="ids")
        if not roles.is_admin(actor):
            foreign = [n for n in names if found[n] != actor.username]
            if foreign:
                raise PermissionDenied(
                    f"{', '.join(foreign[:5])} belong(s) to other users; researchers may cancel only their own jobs"
                )
        rows = Job.objects.filter(name__in=names).exclude(state__in=TERMINAL_JOB_VALUES)
    if lock:
        rows = rows.select_for_update()
    roots = list(rows.order_by("pk").values_list("pk", "name")[: MAX_BULK_CANCEL_JOBS + 1])
    if len(roots) > MAX_BULK_CANCEL_JOBS:
        raise FailedPrecondition(
            f"the selection has more than {MAX_BULK_CANCEL_JOBS:,} unfinished jobs; narrow it", field="filter"
        )
    return roots


def _with_descendants(pks: list[int]) -> list[int]:
    """``pks`` and the pks of their descendants (finished or not): one query per level of depth."""
    seen = set(pks)
    frontier = list(pks)
    while frontier:
        frontier = list(Job.objects.filter(parent_id__in=frontier).values_list("pk", flat=True))
        seen.update(frontier)
    return sorted(seen)


def _kill(actor, roots: list[tuple[int, str]], now: datetime) -> tuple[dict[int, str], int]:
    """Kill ``roots`` and their unfinished descendants; inside the caller's transaction."""
    if not roots:
        return {}, 0
    if len(roots) == 1:
        pk, name = roots[0]
        tree = Job.objects.filter(Q(pk=pk) | Q(name__startswith=f"{name}/"))
    else:
        tree = Job.objects.filter(pk__in=_with_descendants([pk for pk, _ in roots]))
    # Every job of the trees locked, in id order (a child's id is above its parent's): job rows
    # before task rows, the order the tick and the attempt reports lock in, so none of them
    # waits on another in a cycle.
    jobs = dict(
        tree.exclude(state__in=TERMINAL_JOB_VALUES).select_for_update().order_by("pk").values_list("pk", "name")
    )
    active = Attempt.objects.filter(task__job_id__in=list(jobs), state__in=ACTIVE_VALUES)
    # Their processes still run: STOP intents tell the workers (delivered after commit).
    write_stop_intents(active.values_list("task_id", "number", "worker_id"), f"Killed by {actor.username}", now)
    active.update(state=TaskState.KILLED.value, error=f"Killed by {actor.username}")
    killed_tasks = Task.objects.filter(job_id__in=list(jobs), state__in=NON_TERMINAL_VALUES).update(
        state=TaskState.KILLED.value, worker=None, updated_at=now
    )
    Job.objects.filter(pk__in=list(jobs)).exclude(state__in=TERMINAL_JOB_VALUES).update(
        state=JobState.KILLED.value, finished_at=now
    )
    record_cancelled(actor.username, roots, jobs, now)
    for _, name in roots:
        log.info(
            "job %s cancelled by %s",
            name,
            actor.username,
            extra={
                "job": name,
                "actor": actor.username,
                "jobs": len(jobs),
                "tasks": killed_tasks,
                "action": "job.cancel",
            },
        )
    return jobs, killed_tasks
