"""Set-based writes: one SQL statement for any number of rows.

On PostgreSQL the rows travel as one JSON array parameter (serialised by orjson, in C: far
faster than adapting a Python list per column) and the statement reads them back with
``jsonb_array_elements``, so ten thousand updates cost one round trip and one plan. SQLite runs
in process, where ``executemany`` of a prepared statement is already cheap.

Column types are PostgreSQL type names (``bigint``, ``integer``, ``smallint``, ``text``,
``timestamptz``); SQLite ignores them. Values must be JSON-serialisable or datetimes.
"""

from __future__ import annotations

import json

import orjson
from collections.abc import Sequence
from contextlib import contextmanager, nullcontext

from django.db import connection

Column = tuple[str, str]  # (name, PostgreSQL type)


def _rows_relation(columns: Sequence[Column]) -> str:
    """``SELECT (r->>0)::type AS name, ... FROM jsonb_array_elements(%s::jsonb) AS r``.

    jsonb, not json: the payload is parsed once and each ``->>`` is a lookup, where json re-reads
    an element's text for every column (see :func:`insert_returning`)."""
    fields = ", ".join(f"(r->>{i})::{pg_type} AS {name}" for i, (name, pg_type) in enumerate(columns))
    return f"SELECT {fields} FROM jsonb_array_elements(%s::jsonb) AS r"


def _payload(rows: Sequence[tuple]) -> str:
    """The rows as one JSON array of arrays, by orjson (C; datetimes as ISO 8601, the form
    ``isoformat`` gives; dict keys that are not strings as strings, as ``json`` writes them):
    a 30,000-row task update's payload in about a fifth of ``json.dumps``'s time."""
    return orjson.dumps(rows, option=orjson.OPT_NON_STR_KEYS).decode()


def id_array(ids) -> str:
    """The integer ids as one PostgreSQL array literal (``'{1,2,3}'``), for ``= ANY(%s::bigint[])``.

    Django's cursors bind parameters on the client, and psycopg quotes a Python list there
    element by element in Python (30,000 ids: ~25 ms); this is one ``str.join`` and one quoted
    string (~4 ms)."""
    return "{" + ",".join(map(str, map(int, ids))) + "}"


def id_match(column: str, ids: Sequence[int]) -> tuple[str, list]:
    """SQL for ``column`` being one of the integer ``ids``, and its parameters: one array
    parameter on PostgreSQL (``= ANY``, :func:`id_array`), a placeholder per id elsewhere."""
    if connection.vendor == "postgresql":
        return f"{column} = ANY(%s::bigint[])", [id_array(ids)]
    return f"{column} IN ({', '.join(['%s'] * len(ids))})", list(ids)


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
    rows back in memory: ``jsonb_array_elements`` materialises its rows, and past ``work_mem``
    they go through temporary files. Must run inside ``transaction.atomic``."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL work_mem = '{PAYLOAD_WORK_MEM}'")


def insert_rows(table: str, columns: Sequence[Column], rows: Sequence[tuple]) -> None:
    """Insert the rows in one statement: ``COPY table (columns) FROM STDIN (FORMAT BINARY)`` on
    PostgreSQL (psycopg 3's ``cursor.copy``: no JSON to build and parse back, no per-row executor
    work), ``INSERT ... VALUES`` by ``executemany`` elsewhere. The same rows either way.

    Binary, not text: each value is dumped by psycopg's C dumper for its column's type and read
    by the server without parsing text (39,000 events: 15 ms of this process's CPU against 78).
    So each column's type must be the table's own (``integer`` for an ``integer`` column, not
    ``bigint``; ``text`` also serves ``varchar``), and each value of that type's Python kind.

    COPY cannot run inside psycopg's pipeline mode: call this outside :func:`pipeline`.
    """
    if not rows:
        return
    names = ", ".join(name for name, _ in columns)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            types = [pg_type for _, pg_type in columns]

            def copy(sql, params, many, context):
                with context["cursor"].cursor.copy(sql) as stream:
                    stream.set_types(types)
                    for row in rows:
                        stream.write_row(row)

            # Through Django's execute wrappers and, when queries are logged, its query log, so
            # query counters and the write profile see the COPY as the one statement it is.
            sql = f"COPY {table} ({names}) FROM STDIN (FORMAT BINARY)"
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
    changed_only: bool = False,
    postgresql_set: str = "",
    keep_when_null: Sequence[str] = (),
) -> None:
    """``UPDATE table SET columns WHERE keys match`` for each row, in one statement.

    Each row is ``(*key values, *column values)``. ``condition`` is extra SQL over the target
    row, with columns qualified by the table name (``"scheduler_job.state = 'pending'"``); it
    must contain no parameters. ``changed_only`` leaves alone the rows whose columns already
    hold the given values (no new row version, no trigger), so a caller may send rows it does
    not know to differ. ``postgresql_set`` is one more assignment, the same for every row, on
    PostgreSQL only (the change stamp, which SQLite does not have). A key may be the row's
    ``ctid`` (type ``tid``), where the caller holds the rows locked since it read them.
    ``keep_when_null`` names columns whose None in a row leaves the stored value as it is.

    On PostgreSQL the rows are visited in the order of their keys (the payload is sorted by
    them, on the server): one after another on the same heap and index pages, where rows in
    the caller's order (a tick's come from a set) jump between pages at every row. A first
    tick's task UPDATE by position (28,561 rows) takes about a third less of the backend's CPU
    so, with the same buffers and WAL (docs/benchmarks.md, section writes37). Row locks are
    taken in that order too.
    """
    if not rows:
        return
    extra = f" AND {condition}" if condition else ""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            assignments = ", ".join(
                f"{name} = COALESCE(v.{name}, {table}.{name})" if name in keep_when_null else f"{name} = v.{name}"
                for name, _ in columns
            )
            if postgresql_set:
                assignments += f", {postgresql_set}"
            matches = " AND ".join(f"{table}.{name} = v.{name}" for name, _ in keys)
            if changed_only:
                extra += (
                    " AND (" + " OR ".join(f"{table}.{name} IS DISTINCT FROM v.{name}" for name, _ in columns) + ")"
                )
            order = ", ".join(str(i) for i in range(1, len(keys) + 1))
            cursor.execute(
                f"UPDATE {table} SET {assignments} FROM ({_rows_relation([*keys, *columns])} ORDER BY {order}) AS v "
                f"WHERE {matches}{extra}",
                [_payload(rows)],
            )
        else:
            assignments = ", ".join(
                f"{name} = COALESCE(%s, {name})" if name in keep_when_null else f"{name} = %s" for name, _ in columns
            )
            matches = " AND ".join(f"{name} = %s" for name, _ in keys)
            n_keys = len(keys)
            if changed_only:
                extra += " AND (" + " OR ".join(f"{name} IS NOT %s" for name, _ in columns) + ")"
            cursor.executemany(
                f"UPDATE {table} SET {assignments} WHERE {matches}{extra}",
                [(*row[n_keys:], *row[:n_keys], *(row[n_keys:] if changed_only else ())) for row in rows],
            )


def model_columns(model) -> list[tuple[str, str, str]]:
    """``(column, PostgreSQL type, attribute name)`` of every concrete column of ``model`` but its
    auto primary key and its generated columns (which the database computes), for
    :func:`insert_returning`; JSON fields are ``jsonb``."""
    return [
        (f.column, "jsonb" if f.get_internal_type() == "JSONField" else f.db_type(connection), f.attname)
        for f in model._meta.concrete_fields
        if not f.primary_key and not f.generated
    ]


def insert_returning(
    table: str, columns: Sequence[Column], rows: Sequence[tuple], returning: Sequence[str]
) -> list[tuple]:
    """Insert the rows in one statement and return the ``returning`` columns of each inserted row,
    in no promised order (match them by a unique column, e.g. the new ids by name).

    ``jsonb`` columns take Python values (lists, dicts), stored as JSON. PostgreSQL reads the rows
    from one JSON parameter (``jsonb_array_elements``) in one ``INSERT ... SELECT ... RETURNING``; SQLite takes one multi-row ``INSERT ... VALUES ... RETURNING``
    within its limit of bound variables (a set larger than that takes a few).
    """
    if not rows:
        return []
    names = ", ".join(connection.ops.quote_name(name) for name, _ in columns)
    back = ", ".join(connection.ops.quote_name(name) for name in returning)
    is_json = [pg_type == "jsonb" for _, pg_type in columns]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            casts = ", ".join(
                f"(r->{i})::jsonb" if json_column else f"(r->>{i})::{pg_type}"
                for i, ((_, pg_type), json_column) in enumerate(zip(columns, is_json, strict=True))
            )
            # jsonb, not json: the rows are parsed once, and each ``->`` is then a lookup, where json
            # re-reads an element's text for every column (a 1,000-job batch: 3 ms against 44).
            cursor.execute(
                f"INSERT INTO {table} ({names}) SELECT {casts} FROM jsonb_array_elements(%s::jsonb) AS r "
                f"RETURNING {back}",
                [_payload(rows)],
            )
            return cursor.fetchall()
        json_at = [i for i, json_column in enumerate(is_json) if json_column]
        if json_at:
            rows = [tuple(json.dumps(v) if i in json_at else v for i, v in enumerate(row)) for row in rows]
        per_statement = max(1, _sqlite_variable_limit() // len(columns))
        one_row = "(" + ", ".join(["%s"] * len(columns)) + ")"
        returned: list[tuple] = []
        for start in range(0, len(rows), per_statement):
            chunk = rows[start : start + per_statement]
            cursor.execute(
                f"INSERT INTO {table} ({names}) VALUES {', '.join([one_row] * len(chunk))} RETURNING {back}",
                [value for row in chunk for value in row],
            )
            returned += cursor.fetchall()
        return returned


def _sqlite_variable_limit() -> int:
    """The SQLite library's limit of bound variables per statement (32,766 since 3.32)."""
    import sqlite3

    connection.ensure_connection()
    return connection.connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
