"""How long the ticks' records are kept.

Every tick writes a :class:`~scheduler.models.TickRecord` (its counts and its spend, limit and
fairness samples, read by the console's charts). Records older than ``IRIS_TICK_HISTORY_DAYS``
are deleted by the hourly ``scheduler.prune_history`` task, in batches so no transaction holds
many rows; the newest record (the stored queue and what-if basis) is always kept. Preemption
events outlive their tick: their ``tick`` link becomes empty.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction

from scheduler.models import PreemptionEvent, TickRecord

BATCH = 2000


def prune_tick_records(now: datetime, keep_days: float, batch: int = BATCH) -> int:
    """Delete the tick records started more than ``keep_days`` before ``now`` (0: keep all),
    never the newest. Returns how many were deleted."""
    if keep_days <= 0:
        return 0
    cutoff = now - timedelta(days=keep_days)
    newest = TickRecord.objects.order_by("-pk").values_list("pk", flat=True).first()
    old = TickRecord.objects.filter(started_at__lt=cutoff).exclude(pk=newest).order_by("pk")
    deleted = 0
    while pks := list(old.values_list("pk", flat=True)[:batch]):
        with transaction.atomic():
            PreemptionEvent.objects.filter(tick_id__in=pks).update(tick=None)
            TickRecord.objects.filter(pk__in=pks).delete()
        deleted += len(pks)
    return deleted
