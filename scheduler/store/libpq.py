"""The hot paths' prepared statements sent on libpq directly (PostgreSQL; issue 26, ``web38``).

``scheduler.store.prepared`` sends a submission's statements as one psycopg pipeline per round
trip. psycopg builds a cursor per statement and runs its pipeline through Python generators (a
queue of commands, a queue of results matched to cursors, its prepared-statement manager): a
quarter of a submission's CPU in the web process went to that machinery, about twice what the
same statements cost sent on the connection's libpq object (``pgconn``, psycopg's C wrapper)
in pipeline mode. A :class:`Session` does that for a connection: the same statements, the same
parameters dumped by psycopg's own C ``Transformer`` (so the same types and formats as psycopg
would send), prepared on the server the first time (by name, keyed by the SQL and its parameter
types, as psycopg keys its own), the rows loaded by the same ``Transformer``, one ``Sync`` per
call: one round trip. The transaction is started as psycopg starts it (its ``BEGIN`` when the
connection is not in autocommit and no transaction is open), errors are psycopg's exceptions
built from the server's error (``error_from_result``), raised after the pipeline has been
drained and left, so the connection is as psycopg leaves it after a failed pipeline.

Only with prepared statements enabled (the connection's ``prepare_threshold`` set: settings'
``IRIS_DB_PREPARED_STATEMENTS``); otherwise :func:`session` answers None and the caller uses
psycopg's cursors. The names this module prepares (``iris_<n>``) do not collide with psycopg's
(``_pg3_<n>``), and nothing in the application deallocates prepared statements.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import psycopg
from psycopg import errors, pq
from psycopg.adapt import Transformer
from psycopg.generators import fetch_many, send

_IDLE = pq.TransactionStatus.IDLE
_OK = pq.ConnStatus.OK
_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_FATAL_ERROR = pq.ExecStatus.FATAL_ERROR
_PIPELINE_SYNC = pq.ExecStatus.PIPELINE_SYNC
_PIPELINE_ABORTED = pq.ExecStatus.PIPELINE_ABORTED
_BAD = pq.ConnStatus.BAD

# Two of psycopg's private names (pyproject pins psycopg's minor version). Should a release
# move them, :func:`session` answers None and every statement takes psycopg's cursors as with
# prepared statements off: slower, never wrong.
try:
    from psycopg._queries import _query2pg  # psycopg's own placeholder conversion (cached)

    PRIVATE_NAMES_FOUND = hasattr(psycopg.Connection, "_get_tx_start_command")
except ImportError:  # pragma: no cover - only with a psycopg that moved it
    PRIVATE_NAMES_FOUND = False


def session(conn: psycopg.Connection) -> Session | None:
    """The :class:`Session` of this psycopg connection, or None where statements are not to be
    prepared (``prepare_threshold`` None), the connection is not usable (psycopg's cursor
    then raises its own error) or this psycopg lacks the private names used here."""
    if (
        not PRIVATE_NAMES_FOUND
        or conn.prepare_threshold is None
        or conn.pgconn.status != _OK
        or conn.pgconn.pipeline_status
    ):
        return None
    found = getattr(conn, "_iris_session", None)  # kept on the connection: gone with it
    if found is None or found.pgconn is not conn.pgconn:
        found = conn._iris_session = Session(conn)
    return found


class Session:
    """This module's side of one server session: the statements it has prepared there (by SQL
    and parameter types), and one ``Transformer`` to dump parameters and load rows with."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        self.pgconn = conn.pgconn
        self.names: dict[tuple[bytes, tuple], bytes] = {}
        self.numbers = itertools.count()
        self.tx = Transformer(conn)

    def run(self, statements: Sequence[tuple[str, Sequence, bool]], keep: int | None = None) -> list[list[tuple]]:
        """Send ``statements`` (``(sql, params, prepare)``; not prepared: a command without
        parameters, such as ``COMMIT``) in one round trip; the rows of the first ``keep`` of
        them (all by default), one list each (empty for a statement that returns none). Every
        parameter is dumped before anything is sent: a value psycopg cannot adapt sends nothing."""
        conn, pg, tx = self.conn, self.pgconn, self.tx
        keep = len(statements) if keep is None else keep
        encoding = pg._encoding
        with conn.lock:
            # Per result expected: the name a PREPARE creates (or None), and the statement's index (-1: BEGIN, PREPARE).
            expected: list[tuple[tuple | None, int]] = []
            sends: list[tuple] = []
            if not conn.autocommit and pg.transaction_status == _IDLE:
                sends.append((conn._get_tx_start_command(),))
                expected.append((None, -1))
            sending: dict[tuple[bytes, tuple], bytes] = {}  # names this call prepares
            for index, (sql, params, prepare) in enumerate(statements):
                if not prepare:
                    sends.append((sql.encode(encoding),))
                else:
                    query, formats = _converted(sql, encoding)
                    if len(params) != len(formats):
                        raise psycopg.ProgrammingError(
                            f"the query has {len(formats)} placeholders but {len(params)} parameters were passed"
                        )
                    dumped = tx.dump_sequence(params, formats)
                    types = tuple(tx.types or ())
                    key = (query, types)
                    name = self.names.get(key) or sending.get(key)
                    if name is None:
                        name = sending[key] = f"iris_{next(self.numbers)}".encode()
                        sends.append((name, query, types))
                        expected.append(((key, name), -1))
                    sends.append((name, dumped, list(tx.formats or ())))
                expected.append((None, index))
            pg.enter_pipeline_mode()
            try:
                for message in sends:
                    if len(message) == 1:
                        pg.send_query_params(message[0], None)
                    elif isinstance(message[1], bytes):
                        pg.send_prepare(*message)
                    else:
                        pg.send_query_prepared(*message, 0)
                pg.pipeline_sync()
                conn.wait(send(pg))
                results = []
                while True:
                    got = conn.wait(fetch_many(pg))
                    if not got or got[-1].status == _PIPELINE_SYNC:
                        break
                    results.append(got)
            finally:
                if pg.status != _BAD:
                    pg.exit_pipeline_mode()
        rows: list[list[tuple]] = [[] for _ in range(keep)]
        failed = None
        for got, (prepared, index) in zip(results, expected, strict=True):
            result = got[-1]
            status = result.status
            if status == _FATAL_ERROR:
                failed = failed or errors.error_from_result(result, encoding=encoding)
            elif status == _PIPELINE_ABORTED:
                failed = failed or errors.PipelineAborted("pipeline aborted")
            elif prepared is not None:
                key, name = prepared
                self.names[key] = name
            elif 0 <= index < keep and status == _TUPLES_OK:
                tx.set_pgresult(result)
                rows[index] = tx.load_rows(0, result.ntuples, tuple)
        if failed is not None:
            raise failed
        return rows


# (SQL, encoding) -> the statement with PostgreSQL's placeholders, and its parameters' formats.
_conversions: dict[tuple[str, str], tuple[bytes, list]] = {}


def _converted(sql: str, encoding: str) -> tuple[bytes, list]:
    found = _conversions.get((sql, encoding))
    if found is None:
        query, formats, order, _ = _query2pg(sql.encode(encoding), encoding)
        if order is not None:
            raise psycopg.ProgrammingError("named placeholders are not supported here: use %s")
        if len(_conversions) >= 1000:  # fixed statements only; a bound, not a policy
            _conversions.clear()
        found = _conversions[(sql, encoding)] = (query, formats)
    return found
