"""Core types -> JSON: the snapshot as ``snapshot`` prints it and the decision as ``simulate``
prints it (see the package for key order)."""

from __future__ import annotations

from collections.abc import Mapping
from bisect import insort
from dataclasses import dataclass
from itertools import chain, repeat
from typing import Any

from scheduler.core.bands import Band
from scheduler.core.explain import pending_queue
from scheduler.core.types import (
    ClusterSnapshot,
    Constraint,
    ConstraintOp,
    Decision,
    Device,
    DeviceType,
    JobSpec,
    TaskMap,
    TaskSnapshot,
    TaskState,
)
from scheduler.core.wire.read import OMITTED_TASK_STATE


def _device_json(device: Device) -> dict:
    if device.type is DeviceType.CPU:
        return {"type": "cpu"}
    return {"type": device.type.value, "variant": device.variant, "count": device.count}


def _constraint_json(c: Constraint) -> dict:
    out: dict[str, Any] = {"key": c.key, "op": c.op.value}
    if c.op is ConstraintOp.IN:
        out["value"] = list(c.value)
    elif c.op is not ConstraintOp.EXISTS:
        out["value"] = c.value
    out["soft"] = c.soft
    return out


def _is_plain_pending(task: TaskSnapshot) -> bool:
    return (
        task.state is TaskState.PENDING
        and task.worker is None
        and task.band is None
        and task.preemption_count == 0
        and task.unfinished_attempt_worker is None
    )


def snapshot_to_json(snapshot: ClusterSnapshot) -> dict:
    """The snapshot as a JSON-ready dict, every field explicit (see the module docstring)."""
    config = snapshot.config
    by_id = {t.id: t for t in snapshot.tasks}
    tasks = []
    for job in snapshot.jobs.values():
        for index in range(job.replicas):
            task_id = f"{job.id}/{index}"
            task = by_id.get(task_id)
            if task is None:
                tasks.append(_task_json(TaskSnapshot(task_id, job.id, index, state=OMITTED_TASK_STATE)))
            elif not _is_plain_pending(task):
                tasks.append(_task_json(task))
    out = {
        "now_ms": snapshot.now_ms,
        "config": {
            "max_tasks_per_job_per_cycle": config.max_tasks_per_job_per_cycle,
            "max_assignments_per_worker": config.max_assignments_per_worker,
            "max_building_tasks": config.max_building_tasks,
            "budget_defaults": {
                "budget_limit": config.budget_defaults.budget_limit,
                "max_band": config.budget_defaults.max_band.wire,
            },
        },
        "budgets": [
            {"user": b.user, "budget_limit": b.budget_limit, "max_band": b.max_band.wire}
            for b in snapshot.budgets.values()
        ],
        "workers": [
            {
                "id": w.id,
                "healthy": w.healthy,
                "cpu_millicores": w.cpu_millicores,
                "memory_bytes": w.memory_bytes,
                "device": _device_json(w.device),
                "attributes": dict(w.attributes),
            }
            for w in snapshot.workers
        ],
        "jobs": [_job_json(job) for job in snapshot.jobs.values()],
        "tasks": tasks,
    }
    # Written only when there are any, so snapshots of clusters without TPU provisioning stay
    # byte-identical to the format before scale groups were part of it.
    if snapshot.scale_groups:
        out["scale_groups"] = [
            {
                "name": g.name,
                "variant": g.variant,
                "zone": g.zone,
                "min_slices": g.min_slices,
                "max_slices": g.max_slices,
                "hosts_per_slice": g.hosts_per_slice,
                "chips_per_host": g.chips_per_host,
            }
            for g in snapshot.scale_groups
        ]
    return out


def _job_json(job: JobSpec) -> dict:
    return {
        "id": job.id,
        "user": job.user,
        "band": job.band.wire,
        "parent": job.parent,
        "submitted_at_ms": job.submitted_at_ms,
        "root_submitted_at_ms": job.root_submitted_at_ms,
        "replicas": job.replicas,
        "resources": {
            "cpu_millicores": job.resources.cpu_millicores,
            "memory_bytes": job.resources.memory_bytes,
            "device": _device_json(job.resources.device),
        },
        "coscheduling": None if job.group_by is None else {"group_by": job.group_by},
        "constraints": [_constraint_json(c) for c in job.constraints],
        "scheduling_deadline_ms": job.scheduling_deadline_ms,
        "max_retries_preemption": job.max_retries_preemption,
        "max_retries_failure": job.max_retries_failure,
    }


def _task_json(task: TaskSnapshot) -> dict:
    return {
        "id": task.id,
        "state": task.state.value,
        "worker": task.worker,
        "band": None if task.band is None else task.band.wire,
        "preemption_count": task.preemption_count,
        "unfinished_attempt_worker": task.unfinished_attempt_worker,
    }


# -- decision to JSON ---------------------------------------------------------------------------


def task_sort_key(task_id: str) -> tuple[str, int]:
    """(job id, index) of a task id, so ``/a/j/10`` sorts after ``/a/j/9``."""
    job_id, _, index = task_id.rpartition("/")
    return (job_id, int(index))


@dataclass(frozen=True, slots=True)
class _Entry:
    """A task of a :class:`TaskMap` known by its id alone (an ``extra`` entry), for its runs."""

    id: str
    job_id: str
    index: int


def _in_task_order(mapping: Mapping[str, Any]) -> tuple[list[str], list[Any], list[int]]:
    """The task ids of ``mapping`` sorted by :func:`task_sort_key`, as runs of tasks sharing a
    value: (the ids, each run's value, each run's length).

    A :class:`TaskMap`'s runs are taken whole, put in order by their first task (a job's runs
    hold its tasks by index, the tasks of one run before the next's); only the jobs with an
    ``extra`` or ``removed`` task go a task at a time. Any other map is sorted by task."""
    if not isinstance(mapping, TaskMap):
        ids = sorted(mapping, key=task_sort_key)
        return ids, list(map(mapping.__getitem__, ids)), [1] * len(ids)
    runs = [run for run in mapping.runs if run[0]]
    extra, removed = mapping.extra, mapping.removed
    if extra or removed:
        touched = {task_id[: task_id.rfind("/")] for task_id in chain(extra, removed)}
        singles = [
            ((task,), value)
            for tasks, value in runs
            if tasks[0].job_id in touched
            for task in tasks
            if task.id not in removed
        ]
        runs = [run for run in runs if run[0][0].job_id not in touched]
        runs.extend(singles)
        runs.extend(
            ((_Entry(task_id, job_id, int(index)),), value)
            for task_id, value in extra.items()
            if task_id not in removed
            for job_id, _, index in (task_id.rpartition("/"),)
        )
    # By (job id, first index): a stable sort by index, then one by job id (plain keys compare
    # in C far faster than tuples).
    firsts = [tasks[0] for tasks, _ in runs]
    by_index = sorted(range(len(runs)), key=[task.index for task in firsts].__getitem__)
    runs = list(map(runs.__getitem__, sorted(by_index, key=[task.job_id for task in firsts].__getitem__)))
    return [task.id for tasks, _ in runs for task in tasks], [value for _, value in runs], [len(t) for t, _ in runs]


def _after_in_task_order(after: Mapping[str, Any], in_order: list[str]) -> list[str]:
    """The task ids of ``after`` sorted by :func:`task_sort_key`: those among ``in_order`` (task
    ids in that order: the effective bands', which hold every task placed or expired) picked
    from it in C, the few others (preemption victims, their gang siblings) put in place."""
    ids = list(filter(after.__contains__, in_order))
    if len(ids) == len(after):
        return ids
    picked = set(ids)
    others = [task_id for task_id in after if task_id not in picked]
    if len(others) > len(ids) // 8:
        return sorted(after, key=task_sort_key)
    for task_id in others:
        insort(ids, task_id, key=task_sort_key)
    return ids


# Wire names by dict look-up: ``Band.wire`` and ``Enum.value`` are Python-level properties.
BAND_WIRE = {band: band.wire for band in Band}
BAND_WIRE_OR_NONE = {None: None, **BAND_WIRE}
TASK_STATE_VALUES = {state: state.value for state in TaskState}


def decision_to_json(decision: Decision) -> dict:
    """The decision in the format of docs/snapshot-format.md; pending reasons rendered as text
    (cause and downgrade; a task's place is in ``queue``, the one definition of positions).

    The maps keyed by task are in task order (:func:`task_sort_key`); ``decide``'s effective
    bands and reasons are put in that order a job at a time (``_in_task_order``)."""
    band_wire = BAND_WIRE
    band_ids, band_values, band_lengths = _in_task_order(decision.effective_bands)
    reason_ids, reason_values, reason_lengths = _in_task_order(decision.pending_reasons)
    # Each reason object is rendered once (equal reasons are often one object).
    texts = {
        key: reason.text() if hasattr(reason, "text") else str(reason)
        for key, reason in dict(zip(map(id, reason_values), reason_values)).items()
    }
    after = decision.after
    after_ids = _after_in_task_order(after, band_ids)
    after_values = list(map(after.__getitem__, after_ids))
    states, band_or_none = TASK_STATE_VALUES, BAND_WIRE_OR_NONE
    # ``decide`` shares one TaskAfter between tasks with the same outcome (thousands land on
    # one worker alike), so each is rendered once and the tasks share its (read-only) dict.
    rendered = {
        key: {
            "state": states[task.state],
            "worker": task.worker,
            "band": band_or_none[task.band],
            "preemption_count": task.preemption_count,
        }
        for key, task in dict(zip(map(id, after_values), after_values)).items()
    }
    return {
        "spend": {user: decision.spend[user] for user in sorted(decision.spend)},
        "effective_bands": dict(
            zip(band_ids, chain.from_iterable(map(repeat, map(band_wire.__getitem__, band_values), band_lengths)))
        ),
        "order": list(decision.order),
        "assignments": [{"task": a.task, "worker": a.worker, "band": band_wire[a.band]} for a in decision.assignments],
        "preemptions": [
            {"victim": p.victim, "preemptor": p.preemptor, "worker": p.worker} for p in decision.preemptions
        ],
        "unschedulable": [{"task": u.task, "reason": u.reason} for u in decision.unschedulable],
        "pending_reasons": dict(
            zip(
                reason_ids,
                chain.from_iterable(map(repeat, map(texts.__getitem__, map(id, reason_values)), reason_lengths)),
            )
        ),
        "queue": {band_wire[band]: tasks for band, tasks in pending_queue(decision).items()},
        "after": dict(zip(after_ids, map(rendered.__getitem__, map(id, after_values)))),
        "jobs_after": {job: decision.jobs_after[job].value for job in sorted(decision.jobs_after)},
    }
