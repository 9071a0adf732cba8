"""The dispatcher: drains the outbox, delivering each intent to its backend at most once.

One drain at a time (the ``dispatch`` lease); failed deliveries retry with backoff until
``IRIS_DISPATCH_MAX_TRIES``, then the attempt ends. A START goes out only onto room that is free
on its worker counting every attempt that may still have a process there, victims whose stop
is not confirmed included (``worker_room``); otherwise it is held until that room is free: not
due again until an attempt on its worker finishes (``outbox.wake_held_starts``) or
``HELD_RECHECK_SECONDS`` have passed.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import F
from django.utils import timezone

from scheduler import backends
from scheduler.backends import (
    AttemptRef,
    AttemptReport,
    AttemptStatus,
    BackendError,
    Delivery,
    PermanentBackendError,
    admitting_names,
)
from scheduler.execution.attempts import apply_reports
from scheduler.execution.outbox import (
    DELIVERED,
    DONE,
    FAILED,
    HELD_MESSAGE,
    HELD_RECHECK_SECONDS,
    PENDING,
    ROOM_HELD_MESSAGE,
    START,
    STOP,
    IntentRow,
    intent_rows,
    start_order,
    stop_order,
    wake_held_starts,
)
from scheduler.models import Attempt, DispatchIntent
from scheduler.foundation import instruments
from scheduler.core.constraints import request_tuple
from scheduler.store import bulk, lease
from scheduler.store.job_rows import device_from_columns, resources_from_columns
from scheduler.store.states import ACTIVE_VALUES

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


@dataclass
class DrainResult:
    """What one drain did, by outcome."""

    delivered: int = 0  # handed to a backend that will report back (a local agent's mailbox)
    done: int = 0  # took effect, or needed nothing (already finished, superseded)
    finished: int = 0  # stops that found nothing running: the attempt was marked finished
    held: int = 0  # starts waiting for a victim's attempt to finish, or for room on their worker
    retried: int = 0  # failed, will retry after backoff
    failed: int = 0  # gave up after IRIS_DISPATCH_MAX_TRIES (or a permanent error)
    batches: int = 0


def acquire_lease(holder: str, now: datetime) -> bool:
    """Take (or, already holding it, renew) the dispatch lease. True when this holder owns it."""
    return lease.acquire(LEASE_NAME, holder, now, LEASE_SECONDS, reentrant=True)


def release_lease(holder: str) -> None:
    lease.release(LEASE_NAME, holder)


def drain(
    now: datetime | None = None, *, batch_size: int = BATCH_SIZE, max_batches: int = MAX_BATCHES
) -> DrainResult | None:
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
        # A drain that delivered everything is routine (one every few seconds under load): DEBUG.
        # Retries and failures are news.
        log.log(
            logging.INFO if result.retried or result.failed else logging.DEBUG,
            "dispatch: %d delivered, %d done, %d finished, %d held, %d retrying, %d failed",
            result.delivered,
            result.done,
            result.finished,
            result.held,
            result.retried,
            result.failed,
        )
    return result


# The ids of the due intents after an id, in id order: the first ``limit`` never tried (the
# partial index ``intent_fresh`` holds exactly those, in id order) and the first ``limit`` whose
# retry or recheck time has come (the ``(state, next_try_at)`` index), merged. One walk of the
# primary key filtered by state read every intent ever written before the first due one.
DUE_IDS_SQL = """
SELECT id FROM (
    SELECT id FROM scheduler_dispatchintent
    WHERE state = %s AND next_try_at IS NULL AND id > %s ORDER BY id LIMIT %s
) AS fresh
UNION ALL
SELECT id FROM (
    SELECT id FROM scheduler_dispatchintent
    WHERE state = %s AND next_try_at <= %s AND id > %s ORDER BY id LIMIT %s
) AS again
ORDER BY id LIMIT %s"""


def due_intents(now: datetime, after: int, limit: int) -> list[IntentRow]:
    """The first ``limit`` pending intents after id ``after`` never tried or due again at ``now``."""
    return intent_rows(DUE_IDS_SQL, [PENDING, after, limit, PENDING, now, after, limit, limit])


def blocked_placements(batch: list[IntentRow]) -> dict[tuple[int, int], bool]:
    """``(job pk, worker pk)`` pairs whose STARTs must wait: the worker still holds an unfinished
    attempt of a task that a task of that job preempted (one query).

    Matching by job rather than by task covers gangs, whose victims are paired with members in
    no particular order; a victim attempt counts only if it existed when the eviction happened.
    """
    starts = [i for i in batch if i.kind == START and i.worker_id is not None]
    if not starts:
        return {}
    workers = sorted({i.worker_id for i in starts})
    jobs = sorted({i.job_id for i in starts})
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


# (cpu millicores, memory bytes, GPUs, TPU chips): the core's units (``request_tuple``).
Room = list[int]


# The unfinished attempts on some workers whose START left the outbox (or has none), counted by
# worker and job, with the job's resource columns. The task's job and the attempt's START are
# scalar subqueries: one index look-up each per attempt, so the statement costs what the
# workers hold. As joins (with the START as NOT EXISTS) PostgreSQL hashed or merged the whole
# task table and every pending START for every batch: 0.4-1.9 s a batch on bench_api's
# starting backlog, planned on statistics that predate the backlog.
ROOM_SQL = """
SELECT g.worker_id, j.cpu_millicores, j.memory_bytes, j.device_type, j.device_variant, j.device_count, g.n
FROM (
    SELECT a.worker_id AS worker_id, (SELECT t.job_id FROM scheduler_task t WHERE t.id = a.task_id) AS job_id,
           COUNT(*) AS n
    FROM scheduler_attempt a
    WHERE a.finished_at IS NULL AND {workers}
      AND (SELECT u.id FROM scheduler_dispatchintent u
           WHERE u.task_id = a.task_id AND u.attempt_number = a.number AND u.kind = %s AND u.state = %s
             AND u.tries = 0) IS NULL
    GROUP BY 1, 2
) AS g
JOIN scheduler_job j ON j.id = g.job_id"""


def worker_room(batch: list[IntentRow]) -> dict[int, Room]:
    """Per worker with never-sent STARTs in ``batch``: its capacity minus the requests of every
    attempt that may have a process there (one query, :data:`ROOM_SQL`).

    That is every attempt not confirmed finished, except those whose START never left the
    outbox (pending, never tried): delivered and running attempts, and the attempts a tick ended
    (preempted, requeued, killed) whose process has not reported its end. A tick frees a
    victim's room in its own accounting at once and may place more than the preemptor onto it
    in the same pass; the processes only leave when the agent confirms, so until then the
    room stays taken here, for every START, whichever job it belongs to.

    An admitting backend's worker row (the Kubernetes cluster's) has no capacity of its own
    (Kueue admits its pods, and the core never places on it): its STARTs are not checked here.
    """
    admitting = admitting_names()
    workers = {
        i.worker_id: i
        for i in batch
        if i.kind == START and i.worker_id is not None and i.tries == 0 and i.worker_backend not in admitting
    }
    if not workers:
        return {}
    room: dict[int, Room] = {}
    for pk, i in workers.items():
        device = device_from_columns(i.worker_device_type, i.worker_device_variant, i.worker_device_count)
        room[pk] = [i.worker_cpu_millicores, i.worker_memory_bytes, device.gpu_count, device.tpu_count]
    match, params = bulk.id_match("a.worker_id", sorted(workers))
    with connection.cursor() as cursor:
        cursor.execute(ROOM_SQL.format(workers=match), [*params, START, PENDING])
        rows = cursor.fetchall()
    for worker_pk, cpu, mem, device_type, variant, count, n in rows:
        need = request_tuple(resources_from_columns(cpu, mem, device_type, variant, count))
        free = room[worker_pk]
        for i in range(4):
            free[i] -= need[i] * n
    return room


def take_room(room: dict[int, Room], intent: IntentRow) -> bool:
    """Take the room ``intent``'s task needs on its worker, if it is free. True when taken."""
    free = room.get(intent.worker_id)
    if free is None:
        return True
    need = request_tuple(intent.job_resources())
    if any(free[i] < need[i] for i in range(4)):
        return False
    for i in range(4):
        free[i] -= need[i]
    return True


# An outcome row: (intent pk, state, last error (None: keep it), next try at) for
# ``record_outcomes``.
Outcome = tuple[int, str, str | None, datetime | None]


def deliver_batch(batch: list[IntentRow], now: datetime, result: DrainResult) -> None:
    blocked = blocked_placements(batch)
    room = worker_room(batch)
    to_send: list[IntentRow] = []
    done: set[int] = set()
    held: list[Outcome] = []
    never_ran: set[int] = set()  # attempts that never reached a backend: finished now
    closed: set[tuple[int, int]] = set()
    recheck = now + timedelta(seconds=HELD_RECHECK_SECONDS)

    for intent in batch:
        key = intent.key
        if intent.kind == START:
            if intent.attempt_state not in ACTIVE_VALUES:
                # Preempted or cancelled before it was sent: never start it.
                done.add(intent.pk)
                if intent.tries == 0 and intent.attempt_pk is not None:
                    never_ran.add(intent.attempt_pk)
                    closed.add(key)
                continue
            message = None
            if intent.worker_id is not None and (intent.job_id, intent.worker_id) in blocked:
                message = HELD_MESSAGE.format(worker=intent.worker_name)
            elif intent.tries == 0 and not take_room(room, intent):
                # A START tried before may already run: it is counted in the room, not held.
                message = ROOM_HELD_MESSAGE.format(worker=intent.worker_name)
            if message is not None:
                # Looked at again when an attempt on the worker finishes, or at the recheck.
                held.append((intent.pk, PENDING, message, recheck))
                continue
        else:
            if key in closed or intent.attempt_finished_at is not None or intent.attempt_pk is None:
                done.add(intent.pk)
                continue
            if intent.start_pk is not None and intent.start_tries == 0:
                # Its START never reached a backend, so nothing runs: no stop to send.
                done.update((intent.pk, intent.start_pk))
                never_ran.add(intent.attempt_pk)
                closed.add(key)
                continue
        to_send.append(intent)

    if to_send:
        # Count the try before sending: an intent that may have reached a backend is never "unsent".
        DispatchIntent.objects.filter(pk__in=[i.pk for i in to_send]).update(tries=F("tries") + 1, updated_at=now)

    delivered: list[int] = []
    finished: list[IntentRow] = []
    failures: list[tuple[IntentRow, int, str, bool]] = []
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
                done.add(intent.pk)

    done.difference_update(delivered)  # cannot meet (a START sent has an active attempt); delivered wins
    failed, undeliverable = failure_outcomes(failures, now, result)
    record_outcomes(
        [
            *((pk, DELIVERED, "", None) for pk in delivered),
            *((pk, DONE, None, None) for pk in sorted(done)),
            *held,
            *failed,
        ],
        now,
    )
    result.delivered += len(delivered)
    result.done += len(done)
    result.held += len(held)
    if never_ran:
        ending = Attempt.objects.filter(pk__in=never_ran, finished_at__isnull=True).exclude(state__in=ACTIVE_VALUES)
        workers = list(ending.values_list("worker_id", flat=True))
        ending.update(finished_at=now)
        # A preemptor held on a victim that never ran may start now (after the holds above:
        # one held in this batch on such a victim is due again at the next drain).
        wake_held_starts(workers)
    if undeliverable:
        # The task cannot start where it was placed: end the attempt as lost, so it retries elsewhere.
        end_attempts(
            undeliverable,
            AttemptStatus.WORKER_LOST,
            "could not be delivered to its worker; see the dispatch intent's last error",
            now,
        )
    if finished:
        end_attempts(
            finished, AttemptStatus.PREEMPTED, "stopped: the backend has nothing running for this attempt", now
        )
        result.finished += len(finished)


def record_outcomes(outcomes: list[Outcome], now: datetime) -> None:
    """Write what became of a batch's intents in one statement: each row's state, last error
    (None keeps the stored one) and next try time. Only intents still PENDING change: one a
    tick or an agent's report closed meanwhile stays DONE."""
    bulk.update_rows(
        DispatchIntent._meta.db_table,
        [("id", "bigint")],
        [("state", "text"), ("last_error", "text"), ("next_try_at", "timestamptz"), ("updated_at", "timestamptz")],
        [(*outcome, now) for outcome in outcomes],
        condition=f"{DispatchIntent._meta.db_table}.state = '{PENDING}'",
        keep_when_null=("last_error",),
    )


def backend_name(intent: IntentRow) -> str:
    """Where an intent goes: the backend of the worker its attempt was placed on; for an attempt
    with no worker (a backend that admits work itself, such as Kueue), the job's route."""
    if intent.worker_backend is not None:
        return intent.worker_backend
    job_route = intent.job_route
    if job_route and job_route != "workers":
        return job_route
    if intent.kind == START:
        raise PermanentBackendError("the worker this attempt was placed on no longer exists")
    return "local"  # a stop with nowhere to go: the local backend reports it finished


def send(intent: IntentRow) -> Delivery:
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


def failure_outcomes(
    failures: list[tuple[IntentRow, int, str, bool]], now: datetime, result: DrainResult
) -> tuple[list[Outcome], list[IntentRow]]:
    """Each failed delivery's outcome: retried after :func:`retry_delay`, or FAILED after
    ``IRIS_DISPATCH_MAX_TRIES`` tries or a permanent error (logged, counted); and the STARTs
    given up on, whose attempts cannot start where they were placed."""
    outcomes: list[Outcome] = []
    undeliverable: list[IntentRow] = []
    for intent, tries, error, permanent in failures:
        gave_up = permanent or tries >= settings.DISPATCH_MAX_TRIES
        if gave_up:
            outcomes.append((intent.pk, FAILED, error, None))
            if intent.kind == START:
                undeliverable.append(intent)
            result.failed += 1
            log.error(
                "dispatch gave up on %s after %d tries: %s",
                intent,
                tries,
                error,
                extra={
                    "task": f"{intent.job_name}/{intent.task_index}",
                    "attempt": intent.attempt_number,
                    "worker": intent.worker_name,
                },
            )
        else:
            outcomes.append((intent.pk, PENDING, error, now + timedelta(seconds=retry_delay(tries))))
            result.retried += 1
        instruments.record_delivery_failure(intent, gave_up=gave_up)
    return outcomes, undeliverable


def end_attempts(intents: list[IntentRow], status: AttemptStatus, message: str, now: datetime) -> None:
    """End the attempts of ``intents`` with ``status``, as if their backend had reported it."""

    apply_reports(
        [AttemptReport(ref=AttemptRef(i.task_id, i.attempt_number), status=status, message=message) for i in intents],
        now=now,
    )
