"""The rows one ``POST jobs/`` reads and writes, as fixed prepared statements on PostgreSQL.

:func:`rule_reads` is everything the submission rules read once the budget identity's lock is
held: its budget row, its active grants, its unfinished tasks (counted up to a bound) and
whether the new id is taken, in one statement. :func:`insert_job_with_tasks` is the write: the
submission time from the submission clock, the job row and one task row per replica, in one
statement (one round trip); :func:`worker_fits` the capacity warning's one question. The first two
are PostgreSQL-only; on SQLite (in process, no round trip to
save) the use case reads through the ORM and writes model instances as before.

Why SQL and not the ORM here: docs/operations.md, "The submission path".
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

from django.db import connection

from scheduler.models import Job, StagedEvent, Task, UpliftGrant, Worker
from scheduler.store import bulk, prepared
from scheduler.store.states import NON_TERMINAL_VALUES


@dataclass(frozen=True)
class RuleReads:
    """What one submission's rules read, as of the moment the identity's lock was held."""

    budget_row: tuple[int, int] | None  # (budget_limit, max_band rank), None: the defaults apply
    grants: list[tuple[int | None, int | None]]  # (budget_limit, max_band) of each active grant
    unfinished: int  # the identity's unfinished tasks, counted up to the bound asked for
    id_taken: bool


def _literals(values: Sequence[str]) -> str:
    """Fixed state values of the code (never input) as SQL literals, so the plan sees constants."""
    return ", ".join("'" + value.replace("'", "''") + "'" for value in values)


@lru_cache(maxsize=1)
def _rule_reads_sql() -> str:
    return (
        "SELECT "
        "(SELECT ARRAY[b.budget_limit, b.max_band] FROM scheduler_userbudget b WHERE b.user_id = %s), "
        "(SELECT array_agg(ARRAY[g.budget_limit, g.max_band]) FROM scheduler_upliftgrant g "
        f"  WHERE g.user_id = %s AND g.state = '{UpliftGrant.State.APPROVED.value}' "
        "   AND g.starts_at <= %s AND g.expires_at > %s), "
        "(SELECT count(*) FROM (SELECT 1 FROM scheduler_task t JOIN scheduler_job j ON j.id = t.job_id "
        f'  WHERE j."user" = %s AND t.state IN ({_literals(NON_TERMINAL_VALUES)}) LIMIT %s) AS c), '
        "EXISTS (SELECT 1 FROM scheduler_job WHERE name = %s)"
    )


def rule_reads(user: str, job_id: str, *, count_up_to: int, at: datetime) -> RuleReads:
    """One statement: ``user``'s budget row and active grants at ``at``, its unfinished tasks
    counted up to ``count_up_to``, and whether ``job_id`` exists (PostgreSQL only)."""
    row, grants, unfinished, taken = prepared.fetch_one(
        _rule_reads_sql(), [user, user, at, at, user, count_up_to, job_id]
    )
    return RuleReads(
        budget_row=None if row is None else (row[0], row[1]),
        grants=[(g[0], g[1]) for g in grants or ()],
        unfinished=unfinished,
        id_taken=taken,
    )


# Filled by the statement itself: the submission time and what follows from it.
_TIMED = ("submitted_at_ms", "root_submitted_at_ms", "scheduling_deadline_ms")


@lru_cache(maxsize=1)
def _insert_sql() -> tuple[str, tuple[tuple[str, str, str], ...], list[tuple[str, str, str]]]:
    columns = tuple(c for c in bulk.model_columns(Job) if c[2] not in _TIMED)
    names = ", ".join(f'"{column}"' for column, _, _ in columns)
    values = ", ".join(f"%s::{pg_type}" for _, pg_type, _ in columns)
    task = Task._meta.db_table
    staged = _staged_columns()
    staged_names = ", ".join(f'"{column}"' for column, _, _ in staged)
    staged_values = ", ".join(f"%s::{pg_type}" for _, pg_type, _ in staged)
    sql = (
        "WITH stamp AS (SELECT scheduler_next_submission_ms(%s::bigint) AS ms), "
        f"job AS (INSERT INTO {Job._meta.db_table} ({names}, submitted_at_ms, root_submitted_at_ms, "
        "scheduling_deadline_ms) "
        f"SELECT {values}, stamp.ms, COALESCE(%s::bigint, stamp.ms), stamp.ms + %s::bigint FROM stamp "
        "RETURNING id, submitted_at_ms), "
        f'tasks AS (INSERT INTO {task} (job_id, "index", state, preemption_count, failure_count, attempt_count, '
        "updated_at) SELECT job.id, i, %s::text, 0, 0, 0, %s::timestamptz FROM job, "
        'generate_series(0, %s::integer - 1) AS i RETURNING id, "index"), '
        # The job's first event, staged by the same statement (a data-modifying CTE always runs).
        f"staged AS (INSERT INTO {StagedEvent._meta.db_table} ({staged_names}) VALUES ({staged_values})) "
        'SELECT job.id, job.submitted_at_ms, (SELECT array_agg(id ORDER BY "index") FROM tasks) FROM job'
    )
    return sql, columns, staged


def _staged_columns() -> list[tuple[str, str, str]]:
    return bulk.model_columns(StagedEvent)


def insert_job_with_tasks(
    fields: Mapping[str, object],
    *,
    now_ms: int,
    root_submitted_at_ms: int | None,
    deadline_after_ms: int | None,
    replicas: int,
    task_state: str,
    created_at: datetime,
    event: Mapping[str, object],
) -> tuple[int, int, list[int]]:
    """Write one job (its columns by attribute name in ``fields``, but the three times) and
    ``replicas`` tasks in ``task_state``, stamped by the submission clock at ``now_ms`` or later,
    in one statement. Returns the job's id, its submission time and its tasks' ids by index.
    ``root_submitted_at_ms`` None: the job is a root (its own time); ``deadline_after_ms`` None:
    no scheduling deadline. ``event``: the job's first event as a ``StagedEvent`` row's values by
    attribute name, staged by the same statement. A taken name raises ``django.db.IntegrityError``."""
    sql, columns, staged = _insert_sql()
    values = []
    for _, pg_type, attname in columns:
        value = created_at if attname == "created_at" else fields.get(attname)
        if pg_type == "jsonb" and value is not None:
            value = json.dumps(value)
        values.append(value)
    row = prepared.fetch_one(
        sql,
        [
            now_ms,
            *values,
            root_submitted_at_ms,
            deadline_after_ms,
            task_state,
            created_at,
            replicas,
            *(event[attname] for _, _, attname in staged),
        ],
    )
    return row[0], row[1], list(row[2])


def worker_fits(
    cpu_millicores: int,
    memory_bytes: int,
    *,
    device_type: str | None = None,
    variant: str | None = None,
    count: int = 0,
) -> bool:
    """Whether any registered worker has at least this CPU and memory (and, with ``device_type``,
    is of that type, of ``variant`` when given, with at least ``count`` chips): one ``EXISTS``,
    prepared on PostgreSQL (every submission asks, for its capacity warning)."""
    conditions, params = ["cpu_millicores >= %s", "memory_bytes >= %s"], [cpu_millicores, memory_bytes]
    if device_type is not None:
        conditions += ["device_type = %s", "device_count >= %s"]
        params += [device_type, count]
        if variant is not None:
            conditions.append("device_variant = %s")
            params.append(variant)
    sql = f"SELECT 1 FROM {Worker._meta.db_table} WHERE {' AND '.join(conditions)} LIMIT 1"
    return bool(prepared.fetch(sql, params))


def taken_names(names: Sequence[str]) -> set[str]:
    """Which of these job ids exist, in one statement: on PostgreSQL a prepared
    ``name = ANY(%s)`` of one array parameter (a batch's thousand ids as one value, where the
    ORM's ``IN (...)`` inlined a thousand literals for the server to parse: 90 ms a batch in a
    profile, issue 26); elsewhere the ORM's ``IN``."""
    if not names:
        return set()
    if connection.vendor != "postgresql":
        return set(Job.objects.filter(name__in=names).values_list("name", flat=True))
    rows = prepared.fetch(f"SELECT name FROM {Job._meta.db_table} WHERE name = ANY(%s::text[])", [list(names)])
    return {name for (name,) in rows}
