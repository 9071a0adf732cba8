"""Deleting old rows in bounded batches, within a time budget.

Retention (``scheduler.tick.history``) deletes rows by the thousand from tables that grow by
every tick or preemption. One unbounded ``DELETE`` would hold its locks, and on PostgreSQL its
WAL, for as long as it takes, and SQLite's single writer would wait behind it: each batch here is
its own short transaction of at most ``batch`` rows in one ``DELETE`` statement, and the loop
stops at its deadline, leaving the rest to the next run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import QuerySet


@dataclass(frozen=True)
class Pruned:
    """How many rows a pruning deleted, and whether it got through all it was asked to
    (false: the time budget ran out first; the next run goes on)."""

    deleted: int
    finished: bool


def delete_in_batches(
    candidates: QuerySet,
    *,
    batch: int,
    deadline: float,
    before_delete: Callable[[list], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Pruned:
    """Delete the rows of ``candidates`` (a queryset ordered by the order to delete them in,
    re-read each round) ``batch`` at a time until none is left or ``clock()`` reaches
    ``deadline`` (a ``time.monotonic`` value; checked before each batch, so at most one batch
    runs past it). Each batch reads its primary keys, runs ``before_delete(pks)`` (e.g. to unlink
    rows that point at them) and deletes them in one transaction."""
    if batch < 1:
        raise ValueError("batch must be at least 1")
    model = candidates.model
    deleted = 0
    while clock() < deadline:
        pks = list(candidates.values_list("pk", flat=True)[:batch])
        if not pks:
            return Pruned(deleted, True)
        with transaction.atomic():
            if before_delete is not None:
                before_delete(pks)
            model.objects.filter(pk__in=pks).delete()
        deleted += len(pks)
    return Pruned(deleted, False)
