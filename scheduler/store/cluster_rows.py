"""The rows a tick decides over, read from the database and, on PostgreSQL, kept between ticks.

Reading a 100,000-task cluster whole costs over a second, most of it building Python objects
for rows that did not change since the previous tick. On PostgreSQL a :class:`ClusterRows` kept
in the tick process therefore reads only what changed: a trigger stamps every inserted or
updated job, task, attempt and worker row with its transaction id (``change_xid``, migrations
0004 and 0029; inserts by the column's default and the tick's task UPDATE by its own
``CHANGE_STAMP``, migration 0031; all but a live job's flip between pending and running,
migration 0025, which keeps that write off every index: so a job is kept as live or as how it
finished, never as pending or running; and a worker's heartbeat that changes nothing the tick
reads), and
each read takes the rows stamped at or after the oldest transaction still running at the
previous read (``pg_snapshot_xmin``). Every transaction that committed since then has such an
id, so nothing is missed whatever order transactions commit in; a row read twice is harmless.
All reads of one refresh run in one ``REPEATABLE READ`` transaction, so they see one instant.

The whole cluster is read again when the cache is cold, when a row was deleted (a trigger bumps
``iris_snapshot_epoch``), when the last refresh is older than ``STALE_SECONDS`` (catching up on
a long gap costs more than starting over), or when the database is another one. SQLite, the
embedded default for small clusters, always reads everything.

What is kept matches a whole read exactly (``tests/store/test_cluster_rows.py`` checks it):
live jobs and tasks, plus finished tasks (and their jobs) whose earlier attempt still holds a
worker: ended but not yet confirmed finished, so its resources stay committed there.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from django.db import connection, transaction

from scheduler.core.bands import Band
from scheduler.core.types import (
    TERMINAL_STATES,
    JobSpec,
    TaskSnapshot,
    TaskState,
    Device,
    WorkerSpec,
    task_snapshot,
)
from scheduler.core.types import worker_spec as make_worker_spec
from scheduler.models import Attempt, Job, Task, Worker
from scheduler.store.job_rows import JOB_SPEC_SQL, ResourceCache, device_from_columns, job_spec_from_row, json_value
from scheduler.store.states import ACTIVE_VALUES, LIVE_JOB_VALUES, LIVE_TASK_VALUES

# Plain dict look-ups: calling an Enum per row costs more than the rest of the row's work.
TASK_STATES = {s.value: s for s in TaskState}
BANDS = {int(b): b for b in Band}
LIVE_TASKS = frozenset(LIVE_TASK_VALUES)
LIVE_JOBS = frozenset(LIVE_JOB_VALUES)
ACTIVE_TASKS = frozenset(ACTIVE_VALUES)
LIVE_TASK_STATES = frozenset(s for s in TaskState if s not in TERMINAL_STATES)

# A refresh after a longer gap reads the whole cluster instead of the changes since.
STALE_SECONDS = 60.0


class TaskRow(NamedTuple):
    """What the shell needs to write a task back: its primary key and its state when read.
    (A named tuple: one is built per task read, at a third of a frozen dataclass's cost.)"""

    pk: int
    job_pk: int
    state: str
    worker_pk: int | None
    attempt_count: int


def in_list(values: tuple[str, ...]) -> str:
    """``IN (...)`` over fixed state names: constants of ours, never user input."""
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


JOB = Job._meta.db_table
TASK = Task._meta.db_table
ATTEMPT = Attempt._meta.db_table
WORKER = Worker._meta.db_table

# The job's pk and state, then the mapper's columns (store/job_rows.py), so row[2:] is its row.
JOB_SELECT = f"SELECT j.id, j.state, {JOB_SPEC_SQL} FROM {JOB} j LEFT JOIN {JOB} p ON p.id = j.parent_id"
TASK_SELECT = (
    f'SELECT t.id, t.job_id, t."index", t.state, t.worker_id, t.band, t.preemption_count, t.attempt_count FROM {TASK} t'
)
ATTEMPT_SELECT = f"SELECT a.id, a.task_id, a.worker_id, a.state, a.finished_at IS NULL FROM {ATTEMPT} a"
# Attempts that ended (preempted, lost, killed) but whose process the worker has not yet
# confirmed finished: their tasks' resources stay committed on that worker.
HELD = f"a.finished_at IS NULL AND a.worker_id IS NOT NULL AND a.state NOT IN {in_list(ACTIVE_VALUES)}"
# The live tasks, in the words of the task table's two partial indexes (migration 0035: pending,
# and active by worker), so each arm is answered by its own index: ``state IN`` all four live
# states implies neither index's condition, and behind a year of finished tasks PostgreSQL would
# read the whole table instead.
LIVE_TASK_MATCH = f"(t.state = '{TaskState.PENDING.value}' OR t.state IN {in_list(ACTIVE_VALUES)})"
assert {TaskState.PENDING.value, *ACTIVE_VALUES} == set(LIVE_TASK_VALUES)
WORKER_COLUMNS = (
    "id, name, healthy, draining, cpu_millicores, memory_bytes, device_type, device_variant, "
    "device_count, CAST(attributes AS text)"
)
WORKER_SELECT = f"SELECT {WORKER_COLUMNS} FROM {WORKER} ORDER BY name"
# The change stamp's value: the writing transaction's id (what the triggers and the column's
# default set). A writer that sets it itself skips the task trigger's per-row call.
CHANGE_STAMP = "change_xid = pg_current_xact_id()::text::bigint"
# Workers stamped since a read (migration 0029: a heartbeat that changes nothing read is not).
WORKER_CHANGES = f"SELECT {WORKER_COLUMNS} FROM {WORKER} WHERE change_xid >= %s"


def worker_spec(row: tuple, shapes: WorkerShapes | None = None) -> WorkerSpec:
    """A worker row (``WORKER_COLUMNS``) as the core's spec. ``shapes``: parse each attributes
    text and device once per read (10,000 workers have a few thousand of one and a handful of
    the other)."""
    _, name, healthy, draining, cpu, mem, dtype, variant, count, attributes = row
    if shapes is None:
        shapes = WorkerShapes()
    return make_worker_spec(
        name,
        cpu,
        mem,
        shapes.device(dtype, variant, count),
        shapes.attributes(attributes),
        bool(healthy) and not draining,
    )


class WorkerShapes:
    """The devices and attribute maps of the workers of one read, by their columns. Each spec
    gets its own copy of its attribute map (a spec's map is its own, as the constructor's is)."""

    def __init__(self) -> None:
        self._devices: dict[tuple, Device] = {}
        self._attributes: dict[object, dict[str, str]] = {}

    def device(self, dtype: str, variant: str | None, count: int) -> Device:
        key = (dtype, variant, count)
        device = self._devices.get(key)
        if device is None:
            device = self._devices[key] = device_from_columns(dtype, variant, count)
        return device

    def attributes(self, raw) -> dict[str, str]:
        """``raw`` (the column as text, or as the driver parsed it) as a ``str -> str`` map."""
        if not isinstance(raw, str):  # the select casts the column to text: not from this module
            return {str(k): str(v) for k, v in (json_value(raw) or {}).items()}
        parsed = self._attributes.get(raw)
        if parsed is None:
            parsed = self._attributes[raw] = {str(k): str(v) for k, v in (json.loads(raw) or {}).items()}
        return dict(parsed)


class ClusterRows:
    """Jobs, tasks and held attempts as of the last :meth:`refresh`, with the workers.

    Kept in the shapes the tick hands on (task id -> row, job name -> spec, ...), so a refresh
    that read a few thousand changed rows costs in proportion to them, not to the cluster.

    :meth:`view` hands those maps over without copying them (copying 100,000 task rows costs
    more than a refresh that found nothing); they are copied on write: the first change after
    a view copies them first (:meth:`_own`), so what a view holds (and the decision remembered
    with it, ``scheduler.core.reuse``) never sees a later refresh's changes.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.database: tuple | None = None
        self.watermark: int | None = None
        self.epoch: int | None = None
        self.refreshed_at = 0.0
        self.last_refresh_kind = ""
        # Jobs: live ones, and ended ones while a held task of theirs needs them.
        self.job_names: dict[int, str] = {}  # pk -> name; the dicts below are by name
        self.ended_jobs: set[int] = set()
        self.job_specs: dict[str, JobSpec] = {}
        self.job_pks: dict[str, int] = {}
        self.job_states: dict[str, str] = {}  # how each finished, "" while live
        # Tasks of kept jobs: live ones, and finished ones an unconfirmed attempt holds.
        self.task_snapshots: dict[int, TaskSnapshot] = {}
        self.task_rows: dict[str, TaskRow] = {}
        self.held: dict[int, tuple[int, int]] = {}  # attempt pk -> (task pk, worker pk)
        self._held_by: dict[int, int] | None = None  # ``held_workers()`` while ``held`` is unchanged
        self.workers: tuple[WorkerSpec, ...] = ()
        self.worker_names: dict[int, str] = {}
        self.worker_pks: dict[str, int] = {}
        self._worker_cache: dict[int, tuple[tuple, WorkerSpec]] = {}  # pk -> (row as read, spec)
        self._worker_positions: dict[int, int] = {}  # pk -> its place in ``workers``
        self._resources = ResourceCache()
        # Copy on write: whether a view holds the maps below, and the tasks as the last view
        # had them (None once anything changed since).
        self._shared = False
        self._tasks: tuple[TaskSnapshot, ...] | None = None
        # The ids of the tasks taken in or dropped since the log began, in order, for readers
        # that keep something per task and update it from changes (the board's counts): see
        # :func:`task_changes`. A new log (a new ``log_epoch``) after every whole read.
        self.reset_log()

    def _own(self) -> None:
        """Before any change to the kept maps: copy those a view holds (see the class)."""
        self._tasks = None
        if self._shared:
            # ``.copy()``, not ``dict(...)``: a map that lost entries (every tick drops some) is
            # copied by ``dict()`` one entry at a time, by ``.copy()`` as one block while at most
            # a third of its slots are dead (100,000 entries: a few ms against tens).
            self.job_specs = self.job_specs.copy()
            self.job_pks = self.job_pks.copy()
            self.job_states = self.job_states.copy()
            self.task_snapshots = self.task_snapshots.copy()
            self.task_rows = self.task_rows.copy()
            self._shared = False

    # --- reading ------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Bring the rows up to date, in one transaction (one consistent instant)."""
        postgres = connection.vendor == "postgresql"
        outermost = not connection.in_atomic_block
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                marks = None
                if postgres:
                    if outermost:
                        # Every read below sees the same snapshot. (Inside a caller's
                        # transaction, in tests, the caller's isolation applies.)
                        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    cursor.execute(
                        "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint, epoch "
                        "FROM iris_snapshot_epoch WHERE id = 1"
                    )
                    marks = cursor.fetchone()
                settings = connection.settings_dict
                database = (connection.vendor, settings.get("NAME"), settings.get("HOST"), settings.get("PORT"))
                incremental = (
                    marks is not None
                    and self.watermark is not None
                    and database == self.database
                    and marks[1] == self.epoch
                    and time.monotonic() - self.refreshed_at < STALE_SECONDS
                )
                if not incremental:
                    self.reset()
                if incremental:
                    self._read_changed_workers(cursor, self.watermark)
                    self._read_changes(cursor, self.watermark)
                else:
                    self._read_workers(cursor)
                    self._read_all(cursor)
        except BaseException:
            self.reset()  # half-applied changes: start over next time
            raise
        self.database = database
        self.watermark, self.epoch = marks if marks is not None else (None, None)
        self.refreshed_at = time.monotonic()
        self.last_refresh_kind = "changes" if incremental else "all"

    def _read_workers(self, cursor) -> None:
        """Every worker, in name order; those read unchanged before keep their spec."""
        cursor.execute(WORKER_SELECT)
        workers: list[WorkerSpec] = []
        names: dict[int, str] = {}
        cache: dict[int, tuple[tuple, WorkerSpec]] = {}
        old = self._worker_cache
        shapes = WorkerShapes()
        for row in cursor.fetchall():
            pk, name = row[0], row[1]
            names[pk] = name
            previous = old.get(pk)
            spec = previous[1] if previous is not None and previous[0] == row else worker_spec(row, shapes)
            cache[pk] = (row, spec)
            workers.append(spec)
        self._worker_cache = cache
        self._worker_positions = {pk: position for position, pk in enumerate(cache)}
        self.workers = tuple(workers)
        self.worker_names = names
        self.worker_pks = {name: pk for pk, name in names.items()}

    def _read_changed_workers(self, cursor, since: int) -> None:
        """The workers stamped since the previous read (usually none: a heartbeat that changes
        nothing the tick reads is not stamped). A changed worker takes its place in ``workers``;
        a new or renamed one means reading them all again (their order is the database's
        collation of their names, which only it knows)."""
        cursor.execute(WORKER_CHANGES, [since])
        rows = cursor.fetchall()
        if not rows:
            return
        cache, positions = self._worker_cache, self._worker_positions
        changed = []
        for row in rows:
            previous = cache.get(row[0])
            if previous is None or previous[0][1] != row[1]:
                self._read_workers(cursor)
                return
            if previous[0] != row:
                changed.append(row)
        if not changed:
            return  # read again unchanged (a watermark held back by a long transaction)
        workers = list(self.workers)
        for row in changed:
            spec = worker_spec(row)
            cache[row[0]] = (row, spec)
            workers[positions[row[0]]] = spec
        self.workers = tuple(workers)

    def _read_all(self, cursor) -> None:
        """The live jobs and tasks, and the finished ones an unconfirmed attempt still holds.

        In id order, as the rows kept between refreshes are (new rows come after old ones): the
        decision may follow the order of jobs in a tie, and without an order PostgreSQL returns
        rows as they lie on disk, which an update reshuffles, so two whole reads of an unchanged
        cluster would differ (and an unchanged tick could not reuse its decision)."""
        cursor.execute(f"{ATTEMPT_SELECT} WHERE {HELD}")
        held_attempts = cursor.fetchall()
        self._take_attempts(held_attempts)
        # The held attempts' tasks by their ids, read just now (a few, however long the history):
        # a subquery instead let the planner misjudge how many and hash every task and job of a
        # year's history to find them (1.6 + 1.9 s at 10,000,000 finished tasks).
        held_tasks = ", ".join(str(int(task)) for task in sorted({row[1] for row in held_attempts}))
        cursor.execute(f"{JOB_SELECT} WHERE j.finished_state IS NULL ORDER BY j.id")
        self._take_jobs(cursor.fetchall())
        if held_tasks:
            cursor.execute(
                f"{JOB_SELECT} WHERE j.finished_state IS NOT NULL "
                f"AND j.id IN (SELECT t.job_id FROM {TASK} t WHERE t.id IN ({held_tasks})) ORDER BY j.id"
            )
            self._take_jobs(cursor.fetchall(), force=True)
        cursor.execute(f"{TASK_SELECT} WHERE {LIVE_TASK_MATCH} ORDER BY t.id")
        self._take_tasks(cursor.fetchall())
        if held_tasks:
            cursor.execute(
                f"{TASK_SELECT} WHERE t.state NOT IN {in_list(LIVE_TASK_VALUES)} AND t.id IN ({held_tasks}) ORDER BY t.id"
            )
            self._take_tasks(cursor.fetchall())

    def _read_changes(self, cursor, since: int) -> None:
        """Rows written by transactions that may have committed after the previous read."""
        cursor.execute(f"{ATTEMPT_SELECT} WHERE a.change_xid >= %s", [since])
        dirty = self._take_attempts(cursor.fetchall())
        cursor.execute(f"{JOB_SELECT} WHERE j.change_xid >= %s", [since])
        self._take_jobs(cursor.fetchall())
        cursor.execute(f"{TASK_SELECT} WHERE t.change_xid >= %s", [since])
        rows = cursor.fetchall()
        orphans = self._take_tasks(rows)
        if dirty:
            dirty -= {row[0] for row in rows}

        # Tasks whose held attempts changed but whose own row did not.
        held_by = self.held_workers() if dirty else {}
        missing = []
        for pk in dirty:
            snapshot = self.task_snapshots.get(pk)
            if snapshot is not None:
                worker = held_by.get(pk)
                name = self.worker_names.get(worker) if worker else None
                if snapshot.state not in LIVE_TASK_STATES and worker is None:
                    self._drop_task(pk)
                elif name != snapshot.unfinished_attempt_worker:
                    self._own()
                    self.task_snapshots[pk] = replace(snapshot, unfinished_attempt_worker=name)
                    self.task_log.append(snapshot.id)
            elif pk in held_by:
                missing.append(pk)
        if missing:
            # A finished task, dropped earlier, that an attempt holds again.
            cursor.execute(f"{TASK_SELECT} WHERE t.id = ANY(%s)", [missing])
            orphans.extend(cursor.fetchall())
        if orphans:
            # Held tasks of jobs that ended before: the jobs come back while the hold lasts.
            cursor.execute(f"{JOB_SELECT} WHERE j.id = ANY(%s)", [sorted({row[1] for row in orphans})])
            self._take_jobs(cursor.fetchall(), force=True)
            self._take_tasks(orphans)
        self._drop_unneeded_jobs()

    # --- taking rows in -----------------------------------------------------------------------

    def held_workers(self) -> dict[int, int]:
        """task pk -> the worker its newest held attempt is on: read it, never change it. Kept
        until ``held`` changes (every refresh that takes a task in reads it; sorting every held
        attempt each time cost a refresh that took in a handful of tasks ~20 ms of its CPU once
        a few thousand were held)."""
        result = self._held_by
        if result is None:
            result = self._held_by = {}
            for _, (task_pk, worker_pk) in sorted(self.held.items()):
                result[task_pk] = worker_pk
        return result

    def _take_attempts(self, rows) -> set[int]:
        """Track which attempts hold a worker; returns the tasks whose holds may have changed."""
        dirty = set()
        for pk, task_pk, worker_pk, state, unfinished in rows:
            if unfinished and worker_pk is not None and state not in ACTIVE_TASKS:
                if self.held.get(pk) != (task_pk, worker_pk):
                    self.held[pk] = (task_pk, worker_pk)
                    dirty.add(task_pk)
            elif self.held.pop(pk, None) is not None:
                dirty.add(task_pk)
        if dirty:
            self._held_by = None
        return dirty

    def _take_jobs(self, rows, *, force: bool = False) -> None:
        """Live jobs are kept; a job that ended stays only while a held task needs it (``force``
        takes ended jobs the caller knows are needed)."""
        job_names, ended_jobs, resources = self.job_names, self.ended_jobs, self._resources
        owned = False  # the maps a view holds are copied before the first change; once is enough
        for row in rows:
            pk, state, name = row[0], row[1], row[2]
            live = state in LIVE_JOBS
            if pk not in job_names:
                if not (live or force):
                    continue
                if not owned:
                    self._own()
                    owned = True
                job_names[pk] = name
                self.job_specs[name] = job_spec_from_row(row[2:], resources)
                self.job_pks[name] = pk
            # Live or how it finished: all else about a job is fixed at submission, and a live
            # job's flips between pending and running are not stamped (migration 0025), so a
            # changes read would not follow them.
            finished = "" if live else state
            if self.job_states.get(name) != finished:
                if not owned:
                    self._own()
                    owned = True
                self.job_states[name] = finished
            if live:
                ended_jobs.discard(pk)
            else:
                ended_jobs.add(pk)

    def _take_tasks(self, rows) -> list[tuple]:
        """Keep live tasks and held finished ones of kept jobs. Returns the rows of held tasks
        whose job is not kept (the caller fetches the job and offers them again)."""
        orphans: list[tuple] = []
        if not rows:
            return orphans
        held_by = self.held_workers()
        worker_names = self.worker_names
        job_names = self.job_names
        snapshots = self.task_snapshots
        task_rows = self.task_rows
        pending = TaskState.PENDING.value
        log = self.task_log.append
        new_row = tuple.__new__  # TaskRow(...) without its Python-level __new__, one per row
        owned = False  # whether the kept maps are this object's own since the loop began
        for pk, job_pk, index, state, worker_pk, band, preemption_count, attempt_count in rows:
            job_name = job_names.get(job_pk)
            held = held_by.get(pk)
            if job_name is None or (state not in LIVE_TASKS and held is None):
                if pk in snapshots:  # dropped here, as ``_drop_task`` does (a burst ends thousands)
                    if not owned:
                        self._own()
                        snapshots, task_rows, owned = self.task_snapshots, self.task_rows, True
                    dropped = snapshots.pop(pk).id
                    del task_rows[dropped]
                    log(dropped)
                if job_name is None and held is not None:
                    orphans.append((pk, job_pk, index, state, worker_pk, band, preemption_count, attempt_count))
                continue
            task_id = f"{job_name}/{index}"
            snapshot = task_snapshot(
                task_id,
                job_name,
                index,
                TASK_STATES[state],
                worker_names.get(worker_pk) if worker_pk else None,
                BANDS[band] if band is not None and state != pending else None,
                preemption_count,
                worker_names.get(held) if held else None,
            )
            row = new_row(TaskRow, (pk, job_pk, state, worker_pk, attempt_count))
            kept = snapshots.get(pk)
            # Read again unchanged (a watermark held back by a long transaction)? The rows first:
            # a tuple compares in C, where the snapshots' dataclass equality runs Python.
            if kept is not None and task_rows.get(task_id) == row and kept == snapshot:
                continue
            if not owned:  # the maps a view holds are copied before the first change; once is enough
                self._own()
                snapshots, task_rows, owned = self.task_snapshots, self.task_rows, True
            snapshots[pk] = snapshot
            task_rows[task_id] = row
            log(task_id)
        return orphans

    def _drop_task(self, pk: int) -> None:
        if pk not in self.task_snapshots:
            return
        self._own()
        snapshot = self.task_snapshots.pop(pk)
        del self.task_rows[snapshot.id]
        self.task_log.append(snapshot.id)

    def _drop_unneeded_jobs(self) -> None:
        """Ended jobs stay only while one of their tasks is held; their tasks go with them."""
        if not self.ended_jobs:
            return
        needed = set()
        for task_pk, _ in self.held.values():
            snapshot = self.task_snapshots.get(task_pk)
            if snapshot is not None:
                needed.add(self.task_rows[snapshot.id].job_pk)
        for pk in list(self.ended_jobs):
            if pk not in needed:
                self._own()
                self.ended_jobs.discard(pk)
                name = self.job_names.pop(pk)
                replicas = self.job_specs.pop(name).replicas
                del self.job_pks[name]
                del self.job_states[name]
                # A job's tasks are ``name/0`` to ``name/replicas-1``.
                for index in range(replicas):
                    row = self.task_rows.get(f"{name}/{index}")
                    if row is not None:
                        self._drop_task(row.pk)

    # --- what the tick gets ---------------------------------------------------------------------

    def view(self) -> ClusterView:
        """The rows now, the caller's to keep: the kept maps themselves, copied on the next
        change (see the class), and the tasks' tuple the previous view had if none changed."""
        if self._tasks is None:
            self._tasks = tuple(self.task_snapshots.values())
        self._shared = True
        return ClusterView(
            workers=self.workers,
            worker_pks=self.worker_pks,  # rebuilt by every refresh, never changed in place
            jobs=self.job_specs,
            job_pks=self.job_pks,
            job_states=self.job_states,
            tasks=self._tasks,
            task_rows=self.task_rows,
            refresh=self.last_refresh_kind,
            task_snapshots=self.task_snapshots,
            changes=(self.log_epoch, self.log_start + len(self.task_log)),
        )

    def changes(self, since: tuple[int, int], upto: tuple[int, int]) -> list[str] | None:
        """The ids of the tasks taken in or dropped between two views' ``changes`` marks (an
        id may appear more than once), or None when the log cannot say (another log, or a part
        already let go). Lets go of the log up to ``since``: one reader keeps its mark."""
        epoch, start = since
        if epoch != self.log_epoch or upto[0] != self.log_epoch or start < self.log_start:
            return None
        del self.task_log[: start - self.log_start]
        self.log_start = start
        if len(self.task_log) > MAX_LOGGED_CHANGES:
            self.reset_log()
            return None
        return self.task_log[: upto[1] - start]

    def reset_log(self) -> None:
        """Start a new change log: readers holding a mark in the old one rebuild."""
        global _log_epochs
        _log_epochs += 1
        self.log_epoch = _log_epochs
        self.log_start = 0  # the position of task_log[0]
        self.task_log: list[str] = []


@dataclass(frozen=True, slots=True)
class ClusterView:
    """One refresh's rows, the caller's to keep: core specs, and the keys to write back with.
    ``refresh`` says whether the whole cluster was read (``all``) or only changes. The maps
    are shared with the :class:`ClusterRows` they came from (and the next views while nothing
    changes): read them, never change them."""

    workers: tuple[WorkerSpec, ...]
    worker_pks: dict[str, int]
    jobs: dict[str, JobSpec]
    job_pks: dict[str, int]
    job_states: dict[str, str]
    tasks: tuple[TaskSnapshot, ...]
    task_rows: dict[str, TaskRow]
    refresh: str
    # Task pk -> snapshot (``task_rows[id].pk`` finds one by id), and where the change log of
    # the rows this view came from stood (see :func:`task_changes`).
    task_snapshots: dict[int, TaskSnapshot] = field(default_factory=dict)
    changes: tuple[int, int] = (0, 0)


# A change log longer than this (nobody reads it) starts over: readers then rebuild.
MAX_LOGGED_CHANGES = 1_000_000
_log_epochs = 0

_process_rows = ClusterRows()
_lock = threading.Lock()


def task_changes(since: tuple[int, int], upto: tuple[int, int]) -> list[str] | None:
    """The ids of this process's tasks taken in or dropped between the views marked ``since``
    and ``upto`` (``ClusterView.changes``), or None when only a whole rebuild can tell (a view
    read whole, e.g. every read on SQLite or inside a transaction, or a log let go)."""
    with _lock:
        return _process_rows.changes(since, upto)


def read_cluster() -> ClusterView:
    """The cluster now: this process's rows, refreshed (see the module's docstring).

    Inside a caller's transaction the rows read may include its own uncommitted writes, which a
    rollback would take back: then the cluster is read whole and nothing is kept.
    """
    if connection.in_atomic_block:
        rows = ClusterRows()
        rows.refresh()
        return rows.view()
    with _lock:
        _process_rows.refresh()
        return _process_rows.view()


def forget_cluster_rows() -> None:
    """Read everything at the next refresh (tests: rows of a rolled-back test must not linger)."""
    with _lock:
        _process_rows.reset()
