"""How long deliveries are kept: as long as events (``IRIS_EVENT_HISTORY_DAYS``; 0: for ever),
deleted oldest first by the hourly ``scheduler.prune_notifications`` in bounded batches. Only
finished ones (``sent``, ``failed``) go; one still being tried is kept however old."""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from django.conf import settings

from scheduler.notification_models import NotificationDelivery
from scheduler.store.pruning import Pruned, delete_in_batches

DONE = (NotificationDelivery.State.SENT, NotificationDelivery.State.FAILED)


def prune_deliveries(now: datetime, keep_days: float | None = None, *, deadline: float | None = None) -> Pruned:
    keep_days = settings.EVENT_HISTORY_DAYS if keep_days is None else keep_days
    if keep_days <= 0:
        return Pruned(0, True)
    old = NotificationDelivery.objects.filter(state__in=DONE, created_at__lt=now - timedelta(days=keep_days)).order_by(
        "id"
    )
    if deadline is None:
        deadline = time.monotonic() + settings.PRUNE_BUDGET_SECONDS
    return delete_in_batches(old, batch=settings.PRUNE_BATCH_ROWS, deadline=deadline)
