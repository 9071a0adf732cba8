"""How long events are kept: ``IRIS_EVENT_HISTORY_DAYS`` (0: for ever), pruned oldest first by
the hourly ``scheduler.prune_history`` in bounded batches (``scheduler.store.pruning``)."""

from __future__ import annotations

from datetime import datetime, timedelta

from scheduler.models import Event
from scheduler.store.pruning import Pruned, delete_in_batches


def prune_events(now: datetime, keep_days: float, *, batch: int, deadline: float) -> Pruned:
    """Delete the events recorded more than ``keep_days`` before ``now``, oldest first. The
    newest event is always kept, so a reader resuming from it is never told of a gap that is
    only an empty stream. (Staged rows are moved out by every tick; they are not pruned.)"""
    if keep_days <= 0:
        return Pruned(0, True)
    newest = Event.objects.order_by("-id").values_list("id", flat=True).first()
    old = Event.objects.filter(created_at__lt=now - timedelta(days=keep_days)).exclude(id=newest).order_by("id")
    return delete_in_batches(old, batch=batch, deadline=deadline)
