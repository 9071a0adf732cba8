"""Giving committed events their place in the stream, so a reader resuming from id N never misses
an event that becomes visible later with an id below N.

Ids taken from a sequence inside the writers' transactions would not do: on PostgreSQL a
transaction that took id 5 may commit after one that took id 6, and a reader that saw 6 and
resumed from it would never see 5. A lock held by every writer until commit would order them,
but would serialise every submission behind every other's commit again (issue 14 removed that).
So writers stage their events (:mod:`scheduler.events.record`) and :func:`sequence_events` moves
the staged rows that have committed to :class:`~scheduler.models.Event` under one advisory lock
held until its own commit: each run sees every row committed before it started, and hands out
ids above every id a run before it committed. An event's id is therefore its place in the order
events became readable, and the stream has no holes a later commit could fill. Within one run,
rows keep their staging order (one transaction's events stay in the order it wrote them, and
an event caused by an earlier commit, e.g. a task's end after its start, was staged later).

Who runs it: the Celery task ``scheduler.sequence_events``, which the tick asks for after each
commit (:func:`request_sequencing`; off the tick's path: a burst tick's tens of thousands of
events take the mover a moment); every read of the stream (``GET events/``, each short
sleep of a long poll), so an event is readable at most one reader's poll after its commit. A run
that finds the lock taken does nothing: the holder moves the rows. SQLite's writers serialise
at BEGIN, so there the same statements need no lock.

Who is told: on PostgreSQL a run that moved events sends one ``NOTIFY`` on :data:`CHANNEL` in
its own transaction (delivered at its commit, so never before the events are readable; one per
move, not one per event). Each web process's waker (:mod:`scheduler.events.wake`) listens and
wakes its long polls.
"""

from __future__ import annotations

import logging

from django.db import connection, transaction

from scheduler.foundation.enqueue import enqueue
from scheduler.models import Event, StagedEvent

log = logging.getLogger(__name__)

# Rows moved per statement; a larger backlog (a burst tick's starts) takes several.
BATCH = 20_000
# The advisory lock's key (a 64-bit constant: ``hashtextextended('iris:events:sequence', 0)``
# would do as well; a literal keeps it visible in pg_locks).
LOCK_KEY = 7_310_527_001
# The notification channel of a move (PostgreSQL scopes channels to the database).
CHANNEL = "iris_events"

_FIELDS = 'kind, created_at, "user", job, task_index, attempt, tick, data'
# The staged ``data`` is JSON text; the stream's is ``jsonb`` (PostgreSQL).
_MOVED = 'kind, created_at, "user", job, task_index, attempt, tick, data::jsonb'


def sequence_events(*, wait: bool = False, batch: int = BATCH) -> int:
    """Move every committed staged event into the stream, in order. Returns how many moved
    (0 as well when another run holds the lock and ``wait`` is false). Runs its own
    transactions: never call it inside another one (its rows would not be committed)."""
    moved = 0
    while True:
        with transaction.atomic():
            if connection.vendor == "postgresql":
                n = _move_postgresql(wait, batch)
            else:
                n = _move_sqlite(batch)
        if n is None:
            return moved
        moved += n
        if n < batch:
            return moved


def _move_postgresql(wait: bool, batch: int) -> int | None:
    staged, events = StagedEvent._meta.db_table, Event._meta.db_table
    with connection.cursor() as cursor:
        if wait:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])
        else:
            cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [LOCK_KEY])
            if not cursor.fetchone()[0]:
                return None
        # The staging table is a queue: a few live rows, the dead ones of earlier moves at the
        # head until vacuum reclaims them. Its statistics (none on a restored database, or stale
        # while autovacuum is behind) cannot say so, and the planner scanned the whole table,
        # dead rows and all, on every move (15-25 ms each on the benchmark's database, moves
        # every half second while watchers wait); by its key a move reads only its rows (1 ms;
        # a burst of 20,000 as fast as by a scan: 0.90 against 0.87 s).
        cursor.execute("SET LOCAL enable_seqscan = off")
        # One statement, one snapshot (taken after the lock): the rows deleted are exactly the
        # rows inserted, in staging order, with ids from the event table's identity.
        cursor.execute(
            f"WITH moved AS (DELETE FROM {staged} WHERE id IN "
            f"(SELECT id FROM {staged} ORDER BY id LIMIT %s) RETURNING id, {_FIELDS}) "
            f"INSERT INTO {events} ({_FIELDS}) SELECT {_MOVED} FROM moved ORDER BY id",
            [batch],
        )
        moved = cursor.rowcount
        if moved:
            cursor.execute(f"NOTIFY {CHANNEL}")
        return moved


def _move_sqlite(batch: int) -> int:
    staged, events = StagedEvent._meta.db_table, Event._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id FROM {staged} ORDER BY id LIMIT %s", [batch])
        ids = [row[0] for row in cursor.fetchall()]
        if not ids:
            return 0
        # The write lock is held from BEGIN: nothing commits between these statements.
        cursor.execute(
            f"INSERT INTO {events} ({_FIELDS}) SELECT {_FIELDS} FROM {staged} WHERE id <= %s ORDER BY id", [ids[-1]]
        )
        cursor.execute(f"DELETE FROM {staged} WHERE id <= %s", [ids[-1]])
        return len(ids)


def request_sequencing() -> None:
    """Ask Celery to move the committed events now (after commit; never raises: readers move
    them anyway, and so does the next tick's request)."""
    enqueue(
        "scheduler.sequence_events",
        expires=60.0,
        logger=log,
        failure="could not enqueue the event mover; the next read of the stream moves the events",
    )
