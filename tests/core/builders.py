"""Small builders for core snapshots, with defaults, so each test states only what matters.

Units are the ones people think in: cores and GiB (converted to millicores and bytes). Every
snapshot is read at the fixed ``NOW``. Tasks not given explicitly are PENDING, as in the JSON
format.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduler.core.bands import Band
from scheduler.core.types import (
    BudgetDefaults,
    BudgetSpec,
    ClusterSnapshot,
    Constraint,
    ConstraintOp,
    Decision,
    Device,
    DeviceType,
    JobSpec,
    Resources,
    SchedulerConfig,
    TaskSnapshot,
    TaskState,
    WorkerSpec,
)

NOW = 1_800_000_000_000
GIB = 1 << 30


def device(gpu: int = 0, tpu: int = 0, variant: str | None = None) -> Device:
    if gpu:
        return Device(DeviceType.GPU, variant, gpu)
    if tpu:
        return Device(DeviceType.TPU, variant, tpu)
    return Device()


def worker(
    id: str,
    cpu: float = 8,
    mem: float = 32,
    gpu: int = 0,
    tpu: int = 0,
    variant: str | None = None,
    healthy: bool = True,
    **attributes: str,
) -> WorkerSpec:
    """A worker with ``cpu`` cores and ``mem`` GiB. Keyword attributes use ``_`` for ``-``."""
    attrs = {key.replace("_", "-"): value for key, value in attributes.items()}
    return WorkerSpec(id, int(cpu * 1000), int(mem * GIB), device(gpu, tpu, variant), attrs, healthy)


def tpu_slice(name: str, hosts: int = 4, chips: int = 4, variant: str = "v5p", cpu: float = 208, mem: float = 448):
    """The hosts of one TPU slice, with ``tpu-name`` and ``tpu-worker-id``."""
    return [
        worker(f"{name}-{i}", cpu, mem, tpu=chips, variant=variant, tpu_name=name, tpu_worker_id=str(i))
        for i in range(hosts)
    ]


def job(
    id: str,
    band: Band | str = Band.INTERACTIVE,
    replicas: int = 1,
    cpu: float = 1,
    mem: float = 1,
    gpu: int = 0,
    tpu: int = 0,
    variant: str | None = None,
    group_by: str | None = None,
    constraints: Iterable[Constraint] = (),
    deadline: int | None = None,
    submitted: int = 0,
    root_submitted: int | None = None,
    user: str | None = None,
    max_retries_preemption: int = 100,
) -> JobSpec:
    """A job; the user is the first segment of its id unless given."""
    parent = id.rsplit("/", 1)[0]
    return JobSpec(
        id=id,
        user=user or id.split("/")[1],
        band=Band.parse(band),
        parent=parent if parent.count("/") >= 2 else None,
        submitted_at_ms=submitted,
        root_submitted_at_ms=submitted if root_submitted is None else root_submitted,
        replicas=replicas,
        resources=Resources(int(cpu * 1000), int(mem * GIB), device(gpu, tpu, variant)),
        group_by=group_by,
        constraints=tuple(constraints),
        scheduling_deadline_ms=deadline,
        max_retries_preemption=max_retries_preemption,
    )


def task(
    id: str,
    state: TaskState | str = TaskState.RUNNING,
    worker: str | None = None,
    band: Band | str | None = None,
    preemption_count: int = 0,
    unfinished_attempt_worker: str | None = None,
) -> TaskSnapshot:
    """A task by id (``<job id>/<index>``). Active tasks default to the job's requested band
    when ``band`` is None (the core does the same)."""
    job_id, _, index = id.rpartition("/")
    return TaskSnapshot(
        id=id,
        job_id=job_id,
        index=int(index),
        state=TaskState(state),
        worker=worker,
        band=None if band is None else Band.parse(band),
        preemption_count=preemption_count,
        unfinished_attempt_worker=unfinished_attempt_worker,
    )


def running(id: str, worker: str, band: Band | str | None = None, preemption_count: int = 0) -> TaskSnapshot:
    return task(id, TaskState.RUNNING, worker, band, preemption_count)


def budget(user: str, limit: int, max_band: Band | str = Band.INTERACTIVE) -> BudgetSpec:
    return BudgetSpec(user, limit, Band.parse(max_band))


def eq(key: str, value: str, soft: bool = False) -> Constraint:
    return Constraint(key, ConstraintOp.EQ, value, soft)


def ne(key: str, value: str, soft: bool = False) -> Constraint:
    return Constraint(key, ConstraintOp.NE, value, soft)


def in_(key: str, *values: str, soft: bool = False) -> Constraint:
    return Constraint(key, ConstraintOp.IN, tuple(values), soft)


def exists(key: str, soft: bool = False) -> Constraint:
    return Constraint(key, ConstraintOp.EXISTS, None, soft)


def cluster(
    workers: Iterable[WorkerSpec] = (),
    jobs: Iterable[JobSpec] = (),
    tasks: Iterable[TaskSnapshot] = (),
    budgets: Iterable[BudgetSpec] = (),
    now: int = NOW,
    budget_limit: int = 0,
    max_tasks_per_job_per_cycle: int = 4,
    max_assignments_per_worker: int = 4,
    max_building_tasks: int = 8,
) -> ClusterSnapshot:
    """A snapshot. Budgets default to *unlimited* (``budget_limit`` 0) so that tests about
    placement are not disturbed by downgrades; budget tests set limits explicitly."""
    jobs = list(jobs)
    listed = {t.id: t for t in tasks}
    all_tasks = []
    for spec in jobs:
        for index in range(spec.replicas):
            task_id = f"{spec.id}/{index}"
            all_tasks.append(listed.pop(task_id, None) or TaskSnapshot(task_id, spec.id, index))
    assert not listed, f"tasks of unknown jobs or out of range: {sorted(listed)}"
    config = SchedulerConfig(
        max_tasks_per_job_per_cycle=max_tasks_per_job_per_cycle,
        max_assignments_per_worker=max_assignments_per_worker,
        max_building_tasks=max_building_tasks,
        budget_defaults=BudgetDefaults(budget_limit=budget_limit),
    )
    return ClusterSnapshot(
        now_ms=now,
        config=config,
        budgets={b.user: b for b in budgets},
        workers=tuple(workers),
        jobs={spec.id: spec for spec in jobs},
        tasks=tuple(all_tasks),
    )


def placed(decision: Decision) -> dict[str, str]:
    """task id -> worker id of every assignment."""
    return {a.task: a.worker for a in decision.assignments}


def evicted(decision: Decision) -> dict[str, str]:
    """victim id -> preemptor id of every preemption."""
    return {p.victim: p.preemptor for p in decision.preemptions}


def reason_text(decision: Decision, task_id: str) -> str:
    return decision.pending_reasons[task_id].text()
