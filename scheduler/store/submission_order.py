"""Submission times: strictly increasing, without one global lock held until each submission
commits (per-user submissions are serialised by a named lock, ``store.locks``).

Submission time orders the queue (first in, first out within a band), so no two jobs share one
and a job is never stamped before one already written. On PostgreSQL the submission clock
(``scheduler_next_submission_ms``, migration 0015) hands out times under an advisory lock held
only while it runs (microseconds): a sequence remembers the newest time handed out, even to a
submission that has not committed yet, and the newest committed job's time covers rows written
without it (restores, tests). Commits therefore no longer queue behind one another, and
PostgreSQL flushes concurrent commits together. A submission may commit after a later-stamped
one; a tick that runs in between sees the later one first and the earlier one at its next tick,
in its place by time, as if it had arrived a moment later.

SQLite takes its write lock at BEGIN (``transaction_mode: IMMEDIATE``), so a submission there is
alone from its first statement to its commit and reads the newest time itself.
"""

from __future__ import annotations

from django.db import connection
from django.db.models import Max

from scheduler.models import Job

# The submission clock's advisory lock (the function in migration 0015 uses the same number).
CLOCK_LOCK_KEY = 0x1215_0001


def next_submission_ms(now_ms: int) -> int:
    """The next submission time: at least ``now_ms``, after every time handed out before."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT scheduler_next_submission_ms(%s)", [now_ms])
            return cursor.fetchone()[0]
    last = Job.objects.aggregate(last=Max("submitted_at_ms"))["last"]
    return now_ms if last is None else max(now_ms, last + 1)


def next_submission_times(now_ms: int, count: int) -> int:
    """The first of ``count`` consecutive submission times (``first .. first + count - 1``), each
    as :func:`next_submission_ms` would hand it out: one batch's, reserved in one call."""
    if count < 1:
        raise ValueError("count must be at least 1")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT scheduler_next_submission_ms(%s, %s)", [now_ms, count])
            return cursor.fetchone()[0]
    return next_submission_ms(now_ms)
