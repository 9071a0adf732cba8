"""Each cloud backend's health for the console: enabled, healthy, last sync, last error."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Q

from scheduler.models import BackendState, Worker

KUBERNETES = "kubernetes"

TPU = "tpu"


def record_ok(name: str, now: datetime, detail: dict[str, Any], *, enabled: bool = True) -> None:
    state, _ = BackendState.objects.get_or_create(name=name)
    BackendState.objects.filter(name=name).update(
        enabled=enabled,
        healthy=enabled,
        last_sync_at=now,
        last_ok_at=now if enabled else state.last_ok_at,
        consecutive_errors=0,
        detail=detail,
    )


def record_error(name: str, now: datetime, error: str, detail: dict[str, Any] | None = None) -> None:
    state, _ = BackendState.objects.get_or_create(name=name)
    values: dict[str, Any] = {
        "enabled": True,
        "healthy": False,
        "last_sync_at": now,
        "last_error": error[:4000],
        "last_error_at": now,
        "consecutive_errors": state.consecutive_errors + 1,
    }
    if detail is not None:
        values["detail"] = detail
    BackendState.objects.filter(name=name).update(**values)


@dataclass(frozen=True)
class BackendStatus:
    """One backend as the console shows it."""

    name: str
    enabled: bool
    healthy: bool
    last_sync_at: datetime | None
    last_ok_at: datetime | None
    last_error: str
    last_error_at: datetime | None
    consecutive_errors: int
    detail: dict[str, Any]
    workers: int
    # A backend with a sync pass (kubernetes, tpu) has a state row; one whose agents report in
    # (local) has none: its health is its workers' heartbeats, and "last sync" means nothing.
    polled: bool = True
    healthy_workers: int = 0


def backend_status() -> list[BackendStatus]:
    """Every backend with its health, last sync and last error (two queries).

    Lists the cloud backends that have a state row (``kubernetes``, ``tpu``) and every backend
    that registered workers (``local`` is healthy while any of its workers is).
    """
    workers, healthy_workers = {}, {}
    for backend, n, healthy in (
        Worker.objects.order_by()
        .values_list("backend")
        .annotate(n=Count("pk"), healthy=Count("pk", filter=Q(healthy=True)))
    ):
        workers[backend], healthy_workers[backend] = n, healthy
    rows = {s.name: s for s in BackendState.objects.all()}
    result = []
    for name in sorted(set(rows) | set(workers)):
        row = rows.get(name)
        if row is not None:
            result.append(
                BackendStatus(
                    name,
                    row.enabled,
                    row.healthy,
                    row.last_sync_at,
                    row.last_ok_at,
                    row.last_error,
                    row.last_error_at,
                    row.consecutive_errors,
                    row.detail or {},
                    workers.get(name, 0),
                    healthy_workers=healthy_workers.get(name, 0),
                )
            )
        else:
            result.append(
                BackendStatus(
                    name,
                    True,
                    bool(healthy_workers.get(name)),
                    None,
                    None,
                    "",
                    None,
                    0,
                    {},
                    workers.get(name, 0),
                    polled=False,
                    healthy_workers=healthy_workers.get(name, 0),
                )
            )
    return result
