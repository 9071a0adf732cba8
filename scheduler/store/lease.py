"""The one lease helper: a named row in ``SchedulerLease`` taken by compare-and-set.

A holder takes a lease when it is free or expired (or, with ``reentrant``, already its own),
renews it only while it still holds it, and releases it only if it still holds it. Each
operation is one UPDATE that proceeds only if exactly one row changed, so two processes never
both believe they hold the same lease. The tick (``tick``) and the dispatcher (``dispatch``)
each hold one, short, renewed while they work. Every operation takes ``now`` (or none), so
expiry is tested with explicit times.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Q

from scheduler.models import SchedulerLease


def acquire(name: str, holder: str, now: datetime, seconds: float, *, reentrant: bool = False) -> bool:
    """Take the lease ``name`` until ``now + seconds`` if it is free or expired (or already this
    holder's, when ``reentrant``). True when this holder now owns it. One statement when the
    lease's row exists (a tick takes its lease every few seconds); the first take makes it."""
    free = Q(expires_at__isnull=True) | Q(expires_at__lte=now)
    if reentrant:
        free |= Q(holder=holder)

    def take() -> bool:
        lease = SchedulerLease.objects.filter(name=name).filter(free)
        return lease.update(holder=holder, expires_at=now + timedelta(seconds=seconds)) == 1

    if take():
        return True
    SchedulerLease.objects.get_or_create(name=name)
    return take()


def renew(name: str, holder: str, now: datetime, seconds: float) -> bool:
    """Extend the lease to ``now + seconds`` if this holder still owns it. False if it lost it."""
    return (
        SchedulerLease.objects.filter(name=name, holder=holder).update(expires_at=now + timedelta(seconds=seconds)) == 1
    )


def release(name: str, holder: str) -> None:
    """Give the lease back, if this holder still owns it."""
    SchedulerLease.objects.filter(name=name, holder=holder).update(holder="", expires_at=None)
