"""Samples the ticks keep (spend and limits, fairness), read over a time window and thinned to
about a fixed number of points, for the console's charts."""

from __future__ import annotations

from datetime import datetime

from django.db.models import F, Q, QuerySet, Subquery

from scheduler.models import TickRecord


def thinned_ticks(since: datetime, points: int) -> QuerySet[TickRecord]:
    """The ticks started since ``since``, thinned to about ``points``: every k-th by pk, and the
    newest. The slots are fixed by pk (``pk % k == 0``), not counted back from the newest, so a
    page that polls at each tick reads the same ticks again (only the newest is new) and what it
    derived from them can be kept. One query (the window's count), unevaluated."""
    window = TickRecord.objects.filter(started_at__gte=since)
    every = max(1, -(-window.count() // max(points, 1)))
    if every == 1:
        return window
    newest = Subquery(TickRecord.objects.order_by("-pk").values("pk")[:1])
    return window.annotate(_slot=F("pk") % every).filter(Q(_slot=0) | Q(pk=newest))


def thinned_tick_rows(since: datetime, points: int, *fields: str) -> list[tuple]:
    """``fields`` of :func:`thinned_ticks`, oldest first, at most ``points + 1`` (the newest
    kept). Two queries, whatever the number of ticks or users."""
    rows = list(thinned_ticks(since, points).order_by("-pk").values_list(*fields)[: points + 1])
    rows.reverse()
    return rows
