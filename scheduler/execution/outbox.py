"""The dispatch outbox: START and STOP intents written in the same transaction as the change that
needs them, the orders they become, and the operator's view of stuck intents.

A drain is requested after commit through Celery by task name, so nothing here imports the
tasks module.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from scheduler.backends import AttemptRef, StartOrder, StopOrder
from scheduler.core.bands import Band
from scheduler.core.types import Resources
from scheduler.foundation.enqueue import enqueue
from scheduler.models import DispatchIntent
from scheduler.store import bulk
from scheduler.store.job_rows import BANDS, json_value, resources_from_columns

log = logging.getLogger(__name__)

START = DispatchIntent.Kind.START

STOP = DispatchIntent.Kind.STOP

PENDING = DispatchIntent.State.PENDING

DELIVERED = DispatchIntent.State.DELIVERED

DONE = DispatchIntent.State.DONE

FAILED = DispatchIntent.State.FAILED

OPEN_STATES = (PENDING, DELIVERED)

HELD_MESSAGE = "held: waiting for the attempt it preempted on {worker} to finish"

ROOM_HELD_MESSAGE = "held: waiting for capacity on {worker} still held by stopping attempts"

# A held START is looked at again when an attempt on its worker finishes (``wake_held_starts``:
# the only thing that frees the room it waits for or ends the victim it waits on), and after
# this long at the latest (a worker whose capacity grew, a wake missed): not by every drain, which
# re-read thousands of held STARTs behind workers whose agents had not confirmed their stops.
HELD_RECHECK_SECONDS = 30


def wake_held_starts(worker_pks: Iterable[int | None]) -> int:
    """Make the held STARTs on these workers due at the next drain (an attempt there finished).
    One read, and a write only when there are any; returns how many. They are locked in id
    order, the order a drain's writes take them in, so the two never wait on each other in a
    cycle."""
    workers = sorted({pk for pk in worker_pks if pk is not None})
    if not workers:
        return 0
    with transaction.atomic():
        held = list(
            DispatchIntent.objects.filter(
                worker_id__in=workers, state=PENDING, kind=START, tries=0, next_try_at__isnull=False
            )
            .order_by("pk")
            .select_for_update()
            .values_list("pk", flat=True)
        )
        if not held:
            return 0
        return DispatchIntent.objects.filter(pk__in=held, next_try_at__isnull=False).update(next_try_at=None)


def request_dispatch() -> None:
    """Ask Celery for a drain now. Call it after commit; it never raises (the broker may be down,
    and beat drains every ``IRIS_DISPATCH_SECONDS`` anyway)."""
    enqueue(
        "scheduler.dispatch",
        expires=float(max(settings.DISPATCH_SECONDS, 1)) * 5,
        logger=log,
        failure="could not enqueue a dispatch; beat's next drain will deliver the intents",
    )


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


@dataclass(slots=True)
class IntentRow:
    """An intent as the dispatcher and the agents' mailboxes read it (:func:`intent_rows`): its
    own columns, its attempt's (None when the attempt is gone), its attempt's START intent's (a
    STOP's question: did the START ever leave?), and what its order needs of its task, job and
    worker (the worker's columns None when the worker row is gone). Plain values, no model
    instances: a drain reads hundreds a batch."""

    pk: int
    task_id: int
    attempt_number: int
    kind: str
    state: str
    worker_id: int | None
    reason: str
    tries: int
    created_at: datetime
    attempt_pk: int | None
    attempt_state: str | None
    attempt_band: int | None
    attempt_finished_at: datetime | None
    start_pk: int | None
    start_tries: int | None
    task_index: int
    task_band: int | None
    job_id: int
    job_name: str
    job_user: str
    job_replicas: int
    job_band: int
    job_command: list | str | None
    job_group_by: str | None
    job_route: str
    job_cpu_millicores: int
    job_memory_bytes: int
    job_device_type: str
    job_device_variant: str | None
    job_device_count: int
    worker_name: str | None
    worker_backend: str | None
    worker_cpu_millicores: int | None
    worker_memory_bytes: int | None
    worker_device_type: str | None
    worker_device_variant: str | None
    worker_device_count: int | None

    def __str__(self) -> str:
        return f"{self.kind} attempt {self.attempt_number} of task {self.task_id} ({self.state})"

    @property
    def key(self) -> tuple[int, int]:
        """The attempt's ``(task pk, attempt number)``."""
        return (self.task_id, self.attempt_number)

    def job_resources(self) -> Resources:
        """What one task of the intent's job asks for."""
        return resources_from_columns(
            self.job_cpu_millicores,
            self.job_memory_bytes,
            self.job_device_type,
            self.job_device_variant,
            self.job_device_count,
        )


# The columns of IntentRow, in its order: the intent ``i``, its attempt ``a`` and START ``s``
# (outer joins: either may be missing), its task ``t`` and job ``j``, its worker ``w`` (outer).
_INTENT_ROW_SQL = """
SELECT i.id, i.task_id, i.attempt_number, i.kind, i.state, i.worker_id, i.reason, i.tries, i.created_at,
       a.id, a.state, a.band, a.finished_at, s.id, s.tries,
       t."index", t.band,
       j.id, j.name, j."user", j.replicas, j.band, j.command, j.group_by, j.route,
       j.cpu_millicores, j.memory_bytes, j.device_type, j.device_variant, j.device_count,
       w.name, w.backend, w.cpu_millicores, w.memory_bytes, w.device_type, w.device_variant, w.device_count
FROM scheduler_dispatchintent i
JOIN scheduler_task t ON t.id = i.task_id
JOIN scheduler_job j ON j.id = t.job_id
LEFT JOIN scheduler_worker w ON w.id = i.worker_id
LEFT JOIN scheduler_attempt a ON a.task_id = i.task_id AND a.number = i.attempt_number
LEFT JOIN scheduler_dispatchintent s ON s.task_id = i.task_id AND s.attempt_number = i.attempt_number AND s.kind = 'start'
"""


def intent_rows(chosen: str, params: Sequence) -> list[IntentRow]:
    """The intents whose ids the query ``chosen`` selects (as its one column, with ``%s``
    parameters, in its own order and limit), in id order, as :class:`IntentRow`: two queries,
    rows kept as values. The ids are fetched first and then looked up by primary key: one
    query joining on the ids' subquery was planned as a hash join over every intent ever
    written (done and delivered ones stay), growing with the outbox's history."""
    with connection.cursor() as cursor:
        cursor.execute(chosen, params)
        ids = [pk for (pk,) in cursor.fetchall()]
        if not ids:
            return []
        match, params = bulk.id_match("i.id", ids)
        cursor.execute(f"{_INTENT_ROW_SQL} WHERE {match} ORDER BY i.id", params)
        rows = [IntentRow(*row) for row in cursor.fetchall()]
    if connection.vendor != "postgresql":
        # SQLite hands datetimes back naive (stored in UTC) and JSON as its text.
        for row in rows:
            row.created_at = aware(row.created_at)
            row.attempt_finished_at = aware(row.attempt_finished_at)
    return rows


def aware(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


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


def start_order(intent: IntentRow) -> StartOrder:
    """The order for a START intent read by :func:`intent_rows`."""
    stamped = intent.attempt_band
    band = BANDS[
        stamped if stamped is not None else (intent.task_band if intent.task_band is not None else intent.job_band)
    ]
    job, index = intent.job_name, intent.task_index
    task_name = f"{job}/{index}"
    worker = intent.worker_name or ""
    return StartOrder(
        ref=AttemptRef(intent.task_id, intent.attempt_number),
        task=task_name,
        job=job,
        user=intent.job_user,
        index=index,
        replicas=intent.job_replicas,
        worker=worker,
        band=band,
        command=tuple(json_value(intent.job_command) or ()),
        environment=task_environment(task_name, job, index, intent.attempt_number, band, worker),
        resources=intent.job_resources(),
        group_by=intent.job_group_by or None,
        created_at=intent.created_at,
    )


def stop_order(intent: IntentRow) -> StopOrder:
    return StopOrder(
        ref=AttemptRef(intent.task_id, intent.attempt_number),
        task=f"{intent.job_name}/{intent.task_index}",
        worker=intent.worker_name,
        reason=intent.reason,
        grace_seconds=float(settings.STOP_GRACE_SECONDS),
    )


def stuck_condition(now: datetime | None = None) -> Q:
    """The intents an operator should look at: FAILED ones, ones retrying after an error, and
    ones still not done ``IRIS_DISPATCH_STUCK_SECONDS`` after they were written (a held preemptor
    start, an agent that does not fetch its mailbox)."""
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.DISPATCH_STUCK_SECONDS)
    return Q(state=FAILED) | Q(state=PENDING, tries__gt=0) | Q(state__in=OPEN_STATES, created_at__lte=cutoff)


def stuck_intents(now: datetime | None = None) -> QuerySet[DispatchIntent]:
    """The :func:`stuck_condition` intents, oldest first. Slice it for a page; ``task__job`` and ``worker``
    are loaded with it."""
    return (
        DispatchIntent.objects.filter(stuck_condition(now))
        .select_related("task__job", "worker")
        # Oldest first by id (ids are handed out as intents are written): the primary key's index
        # walks in that order and stops at the page, where ordering by created_at sorted every
        # match (1.3 s with 30,000 undelivered intents behind a stopped dispatcher).
        .order_by("pk")
    )


def intent_counts(now: datetime | None = None) -> dict[str, int]:
    """``{"pending": n, "delivered": n, "failed": n, "stuck": n}`` for open and failed intents.

    One statement: the stuck ones are all open or failed, so one pass over the intents not done
    counts both. Behind a stopped dispatcher every intent a tick writes stays open (67,000 after
    a dozen ticks at 100,000 x 10,000), and each pass over them took 25-40 ms on the server: the
    scheduler page and status made three (these counts, the stuck count, readiness's stuck count
    again), now one (readiness takes the stuck count from here: ``health.readiness``)."""
    counts = {str(state): 0 for state in (PENDING, DELIVERED, FAILED)}
    counts["stuck"] = 0
    rows = (
        DispatchIntent.objects.exclude(state=DONE)
        .order_by()
        .values_list("state")
        .annotate(n=Count("pk"), stuck=Count("pk", filter=stuck_condition(now)))
        .values_list("state", "n", "stuck")
    )
    for state, n, stuck_n in rows:
        counts[str(state)] = n
        counts["stuck"] += stuck_n
    return counts


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
