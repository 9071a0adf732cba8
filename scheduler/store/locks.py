"""Named locks held until the current transaction ends.

On PostgreSQL a transaction-scoped advisory lock keyed by the name's 64-bit hash; on SQLite
nothing is needed, since writers take the database lock at BEGIN (``transaction_mode``
IMMEDIATE in the settings), so a check-then-insert inside one transaction is already serial.
"""

from __future__ import annotations

from django.db import connection

from scheduler.store import prepared


def hold_until_commit(name: str) -> None:
    """Block until no other transaction holds ``name``; keep it until this transaction ends."""
    if connection.vendor == "postgresql":
        # A prepared statement: every submission takes one (scheduler.store.prepared).
        prepared.fetch(*lock_statement(name))


def lock_statement(name: str) -> tuple[str, list]:
    """The PostgreSQL statement of :func:`hold_until_commit`, for a caller that sends it with
    the reads that must follow it (``prepared.fetch_one_after``)."""
    return "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [name]
