"""Read-side queries for the console and the API. Each function runs a fixed number of queries."""

from __future__ import annotations

from django.db.models import Count

from scheduler.models import Task, TickRecord


def recent_ticks(limit: int = 20) -> list[TickRecord]:
    return list(TickRecord.objects.defer("explanation", "spend", "limits").order_by("-started_at")[:limit])


def task_counts_by_state() -> dict[str, int]:
    return dict(Task.objects.values_list("state").annotate(n=Count("id")).values_list("state", "n"))
