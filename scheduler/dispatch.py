"""The outbox drain: hand due START and STOP intents to their backends, after commit.

The tick (and cancelling a job) writes ``DispatchIntent`` rows in the same transaction as the
decision that needs them, then asks for a drain after commit (``request_dispatch``); Celery beat
drains every ``IRIS_DISPATCH_SECONDS`` as well, so a lost message or a dispatcher that crashed
between commit and send loses nothing: the intents are rows, and the next drain finds them.

One drain (under a lease, so two never overlap) walks due intents in id order, in batches of
``BATCH_SIZE`` with a fixed number of statements per batch, whatever its size:

- a START whose attempt already ended (preempted or cancelled before it was sent) is not sent;
  if it was never handed to any backend, nothing can be running, so the attempt is marked
  finished at once and its STOP is not sent either;
- a START for a preemptor placed on a worker that still holds the unfinished attempt of a task
  it evicted is **held** until that attempt has finished ("placement binding": the tick assigns
  the preemptor to the freed worker in the same decision, but the worker is not physically free
  until the victim's process has ended);
- everything else goes to the backend named by the worker's ``backend``. The try is counted
  *before* the call, so an intent that may have reached a backend is never treated as unsent.
  Backends start an attempt at most once, so sending again after a crash is harmless.

Failures retry with exponential backoff (``IRIS_DISPATCH_RETRY_SECONDS``, doubling, capped at
``RETRY_MAX_SECONDS``) up to ``IRIS_DISPATCH_MAX_TRIES``, then the intent is FAILED and stays
visible with its ``last_error``; a START that cannot be delivered ends its attempt as if the
worker were lost, so the task retries elsewhere. ``stuck_intents`` lists what operators should
look at.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from scheduler import backends
from scheduler.backends import (
    AttemptRef,
    AttemptReport,
    AttemptStatus,
    BackendError,
    Delivery,
    PermanentBackendError,
    StartOrder,
    StopOrder,
)
from scheduler.core.bands import Band
from scheduler.core.types import ACTIVE_STATES, Device, DeviceType, Resources
from scheduler.models import Attempt, DispatchIntent, SchedulerLease
from scheduler.observability import events

log = logging.getLogger(__name__)

LEASE_NAME = "dispatch"
# A dispatcher that died holding the lease is replaced after this long. Renewed every batch.
LEASE_SECONDS = 30
# Intents per batch. Each batch costs two reads and at most six writes, whatever its size.
BATCH_SIZE = 500
# Batches per drain, so one drain stays short; the next drain continues where work remains.
MAX_BATCHES = 20
# Longest wait between two delivery tries (the backoff doubles up to this).
RETRY_MAX_SECONDS = 300

ACTIVE_VALUES = sorted(s.value for s in ACTIVE_STATES)
START = DispatchIntent.Kind.START
STOP = DispatchIntent.Kind.STOP
PENDING = DispatchIntent.State.PENDING
DELIVERED = DispatchIntent.State.DELIVERED
DONE = DispatchIntent.State.DONE
FAILED = DispatchIntent.State.FAILED
OPEN_STATES = (PENDING, DELIVERED)

HELD_MESSAGE = "held: waiting for the attempt it preempted on {worker} to finish"


@dataclass
class DrainResult:
    """What one drain did, by outcome."""

    delivered: int = 0  # handed to a backend that will report back (a local agent's mailbox)
    done: int = 0  # took effect, or needed nothing (already finished, superseded)
    finished: int = 0  # stops that found nothing running: the attempt was marked finished
    held: int = 0  # preemptor starts waiting for their victim's attempt to finish
    retried: int = 0  # failed, will retry after backoff
    failed: int = 0  # gave up after IRIS_DISPATCH_MAX_TRIES (or a permanent error)
    batches: int = 0


# --- triggering -----------------------------------------------------------------------------------


def request_dispatch() -> None:
    """Ask Celery for a drain now. Call it after commit; it never raises (the broker may be down,
    and beat drains every ``IRIS_DISPATCH_SECONDS`` anyway)."""
    try:
        from scheduler.tasks import dispatch

        dispatch.apply_async(expires=float(max(settings.DISPATCH_SECONDS, 1)) * 5, retry=False)
    except Exception:  # noqa: BLE001 -- any broker failure; the intents wait in the outbox
        log.warning("could not enqueue a dispatch; beat's next drain will deliver the intents", exc_info=True)


def write_stop_intents(attempts: Iterable[tuple[int, int, int | None]], reason: str, now: datetime) -> int:
    """Write STOP intents for ``(task pk, attempt number, worker pk)`` of attempts that just ended.

    Call inside the transaction that ended them; a drain is requested after commit. An attempt
    that already has a STOP keeps it (the outbox holds one intent per attempt and kind).
    """
    rows = [
        DispatchIntent(
            task_id=task_pk,
            attempt_number=number,
            kind=STOP,
            worker_id=worker_pk,
            state=PENDING,
            reason=reason[:500],
            created_at=now,
        )
        for task_pk, number, worker_pk in attempts
    ]
    if not rows:
        return 0
    DispatchIntent.objects.bulk_create(rows, ignore_conflicts=True)
    transaction.on_commit(request_dispatch, robust=True)
    return len(rows)


def close_intents(attempt_keys: Iterable[tuple[int, int]], now: datetime, *, kinds=(START, STOP)) -> int:
    """Mark open intents of the given ``(task pk, attempt number)`` attempts DONE (one statement)."""
    match = Q()
    for task_pk, number in attempt_keys:
        match |= Q(task_id=task_pk, attempt_number=number)
    if not match:
        return 0
    return DispatchIntent.objects.filter(match, kind__in=kinds, state__in=OPEN_STATES).update(
        state=DONE, updated_at=now
    )


# --- the lease ------------------------------------------------------------------------------------


def acquire_lease(holder: str, now: datetime) -> bool:
    SchedulerLease.objects.get_or_create(name=LEASE_NAME)
    return (
        SchedulerLease.objects.filter(name=LEASE_NAME)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__lte=now) | Q(holder=holder))
        .update(holder=holder, expires_at=now + timedelta(seconds=LEASE_SECONDS))
        == 1
    )


def release_lease(holder: str) -> None:
    SchedulerLease.objects.filter(name=LEASE_NAME, holder=holder).update(holder="", expires_at=None)


# --- orders ---------------------------------------------------------------------------------------


def with_attempts(intents: QuerySet[DispatchIntent]) -> QuerySet[DispatchIntent]:
    """Intents with their task, job and worker, and their attempt's state annotated: one query."""
    attempt = Attempt.objects.filter(task_id=OuterRef("task_id"), number=OuterRef("attempt_number"))
    start = DispatchIntent.objects.filter(
        task_id=OuterRef("task_id"), attempt_number=OuterRef("attempt_number"), kind=START
    )
    return (
        intents.select_related("task__job", "worker")
        .defer("task__job__submission_argv", "task__job__constraints", "worker__attributes")
        .annotate(
            attempt_pk=Subquery(attempt.values("pk")[:1]),
            attempt_state=Subquery(attempt.values("state")[:1]),
            attempt_band=Subquery(attempt.values("band")[:1]),
            attempt_finished_at=Subquery(attempt.values("finished_at")[:1]),
            start_pk=Subquery(start.values("pk")[:1]),
            start_tries=Subquery(start.values("tries")[:1]),
        )
    )


def task_environment(task: str, job: str, index: int, attempt: int, band: Band, worker: str) -> dict[str, str]:
    """What a task's process sees, on every backend."""
    return {
        "IRIS_TASK_ID": task,
        "IRIS_JOB_ID": job,
        "IRIS_TASK_INDEX": str(index),
        "IRIS_ATTEMPT": str(attempt),
        "IRIS_BAND": band.wire,
        "IRIS_WORKER": worker,
    }


def start_order(intent: DispatchIntent) -> StartOrder:
    """The order for a START intent loaded through :func:`with_attempts`."""
    task = intent.task
    job = task.job
    stamped = getattr(intent, "attempt_band", None)
    band = Band(stamped if stamped is not None else (task.band if task.band is not None else job.band))
    task_name = f"{job.name}/{task.index}"
    worker = intent.worker.name if intent.worker else ""
    device = (
        Device()
        if job.device_type == DeviceType.CPU.value
        else Device(DeviceType(job.device_type), job.device_variant or None, job.device_count)
    )
    return StartOrder(
        ref=AttemptRef(task.pk, intent.attempt_number),
        task=task_name,
        job=job.name,
        user=job.user,
        index=task.index,
        replicas=job.replicas,
        worker=worker,
        band=band,
        command=tuple(job.command or ()),
        environment=task_environment(task_name, job.name, task.index, intent.attempt_number, band, worker),
        resources=Resources(job.cpu_millicores, job.memory_bytes, device),
        group_by=job.group_by or None,
        created_at=intent.created_at,
    )


def stop_order(intent: DispatchIntent) -> StopOrder:
    task = intent.task
    return StopOrder(
        ref=AttemptRef(task.pk, intent.attempt_number),
        task=f"{task.job.name}/{task.index}",
        worker=intent.worker.name if intent.worker else None,
        reason=intent.reason,
        grace_seconds=float(settings.STOP_GRACE_SECONDS),
    )


# --- draining -------------------------------------------------------------------------------------


def drain(now: datetime | None = None, *, batch_size: int = BATCH_SIZE, max_batches: int = MAX_BATCHES) -> DrainResult | None:
    """Deliver due intents in id order. Returns None when another drain holds the lease."""
    holder = uuid.uuid4().hex
    if not acquire_lease(holder, now or timezone.now()):
        log.debug("dispatch skipped: another drain holds the lease")
        return None
    result = DrainResult()
    try:
        after = 0
        for _ in range(max_batches):
            at = now or timezone.now()
            batch = due_intents(at, after, batch_size)
            if not batch:
                break
            result.batches += 1
            deliver_batch(batch, at, result)
            after = batch[-1].pk
            if len(batch) < batch_size:
                break
            acquire_lease(holder, at)  # renew
    finally:
        release_lease(holder)
    if result.batches:
        log.info(
            "dispatch: %d delivered, %d done, %d finished, %d held, %d retrying, %d failed",
            result.delivered, result.done, result.finished, result.held, result.retried, result.failed,
        )
    return result


def due_intents(now: datetime, after: int, limit: int) -> list[DispatchIntent]:
    due = DispatchIntent.objects.filter(state=PENDING, pk__gt=after).filter(
        Q(next_try_at__isnull=True) | Q(next_try_at__lte=now)
    )
    return list(with_attempts(due).order_by("pk")[:limit])


def blocked_placements(batch: list[DispatchIntent]) -> dict[tuple[int, int], bool]:
    """``(job pk, worker pk)`` pairs whose STARTs must wait: the worker still holds an unfinished
    attempt of a task that a task of that job preempted (one query).

    Matching by job rather than by task covers gangs, whose victims are paired with members in
    no particular order; a victim attempt counts only if it existed when the eviction happened.
    """
    starts = [i for i in batch if i.kind == START and i.worker_id is not None]
    if not starts:
        return {}
    workers = sorted({i.worker_id for i in starts})
    jobs = sorted({i.task.job_id for i in starts})
    rows = (
        Attempt.objects.filter(finished_at__isnull=True, worker_id__in=workers)
        .exclude(state__in=ACTIVE_VALUES)
        .filter(
            task__preempted_by_events__preemptor__job_id__in=jobs,
            task__preempted_by_events__created_at__gte=F("created_at"),
        )
        .values_list("task__preempted_by_events__preemptor__job_id", "worker_id")
        .distinct()
    )
    return {(job_pk, worker_pk): True for job_pk, worker_pk in rows}


def deliver_batch(batch: list[DispatchIntent], now: datetime, result: DrainResult) -> None:
    blocked = blocked_placements(batch)
    to_send: list[DispatchIntent] = []
    done: list[int] = []
    held: list[tuple[str, int]] = []
    never_ran: set[int] = set()  # attempts that never reached a backend: finished now
    closed: set[tuple[int, int]] = set()

    for intent in batch:
        key = (intent.task_id, intent.attempt_number)
        if intent.kind == START:
            if intent.attempt_state not in ACTIVE_VALUES:
                # Preempted or cancelled before it was sent: never start it.
                done.append(intent.pk)
                if intent.tries == 0 and intent.attempt_pk is not None:
                    never_ran.add(intent.attempt_pk)
                    closed.add(key)
                continue
            if intent.worker_id is not None and (intent.task.job_id, intent.worker_id) in blocked:
                message = HELD_MESSAGE.format(worker=intent.worker.name)
                if intent.last_error != message:
                    held.append((message, intent.pk))
                result.held += 1
                continue
        else:
            if key in closed or intent.attempt_finished_at is not None or intent.attempt_pk is None:
                done.append(intent.pk)
                continue
            if intent.start_pk is not None and intent.start_tries == 0:
                # Its START never reached a backend, so nothing runs: no stop to send.
                done.extend([intent.pk, intent.start_pk])
                never_ran.add(intent.attempt_pk)
                closed.add(key)
                continue
        to_send.append(intent)

    if to_send:
        # Count the try before sending: an intent that may have reached a backend is never "unsent".
        DispatchIntent.objects.filter(pk__in=[i.pk for i in to_send]).update(tries=F("tries") + 1, updated_at=now)

    delivered: list[int] = []
    finished: list[DispatchIntent] = []
    failures: list[tuple[DispatchIntent, int, str, bool]] = []
    for intent in to_send:
        tries = intent.tries + 1
        try:
            delivery = send(intent)
        except PermanentBackendError as exc:
            failures.append((intent, tries, describe(exc), True))
        except Exception as exc:  # noqa: BLE001 -- any backend failure is retried with backoff
            if not isinstance(exc, BackendError):
                log.warning("backend error delivering %s", intent, exc_info=True)
            failures.append((intent, tries, describe(exc), False))
        else:
            if delivery is Delivery.DELIVERED:
                delivered.append(intent.pk)
            elif delivery is Delivery.FINISHED and intent.kind == STOP:
                finished.append(intent)
            else:
                done.append(intent.pk)

    if delivered:
        DispatchIntent.objects.filter(pk__in=delivered, state=PENDING).update(
            state=DELIVERED, last_error="", next_try_at=None, updated_at=now
        )
        result.delivered += len(delivered)
    if done:
        DispatchIntent.objects.filter(pk__in=done, state__in=(PENDING, FAILED)).update(
            state=DONE, next_try_at=None, updated_at=now
        )
        result.done += len(set(done))
    if never_ran:
        Attempt.objects.filter(pk__in=never_ran, finished_at__isnull=True).exclude(state__in=ACTIVE_VALUES).update(
            finished_at=now
        )
    if held:
        DispatchIntent.objects.bulk_update(
            [DispatchIntent(pk=pk, last_error=message, updated_at=now) for message, pk in held],
            ["last_error", "updated_at"],
        )
    if failures:
        record_failures(failures, now, result)
    if finished:
        end_attempts(finished, AttemptStatus.PREEMPTED, "stopped: the backend has nothing running for this attempt", now)
        result.finished += len(finished)


def backend_name(intent: DispatchIntent) -> str:
    """Where an intent goes: the backend of the worker its attempt was placed on; for an attempt
    with no worker (a backend that admits work itself, such as Kueue), the job's backend."""
    if intent.worker is not None:
        return intent.worker.backend
    job_backend = getattr(intent.task.job, "backend", "") or ""
    if job_backend and job_backend != "workers":
        return job_backend
    if intent.kind == START:
        raise PermanentBackendError("the worker this attempt was placed on no longer exists")
    return "local"  # a stop with nowhere to go: the local backend reports it finished


def send(intent: DispatchIntent) -> Delivery:
    backend = backends.get_backend(backend_name(intent))
    if intent.kind == START:
        return backend.start(start_order(intent))
    return backend.stop(stop_order(intent))


def describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:2000]


def retry_delay(tries: int) -> float:
    """Seconds before try ``tries + 1``: ``IRIS_DISPATCH_RETRY_SECONDS`` doubling, capped."""
    return min(settings.DISPATCH_RETRY_SECONDS * 2 ** max(tries - 1, 0), RETRY_MAX_SECONDS)


def record_failures(failures: list[tuple[DispatchIntent, int, str, bool]], now: datetime, result: DrainResult) -> None:
    updates = []
    given_up: list[DispatchIntent] = []
    for intent, tries, error, permanent in failures:
        if permanent or tries >= settings.DISPATCH_MAX_TRIES:
            updates.append(DispatchIntent(pk=intent.pk, state=FAILED, next_try_at=None, last_error=error, updated_at=now))
            given_up.append(intent)
            result.failed += 1
            log.error("dispatch gave up on %s after %d tries: %s", intent, tries, error,
                      extra={"task": f"{intent.task.job.name}/{intent.task.index}", "attempt": intent.attempt_number,
                             "worker": intent.worker.name if intent.worker else None})
        else:
            at = now + timedelta(seconds=retry_delay(tries))
            updates.append(DispatchIntent(pk=intent.pk, state=PENDING, next_try_at=at, last_error=error, updated_at=now))
            result.retried += 1
        events.record_delivery_failure(intent, gave_up=permanent or tries >= settings.DISPATCH_MAX_TRIES)
    DispatchIntent.objects.bulk_update(updates, ["state", "next_try_at", "last_error", "updated_at"])
    starts = [i for i in given_up if i.kind == START]
    if starts:
        # The task cannot start where it was placed: end the attempt as lost, so it retries elsewhere.
        end_attempts(
            starts, AttemptStatus.WORKER_LOST, "could not be delivered to its worker; see the dispatch intent's last error",
            now,
        )


def end_attempts(intents: list[DispatchIntent], status: AttemptStatus, message: str, now: datetime) -> None:
    """End the attempts of ``intents`` with ``status``, as if their backend had reported it."""
    from scheduler import reports  # reports imports this module

    reports.apply_reports(
        [AttemptReport(ref=AttemptRef(i.task_id, i.attempt_number), status=status, message=message) for i in intents],
        now=now,
    )


# --- what operators look at -----------------------------------------------------------------------


def stuck_intents(now: datetime | None = None) -> QuerySet[DispatchIntent]:
    """Intents an operator should look at, oldest first: FAILED ones, ones retrying after an
    error, and ones still not done ``IRIS_DISPATCH_STUCK_SECONDS`` after they were written
    (a held preemptor start, an agent that does not fetch its mailbox). Slice it for a page;
    ``task__job`` and ``worker`` are loaded with it.
    """
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.DISPATCH_STUCK_SECONDS)
    return (
        DispatchIntent.objects.filter(
            Q(state=FAILED) | Q(state=PENDING, tries__gt=0) | Q(state__in=OPEN_STATES, created_at__lte=cutoff)
        )
        .select_related("task__job", "worker")
        .order_by("created_at", "pk")
    )


def intent_counts(now: datetime | None = None) -> dict[str, int]:
    """``{"pending": n, "delivered": n, "failed": n, "stuck": n}`` for open and failed intents (two queries)."""
    counts = {state: 0 for state in (PENDING, DELIVERED, FAILED)}
    for state, n in (
        DispatchIntent.objects.exclude(state=DONE).order_by().values_list("state").annotate(n=Count("pk"))
    ):
        counts[state] = n
    counts["stuck"] = stuck_intents(now).count()
    return {str(k): v for k, v in counts.items()}


def retry_intents(pks: Iterable[int] | None = None) -> int:
    """Operators: send FAILED intents (all, or the given ones) once more at the next drain.

    ``tries`` is kept, so an intent that fails again is FAILED again at once; a START retried
    after its attempt ended is simply not sent.
    """
    failed = DispatchIntent.objects.filter(state=FAILED)
    if pks is not None:
        failed = failed.filter(pk__in=list(pks))
    changed = failed.update(state=PENDING, next_try_at=None, updated_at=timezone.now())
    if changed:
        transaction.on_commit(request_dispatch, robust=True)
    return changed
