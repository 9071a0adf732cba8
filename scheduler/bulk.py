"""Set-based writes: one SQL statement for any number of rows.

On PostgreSQL the rows travel as one array per column and the statement joins
``unnest(...)``, so ten thousand updates cost one round trip and one plan. SQLite runs in
process, where ``executemany`` of a prepared statement is already cheap.

Column types are PostgreSQL type names (``bigint``, ``integer``, ``smallint``, ``text``,
``timestamptz``); SQLite ignores them.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection

Column = tuple[str, str]  # (name, PostgreSQL type)


def _columns(rows: Sequence[tuple], count: int) -> list[list]:
    return [[row[i] for row in rows] for i in range(count)]


def _unnest(columns: Sequence[Column]) -> str:
    arrays = ", ".join(f"%s::{pg_type}[]" for _, pg_type in columns)
    names = ", ".join(name for name, _ in columns)
    return f"unnest({arrays}) AS v({names})"


def insert_rows(table: str, columns: Sequence[Column], rows: Sequence[tuple]) -> None:
    """``INSERT INTO table (columns) VALUES row...`` in one statement."""
    if not rows:
        return
    names = ", ".join(name for name, _ in columns)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"INSERT INTO {table} ({names}) SELECT {names} FROM {_unnest(columns)}",
                _columns(rows, len(columns)),
            )
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
            everything = [*keys, *columns]
            assignments = ", ".join(f"{name} = v.{name}" for name, _ in columns)
            matches = " AND ".join(f"{table}.{name} = v.{name}" for name, _ in keys)
            cursor.execute(
                f"UPDATE {table} SET {assignments} FROM {_unnest(everything)} WHERE {matches}{extra}",
                _columns(rows, len(everything)),
            )
        else:
            assignments = ", ".join(f"{name} = %s" for name, _ in columns)
            matches = " AND ".join(f"{name} = %s" for name, _ in keys)
            n_keys = len(keys)
            cursor.executemany(
                f"UPDATE {table} SET {assignments} WHERE {matches}{extra}",
                [(*row[n_keys:], *row[:n_keys]) for row in rows],
            )
