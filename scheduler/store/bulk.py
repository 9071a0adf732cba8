"""Set-based writes: one SQL statement for any number of rows.

On PostgreSQL the rows travel as one JSON array parameter (serialised by the C json encoder, far
faster than adapting a Python list per column) and the statement reads them back with
``json_array_elements``, so ten thousand updates cost one round trip and one plan. SQLite runs
in process, where ``executemany`` of a prepared statement is already cheap.

Column types are PostgreSQL type names (``bigint``, ``integer``, ``smallint``, ``text``,
``timestamptz``); SQLite ignores them. Values must be JSON-serialisable or datetimes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import contextmanager, nullcontext
from datetime import datetime
from functools import lru_cache

from django.db import connection

Column = tuple[str, str]  # (name, PostgreSQL type)


def _json_default(value: object) -> str:
    if isinstance(value, datetime):
        return _isoformat(value)
    raise TypeError(f"cannot write {type(value).__name__} in a bulk statement")


@lru_cache(maxsize=16)
def _isoformat(value: datetime) -> str:
    """Rows written together share a handful of timestamps (the tick's own, mostly)."""
    return value.isoformat()


def _rows_relation(columns: Sequence[Column]) -> str:
    """``SELECT (r->>0)::type AS name, ... FROM json_array_elements(%s::json) AS r``."""
    fields = ", ".join(f"(r->>{i})::{pg_type} AS {name}" for i, (name, pg_type) in enumerate(columns))
    return f"SELECT {fields} FROM json_array_elements(%s::json) AS r"


def _payload(rows: Sequence[tuple]) -> str:
    return json.dumps(rows, default=_json_default, separators=(",", ":"))


@contextmanager
def pipeline():
    """On PostgreSQL, send the statements made inside without waiting for each one's result
    (psycopg's pipeline mode): the server executes one while Python prepares the next. Their
    results, and any error, arrive when the block ends. Only for writes whose results nobody
    reads (row counts are not known inside). Elsewhere, statements run one by one as usual."""
    if connection.vendor != "postgresql":
        yield
        return
    connection.ensure_connection()
    with connection.connection.pipeline():
        yield


# Enough for a burst tick's largest payload (tens of thousands of rows) to be read back without
# spilling to temporary files; the default (4 MB) is per sort or set-returning function.
PAYLOAD_WORK_MEM = "64MB"


def keep_payloads_in_memory() -> None:
    """For the rest of the current transaction (PostgreSQL), let the statements here read their
    rows back in memory: ``json_array_elements`` materialises its rows, and past ``work_mem``
    they go through temporary files. Must run inside ``transaction.atomic``."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL work_mem = '{PAYLOAD_WORK_MEM}'")


def insert_rows(table: str, columns: Sequence[Column], rows: Sequence[tuple]) -> None:
    """Insert the rows in one statement: ``COPY table (columns) FROM STDIN`` on PostgreSQL
    (psycopg 3's ``cursor.copy``: no JSON to build and parse back, no per-row executor work),
    ``INSERT ... VALUES`` by ``executemany`` elsewhere. The same rows either way.

    COPY cannot run inside psycopg's pipeline mode: call this outside :func:`pipeline`.
    """
    if not rows:
        return
    names = ", ".join(name for name, _ in columns)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            def copy(sql, params, many, context):
                with context["cursor"].cursor.copy(sql) as stream:
                    for row in rows:
                        stream.write_row(row)

            # Through Django's execute wrappers and, when queries are logged, its query log, so
            # query counters and the write profile see the COPY as the one statement it is.
            sql = f"COPY {table} ({names}) FROM STDIN"
            logged = cursor.debug_sql(sql) if hasattr(cursor, "debug_sql") else nullcontext()
            with logged:
                cursor._execute_with_wrappers(sql, None, False, executor=copy)
        else:
            placeholders = ", ".join(["%s"] * len(columns))
            cursor.executemany(f"INSERT INTO {table} ({names}) VALUES ({placeholders})", rows)


def update_rows(
    table: str,
    keys: Sequence[Column],
    columns: Sequence[Column],
    rows: Sequence[tuple],
    *,
    condition: str = "",
) -> None:
    """``UPDATE table SET columns WHERE keys match`` for each row, in one statement.

    Each row is ``(*key values, *column values)``. ``condition`` is extra SQL over the target
    row, with columns qualified by the table name (``"scheduler_job.state = 'pending'"``); it
    must contain no parameters.
    """
    if not rows:
        return
    extra = f" AND {condition}" if condition else ""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            assignments = ", ".join(f"{name} = v.{name}" for name, _ in columns)
            matches = " AND ".join(f"{table}.{name} = v.{name}" for name, _ in keys)
            cursor.execute(
                f"UPDATE {table} SET {assignments} FROM ({_rows_relation([*keys, *columns])}) AS v "
                f"WHERE {matches}{extra}",
                [_payload(rows)],
            )
        else:
            assignments = ", ".join(f"{name} = %s" for name, _ in columns)
            matches = " AND ".join(f"{name} = %s" for name, _ in keys)
            n_keys = len(keys)
            cursor.executemany(
                f"UPDATE {table} SET {assignments} WHERE {matches}{extra}",
                [(*row[n_keys:], *row[:n_keys]) for row in rows],
            )


def insert_objects(objects: Sequence, *, key: str) -> None:
    """Insert unsaved model instances of one model in one statement and set each one's ``pk``.

    Every concrete column but the auto primary key is written as the instance holds it (no
    ``pre_save``: set ``auto_now_add`` fields yourself). ``key`` names a unique field whose value
    each instance has: the new ids come back with it (``RETURNING``), so they are matched by
    value, never by the order a database returns rows in. PostgreSQL reads the rows from one JSON
    parameter (``json_array_elements``, as :func:`update_rows`); SQLite takes one multi-row
    ``INSERT ... VALUES`` within its limit of bound variables (a larger set takes a few).
    """
    if not objects:
        return
    meta = type(objects[0])._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    names = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    key_column = meta.get_field(key).column
    pk_column = meta.pk.column
    is_json = [f.get_internal_type() == "JSONField" for f in fields]
    table = meta.db_table
    returned: dict = {}
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            casts = ", ".join(
                f"(r->{i})::jsonb" if json_column else f"(r->>{i})::{f.db_type(connection)}"
                for i, (f, json_column) in enumerate(zip(fields, is_json, strict=True))
            )
            rows = [tuple(getattr(o, f.attname) for f in fields) for o in objects]
            cursor.execute(
                f"INSERT INTO {table} ({names}) SELECT {casts} FROM json_array_elements(%s::json) AS r "
                f"RETURNING {pk_column}, {key_column}",
                [_payload(rows)],
            )
            returned = dict((k, pk) for pk, k in cursor.fetchall())
        else:
            rows = [
                tuple(json.dumps(getattr(o, f.attname)) if json_column else getattr(o, f.attname)
                      for f, json_column in zip(fields, is_json, strict=True))
                for o in objects
            ]
            per_statement = max(1, _sqlite_variable_limit() // len(fields))
            one_row = "(" + ", ".join(["%s"] * len(fields)) + ")"
            for start in range(0, len(rows), per_statement):
                chunk = rows[start:start + per_statement]
                cursor.execute(
                    f"INSERT INTO {table} ({names}) VALUES {', '.join([one_row] * len(chunk))} "
                    f"RETURNING {pk_column}, {key_column}",
                    [value for row in chunk for value in row],
                )
                returned.update((k, pk) for pk, k in cursor.fetchall())
    key_attname = meta.get_field(key).attname
    for o in objects:
        o.pk = returned[getattr(o, key_attname)]
        o._state.adding = False


def _sqlite_variable_limit() -> int:
    """The SQLite library's limit of bound variables per statement (32,766 since 3.32)."""
    import sqlite3

    connection.ensure_connection()
    return connection.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
