"""Workers: the one register / heartbeat / reconcile / lost path.

The agent API (``/api/v1/agent/``) and ``POST /api/v1/workers/`` both register and heartbeat
through :func:`upsert_worker` and :func:`heartbeat`; a heartbeat that lists the attempts the
worker runs also reconciles them. Workers whose heartbeat is older than
``IRIS_WORKER_GRACE_SECONDS`` are declared lost (:func:`check_workers`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from scheduler import backends
from scheduler.foundation.access import require_operator
from scheduler.backends import AttemptRef, AttemptReport, AttemptStatus, StartOrder, StopOrder
from scheduler.foundation.errors import InvalidArgument, NotFound
from scheduler.execution.attempts import apply_report
from scheduler.execution.outbox import close_intents, intent_rows, start_order, stop_order
from scheduler.foundation.inputs import (
    parse_attributes,
    parse_cpu_millicores,
    parse_device,
    parse_memory,
    parse_segment,
    parse_text,
    parse_worker_name,
)
from scheduler.models import Attempt, AuditEntry, DispatchIntent, Worker
from scheduler.store.states import ACTIVE_VALUES

log = logging.getLogger(__name__)


def upsert_worker(
    *,
    name: Any,
    cpu: Any,
    memory: Any,
    device: Any = None,
    attributes: Any = None,
    backend: Any = "local",
    by: str,
) -> tuple[Worker, bool]:
    """Register or re-register a worker by name: its declared capacity, healthy, heartbeat now.
    Draining is left as it was. Returns the worker and whether it is new.

    The one registration path: the caller has checked who may do it (an operator through
    ``POST workers/``, the worker's own agent through the agent API); ``by`` names that path in
    the log.
    """
    worker_name = parse_worker_name(name)
    if cpu in (None, ""):
        raise InvalidArgument("required (cores)", field="cpu")
    if memory in (None, ""):
        raise InvalidArgument("required (bytes or a size like '64Gi')", field="memory")
    values = {"cpu_millicores": parse_cpu_millicores(cpu, allow_zero=True), "memory_bytes": parse_memory(memory)}
    dev = parse_device(device)
    values.update(device_type=dev.type.value, device_variant=dev.variant, device_count=dev.count)
    values["attributes"] = parse_attributes(attributes)
    values["backend"] = parse_backend(backend)
    values["healthy"] = True
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
    log.info("worker %s %s by %s", worker_name, "registered" if created else "re-registered", by)
    return worker, created


def parse_backend(value: Any, name: str = "backend") -> str:
    """A registered backend's name (``local`` when omitted); an unknown one would never run a task."""
    backend = parse_segment(parse_text(value, name, max_length=32) or "local", name)
    known = backends.backend_names()
    if backend not in known:
        raise InvalidArgument(f"unknown backend {backend!r}; expected one of {', '.join(known)}", field=name)
    return backend


def register_worker(
    actor,
    *,
    name: Any,
    cpu: Any = None,
    memory: Any = None,
    device: Any = None,
    attributes: Any = None,
    backend: Any = "local",
) -> tuple[Worker, bool]:
    """Operators (or worker agents signed in as one) register a worker: :func:`upsert_worker`."""
    require_operator(actor, "register workers")
    return upsert_worker(
        name=name,
        cpu=cpu,
        memory=memory,
        device=device,
        attributes=attributes,
        backend=backend,
        by=actor.username,
    )


def register_agent(
    *, name: Any, cpu: Any, memory: Any, device: Any = None, attributes: Any = None, backend: Any = "local"
) -> tuple[Worker, bool]:
    """A worker agent joins (or re-joins) through the agent API, which has checked that the
    caller holds the credential of worker ``name`` (``execution/enrolment.py``): :func:`upsert_worker`."""
    return upsert_worker(
        name=name, cpu=cpu, memory=memory, device=device, attributes=attributes, backend=backend, by="its agent"
    )


def heartbeat(worker_name: str, *, healthy: bool, now: datetime) -> dict[str, Any]:
    """The one heartbeat write: the worker's health and ``last_heartbeat``. Returns its ``pk``
    and ``name``; NOT_FOUND when no worker has that name."""
    worker = Worker.objects.filter(name=worker_name).values("pk", "name").first()
    if worker is None:
        raise NotFound(f"worker {worker_name} is not registered; register it first", field="name")
    Worker.objects.filter(pk=worker["pk"]).update(last_heartbeat=now, healthy=healthy)
    return worker


def heartbeat_worker(actor, name: Any, *, healthy: Any = True) -> Worker:
    """An operator says a worker is alive (``POST workers/{name}:heartbeat``). Without the list
    of attempts the worker runs there is nothing to reconcile; agents heartbeat through
    :func:`agent_heartbeat`, which reconciles."""
    require_operator(actor, "send worker heartbeats")
    worker_name = parse_worker_name(name)
    if healthy is None:
        healthy = True
    if not isinstance(healthy, bool):
        raise InvalidArgument("expected true or false", field="healthy")
    with transaction.atomic():
        heartbeat(worker_name, healthy=healthy, now=timezone.now())
        return Worker.objects.get(name=worker_name)


def drain_worker(actor, name: Any) -> Worker:
    """Stop placing new work on a worker; what runs there keeps running. Idempotent; audited."""
    return _set_draining(actor, name, draining=True)


def undrain_worker(actor, name: Any) -> Worker:
    """Place work on a drained worker again. Idempotent; audited."""
    return _set_draining(actor, name, draining=False)


def _set_draining(actor, name: Any, *, draining: bool) -> Worker:
    verb = "drain" if draining else "undrain"
    require_operator(actor, f"{verb} workers")
    worker_name = parse_worker_name(name)
    with transaction.atomic():
        worker = Worker.objects.select_for_update().filter(name=worker_name).first()
        if worker is None:
            raise NotFound(f"worker {worker_name} is not registered", field="name")
        before = worker.draining
        if before != draining:
            Worker.objects.filter(pk=worker.pk).update(draining=draining)
            worker.draining = draining
        AuditEntry.objects.create(
            actor=actor,
            actor_name=actor.username,
            action=f"worker.{verb}",
            target=f"worker {worker_name}",
            before={"draining": before},
            after={"draining": draining},
            reason="",
        )
    log.info(
        "worker %s %sed by %s",
        worker_name,
        verb,
        actor.username,
        extra={"worker": worker_name, "actor": actor.username, "action": f"worker.{verb}"},
    )
    return worker


# Orders handed to one agent per heartbeat; the rest follow on the next one.
MAILBOX_LIMIT = 100
# A worker's delivered intents, oldest first: on PostgreSQL the (worker, state) index reads them
# (migration 0037 leaves only never-tried intents out of it; tests/execution/test_drain_batches.py
# checks the plan on both databases).
MAILBOX_IDS_SQL = "SELECT id FROM scheduler_dispatchintent WHERE worker_id = %s AND state = %s ORDER BY id LIMIT %s"


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
            apply_report(AttemptReport(AttemptRef(task_pk, number), AttemptStatus.WORKER_LOST, message=reason), now)
    return True


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
    running_keys = {(r.task_pk, r.attempt) for r in running}
    with transaction.atomic():
        worker = heartbeat(worker_name, healthy=healthy, now=now)
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
            reports.append(
                AttemptReport(AttemptRef(*key), AttemptStatus.PREEMPTED, message="not running on its worker")
            )
        elif start == DispatchIntent.State.DONE:
            reports.append(
                AttemptReport(
                    AttemptRef(*key),
                    AttemptStatus.WORKER_LOST,
                    message=f"the agent on {worker_name} no longer runs it (was the agent restarted?)",
                )
            )
    if acknowledged:
        close_intents(acknowledged, now, kinds=(DispatchIntent.Kind.START,))
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
    intents = intent_rows(MAILBOX_IDS_SQL, [worker_pk, DispatchIntent.State.DELIVERED, MAILBOX_LIMIT])
    for intent in intents:
        key = intent.key
        if intent.kind == DispatchIntent.Kind.START:
            if intent.attempt_state in ACTIVE_VALUES and key not in running:
                box.starts.append(start_order(intent))
        elif intent.attempt_finished_at is None and key not in stopping:
            box.stops.append(stop_order(intent))
            stopping.add(key)
    return box
