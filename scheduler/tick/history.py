"""How long the scheduler's history is kept: tick records, preemption events, shipped logs.

Every tick writes a :class:`~scheduler.models.TickRecord` (its counts and its spend, limit and
fairness samples, read by the console's charts). Records older than ``IRIS_TICK_HISTORY_DAYS``
are deleted by the hourly ``scheduler.prune_history`` task; the newest record is always kept,
and so is any record holding a stored queue and what-if basis (the newest tick's, or the earlier
tick's it names because it reused that tick's decision: ``TickRecord.explanation_tick``).
Preemption events outlive their tick (their ``tick`` link becomes empty) and are kept
``IRIS_PREEMPTION_HISTORY_DAYS``; shipped logs not written to for ``IRIS_SHIPPED_LOG_DAYS`` go too
(``scheduler.execution.logs``), and job and budget events older than ``IRIS_EVENT_HISTORY_DAYS``
(``scheduler.events.retention``).

Rows go in batches of ``IRIS_PRUNE_BATCH_ROWS`` (one short transaction and one ``DELETE`` each,
``scheduler.store.pruning``), and one run stops after ``IRIS_PRUNE_BUDGET_SECONDS``: a backlog
(a year of history when retention is first turned on) is worked off run by run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings

from scheduler.events.retention import prune_events
from scheduler.execution.logs import prune_shipped_logs
from scheduler.models import PreemptionEvent, TickRecord
from scheduler.store.pruning import Pruned, delete_in_batches

BATCH = 2000


def prune_tick_records(now: datetime, keep_days: float, batch: int = BATCH, deadline: float | None = None) -> int:
    """Delete the tick records started more than ``keep_days`` before ``now`` (0: keep all),
    never the newest nor one holding the stored queue (a record that no longer holds it never
    holds it again: only new records are written one). Returns how many were deleted."""
    return _prune_tick_records(now, keep_days, batch, deadline).deleted


def _prune_tick_records(now: datetime, keep_days: float, batch: int, deadline: float | None) -> Pruned:
    if keep_days <= 0:
        return Pruned(0, True)
    cutoff = now - timedelta(days=keep_days)
    newest = TickRecord.objects.order_by("-pk").values_list("pk", "explanation_tick").first() or (None, None)
    old = (
        TickRecord.objects.filter(started_at__lt=cutoff, explanation__isnull=True)
        .exclude(pk__in=[pk for pk in newest if pk is not None])
        .order_by("pk")
    )

    def unlink_events(pks: list) -> None:
        PreemptionEvent.objects.filter(tick_id__in=pks).update(tick=None)

    return delete_in_batches(old, batch=batch, deadline=_forever(deadline), before_delete=unlink_events)


def prune_preemption_events(
    now: datetime, keep_days: float, batch: int = BATCH, deadline: float | None = None
) -> Pruned:
    """Delete the preemption events older than ``keep_days`` before ``now`` (0: keep all), oldest
    first. Every figure computed from them looks back at most 24 hours (fairness, metrics); older
    ones are the preemption history pages' and the job pages' record."""
    if keep_days <= 0:
        return Pruned(0, True)
    old = PreemptionEvent.objects.filter(created_at__lt=now - timedelta(days=keep_days)).order_by("created_at", "pk")
    return delete_in_batches(old, batch=batch, deadline=_forever(deadline))


def _forever(deadline: float | None) -> float:
    return float("inf") if deadline is None else deadline


@dataclass(frozen=True)
class HistoryPruned:
    tick_records: int
    preemption_events: int
    shipped_logs: int
    shipped_log_bytes: int
    finished: bool  # false: the time budget ran out; the next run goes on
    events: int = 0


def prune_history(now: datetime) -> HistoryPruned:
    """One retention run by the settings, within ``IRIS_PRUNE_BUDGET_SECONDS`` for all four."""
    deadline = time.monotonic() + settings.PRUNE_BUDGET_SECONDS
    batch = settings.PRUNE_BATCH_ROWS
    ticks = _prune_tick_records(now, settings.TICK_HISTORY_DAYS, batch, deadline)
    events = prune_preemption_events(now, settings.PREEMPTION_HISTORY_DAYS, batch, deadline)
    files, freed = prune_shipped_logs(now.timestamp(), settings.SHIPPED_LOG_DAYS, deadline=deadline)
    stream = prune_events(now, settings.EVENT_HISTORY_DAYS, batch=batch, deadline=deadline)
    finished = ticks.finished and events.finished and stream.finished and time.monotonic() < deadline
    return HistoryPruned(ticks.deleted, events.deleted, files, freed, finished, events=stream.deleted)
