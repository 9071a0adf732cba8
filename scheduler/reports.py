"""The write side of execution: what really happened to attempts, applied to attempts, tasks
and jobs; worker agents' registration and heartbeats; workers declared lost.

Reports (:class:`~scheduler.backends.AttemptReport`) come from worker agents through the agent
API, from backends the shell polls (``Backend.sync``) and from the dispatcher itself. Applying
one is a compare-and-set: the task changes only if it is still on that attempt in an active
state, and an attempt only moves forward, so

- a late or duplicate report never revives an attempt that has ended (a RUNNING heartbeat after
  a preemption changes nothing; a second exit report changes nothing);
- a report racing the tick loses cleanly: if the tick preempted the task first, the report only
  records that the process ended (``finished_at``, which frees the worker's capacity).

Outcomes, for the attempt the task is currently on:

=============  ===============================================================================
RUNNING        attempt RUNNING with ``started_at``; task RUNNING
SUCCEEDED      attempt and task SUCCEEDED
FAILED         ``failure_count + 1``; the task retries (PENDING) while ``failure_count <=
               max_retries_failure``, else FAILED
PREEMPTED,     ``preemption_count + 1``; the task retries while the count before the raise is
WORKER_LOST    below ``max_retries_preemption``, else PREEMPTED / WORKER_FAILED
=============  ===============================================================================

Every terminal report sets ``finished_at``. When a gang member leaves for a retry, its active
siblings are requeued free of charge; when it ends for good, its unfinished siblings end
COSCHED_FAILED. Siblings' processes get STOP intents. A job finishes when all its tasks have.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, OuterRef, Subquery
from django.utils import timezone

from scheduler import backends, dispatch
from scheduler.backends import AttemptRef, AttemptReport, AttemptStatus, StartOrder, StopOrder
from scheduler.core.types import ACTIVE_STATES, NON_TERMINAL_STATES, TERMINAL_JOB_STATES, JobState, TaskState
from scheduler.errors import InvalidArgument, NotFound
from scheduler.models import Attempt, DispatchIntent, Job, Task, Worker

log = logging.getLogger(__name__)

ACTIVE_VALUES = sorted(s.value for s in ACTIVE_STATES)
NON_TERMINAL_VALUES = sorted(s.value for s in NON_TERMINAL_STATES)
TERMINAL_JOB_VALUES = sorted(s.value for s in TERMINAL_JOB_STATES)
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
# Orders handed to one agent per heartbeat; the rest follow on the next one.
MAILBOX_LIMIT = 100


@dataclass
class ApplyOutcome:
    applied: int = 0
    ignored: int = 0


# --- applying reports -----------------------------------------------------------------------------


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
            .values("pk", "state", "finished_at", "worker_id", "worker__name")
            .first()
        )
        if attempt is None:
            return False
        if report.worker is not None and attempt["worker__name"] != report.worker:
            log.warning("ignoring report from %s about %s, which runs on %s", report.worker, report.ref,
                        attempt["worker__name"])
            return False
        if report.status.is_terminal:
            return _finish(report, attempt, now)
        return _progress(report, attempt, now)


def _progress(report: AttemptReport, attempt: dict[str, Any], now: datetime) -> bool:
    """BUILDING or RUNNING: forward only, and only for an attempt still active."""
    key = (report.ref.task_pk, report.ref.attempt)
    acknowledged = dispatch.close_intents([key], now, kinds=(DispatchIntent.Kind.START,))
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
    dispatch.close_intents([(task_pk, number)], now)
    if attempt["finished_at"] is not None:
        return False  # a duplicate or late report: the attempt has ended and stays so
    message = report_message(report)
    changed_task = False
    if attempt["state"] in ACTIVE_VALUES:
        changed_task = _end_task_attempt(task_pk, number, report.status, now, message)
        Attempt.objects.filter(pk=attempt["pk"], state__in=ACTIVE_VALUES).update(
            state=ATTEMPT_STATE_FOR[report.status].value, error=message
        )
    # The process has ended (or never ran): the attempt stops holding capacity. Its state stays
    # what the scheduler decided (PREEMPTED, KILLED, ...) if the scheduler ended it first.
    update: dict[str, Any] = {"finished_at": now}
    if report.exit_code is not None:
        update["exit_code"] = report.exit_code
    Attempt.objects.filter(pk=attempt["pk"], finished_at__isnull=True).update(**update)
    if changed_task:
        log.info("task %s attempt %s %s%s", task_pk, number, report.status.value, f": {message}" if message else "")
    return True


def report_message(report: AttemptReport) -> str:
    if report.message:
        return report.message[:2000]
    if report.status is AttemptStatus.FAILED and report.exit_code is not None:
        return f"exited with code {report.exit_code}"
    if report.status is AttemptStatus.SUCCEEDED:
        return ""
    return report.status.value.replace("_", " ")


def _end_task_attempt(task_pk: int, number: int, status: AttemptStatus, now: datetime, message: str) -> bool:
    """Move the task off its current attempt ``number`` (compare-and-set). True if it moved."""
    task = (
        Task.objects.filter(pk=task_pk)
        .values(
            "state", "attempt_count", "preemption_count", "failure_count", "index", "job_id", "job__name",
            "job__group_by", "job__max_retries_failure", "job__max_retries_preemption",
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
    if task["job__group_by"] and new_state is not TaskState.SUCCEEDED:
        if new_state is TaskState.PENDING:
            _release_gang(job_pk, task_pk, now, requeue=True, reason=f"Requeued: gang member {task_name} {message}")
        else:
            _release_gang(job_pk, task_pk, now, requeue=False, reason=f"Gang member {task_name} ended: {message}")
    if new_state is not TaskState.PENDING:
        finish_jobs([job_pk], now)
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
    dispatch.write_stop_intents([(t, n, w) for _, t, n, w in siblings], reason, now)


def finish_jobs(job_pks: Iterable[int], now: datetime) -> None:
    """Finish each job whose tasks have all finished (one grouped read per job)."""
    for job_pk in set(job_pks):
        counts = dict(
            Task.objects.filter(job_id=job_pk).order_by().values_list("state").annotate(n=Count("pk"))
        )
        if not counts or any(state in NON_TERMINAL_VALUES for state in counts):
            continue
        outcome = JobState.SUCCEEDED
        for task_state, job_state in JOB_OUTCOME_ORDER:
            if counts.get(task_state.value):
                outcome = job_state
                break
        Job.objects.filter(pk=job_pk).exclude(state__in=TERMINAL_JOB_VALUES).update(
            state=outcome.value, finished_at=now
        )


# --- workers that stop heartbeating ---------------------------------------------------------------


def check_workers(now: datetime | None = None) -> list[str]:
    """Declare lost every heartbeating worker silent for more than ``IRIS_WORKER_GRACE_SECONDS``.

    Only workers of backends that heartbeat and that have heartbeated at least once are watched
    (a worker registered by hand has no agent to hear from). Returns the names declared lost.
    """
    now = now or timezone.now()
    grace = settings.WORKER_GRACE_SECONDS
    cutoff = now - timedelta(seconds=grace)
    silent = Worker.objects.filter(
        healthy=True, backend__in=backends.heartbeat_backend_names(), last_heartbeat__lt=cutoff
    ).values_list("pk", "name")
    lost = []
    for pk, name in silent:
        if declare_worker_lost(pk, now, f"worker {name} lost: no heartbeat for more than {grace}s", cutoff=cutoff):
            lost.append(name)
    if lost:
        log.warning("workers lost (no heartbeat for %ss): %s", grace, ", ".join(lost))
    return lost


def declare_worker_lost(worker_pk: int, now: datetime, reason: str, *, cutoff: datetime | None = None) -> bool:
    """Mark a worker unhealthy and end every unfinished attempt on it: active ones end
    WORKER_FAILED and their tasks retry within ``max_retries_preemption``; ones the scheduler had
    already ended are marked finished. Nothing can confirm them any more, and an unhealthy worker
    takes no new work; if its agent comes back, it is told to stop whatever it still runs.
    """
    with transaction.atomic():
        worker = Worker.objects.filter(pk=worker_pk, healthy=True)
        if cutoff is not None:
            worker = worker.filter(last_heartbeat__lt=cutoff)
        if not worker.update(healthy=False):
            return False
        unfinished = list(
            Attempt.objects.filter(worker_id=worker_pk, finished_at__isnull=True).values_list("task_id", "number")
        )
        for task_pk, number in unfinished:
            apply_report(
                AttemptReport(AttemptRef(task_pk, number), AttemptStatus.WORKER_LOST, message=reason), now
            )
    return True


def sync_backends(now: datetime | None = None) -> int:
    """Apply the reports of every backend that is polled (``Backend.sync``). Returns how many applied."""
    now = now or timezone.now()
    applied = 0
    for name in backends.polled_backend_names():
        try:
            reports = list(backends.get_backend(name).sync(now))
        except Exception:  # noqa: BLE001 -- one backend's outage must not stop the others
            log.warning("backend %s failed to sync", name, exc_info=True)
            continue
        applied += apply_reports(reports, now).applied
    return applied


# --- worker agents --------------------------------------------------------------------------------


def register_agent(
    *, name: Any, cpu: Any, memory: Any, device: Any = None, attributes: Any = None, backend: Any = "local"
) -> tuple[Worker, bool]:
    """A worker agent joins (or re-joins): upsert the worker by name with its declared capacity,
    healthy, heartbeat now. Draining is left as it was. Returns the worker and whether it is new.

    The caller has checked the agent may do this (an operator or a member of ``iris-agents``).
    """
    from scheduler import services  # the parsers and their messages live there

    worker_name = services.parse_worker_name(name)
    if cpu in (None, ""):
        raise InvalidArgument("required (cores)", field="cpu")
    if memory in (None, ""):
        raise InvalidArgument("required (bytes or a size like '64Gi')", field="memory")
    values = {
        "cpu_millicores": services.parse_cpu_millicores(cpu),
        "memory_bytes": services.parse_memory(memory),
        "attributes": services.parse_attributes(attributes),
        "healthy": True,
    }
    dev = services.parse_device(device)
    values.update(device_type=dev.type.value, device_variant=dev.variant, device_count=dev.count)
    backend_name = services.parse_text(backend, "backend", max_length=32) or "local"
    values["backend"] = services.parse_segment(backend_name, "backend")
    now = timezone.now()
    with transaction.atomic():
        worker, created = Worker.objects.select_for_update().get_or_create(
            name=worker_name, defaults={**values, "last_heartbeat": now}
        )
        if not created:
            for key, value in values.items():
                setattr(worker, key, value)
            worker.last_heartbeat = now
            worker.save()
    log.info("worker %s %s by its agent", worker_name, "registered" if created else "re-registered")
    return worker, created


@dataclass
class Mailbox:
    """What a heartbeat hands back to an agent."""

    starts: list[StartOrder] = field(default_factory=list)
    stops: list[StopOrder] = field(default_factory=list)


def agent_heartbeat(
    worker_name: str, running: Iterable[AttemptRef], *, healthy: bool = True, now: datetime | None = None
) -> Mailbox:
    """An agent says it is alive and which attempts it runs; answer with its orders.

    Reconciles the agent's view with ours: an attempt the agent runs that we consider ended (or
    never placed there) gets a stop; an ended attempt it does not run is finished; an active
    attempt it confirmed starting but no longer runs (the agent restarted) is lost.
    """
    now = now or timezone.now()
    worker = Worker.objects.filter(name=worker_name).values("pk", "name").first()
    if worker is None:
        raise NotFound(f"worker {worker_name} is not registered; register it first", field="name")
    running_keys = {(r.task_pk, r.attempt) for r in running}
    with transaction.atomic():
        Worker.objects.filter(pk=worker["pk"]).update(last_heartbeat=now, healthy=healthy)
        orphan_stops = reconcile(worker["pk"], worker["name"], running_keys, now)
    return Mailbox(starts=[], stops=orphan_stops) if not healthy else mailbox(worker["pk"], running_keys, orphan_stops)


def reconcile(worker_pk: int, worker_name: str, running: set[tuple[int, int]], now: datetime) -> list[StopOrder]:
    start_state = DispatchIntent.objects.filter(
        task_id=OuterRef("task_id"), attempt_number=OuterRef("number"), kind=DispatchIntent.Kind.START
    ).values("state")[:1]
    unfinished = list(
        Attempt.objects.filter(worker_id=worker_pk, finished_at__isnull=True)
        .annotate(start_state=Subquery(start_state))
        .values_list("task_id", "number", "state", "start_state", "error")
    )
    active_here = set()
    ended_why = {}
    acknowledged = []
    reports = []
    for task_pk, number, state, start, error in unfinished:
        key = (task_pk, number)
        if state in ACTIVE_VALUES:
            active_here.add(key)
        else:
            ended_why[key] = error
        if key in running:
            if state in ACTIVE_VALUES and start != DispatchIntent.State.DONE:
                acknowledged.append(key)
            continue
        if state not in ACTIVE_VALUES:
            reports.append(AttemptReport(AttemptRef(*key), AttemptStatus.PREEMPTED, message="not running on its worker"))
        elif start == DispatchIntent.State.DONE:
            reports.append(
                AttemptReport(
                    AttemptRef(*key),
                    AttemptStatus.WORKER_LOST,
                    message=f"the agent on {worker_name} no longer runs it (was the agent restarted?)",
                )
            )
    if acknowledged:
        dispatch.close_intents(acknowledged, now, kinds=(DispatchIntent.Kind.START,))
    for report in reports:
        apply_report(report, now)
    grace = float(settings.STOP_GRACE_SECONDS)
    # Usually the attempt's STOP intent is on its way too; whichever arrives first stops it.
    return [
        StopOrder(
            AttemptRef(*key),
            task=str(key[0]),
            worker=worker_name,
            reason=ended_why.get(key) or "not an active attempt on this worker",
            grace_seconds=grace,
        )
        for key in sorted(running - active_here)
    ]


def mailbox(worker_pk: int, running: set[tuple[int, int]], extra_stops: list[StopOrder]) -> Mailbox:
    """Delivered intents for this worker, as orders (one query)."""
    box = Mailbox(stops=list(extra_stops))
    stopping = {(s.ref.task_pk, s.ref.attempt) for s in extra_stops}
    intents = dispatch.with_attempts(
        DispatchIntent.objects.filter(worker_id=worker_pk, state=DispatchIntent.State.DELIVERED)
    ).order_by("pk")[:MAILBOX_LIMIT]
    for intent in intents:
        key = (intent.task_id, intent.attempt_number)
        if intent.kind == DispatchIntent.Kind.START:
            if intent.attempt_state in ACTIVE_VALUES and key not in running:
                box.starts.append(dispatch.start_order(intent))
        elif intent.attempt_finished_at is None and key not in stopping:
            box.stops.append(dispatch.stop_order(intent))
            stopping.add(key)
    return box
