"""Samples the ticks keep (spend and limits, fairness), read over a time window and thinned to
about a fixed number of points, for the console's charts."""

from __future__ import annotations

from datetime import datetime

from django.db.models import F, Subquery

from scheduler.models import TickRecord


def thinned_tick_rows(since: datetime, points: int, *fields: str) -> list[tuple]:
    """``fields`` of the ticks started since ``since``, oldest first, thinned to about ``points``.

    Two queries: how many ticks the window holds, then every k-th of them counted back from the
    newest (so the newest tick is always in), whatever the number of ticks or users.
    """
    window = TickRecord.objects.filter(started_at__gte=since)
    every = max(1, -(-window.count() // max(points, 1)))
    qs = window
    if every > 1:
        newest = Subquery(TickRecord.objects.order_by("-pk").values("pk")[:1])
        qs = qs.annotate(_slot=(newest - F("pk")) % every).filter(_slot=0)
    rows = list(qs.order_by("-pk").values_list(*fields)[: points + 1])
    rows.reverse()
    return rows
