"""Kubernetes sync (Celery beat, every ``IRIS_KUBERNETES_SYNC_SECONDS``): makes sure the
PriorityClasses and Kueue WorkloadPriorityClasses exist, keeps the worker row that stands for
the cluster (healthy while the API answers, so the tick promotes only then), applies what the
pods say (``KubernetesBackend.poll``), ends attempts whose pods vanished, removes finished
pods and PDBs, and records the outcome in ``BackendState``.

Every API call is outside any transaction, and every database write is a compare-and-set or a
single row's update, so a failed or timed-out call leaves the state the next pass continues from.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import OuterRef, Subquery
from django.utils import timezone

from scheduler import backends
from scheduler.backends.base import AttemptRef, AttemptReport, AttemptStatus, BackendError
from scheduler.foundation.cluster_config import cluster_config
from scheduler.execution.attempts import apply_reports
from scheduler.models import Attempt, DispatchIntent, Worker
from scheduler.provisioning.health import KUBERNETES, record_error, record_ok

log = logging.getLogger(__name__)

# A pod created this recently may not be in our view yet: not declared vanished before then.
VANISHED_GRACE_SECONDS = 60


@dataclass
class KubernetesSync:
    enabled: bool = True
    applied: int = 0
    vanished: int = 0
    collected: int = 0
    pods: int = 0
    error: str = ""
    setup: dict[str, list[str]] = field(default_factory=dict)


def ensure_kubernetes_worker(config: Any) -> Worker:
    """The worker row standing for the cluster: tasks promoted to pods are ASSIGNED to it.
    Created unhealthy; a pass that reached the API marks it healthy."""
    worker, _ = Worker.objects.get_or_create(
        name=config.worker_name,
        defaults={
            "backend": KUBERNETES,
            "cpu_millicores": 0,
            "memory_bytes": 0,
            "healthy": False,
            "attributes": {"namespace": config.namespace, "queue": config.queue_name},
        },
    )
    if worker.backend != KUBERNETES:
        raise BackendError(
            f"worker {config.worker_name!r} belongs to backend {worker.backend!r}; set kubernetes.worker_name"
        )
    return worker


def sync_kubernetes(now: datetime | None = None, *, watch_seconds: int | None = None) -> KubernetesSync:
    """One pass over the Kubernetes backend (see the module docstring). Never raises on API errors."""
    now = now or timezone.now()
    config = cluster_config().kubernetes
    if not config.enabled:
        record_ok(KUBERNETES, now, {"reason": "disabled in the cluster config"}, enabled=False)
        Worker.objects.filter(backend=KUBERNETES, healthy=True).update(healthy=False)
        return KubernetesSync(enabled=False)
    backend = backends.get_backend(KUBERNETES)
    outcome = KubernetesSync()
    try:
        setup = backend.ensure_setup()
        if setup.created or setup.updated:
            outcome.setup = {"created": setup.created, "updated": setup.updated}
        worker = ensure_kubernetes_worker(config)
        polled_at = timezone.now()
        kwargs = {} if watch_seconds is None else {"watch_seconds": watch_seconds}
        poll = backend.poll(now, **kwargs)
        outcome.pods = len(poll.live)
        outcome.applied = apply_reports(poll.reports, now).applied
        outcome.vanished = end_vanished_attempts(worker.pk, poll.live, polled_at, now)
        outcome.collected = backend.collect(poll.finished)
        # The API answered: the tick may promote onto the cluster again.
        Worker.objects.filter(pk=worker.pk, healthy=False).update(healthy=True)
    except BackendError as exc:
        outcome.error = str(exc)
        log.warning("kubernetes sync failed: %s", exc)
        record_error(KUBERNETES, now, outcome.error)
        Worker.objects.filter(name=config.worker_name, backend=KUBERNETES).update(healthy=False)
        return outcome
    record_ok(
        KUBERNETES,
        now,
        {
            "namespace": config.namespace,
            "queue": config.queue_name,
            "pods": outcome.pods,
            "reports_applied": outcome.applied,
            "vanished": outcome.vanished,
            "setup": outcome.setup or "unchanged",
        },
    )
    return outcome


def end_vanished_attempts(worker_pk: int, live: set[AttemptRef], polled_at: datetime, now: datetime) -> int:
    """Unfinished attempts whose pod was created (START done) well before the poll but is not
    there: they ended without our seeing how (deleted while no process was watching).

    One query over the cluster's unfinished attempts (as many as it has pods), then one report
    per vanished attempt (rare)."""
    cutoff = polled_at - timedelta(seconds=VANISHED_GRACE_SECONDS)
    start = DispatchIntent.objects.filter(
        task_id=OuterRef("task_id"), attempt_number=OuterRef("number"), kind=DispatchIntent.Kind.START
    )
    rows = (
        Attempt.objects.filter(worker_id=worker_pk, finished_at__isnull=True)
        .annotate(start_state=Subquery(start.values("state")[:1]), start_at=Subquery(start.values("updated_at")[:1]))
        .values_list("task_id", "number", "start_state", "start_at")
    )
    vanished = [
        AttemptRef(task_pk, number)
        for task_pk, number, state, at in rows
        if state == DispatchIntent.State.DONE
        and at is not None
        and at < cutoff
        and AttemptRef(task_pk, number) not in live
    ]
    if not vanished:
        return 0
    return apply_reports(
        [AttemptReport(ref, AttemptStatus.PREEMPTED, message="pod disappeared") for ref in vanished], now
    ).applied
