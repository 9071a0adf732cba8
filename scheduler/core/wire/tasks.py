"""JSON -> core types: the snapshot's tasks, those it lists checked field by field and the
pending rest of its jobs' tasks built (see the package for the format's rules)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from scheduler.core.types import (
    ACTIVE_STATES,
    JobSpec,
    TaskSnapshot,
    TaskState,
    _TaskSnapshotFiller,
    task_snapshot,
)
from scheduler.core.wire.columns import as_parsed
from scheduler.core.wire.fields import (
    BANDS_BY_WIRE,
    fail,
    json_band,
    json_int,
    json_list,
    json_object,
    json_str,
)

# A task index: a decimal number without sign or leading zeros, so each task has one id.
TASK_INDEX = re.compile(r"^(0|[1-9][0-9]*)$")
# For error messages: the accepted task states.
STATE_NAMES = "|".join(s.value for s in TaskState)
# Plain dict look-ups: calling an Enum per task costs more than the rest of its validation.
TASK_STATES_BY_VALUE = {state.value: state for state in TaskState}
TASK_KEYS = frozenset({"id", "state", "worker", "band", "preemption_count", "unfinished_attempt_worker"})
# The fields the fast path reads, in the order it unpacks them (see ``as_parsed``).
TASK_FIELDS = ("id", "state", "worker", "unfinished_attempt_worker", "band", "preemption_count")


def _tasks(raw: Any, path: str, jobs: Mapping[str, JobSpec], worker_ids: set[str]) -> tuple[TaskSnapshot, ...]:
    listed: dict[str, TaskSnapshot] = {}
    states = TASK_STATES_BY_VALUE
    bands = BANDS_BY_WIRE
    active = ACTIVE_STATES
    most = max((job.replicas for job in jobs.values()), default=0)
    # Each index a task may have, by its one spelling (no sign or leading zeros, as TASK_INDEX).
    index_of = {str(index): index for index in range(most)}
    filler = _TaskSnapshotFiller
    items = json_list(raw, path)
    k_id, k_state, k_worker, k_unfinished, k_band, k_count = as_parsed(items, TASK_FIELDS)
    # The allowed keys as the document spells them too: the check then matches them by identity.
    allowed = frozenset(as_parsed(items, tuple(TASK_KEYS)))
    for i, item in enumerate(items):
        # The common shape is checked inline; anything else (and every error) takes _task, which
        # checks the fields in order.
        task = None
        if item.__class__ is dict and allowed.issuperset(item):
            get = item.get
            task_id = get(k_id)
            state = get(k_state, "pending")
            worker = get(k_worker)
            unfinished = get(k_unfinished)
            band = get(k_band)
            count = get(k_count, 0)
            if task_id.__class__ is str and state.__class__ is str and (band is None or band.__class__ is str):
                job_id, _, index_text = task_id.rpartition("/")
                job = jobs.get(job_id)
                index = index_of.get(index_text)
                state = states.get(state)
                band = None if band is None else bands.get(band, False)
                if (
                    job is not None
                    and index is not None
                    and index < job.replicas
                    and state is not None
                    and band is not False
                    and task_id not in listed
                    and (worker is None or (worker.__class__ is str and worker in worker_ids and state in active))
                    and (unfinished is None or (unfinished.__class__ is str and unfinished in worker_ids))
                    and count.__class__ is int
                    and count >= 0
                ):
                    # task_snapshot(...) inline (a call less a task).
                    task = filler()
                    task.id = task_id
                    task.job_id = job_id
                    task.index = index
                    task.state = state
                    task.worker = worker
                    task.band = band
                    task.preemption_count = count
                    task.unfinished_attempt_worker = unfinished
                    task.__class__ = TaskSnapshot
        if task is None:
            task = _task(item, f"{path}[{i}]", jobs, worker_ids, listed)
        listed[task.id] = task
    return _with_pending(jobs, listed, most)


def _with_pending(jobs: Mapping[str, JobSpec], listed: Mapping[str, TaskSnapshot], most: int) -> tuple:
    """Every task of ``jobs``, job by job in index order: the ``listed`` one where there is one,
    else a new pending task.

    The pending tasks (100,000 in a large snapshot) are built inline, as ``task_snapshot``
    builds them (its slots filled on a filler, then re-classed), without a call each."""
    tasks: list[TaskSnapshot] = []
    append = tasks.append
    pending = TaskState.PENDING
    filler = _TaskSnapshotFiller
    cls = TaskSnapshot
    listed_jobs = {task.job_id for task in listed.values()}
    # "/0", "/1", ...: a task id is its job id and one of these (cheaper than formatting each).
    suffixes = [f"/{index}" for index in range(most)]
    for job in jobs.values():
        job_id = job.id
        by_job = job_id in listed_jobs
        for index in range(job.replicas):
            task_id = job_id + suffixes[index]
            if by_job:
                task = listed.get(task_id)
                if task is not None:
                    append(task)
                    continue
            task = filler()
            task.id = task_id
            task.job_id = job_id
            task.index = index
            task.state = pending
            task.worker = None
            task.band = None
            task.preemption_count = 0
            task.unfinished_attempt_worker = None
            task.__class__ = cls
            append(task)
    return tuple(tasks)


def _task(
    item: Any, p: str, jobs: Mapping[str, JobSpec], worker_ids: set[str], listed: Mapping[str, TaskSnapshot]
) -> TaskSnapshot:
    """One listed task, every field checked in order (the first problem raises)."""
    item = json_object(item, p, TASK_KEYS)
    task_id = json_str(item.get("id"), p, "id")
    job_id, _, index_text = task_id.rpartition("/")
    if not TASK_INDEX.match(index_text):
        raise fail(f"{p}.id", "expected <job id>/<index>")
    job = jobs.get(job_id)
    if job is None:
        raise fail(f"{p}.id", f"no job {job_id!r} in the snapshot")
    index = int(index_text)
    if index >= job.replicas:
        raise fail(f"{p}.id", f"index {index} out of range: job {job_id!r} has {job.replicas} replicas")
    if task_id in listed:
        raise fail(f"{p}.id", f"duplicate task id {task_id!r}")
    state = item.get("state", "pending")
    state = TASK_STATES_BY_VALUE.get(state) if isinstance(state, str) else None
    if state is None:
        raise fail(f"{p}.state", f"expected one of {STATE_NAMES}")
    worker = item.get("worker")
    if worker is not None:
        worker = json_str(worker, p, "worker")
        if worker not in worker_ids:
            raise fail(f"{p}.worker", f"no worker {worker!r} in the snapshot")
        if state not in ACTIVE_STATES:
            raise fail(f"{p}.worker", f"a {state.value} task has no worker")
    unfinished = item.get("unfinished_attempt_worker")
    if unfinished is not None:
        unfinished = json_str(unfinished, p, "unfinished_attempt_worker")
        if unfinished not in worker_ids:
            raise fail(f"{p}.unfinished_attempt_worker", f"no worker {unfinished!r} in the snapshot")
    band = item.get("band")
    return task_snapshot(
        task_id,
        job_id,
        index,
        state,
        worker,
        None if band is None else json_band(band, p, "band"),
        json_int(item.get("preemption_count", 0), p, "preemption_count"),
        unfinished,
    )
