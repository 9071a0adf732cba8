"""Fixed statements of the hot paths, sent as prepared statements on PostgreSQL.

Django's psycopg backend binds parameters on the client (every statement is sent as text with
its values inlined), so PostgreSQL parses and plans each one again, and the ORM compiles each
query again in Python before that. The few statements every ``POST jobs/`` and every token call
run (the token lookup, the submission's rule reads and its write) are written out once here
as SQL and executed with psycopg's server-side binding and ``prepare=True``: the first run on a
connection prepares the statement, later runs send only its name and the values. psycopg honours
``prepare=True`` only on a connection whose ``prepare_threshold`` is a number; Django's default
is None (nothing prepared), so the settings set one (``IRIS_DB_PREPARED_STATEMENTS``, on by
default). Until issue 26's second pass it was unset, and these statements were sent unprepared.

Everything else about the connection is Django's: the statement runs on Django's own psycopg
connection, inside whatever transaction Django has open, its errors are Django's database
errors (``wrap_database_errors``: a unique violation is ``django.db.IntegrityError``), and it
is logged in ``connection.queries`` when queries are logged (tests count statements).

Prepared statements live on one server session: behind a transaction-pooling PgBouncer (older
than 1.21) they break; docs/operations.md says so. On SQLite (in process, no parse/plan round
trip to save) the statement runs through Django's cursor as any other.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field

from django.db import DEFAULT_DB_ALIAS, connection, connections

from scheduler.store import libpq


def fetch(sql: str, params: Sequence = ()) -> list[tuple]:
    """Run ``sql`` (``%s`` placeholders) with ``params``; its rows (none for a statement that
    returns none)."""
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else []
    db = connections[DEFAULT_DB_ALIAS]
    db.ensure_connection()
    started = time.monotonic()
    session = libpq.session(db.connection)
    if session is not None:
        with db.wrap_database_errors:
            (rows,) = session.run([(sql, params, True)])
    else:
        import psycopg
        from psycopg.pq import ExecStatus

        with db.wrap_database_errors, psycopg.Cursor(db.connection) as cursor:
            cursor.execute(sql, params, prepare=True)
            # Whether rows came back, from the result's status: ``cursor.description`` would build a
            # column object per column first (a twentieth of a submission's web CPU, issue 26).
            result = cursor.pgresult
            rows = cursor.fetchall() if result is not None and result.status == ExecStatus.TUPLES_OK else []
    if db.queries_logged:
        db.queries_log.append({"sql": f"{sql} -- prepared", "time": f"{time.monotonic() - started:.3f}"})
    return rows


@dataclass
class Ahead:
    """Statements for :func:`fetch_one_after` to run first, in order, whose rows it keeps
    (``rows``: one list per statement, filled once they have run). A submission's token check
    rides ahead of its lock and rule reads this way (issue 26, ``submit37``)."""

    statements: Sequence[tuple[str, Sequence]]
    rows: list[list[tuple]] = field(default_factory=list)


def fetch_one_after(first: tuple[str, Sequence] | Ahead, sql: str, params: Sequence = ()) -> tuple | None:
    """Run the statement ``first`` (``(sql, params)``, its rows unread; or the statements of an
    :class:`Ahead`, their rows kept in it), then ``sql``; the first row of ``sql``. On PostgreSQL
    all go in one round trip (a psycopg pipeline), with the transaction's BEGIN when they are its
    first statements: three round trips become one. The server still runs them one after the
    other, and under READ COMMITTED ``sql`` takes its snapshot only once ``first`` has finished,
    so ``first`` may be a lock that ``sql``'s reads must follow (a submission's: issue 26)."""
    ahead = first if isinstance(first, Ahead) else None
    statements = list(ahead.statements) if ahead is not None else [first]
    if connection.vendor != "postgresql":
        rows = [fetch(*statement) for statement in statements]
        if ahead is not None:
            ahead.rows = rows
        return fetch_one(sql, params)
    # Nothing is read inside the pipeline: leaving it sends the statements and one Sync and
    # processes every result, so the round trip is one.
    return _pipelined(
        [*((text, values, True) for text, values in statements), (sql, params, True)],
        len(statements),
        [f"{text} -- prepared, pipelined" for text in (*(text for text, _ in statements), sql)],
        ahead,
    )


def fetch_one_and_commit(sql: str, params: Sequence = ()) -> tuple | None:
    """``fetch_one``, and when this runs in Django's outermost ``atomic`` block on PostgreSQL, the
    transaction's ``COMMIT`` sent with ``sql`` in one round trip (a psycopg pipeline; issue 26):
    Django's commit on leaving the block then finds the transaction ended and sends nothing
    (psycopg commits only a connection that is in a transaction), and runs its ``on_commit``
    hooks as always. The caller's block must run no statement after this one: it would run in a
    transaction of its own. If ``sql`` fails, PostgreSQL skips the ``COMMIT`` (a pipeline stops
    at its first error), the error is raised and the block rolls back, as before. Inside a nested
    block (a caller's own transaction, a test's) nothing is committed here."""
    db = connections[DEFAULT_DB_ALIAS]
    if db.vendor != "postgresql" or not db.in_atomic_block or len(db.atomic_blocks) != 1:
        return fetch_one(sql, params)
    # Django logs the COMMIT itself (when the block ends), as with any transaction.
    return _pipelined([(sql, params, True), ("COMMIT", (), False)], 0, [f"{sql} -- prepared, COMMIT pipelined"])


def _pipelined(
    statements: Sequence[tuple[str, Sequence, bool]], answer: int, logged: list[str], ahead: Ahead | None = None
) -> tuple | None:
    """Send ``statements`` (``(sql, params, prepare)``) as one psycopg pipeline, one round trip;
    the first row of statement ``answer``, and ``logged`` in Django's query log. With ``ahead``,
    the rows of the statements before ``answer`` are kept in it."""
    db = connections[DEFAULT_DB_ALIAS]  # ``connection``'s object, looked up once (issue 26, submit37)
    db.ensure_connection()
    started = time.monotonic()
    pg = db.connection
    session = libpq.session(pg)
    if session is not None:
        with db.wrap_database_errors:
            rows = session.run(statements, keep=answer + 1)
        row = rows[answer][0] if rows[answer] else None
        if ahead is not None:
            ahead.rows = rows[:answer]
    else:
        import psycopg

        with db.wrap_database_errors, ExitStack() as cursors:
            opened = [cursors.enter_context(psycopg.Cursor(pg)) for _ in statements]
            with pg.pipeline():
                for cursor, (sql, params, prepare) in zip(opened, statements, strict=True):
                    cursor.execute(sql, params, prepare=prepare)
            row = opened[answer].fetchone()
            if ahead is not None:
                ahead.rows = [cursor.fetchall() for cursor in opened[:answer]]
    if db.queries_logged:
        took = f"{time.monotonic() - started:.3f}"
        db.queries_log.extend({"sql": text, "time": took} for text in logged)
    return row


def fetch_one(sql: str, params: Sequence = ()) -> tuple | None:
    rows = fetch(sql, params)
    return rows[0] if rows else None
