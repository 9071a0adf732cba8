"""Submission times: strictly increasing, and per-user submissions serialised, without one global
lock held until each submission commits.

Submission time orders the queue (first in, first out within a band), so no two jobs share one
and a job is never stamped before one already written. On PostgreSQL the submission clock
(``scheduler_next_submission_ms``, migration 0011) hands out times under an advisory lock held
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

import zlib

from django.db import connection
from django.db.models import Max

from scheduler.models import Job

# The submission clock's advisory lock (the function in migration 0011 uses the same number).
CLOCK_LOCK_KEY = 0x1215_0001
# The first key of the per-user locks (the second is a CRC-32 of the budget identity).
USER_LOCK_CLASS = 0x1215


def next_submission_ms(now_ms: int) -> int:
    """The next submission time: at least ``now_ms``, after every time handed out before."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT scheduler_next_submission_ms(%s)", [now_ms])
            return cursor.fetchone()[0]
    last = Job.objects.aggregate(last=Max("submitted_at_ms"))["last"]
    return now_ms if last is None else max(now_ms, last + 1)


def lock_user_submissions(user: str) -> None:
    """Serialise the submissions of one budget identity until this transaction ends, so its
    unfinished-task cap is counted and written by one submission at a time. Other users'
    submissions do not wait. (SQLite: the transaction already holds the database's write lock.)
    Two users whose names share a CRC-32 share a lock: they wait for each other, nothing worse."""
    if connection.vendor == "postgresql":
        key = zlib.crc32(user.encode()) - (1 << 31)  # a signed 32-bit int, as the function takes
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [USER_LOCK_CLASS, key])
