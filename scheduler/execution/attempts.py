"""The attempt state machine: a backend's or an agent's report about one attempt, applied.

Reports are idempotent and ordered by attempt number: a late report about an older attempt, or
a second final report, changes nothing.

A final report locks its job's row (``FOR UPDATE`` on PostgreSQL) before it touches any task of
the job, so two final reports for tasks of one job run one after the other: the second one's
completion check sees the first one's task ended. Without it, each saw only its own update and
counted the other task as still active, and the job stayed RUNNING for good. The order, job row
before tasks, is the tick's and the cancel's too, so none of them waits on another in a cycle.
SQLite takes its write lock at BEGIN, which serialises reports already.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Count, Subquery
from django.utils import timezone

from scheduler.backends import AttemptReport, AttemptStatus
from scheduler.core.types import JobState, TaskState
from scheduler.events import kinds
from scheduler.events.record import Draft, record
from scheduler.execution.outbox import close_intents, wake_held_starts, write_stop_intents
from scheduler.models import Attempt, DispatchIntent, Job, Task
from scheduler.store.states import ACTIVE_VALUES, NON_TERMINAL_VALUES, TERMINAL_JOB_VALUES

log = logging.getLogger(__name__)

# Attempt states a report may move forward from.
BEFORE_RUNNING = (TaskState.ASSIGNED.value, TaskState.BUILDING.value)

ATTEMPT_STATE_FOR = {
    AttemptStatus.SUCCEEDED: TaskState.SUCCEEDED,
    AttemptStatus.FAILED: TaskState.FAILED,
    AttemptStatus.PREEMPTED: TaskState.PREEMPTED,
    AttemptStatus.WORKER_LOST: TaskState.WORKER_FAILED,
}

# When a job's tasks have all finished, the job takes the first of these its tasks show.
JOB_OUTCOME_ORDER = (
    (TaskState.FAILED, JobState.FAILED),
    (TaskState.WORKER_FAILED, JobState.FAILED),
    (TaskState.PREEMPTED, JobState.PREEMPTED),
    (TaskState.COSCHED_FAILED, JobState.COSCHED_FAILED),
    (TaskState.UNSCHEDULABLE, JobState.UNSCHEDULABLE),
    (TaskState.KILLED, JobState.KILLED),
)


@dataclass
class ApplyOutcome:
    applied: int = 0
    ignored: int = 0


def apply_reports(reports: Iterable[AttemptReport], now: datetime | None = None) -> ApplyOutcome:
    """Apply reports in order, each in its own transaction. Reports that change nothing are ignored."""
    outcome = ApplyOutcome()
    for report in reports:
        if apply_report(report, now or timezone.now()):
            outcome.applied += 1
        else:
            outcome.ignored += 1
    return outcome


def apply_report(report: AttemptReport, now: datetime) -> bool:
    """Apply one report. True when it changed something."""
    with transaction.atomic():
        attempt = (
            Attempt.objects.filter(task_id=report.ref.task_pk, number=report.ref.attempt)
            .values(
                "pk",
                "state",
                "finished_at",
                "worker_id",
                "worker__name",
                "task__index",
                "task__job__name",
                "task__job__user",
            )
            .first()
        )
        if attempt is None:
            return False
        if report.worker is not None and attempt["worker__name"] != report.worker:
            log.warning(
                "ignoring report from %s about %s, which runs on %s", report.worker, report.ref, attempt["worker__name"]
            )
            return False
        if report.status.is_terminal:
            return _finish(report, attempt, now)
        return _progress(report, attempt, now)


def _progress(report: AttemptReport, attempt: dict[str, Any], now: datetime) -> bool:
    """BUILDING or RUNNING: forward only, and only for an attempt still active."""
    key = (report.ref.task_pk, report.ref.attempt)
    acknowledged = close_intents([key], now, kinds=(DispatchIntent.Kind.START,))
    if attempt["state"] not in ACTIVE_VALUES or attempt["finished_at"] is not None:
        return bool(acknowledged)
    if report.status is AttemptStatus.RUNNING:
        moved = Attempt.objects.filter(pk=attempt["pk"], state__in=BEFORE_RUNNING).update(
            state=TaskState.RUNNING.value, started_at=now
        )
        if moved:
            Task.objects.filter(pk=key[0], attempt_count=key[1], state__in=BEFORE_RUNNING).update(
                state=TaskState.RUNNING.value, updated_at=now
            )
            job = attempt["task__job__name"]
            data = {"worker": attempt["worker__name"], "attempt": key[1]}
            user = attempt["task__job__user"]
            record([Draft(kinds.RUNNING, now, user, job, attempt["task__index"], key[1], data=data)])
    else:
        moved = Attempt.objects.filter(pk=attempt["pk"], state=TaskState.ASSIGNED.value).update(
            state=TaskState.BUILDING.value
        )
        if moved:
            Task.objects.filter(pk=key[0], attempt_count=key[1], state=TaskState.ASSIGNED.value).update(
                state=TaskState.BUILDING.value, updated_at=now
            )
    return bool(moved or acknowledged)


def _finish(report: AttemptReport, attempt: dict[str, Any], now: datetime) -> bool:
    """A terminal report: end the attempt (if still active) and move its task on; always stamp
    ``finished_at`` once, which frees the worker's capacity."""
    task_pk, number = report.ref.task_pk, report.ref.attempt
    close_intents([(task_pk, number)], now)
    if attempt["finished_at"] is not None:
        return False  # a duplicate or late report: the attempt has ended and stays so
    message = report_message(report)
    changed_task = False
    if attempt["state"] in ACTIVE_VALUES:
        changed_task = _end_task_attempt(task_pk, number, report.status, now, message, report.exit_code)
        Attempt.objects.filter(pk=attempt["pk"], state__in=ACTIVE_VALUES).update(
            state=ATTEMPT_STATE_FOR[report.status].value, error=message
        )
    # The process has ended (or never ran): the attempt stops holding capacity. Its state stays
    # what the scheduler decided (PREEMPTED, KILLED, ...) if the scheduler ended it first.
    update: dict[str, Any] = {"finished_at": now}
    if report.exit_code is not None:
        update["exit_code"] = report.exit_code
    if Attempt.objects.filter(pk=attempt["pk"], finished_at__isnull=True).update(**update):
        # Its room is free: STARTs held on its worker are due at the next drain.
        wake_held_starts([attempt["worker_id"]])
    if changed_task:
        # A success is routine, one a task (dozens a minute under the demo): DEBUG. Any other
        # end (failed, worker lost) is news for whoever reads the log.
        level = logging.DEBUG if report.status.value == "succeeded" else logging.INFO
        log.log(
            level, "task %s attempt %s %s%s", task_pk, number, report.status.value, f": {message}" if message else ""
        )
    return True


def exit_text(exit_code: int) -> str:
    """How an exit reads to people: a negative code (``subprocess``'s convention) is the signal
    that ended the process."""
    if exit_code >= 0:
        return f"exited with code {exit_code}"
    try:
        name = f" ({signal.Signals(-exit_code).name})"
    except ValueError:
        name = ""
    return f"killed by signal {-exit_code}{name}"


def report_message(report: AttemptReport) -> str:
    if report.message:
        return report.message[:2000]
    if report.status is AttemptStatus.FAILED and report.exit_code is not None:
        return exit_text(report.exit_code)
    if report.status is AttemptStatus.SUCCEEDED:
        return ""
    return report.status.value.replace("_", " ")


def lock_jobs(job_pks: Iterable[int]) -> None:
    """Lock the job rows ``job_pks`` until commit, in id order (a no-op on SQLite)."""
    list(
        Job.objects.select_for_update().filter(pk__in=sorted(set(job_pks))).order_by("pk").values_list("pk", flat=True)
    )


def lock_job_of(task_pk: int) -> None:
    """Lock the row of ``task_pk``'s job until commit: taken before any task of the job is read
    or written, so the job's reports (and the tick) take their turn."""
    job = Task.objects.filter(pk=task_pk).values("job_id")
    list(Job.objects.select_for_update().filter(pk=Subquery(job)).values_list("pk", flat=True))


def _end_task_attempt(
    task_pk: int, number: int, status: AttemptStatus, now: datetime, message: str, exit_code: int | None = None
) -> bool:
    """Move the task off its current attempt ``number`` (compare-and-set). True if it moved."""
    lock_job_of(task_pk)
    task = (
        Task.objects.filter(pk=task_pk)
        .values(
            "state",
            "attempt_count",
            "preemption_count",
            "failure_count",
            "index",
            "job_id",
            "job__name",
            "job__user",
            "job__group_by",
            "job__max_retries_failure",
            "job__max_retries_preemption",
        )
        .first()
    )
    if task is None or task["attempt_count"] != number or task["state"] not in ACTIVE_VALUES:
        return False
    preemptions, failures = task["preemption_count"], task["failure_count"]
    if status is AttemptStatus.SUCCEEDED:
        new_state = TaskState.SUCCEEDED
    elif status is AttemptStatus.FAILED:
        failures += 1
        new_state = TaskState.PENDING if failures <= task["job__max_retries_failure"] else TaskState.FAILED
    else:
        retry = preemptions < task["job__max_retries_preemption"]
        preemptions += 1
        new_state = TaskState.PENDING if retry else ATTEMPT_STATE_FOR[status]
    moved = Task.objects.filter(
        pk=task_pk,
        state=task["state"],
        attempt_count=number,
        preemption_count=task["preemption_count"],
        failure_count=task["failure_count"],
    ).update(
        state=new_state.value,
        worker=None,
        band=None,
        preemption_count=preemptions,
        failure_count=failures,
        updated_at=now,
    )
    if not moved:
        return False
    job_pk = task["job_id"]
    task_name = f"{task['job__name']}/{task['index']}"
    record([_attempt_end_event(task, number, new_state, status, now, message, exit_code)])
    if task["job__group_by"] and new_state is not TaskState.SUCCEEDED:
        if new_state is TaskState.PENDING:
            _release_gang(job_pk, task_pk, now, requeue=True, reason=f"Requeued: gang member {task_name} {message}")
        else:
            _release_gang(job_pk, task_pk, now, requeue=False, reason=f"Gang member {task_name} ended: {message}")
    if new_state is not TaskState.PENDING:
        failing = (task_pk, number, exit_code) if new_state is TaskState.FAILED else None
        finish_jobs([job_pk], now, ending=failing)
    return True


def _release_gang(job_pk: int, except_task: int, now: datetime, *, requeue: bool, reason: str) -> None:
    """A gang runs whole or not at all: requeue (free of charge) or end its other members.

    Their processes still run, so their attempts keep holding capacity until stopped.
    """
    siblings = list(
        Attempt.objects.filter(task__job_id=job_pk, state__in=ACTIVE_VALUES)
        .exclude(task_id=except_task)
        .values_list("pk", "task_id", "number", "worker_id")
    )
    tasks = Task.objects.filter(job_id=job_pk).exclude(pk=except_task)
    moving = tasks.filter(state__in=ACTIVE_VALUES if requeue else NON_TERMINAL_VALUES)
    record(_gang_events(job_pk, moving, requeue, reason, now))
    if requeue:
        tasks.filter(state__in=ACTIVE_VALUES).update(
            state=TaskState.PENDING.value, worker=None, band=None, updated_at=now
        )
        attempt_state = TaskState.PREEMPTED.value
    else:
        tasks.filter(state__in=NON_TERMINAL_VALUES).update(
            state=TaskState.COSCHED_FAILED.value, worker=None, band=None, updated_at=now
        )
        attempt_state = TaskState.COSCHED_FAILED.value
    Attempt.objects.filter(pk__in=[s[0] for s in siblings], state__in=ACTIVE_VALUES).update(
        state=attempt_state, error=reason[:2000]
    )
    write_stop_intents([(t, n, w) for _, t, n, w in siblings], reason, now)


def finish_jobs(job_pks: Iterable[int], now: datetime, ending: tuple[int, int, int | None] | None = None) -> None:
    """Finish each job whose tasks have all finished (one grouped read per job).

    The job rows are locked first (in id order), so the tasks read are every committed change:
    another report ending a sibling task has either committed or waits for this one.
    ``ending`` is the failed attempt whose end is being applied (task pk, number, exit code):
    its row is written after this check, so its exit code is taken from here.
    """
    job_pks = sorted(set(job_pks))
    lock_jobs(job_pks)
    for job_pk in job_pks:
        counts = dict(Task.objects.filter(job_id=job_pk).order_by().values_list("state").annotate(n=Count("pk")))
        if not counts or any(state in NON_TERMINAL_VALUES for state in counts):
            continue
        outcome = JobState.SUCCEEDED
        for task_state, job_state in JOB_OUTCOME_ORDER:
            if counts.get(task_state.value):
                outcome = job_state
                break
        ended = (
            Job.objects.filter(pk=job_pk)
            .exclude(state__in=TERMINAL_JOB_VALUES)
            .update(state=outcome.value, finished_at=now)
        )
        if ended:
            record([_job_end_event(job_pk, outcome, counts, now, ending)])


# How a task's end reads as an event's ``outcome``.
EVENT_OUTCOME = {
    TaskState.SUCCEEDED: "succeeded",
    TaskState.FAILED: "failed",
    TaskState.WORKER_FAILED: kinds.OUTCOME_LOST,
    TaskState.PREEMPTED: "preempted",
}


def _attempt_end_event(
    task: dict[str, Any],
    number: int,
    new_state: TaskState,
    status: AttemptStatus,
    now: datetime,
    message: str,
    exit_code: int | None,
) -> Draft:
    """``requeued`` (retries left) or ``task_finished`` for a task whose attempt just ended."""
    job, index, user = task["job__name"], task["index"], task["job__user"]
    if new_state is TaskState.PENDING:
        data = {"attempt": number, "reason": message or status.value.replace("_", " ")}
        return Draft(kinds.REQUEUED, now, user, job, index, number, data=data)
    outcome = EVENT_OUTCOME[new_state]
    if new_state is TaskState.FAILED and exit_code is not None and exit_code < 0:
        outcome = kinds.OUTCOME_KILLED  # ended by a signal (the memory limit, an operator's kill)
    data = {"attempt": number, "outcome": outcome, "exit_code": exit_code, "reason": message}
    return Draft(kinds.TASK_FINISHED, now, user, job, index, number, data=data)


def _gang_events(job_pk: int, moving, requeue: bool, reason: str, now: datetime) -> list[Draft]:
    """The events of a gang's other members requeued or ended with it (one query)."""
    drafts = []
    for index, attempt, job, user in moving.values_list("index", "attempt_count", "job__name", "job__user"):
        attempt = attempt or None
        if requeue:
            data = {"attempt": attempt, "reason": reason[:2000]}
            drafts.append(Draft(kinds.REQUEUED, now, user, job, index, attempt, data=data))
        else:
            data = {"attempt": attempt, "outcome": TaskState.COSCHED_FAILED.value, "exit_code": None, "reason": reason}
            drafts.append(Draft(kinds.TASK_FINISHED, now, user, job, index, attempt, data=data))
    return drafts


def _job_end_event(
    job_pk: int, outcome: JobState, counts: dict[str, int], now: datetime, ending: tuple[int, int, int | None] | None
) -> Draft:
    """``finished``. A failed job is ``failed`` if a task of it failed by its own exit,
    ``killed`` if its failed tasks were all ended by a signal, ``lost`` if none failed but
    workers were lost under them."""
    name, user = Job.objects.filter(pk=job_pk).values_list("name", "user").get()
    value = outcome.value
    if outcome is JobState.FAILED:
        if not counts.get(TaskState.FAILED.value):
            value = kinds.OUTCOME_LOST
        else:
            failed = Attempt.objects.filter(
                task__job_id=job_pk, task__state=TaskState.FAILED.value, state=TaskState.FAILED.value
            )
            exits = list(failed.values_list("exit_code", flat=True))
            if ending is not None:
                exits.append(ending[2])
            if all(code is not None and code < 0 for code in exits):
                value = kinds.OUTCOME_KILLED
    return Draft(kinds.FINISHED, now, user, name, data={"outcome": value})
