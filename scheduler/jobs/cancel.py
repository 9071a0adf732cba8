"""Cancelling a job: the job, its unfinished tasks and every unfinished descendant, with STOP
intents for what still runs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from scheduler.access import owns_job, require_authenticated
from scheduler.core.types import JobState, TaskState
from scheduler.errors import FailedPrecondition, NotFound, PermissionDenied
from scheduler.execution.outbox import write_stop_intents
from scheduler.jobs.request import normalize_job_id
from scheduler.models import Attempt, Job, Task
from scheduler.store.states import ACTIVE_VALUES, NON_TERMINAL_VALUES, TERMINAL_JOB_VALUES

log = logging.getLogger(__name__)


@dataclass(frozen=True)


class CancelOutcome:
    job: str
    killed_jobs: list[str]
    killed_tasks: int


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
        now = timezone.now()
        tree = Job.objects.filter(Q(pk=job.pk) | Q(name__startswith=f"{name}/")).exclude(state__in=TERMINAL_JOB_VALUES)
        # Every job of the tree locked, in id order (a child's id is above its parent's, so the
        # root locked above comes first): job rows before task rows, the order the tick and the
        # attempt reports lock in, so none of them waits on another in a cycle.
        jobs = dict(tree.select_for_update().order_by("pk").values_list("pk", "name"))
        active = Attempt.objects.filter(task__job_id__in=list(jobs), state__in=ACTIVE_VALUES)
        # Their processes still run: STOP intents tell the workers (delivered after commit).
        write_stop_intents(
            active.values_list("task_id", "number", "worker_id"), f"Killed by {actor.username}", now
        )
        active.update(state=TaskState.KILLED.value, error=f"Killed by {actor.username}")
        killed_tasks = Task.objects.filter(job_id__in=list(jobs), state__in=NON_TERMINAL_VALUES).update(
            state=TaskState.KILLED.value, worker=None, updated_at=now
        )
        Job.objects.filter(pk__in=list(jobs)).exclude(state__in=TERMINAL_JOB_VALUES).update(
            state=JobState.KILLED.value, finished_at=now
        )
    log.info("job %s cancelled by %s (%d jobs, %d tasks)", name, actor.username, len(jobs), killed_tasks,
             extra={"job": name, "actor": actor.username, "jobs": len(jobs), "tasks": killed_tasks,
                    "action": "job.cancel"})
    return CancelOutcome(job=name, killed_jobs=sorted(jobs.values()), killed_tasks=killed_tasks)
