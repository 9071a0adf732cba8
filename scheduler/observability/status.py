"""The scheduler's state in one answer, like Slurm's ``sdiag``: the newest ticks with their
durations and counts, who holds the tick and dispatch leases and for how long, the outbox by
state, workers by health, pending tasks per band, and the readiness checks.

Served by ``GET /api/v1/scheduler/status`` (operators) and printed by ``iris scheduler status``.
A fixed number of queries whatever the cluster's size.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count
from django.utils import timezone

from scheduler.execution import dispatcher
from scheduler.execution.outbox import intent_counts
from scheduler.board.read import queue_index
from scheduler.tick.queries import recent_ticks
from scheduler.core.bands import Band
from scheduler.models import SchedulerLease, Worker
from scheduler.observability.health import readiness

TICKS_SHOWN = 10
# How long each lease is taken for, so its age can be told from its expiry (both renew it).
LEASE_SECONDS = {"tick": lambda: settings.TICK_LEASE_SECONDS, "dispatch": lambda: dispatcher.LEASE_SECONDS}


def lease_state(lease: SchedulerLease, now: datetime) -> dict:
    """A lease's holder and how long ago it was taken or last renewed (None when free)."""
    held = bool(lease.holder) and lease.expires_at is not None and lease.expires_at > now
    seconds = LEASE_SECONDS.get(lease.name, lambda: 0)()
    since = lease.expires_at - timedelta(seconds=seconds) if held else None
    return {
        "name": lease.name,
        "holder": lease.holder if held else None,
        "renewed_seconds_ago": round((now - since).total_seconds(), 3) if since else None,
        "expires_at": lease.expires_at.isoformat() if held else None,
    }


def scheduler_status(now: datetime | None = None) -> dict:
    now = now or timezone.now()
    index = queue_index()  # first: the ticks listed beside its counts go up to its tick
    ticks = recent_ticks(TICKS_SHOWN, up_to=index.tick_pk)
    newest = ticks[0].started_at if ticks else None
    workers: Counter = Counter()
    for backend, healthy, draining, n in (
        Worker.objects.order_by().values_list("backend", "healthy", "draining").annotate(n=Count("id"))
    ):
        workers[(backend, "unhealthy" if not healthy else "draining" if draining else "healthy")] += n
    counts = index.band_counts()
    outbox = intent_counts(now)
    return {
        "now": now.isoformat(),
        "tick_seconds": settings.TICK_SECONDS,
        "last_tick_age_seconds": round((now - newest).total_seconds(), 3) if newest else None,
        "ticks": [
            {
                "id": t.pk,
                "started_at": t.started_at.isoformat(),
                "duration_ms": round(t.duration_ms, 1),
                "decide_ms": round(t.decide_ms, 1),
                "pending": t.pending,
                "left_pending": t.left_pending,
                "assigned": t.assigned,
                "preempted": t.preempted,
                "expired": t.expired,
            }
            for t in ticks
        ],
        "leases": [lease_state(lease, now) for lease in SchedulerLease.objects.order_by("name")],
        "outbox": outbox,
        "workers": [
            {"backend": backend, "health": health, "count": n} for (backend, health), n in sorted(workers.items())
        ],
        "pending": {band.wire: counts.get(int(band), 0) for band in Band},
        "pending_at_tick": index.tick_pk,
        "readiness": readiness(stuck=outbox["stuck"]).as_json(),
    }
