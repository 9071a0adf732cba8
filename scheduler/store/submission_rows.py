"""The rows one ``POST jobs/`` reads and writes, as fixed prepared statements on PostgreSQL.

:func:`rule_reads` is everything the submission rules read once the budget identity's lock is
held: its budget row, its active grants, its unfinished tasks (counted up to a bound) and
whether the new id is taken, in one statement. :func:`insert_job_with_tasks` is the write: the
submission time from the submission clock, the job row and one task row per replica, in one
statement (one round trip); :func:`worker_fits` the capacity warning's one question (asked with
the rule reads by a single submission). The first two are PostgreSQL-only; on SQLite (in process, no round trip to
save) the use case reads through the ORM and writes model instances as before.

Why SQL and not the ORM here: docs/operations.md, "The submission path".
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache, partial

from django.db import connection

from scheduler.models import Job, StagedEvent, SubmissionBound, Task, UpliftGrant, Worker
from scheduler.store import bulk, prepared
from scheduler.store.states import NON_TERMINAL_VALUES


@dataclass(frozen=True)
class RuleReads:
    """What one submission's rules read, as of the moment the identity's lock was held."""

    budget_row: tuple[int, int] | None  # (budget_limit, max_band rank), None: the defaults apply
    grants: list[tuple[int | None, int | None]]  # (budget_limit, max_band) of each active grant
    # The identity's unfinished tasks counted up to the bound asked for, or, when its
    # SubmissionBound (with the jobs written since) or else its live jobs' replicas leave room
    # for the ones being added under the cap, that (an upper bound of the count that already
    # passes the cap's rule).
    unfinished: int
    id_taken: bool
    worker_fits: bool | None  # the answer to the capacity question asked with the reads, if any


@dataclass(frozen=True)
class WorkerQuestion:
    """Whether any registered worker has at least this CPU and memory (and, with
    ``device_type``, is of that type, of ``variant`` unless None, with at least ``count`` chips)."""

    cpu_millicores: int
    memory_bytes: int
    device_type: str | None = None
    variant: str | None = None
    count: int = 0


# One statement for any question (the worker table is small; its NULL tests keep one plan).
# CAST, not ``::``: SQLite runs this one too.
_WORKER_FITS = (
    f"EXISTS (SELECT 1 FROM {Worker._meta.db_table} WHERE cpu_millicores >= %s AND memory_bytes >= %s "
    "AND (CAST(%s AS TEXT) IS NULL OR (device_type = CAST(%s AS TEXT) AND device_count >= %s)) "
    "AND (CAST(%s AS TEXT) IS NULL OR device_variant = CAST(%s AS TEXT)))"
)


def _worker_fits_params(question: WorkerQuestion) -> list:
    q = question
    return [q.cpu_millicores, q.memory_bytes, q.device_type, q.device_type, q.count, q.variant, q.variant]


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
        # The unfinished tasks, bounded first by the live jobs' replicas (a job's tasks are
        # written with it, one per replica, so its unfinished tasks are at most its replicas):
        # when that sum leaves room for the new job's, it is the answer, read from the job rows
        # alone; otherwise the tasks are counted (up to the limit). Counting walked each live
        # job's tasks, 3-4 buffers a job, most of the backend's CPU per submission for a user
        # with a few hundred live jobs (issue 26, submit35). Only live jobs either way (an
        # unfinished task's job is never finished: see _unfinished_tasks in jobs/submit.py), not
        # every job of the user's history. A CASE runs its ELSE's subquery only when reached.
        # Before either, the bound its last submission left (SubmissionBound: the tasks of its
        # jobs up to one id, plus the replicas of the jobs written since, read by the (user, id)
        # index): when that leaves room, the live jobs are not read at all. Reading them was a
        # heap page a live job on every submission, most of the backend's CPU per submission for
        # a user with a few hundred (issue 26, pgsub37). A CASE's later branches run only when
        # reached.
        "(SELECT CASE WHEN k.tasks + k.since + %s <= %s THEN k.tasks + k.since ELSE "
        "(SELECT CASE WHEN b.jobs <= %s AND b.replicas + %s <= %s THEN b.replicas ELSE "
        "(SELECT count(*) FROM (SELECT 1 FROM scheduler_task t JOIN scheduler_job j ON j.id = t.job_id "
        f'  WHERE j.finished_state IS NULL AND j."user" = %s AND t.state IN ({_literals(NON_TERMINAL_VALUES)}) '
        "  LIMIT %s) AS c) END "
        "FROM (SELECT count(*) AS jobs, COALESCE(sum(l.replicas), 0) AS replicas FROM (SELECT replicas "
        '  FROM scheduler_job WHERE finished_state IS NULL AND "user" = %s LIMIT %s) AS l) AS b) END '
        f"FROM (SELECT s.tasks, (SELECT COALESCE(sum(n.replicas), 0) FROM {Job._meta.db_table} n "
        '  WHERE n."user" = %s AND n.id > s.last_job_id) AS since '
        # OFFSET 0: the subquery is not flattened, so ``since`` is summed once, not per use.
        f'  FROM (SELECT 1) AS one LEFT JOIN {SubmissionBound._meta.db_table} s ON s."user" = %s OFFSET 0) AS k), '
        "EXISTS (SELECT 1 FROM scheduler_job WHERE name = %s), "
        # The capacity warning's question, asked only when %s is true (an uncorrelated EXISTS is
        # an init plan, run only when the CASE reaches it).
        f"CASE WHEN %s::boolean THEN {_WORKER_FITS} END"
    )


def rule_reads(
    user: str,
    job_id: str,
    *,
    count_up_to: int,
    adding: int = 0,
    at: datetime,
    capacity: WorkerQuestion | None = None,
    after: tuple[str, list] | None = None,
) -> RuleReads:
    """One statement: ``user``'s budget row and active grants at ``at``, its unfinished tasks
    counted up to ``count_up_to`` (or an upper bound of them, when it shows that ``adding`` more
    fit under the cap, ``count_up_to - 1``: its ``SubmissionBound`` with the jobs written since,
    else its live jobs' replicas; ``RuleReads.unfinished``), whether ``job_id``
    exists, and with ``capacity`` whether a registered worker fits it (PostgreSQL only). With ``after`` (a statement: the identity's
    lock) that statement first, in the same round trip (``prepared.fetch_one_after``)."""
    asked = capacity if capacity is not None else WorkerQuestion(0, 0)
    read = prepared.fetch_one if after is None else partial(prepared.fetch_one_after, after)
    row, grants, unfinished, taken, fits = read(
        _rule_reads_sql(),
        [
            user,
            user,
            at,
            at,
            adding,
            count_up_to - 1,  # the cap
            count_up_to - 1,
            adding,
            count_up_to - 1,
            user,
            count_up_to,
            user,
            count_up_to,
            user,
            user,
            job_id,
            capacity is not None,
            *_worker_fits_params(asked),
        ],
    )
    return RuleReads(
        budget_row=None if row is None else (row[0], row[1]),
        grants=[(g[0], g[1]) for g in grants or ()],
        unfinished=unfinished,
        id_taken=taken,
        worker_fits=fits,
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
        # The indexes as one array, not generate_series(0, n - 1): with n a parameter the generic
        # plan counted a thousand series rows, so PostgreSQL planned this statement again on
        # every run (a custom plan for n), a tenth of its backend CPU per submission (issue 26).
        'unnest(%s::integer[]) AS i RETURNING id, "index"), '
        # The job's first event, staged by the same statement (a data-modifying CTE always runs).
        f"staged AS (INSERT INTO {StagedEvent._meta.db_table} ({staged_names}) VALUES ({staged_values})), "
        # The identity's bound on its unfinished tasks, now up to this job (rule_reads).
        f'bound AS (INSERT INTO {SubmissionBound._meta.db_table} ("user", tasks, last_job_id) '
        "SELECT %s::varchar(150), %s::bigint, job.id FROM job "
        '  ON CONFLICT ("user") DO UPDATE SET tasks = EXCLUDED.tasks, last_job_id = EXCLUDED.last_job_id) '
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
    bound: tuple[str, int],
    commit: bool = False,
) -> tuple[int, int, list[int]]:
    """Write one job (its columns by attribute name in ``fields``, but the three times) and
    ``replicas`` tasks in ``task_state``, stamped by the submission clock at ``now_ms`` or later,
    in one statement. Returns the job's id, its submission time and its tasks' ids by index.
    ``root_submitted_at_ms`` None: the job is a root (its own time); ``deadline_after_ms`` None:
    no scheduling deadline. ``event``: the job's first event as a ``StagedEvent`` row's values by
    attribute name, staged by the same statement. ``bound``: the budget identity and its
    unfinished tasks with this job's, at most (``rule_reads``' answer plus ``replicas``), kept as
    its ``SubmissionBound`` up to this job. A taken name raises ``django.db.IntegrityError``.
    ``commit``: the write is the last statement of the caller's transaction, whose ``COMMIT`` may
    go with it (``prepared.fetch_one_and_commit``)."""
    sql, columns, staged = _insert_sql()
    values = []
    for _, pg_type, attname in columns:
        value = created_at if attname == "created_at" else fields.get(attname)
        if pg_type == "jsonb" and value is not None:
            value = json.dumps(value)
        values.append(value)
    row = (prepared.fetch_one_and_commit if commit else prepared.fetch_one)(
        sql,
        [
            now_ms,
            *values,
            root_submitted_at_ms,
            deadline_after_ms,
            task_state,
            created_at,
            list(range(replicas)),
            *(event[attname] for _, _, attname in staged),
            *bound,
        ],
    )
    return row[0], row[1], list(row[2])


def worker_fits(question: WorkerQuestion) -> bool:
    """The answer to ``question``: one ``EXISTS``, prepared on PostgreSQL (a batch asks once per
    shape; a single submission on PostgreSQL asks it with its rules' reads, :func:`rule_reads`)."""
    return bool(prepared.fetch_one(f"SELECT {_WORKER_FITS}", _worker_fits_params(question))[0])


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
