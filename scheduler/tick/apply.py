"""Writing a decision back, inside the tick's transaction.

Writes made while the tick decided are not overwritten: inside the transaction the shell
re-reads the state of every task it is about to change (with ``FOR UPDATE`` on PostgreSQL) and
drops any change whose task moved since the snapshot (a whole gang if one member moved).

Locks are taken in the one order every writer of tasks uses (attempt reports, cancel): the
jobs' rows first, in id order, then their tasks; then the tick holds the workers its tasks,
attempts and intents name (``FOR KEY SHARE``: those columns have no foreign-key constraints).
A report that ends a task locks its job row first too, so the two never wait on each other in
a cycle.

Every kind of write is one set-based statement (:mod:`scheduler.store.bulk`), so the number of
statements per tick does not grow with the number of tasks; on PostgreSQL the updates are
pipelined and the inserts after them are COPY statements. The Python work that reads nothing
(the publication, the events' rows, the placements' metrics) runs in a second thread while the
server executes them (:mod:`scheduler.store.overlap`), so neither waits on the other's part.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple
from functools import partial
from contextlib import ExitStack
from datetime import datetime

from django.db import connection, transaction

from scheduler.foundation import instruments
from scheduler.foundation.instruments import PlacementTallies
from scheduler.board import publish
from scheduler.core.bands import Band
from scheduler.core.budget import resource_value, spend_change
from scheduler.core.types import ACTIVE_STATES, Assignment, Decision, JobState, Preemption, TaskState
from scheduler.models import Attempt, DispatchIntent, Job, PreemptionEvent, Task, TickRecord, Worker
from scheduler.store import bulk, overlap
from scheduler.store.states import ACTIVE_VALUES, TERMINAL_JOB_VALUES
from scheduler.tick.events import change_event_rows, read_prior, record_tick_events, state_event_rows
from scheduler.store.cluster_rows import CHANGE_STAMP
from scheduler.tick.load import LoadedSnapshot


@dataclass(frozen=True)
class TickOutcome:
    tick_id: int
    decision: Decision
    assigned: int
    preempted: int
    expired: int
    skipped_conflicts: int
    duration_ms: float
    # Where the time went: reading the snapshot (whole or only changes, see ``refresh``),
    # deciding; the rest of ``duration_ms`` is writing.
    load_ms: float = 0.0
    decide_ms: float = 0.0
    refresh: str = ""


def lock_jobs(job_pks: set[int]) -> dict[int, str]:
    """Lock the given job rows in id order (PostgreSQL; SQLite serialises writers at BEGIN).

    Returns, on PostgreSQL, where each locked row version lies (its ``ctid``, as text), as
    :func:`current_task_states` does for tasks: the job UPDATEs find their rows there, with no
    primary-key descent per row (a burst flips some 20,000 jobs). Empty elsewhere."""
    if not job_pks or connection.vendor != "postgresql":
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, ctid::text FROM {Job._meta.db_table} WHERE id = ANY(%s::bigint[]) ORDER BY id FOR UPDATE",
            [bulk.id_array(sorted(job_pks))],
        )
        return dict(cursor.fetchall())


def hold_workers(worker_pks: set[int]) -> None:
    """Keep the given workers from being deleted until commit (PostgreSQL's ``FOR KEY SHARE``,
    which heartbeats' updates do not wait for): the tasks, attempts and intents the tick writes
    name them, and those columns have no foreign-key constraints to check it row by row (see
    ``scheduler.models.Attempt``). SQLite serialises writers at BEGIN."""
    if not worker_pks or connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM {Worker._meta.db_table} WHERE id = ANY(%s::bigint[]) ORDER BY id FOR KEY SHARE",
            [bulk.id_array(sorted(worker_pks))],
        )


def current_task_states(pks: list[int]) -> tuple[dict[int, tuple[str, int | None]], dict[int, str]]:
    """Re-read (state, worker) of the given tasks in one statement, locking them on PostgreSQL.

    Also returns, on PostgreSQL, where each locked row version lies (its ``ctid``, as text): the
    task UPDATE finds its rows there, with no primary-key descent per row. The position holds
    until commit, since nothing else may update a row this transaction has locked and the tick
    updates each task once, in that statement. Empty elsewhere."""
    if not pks:
        return {}, {}
    table = Task._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                f"SELECT id, state, worker_id, ctid::text FROM {table} WHERE id = ANY(%s::bigint[]) FOR UPDATE",
                [bulk.id_array(pks)],
            )
            rows = cursor.fetchall()
            return {pk: (state, worker) for pk, state, worker, _ in rows}, {pk: ctid for pk, _, _, ctid in rows}
        # json_each takes the whole id list as one parameter, whatever its length.
        cursor.execute(
            f"SELECT t.id, t.state, t.worker_id FROM {table} t JOIN json_each(%s) j ON t.id = j.value",
            [json_list(pks)],
        )
        return {pk: (state, worker) for pk, state, worker in cursor.fetchall()}, {}


def attempt_starts(attempts: list[tuple[int, int]]) -> dict[tuple[int, int], datetime]:
    """``{(task pk, attempt number): started_at}`` of those of the given attempts that started.
    One statement: on PostgreSQL the pairs travel as two array parameters (:func:`bulk.id_array`)
    matched through the (task, number) unique index, not as two lists of placeholders (a churn
    tick preempts some 2,600 tasks)."""
    if not attempts:
        return {}
    wanted = set(attempts)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT a.task_id, a.number, a.started_at FROM {Attempt._meta.db_table} a "
                "JOIN unnest(%s::bigint[], %s::integer[]) AS w(task_id, number) "
                "ON a.task_id = w.task_id AND a.number = w.number WHERE a.started_at IS NOT NULL",
                [bulk.id_array(task for task, _ in wanted), bulk.id_array(number for _, number in wanted)],
            )
            return {(task, number): at for task, number, at in cursor.fetchall()}
    rows = Attempt.objects.filter(
        task_id__in={task for task, _ in attempts},
        number__in={number for _, number in attempts},
        started_at__isnull=False,
    ).values_list("task_id", "number", "started_at")
    return {(task, number): at for task, number, at in rows if (task, number) in wanted}


# The columns a placement's new attempt is written with (a row per assignment, by COPY).
NEW_ATTEMPT_COLUMNS = [
    ("task_id", "bigint"),
    ("number", "integer"),
    ("worker_id", "bigint"),
    ("state", "text"),
    ("band", "smallint"),
    ("created_at", "timestamptz"),
    ("error", "text"),
]


# The columns the tick writes back to each task it placed, preempted or ended (by its position
# and id, in one UPDATE).
TASK_WRITE_COLUMNS: list[bulk.Column] = [
    ("state", "text"),
    ("worker_id", "bigint"),
    ("band", "smallint"),
    ("preemption_count", "integer"),
    ("attempt_count", "integer"),
    ("updated_at", "timestamptz"),
]


def victim_starts(loaded: LoadedSnapshot, preemptions: list) -> dict[tuple[int, int], datetime]:
    """When each preemption's victim's evicted attempt started (:func:`attempt_starts`)."""
    rows = loaded.tasks
    return attempt_starts(
        [(rows[p.victim].pk, rows[p.victim].attempt_count) for p in preemptions if p.preemptor in rows]
    )


def preemption_rows(
    loaded: LoadedSnapshot,
    preemptions: list,
    tick_pk: int,
    wall: datetime,
    starts: Mapping[tuple[int, int], datetime],
) -> list[tuple]:
    """The preemption events' rows. Each carries its victim's user and job, and the work the eviction
    lost: the victim's resource value × how long its evicted attempt had run (0 if it never
    started), so the history and the fairness page read the event alone. ``starts``: the
    victims' :func:`victim_starts`, read before the writes."""
    rows, jobs = loaded.tasks, loaded.snapshot.jobs
    preemptions = [p for p in preemptions if p.preemptor in rows]
    out = []
    for p in preemptions:
        victim = rows[p.victim]
        job = jobs[p.victim.rsplit("/", 1)[0]]
        started = starts.get((victim.pk, victim.attempt_count))
        ran_ms = max(0, round((wall - started).total_seconds() * 1000)) if started is not None else 0
        out.append(
            (
                tick_pk,
                victim.pk,
                rows[p.preemptor].pk,
                int(p.victim_band),
                int(p.preemptor_band),
                loaded.worker_pks.get(p.worker),
                f"Preempted by {p.preemptor} ({p.preemptor_band.name} over {p.victim_band.name})",
                wall,
                job.user,
                resource_value(job.resources) * ran_ms,
                victim.job_pk,
            )
        )
    return out


# The columns of a preemption event's row (preemption_rows).
PREEMPTION_COLUMNS: list[bulk.Column] = [
    ("tick_id", "bigint"),
    ("victim_id", "bigint"),
    ("preemptor_id", "bigint"),
    ("victim_band", "smallint"),
    ("preemptor_band", "smallint"),
    ("worker_id", "bigint"),
    ("reason", "text"),
    ("created_at", "timestamptz"),
    ("victim_user", "text"),
    ("lost_point_ms", "bigint"),
    ("victim_job_id", "bigint"),
]


# The columns of an outbox row: a start for each new attempt, a stop for each that ended.
INTENT_COLUMNS: list[bulk.Column] = [
    ("task_id", "bigint"),
    ("attempt_number", "integer"),
    ("kind", "text"),
    ("worker_id", "bigint"),
    ("state", "text"),
    ("reason", "text"),
    ("tries", "integer"),
    ("last_error", "text"),
    ("created_at", "timestamptz"),
]


class TaskWrites(NamedTuple):
    """The rows the tick writes for its kept changes, and what it tells from them, found in one
    pass over the kept tasks and one over the assignments (a burst keeps some 30,000 of each)."""

    task_updates: list[tuple]  # TASK_WRITE_COLUMNS by (ctid, id) where positions are known, else by id
    attempt_closes: list[tuple]  # (task pk, number, state, error) of each attempt the tick ends
    new_attempts: list[tuple]  # NEW_ATTEMPT_COLUMNS
    intents: list[tuple]  # INTENT_COLUMNS: the starts, then the stops
    held_workers: set[int]  # the workers those rows name
    started_minus_stopped: dict[str, int]  # per job id, for the tick's ``spend_change``
    # Per job of the kept tasks: whether a kept change makes one of its tasks active.
    jobs_active: dict[str, bool]


def task_writes(
    loaded: LoadedSnapshot,
    decision: Decision,
    kept: set[str],
    assignments: list[Assignment],
    preemptions: list[Preemption],
    positions: Mapping[int, str],
    wall: datetime,
) -> TaskWrites:
    """The rows for the kept changes (``positions``: each locked task's ``ctid``, when known)."""
    rows, worker_pks, after_of = loaded.tasks, loaded.worker_pks, decision.after
    preemptor_of = {p.victim: p.preemptor for p in preemptions}
    assigned_state, intent_pending = TaskState.ASSIGNED.value, DispatchIntent.State.PENDING.value
    start, stop = DispatchIntent.Kind.START.value, DispatchIntent.Kind.STOP.value
    new_attempts, intents, held = [], [], set()
    # Each assigned task's new attempt number (the tasks the kept pass below counts one more).
    numbers: dict[str, int] = {}
    for a in assignments:
        task = a.task
        row, worker_pk = rows[task], worker_pks[a.worker]
        pk, number = row.pk, row.attempt_count + 1
        numbers[task] = number
        held.add(worker_pk)
        new_attempts.append((pk, number, worker_pk, assigned_state, _BAND_VALUES[a.band], wall, ""))
        intents.append((pk, number, start, worker_pk, intent_pending, "assigned", 0, "", wall))
    task_updates, closes, delta, jobs_active = [], [], {}, {}
    append = task_updates.append
    # Module constants as locals: the loop below runs once per kept change (some 30,000).
    active_rows, active_states, state_values, band_values = (
        _ACTIVE_ROW_STATES,
        ACTIVE_STATES,
        _STATE_VALUES,
        _BAND_VALUES,
    )
    number_of = numbers.get
    for task_id in kept:
        after, row = after_of[task_id], rows[task_id]
        job = task_id[: task_id.rfind("/")]
        state, pk = after.state, row.pk
        was_active, now_active = row.state in active_rows, state in active_states
        if now_active:
            jobs_active[job] = True
        elif job not in jobs_active:
            jobs_active[job] = False
        worker, band = after.worker, after.band
        # One tuple per row, its key first (TASK_WRITE_COLUMNS' order), the locked position in
        # front where it is known.
        update = (
            pk,
            state_values[state],
            worker_pks[worker] if worker else None,
            band_values[band] if band is not None else None,
            after.preemption_count,
            number_of(task_id, row.attempt_count),
            wall,
        )
        append((positions[pk], *update) if positions else update)
        if was_active == now_active:
            continue
        delta[job] = delta.get(job, 0) + (1 if now_active else -1)
        if not was_active or not row.attempt_count:
            continue
        if task_id in preemptor_of:
            attempt_state, error = TaskState.PREEMPTED.value, f"Preempted by {preemptor_of[task_id]}"
        elif state is TaskState.COSCHED_FAILED:
            attempt_state, error = TaskState.COSCHED_FAILED.value, "A gang member was preempted for good"
        elif state is TaskState.KILLED:
            ended = decision.jobs_after.get(job)
            attempt_state = TaskState.KILLED.value
            error = f"Killed: job {job} ended {ended.value}" if ended else "Killed by the scheduler"
        else:
            attempt_state, error = TaskState.PREEMPTED.value, "Requeued: a gang member was preempted"
        closes.append((pk, row.attempt_count, attempt_state, error))
        intents.append((pk, row.attempt_count, stop, row.worker_pk, intent_pending, error, 0, "", wall))
        if row.worker_pk is not None:
            held.add(row.worker_pk)
    return TaskWrites(task_updates, closes, new_attempts, intents, held, delta, jobs_active)


# A task state's stored value without the enum's ``value`` descriptor (a call per kept task).
_STATE_VALUES = {state: state.value for state in TaskState}
# A band's stored number without ``int()`` on the enum member.
_BAND_VALUES = {band: int(band) for band in Band}


def json_list(values: list[int]) -> str:
    return "[" + ",".join(str(int(v)) for v in values) + "]"


def apply_decision(
    loaded: LoadedSnapshot, decision: Decision, wall: datetime, started: float, decide_ms: float
) -> TickOutcome:
    """Write the decision. Must run inside ``transaction.atomic``."""
    # The record first (its id names the tick in the rows below); what is known only once the
    # rows are written, or built beside the writes, is set at the end.
    tick = TickRecord.objects.create(
        started_at=wall,
        now_ms=loaded.snapshot.now_ms,
        duration_ms=0,
        decide_ms=decide_ms,
        spend=dict(decision.spend),
        limits=limits_sample(loaded, decision),
    )
    rows = loaded.tasks
    changed = [t for t in decision.after if t in rows]
    changed_rows = list(map(rows.__getitem__, changed))
    job_positions = lock_jobs({row.job_pk for row in changed_rows})
    current, positions = current_task_states([row.pk for row in changed_rows])

    # A task that moved since the snapshot is left alone; for a gang, the whole job's changes go.
    moved_jobs: set[int] = set()
    for row in changed_rows:
        if current.get(row.pk) != (row.state, row.worker_pk):
            moved_jobs.add(row.job_pk)
    gang_jobs: set[str] = set()
    if moved_jobs:
        jobs = loaded.snapshot.jobs
        gang_jobs = {name for name in {t.rsplit("/", 1)[0] for t in changed} if jobs[name].is_gang}

    def keep(task_id: str) -> bool:
        row = rows[task_id]
        if current.get(row.pk) != (row.state, row.worker_pk):
            return False
        job_name = task_id.rsplit("/", 1)[0]
        return not (job_name in gang_jobs and row.job_pk in moved_jobs)

    # Most ticks see no task moved: then every change is kept, with no per-task check again.
    kept = {t for t in changed if keep(t)} if moved_jobs else set(changed)
    skipped = len(changed) - len(kept)
    assignments = [a for a in decision.assignments if a.task in kept]
    preemptions = [p for p in decision.preemptions if p.victim in kept]
    expired = [u for u in decision.unschedulable if u.task in kept]
    writes = task_writes(loaded, decision, kept, assignments, preemptions, positions, wall)
    kept_jobs = writes.jobs_active.keys()
    if kept:  # a tick that writes no task change sends no payload
        bulk.keep_payloads_in_memory()
    hold_workers(writes.held_workers)
    # What this tick's events are told apart from, and when the evicted attempts started (for
    # the preemption events' lost work), read before the writes go out.
    prior = read_prior(tick.pk)
    starts = victim_starts(loaded, preemptions)

    def publication_and_events(publication: publish.Publication) -> tuple[dict, list[tuple], PlacementTallies]:
        # No database read: the tick record's figures, the publication, the rows of this tick's
        # events (scheduler/tick/events.py), and the placements' metrics, recorded at commit.
        fields = publication.record_fields()
        fields["spend_change"] = spend_change(loaded.snapshot.jobs, writes.started_minus_stopped)
        publication.build(kept, tick.pk, fields["fairness"])
        rows = change_event_rows(loaded, decision, kept, kept_jobs, assignments, preemptions, tick.pk, wall)
        rows += state_event_rows(
            prior, loaded.snapshot.jobs, tick, publication.jobs_in_queue, wall, publication.job_counts
        )
        return fields, rows, instruments.placement_tallies(loaded, assignments, preemptions)

    # The server and this process work at once (PostgreSQL): the UPDATEs go out pipelined, and
    # the server executes them while this thread starts the publication; then it is built, with
    # the events' rows, in a second thread (scheduler/store/overlap.py) while this one waits on
    # the UPDATEs and then on the COPYs.
    with ExitStack() as beside:
        with bulk.pipeline():
            write_updates(loaded, decision, kept, writes, job_positions, positions, wall)
            publication = publish.begin(
                loaded.snapshot,
                decision,
                loaded.kueue,
                publish.TaskRows(loaded.tasks, loaded.task_snapshots, loaded.changes),
            )
            rest = beside.enter_context(overlap.alongside(partial(publication_and_events, publication)))
            preempted = preemption_rows(loaded, preemptions, tick.pk, wall, starts)
        # New rows go in by COPY on PostgreSQL (bulk.insert_rows), which psycopg cannot run in a
        # pipeline: after it. None of the rows updated above is inserted here.
        bulk.insert_rows(Attempt._meta.db_table, NEW_ATTEMPT_COLUMNS, writes.new_attempts)
        bulk.insert_rows(PreemptionEvent._meta.db_table, PREEMPTION_COLUMNS, preempted)
        # The outbox, in the same transaction: start every new attempt, stop every attempt that ended.
        bulk.insert_rows(DispatchIntent._meta.db_table, INTENT_COLUMNS, writes.intents)
        record_fields, event_rows, placements = rest.result()
    published = publication.finish(tick.pk)
    record_tick_events(event_rows)

    duration_ms = (time.perf_counter() - started) * 1000
    TickRecord.objects.filter(pk=tick.pk).update(
        **record_fields,
        **published,
        duration_ms=duration_ms,
        assigned=len(assignments),
        preempted=len(preemptions),
        expired=len(expired),
    )
    transaction.on_commit(partial(instruments.record_placement_tallies, placements))
    return TickOutcome(
        tick_id=tick.pk,
        decision=decision,
        assigned=len(assignments),
        preempted=len(preemptions),
        expired=len(expired),
        skipped_conflicts=skipped,
        duration_ms=duration_ms,
    )


def write_updates(
    loaded: LoadedSnapshot,
    decision: Decision,
    kept: set[str],
    writes: TaskWrites,
    job_positions: Mapping[int, str],
    positions: Mapping[int, str],
    wall: datetime,
) -> None:
    """The tick's UPDATEs of tasks, attempts and jobs for the kept changes (``positions``,
    ``job_positions``: the locked rows' ``ctid``, when known)."""
    # On PostgreSQL each row is found at the position its lock read returned (the id is
    # checked too), and the statement sets the change stamp itself: the task trigger lets
    # such an update through without its per-row call (migration 0031).
    bulk.update_rows(
        Task._meta.db_table,
        [("ctid", "tid"), ("id", "bigint")] if positions else [("id", "bigint")],
        TASK_WRITE_COLUMNS,
        writes.task_updates,
        postgresql_set=CHANGE_STAMP,
    )
    # The attempt of a task leaving ASSIGNED/BUILDING/RUNNING keeps holding its worker's capacity
    # (finished_at stays empty) until the worker confirms the process ended.
    bulk.update_rows(
        Attempt._meta.db_table,
        [("task_id", "bigint"), ("number", "integer")],
        [("state", "text"), ("error", "text")],
        writes.attempt_closes,
    )
    job_table = Job._meta.db_table
    kept_jobs = writes.jobs_active.keys()
    terminal = ", ".join(f"'{value}'" for value in TERMINAL_JOB_VALUES)
    ended = [
        (loaded.job_pks[job], state.value, wall)
        for job, state in decision.jobs_after.items()
        if job in loaded.job_pks and job in kept_jobs
    ]
    bulk.update_rows(
        job_table,
        job_keys(job_positions),
        [("state", "text"), ("finished_at", "timestamptz")],
        keyed_by_position(ended, job_positions),
        condition=f"{job_table}.state NOT IN ({terminal})",
    )
    # A live job is RUNNING while any of its tasks is active, PENDING otherwise (a job whose only
    # task was preempted back to the queue is pending again). Written only where the row's
    # state differs: the rows the tick keeps do not follow these flips (migration 0025). The
    # jobs just ended are left out: that write made them finished (or found them so), which
    # this one's condition would skip, and moved their rows from the positions locked.
    ended_pks = {pk for pk, _, _ in ended}
    bulk.update_rows(
        job_table,
        job_keys(job_positions),
        [("state", "text")],
        keyed_by_position(
            [row for row in live_job_states(loaded, kept, writes.jobs_active) if row[0] not in ended_pks],
            job_positions,
        ),
        condition=f"{job_table}.state IN ('{JobState.PENDING.value}', '{JobState.RUNNING.value}')",
        changed_only=True,
    )


def job_keys(positions: Mapping[int, str]) -> list[bulk.Column]:
    """The job UPDATEs' keys: the locked row's position and its id where positions are known
    (PostgreSQL, :func:`lock_jobs`), else the id."""
    return [("ctid", "tid"), ("id", "bigint")] if positions else [("id", "bigint")]


def keyed_by_position(rows: list[tuple], positions: Mapping[int, str]) -> list[tuple]:
    """``rows`` (each its job's pk first) with the job's locked position in front, where
    positions are known. A job with none was not there to lock (deleted since the snapshot):
    its row is dropped, as the UPDATE by id would have matched nothing."""
    if not positions:
        return rows
    return [(positions[row[0]], *row) for row in rows if row[0] in positions]


def live_job_states(loaded: LoadedSnapshot, kept: set[str], jobs_active: dict[str, bool]) -> list[tuple[int, str]]:
    """(job pk, pending|running) for each live job with a written task change: what its state is
    after them (running while any of its tasks is active). Whether that differs from the row's
    is for the statement to tell (``changed_only``): the kept rows know a job is live, not which
    of the two it is. ``jobs_active``: per such job, whether a kept change makes one of its
    tasks active (:func:`task_writes`). Looks at the other jobs' tasks only (a job's tasks are
    ``job/0`` to ``job/replicas-1``; those not in the rows have finished), never at every task."""
    rows, jobs, job_states = loaded.tasks, loaded.snapshot.jobs, loaded.job_states
    running, pending = JobState.RUNNING.value, JobState.PENDING.value
    states = []
    # Sorted by name alone: the names are distinct, and comparing strings is cheaper than
    # comparing (name, flag) tuples (a burst changes some 20,000 jobs).
    for job in sorted(jobs_active):
        active = jobs_active[job]
        if job_states.get(job):
            continue  # finished
        if not active:  # or one of its other tasks is active, as read
            for index in range(jobs[job].replicas):
                task_id = f"{job}/{index}"
                row = rows.get(task_id)
                if row is not None and row.state in _ACTIVE_ROW_STATES and task_id not in kept:
                    active = True
                    break
        states.append((loaded.job_pks[job], running if active else pending))
    return states


_ACTIVE_ROW_STATES = frozenset(ACTIVE_VALUES)


def limits_sample(loaded: LoadedSnapshot, decision: Decision) -> dict[str, int]:
    """Each spending or budgeted user's effective limit this tick (0 = unlimited)."""
    default = loaded.snapshot.config.budget_defaults.budget_limit
    users = set(decision.spend) | set(loaded.snapshot.budgets)
    return {
        user: (loaded.snapshot.budgets[user].budget_limit if user in loaded.snapshot.budgets else default)
        for user in sorted(users)
    }
