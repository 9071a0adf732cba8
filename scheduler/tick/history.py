"""How long the ticks' records are kept.

Every tick writes a :class:`~scheduler.models.TickRecord` (its counts and its spend, limit and
fairness samples, read by the console's charts). Records older than ``IRIS_TICK_HISTORY_DAYS``
are deleted by the hourly ``scheduler.prune_history`` task, in batches so no transaction holds
many rows; the newest record is always kept, and so is any record holding a stored queue and
what-if basis (the newest tick's, or the earlier tick's it names because it reused that tick's
decision: ``TickRecord.explanation_tick``). Preemption
events outlive their tick: their ``tick`` link becomes empty.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction

from scheduler.models import PreemptionEvent, TickRecord

BATCH = 2000


def prune_tick_records(now: datetime, keep_days: float, batch: int = BATCH) -> int:
    """Delete the tick records started more than ``keep_days`` before ``now`` (0: keep all),
    never the newest nor one holding the stored queue (a record that no longer holds it never
    holds it again: only new records are written one). Returns how many were deleted."""
    if keep_days <= 0:
        return 0
    cutoff = now - timedelta(days=keep_days)
    newest = TickRecord.objects.order_by("-pk").values_list("pk", "explanation_tick").first() or (None, None)
    old = (
        TickRecord.objects.filter(started_at__lt=cutoff, explanation__isnull=True)
        .exclude(pk__in=[pk for pk in newest if pk is not None])
        .order_by("pk")
    )
    deleted = 0
    while pks := list(old.values_list("pk", flat=True)[:batch]):
        with transaction.atomic():
            PreemptionEvent.objects.filter(tick_id__in=pks).update(tick=None)
            TickRecord.objects.filter(pk__in=pks).delete()
        deleted += len(pks)
    return deleted
