"""The one boundary adapter: database rows -> core types, and a decision -> what the console reads.

``load_snapshot`` reads everything a tick decides over with a fixed number of queries, whatever
the size of the cluster, and returns the :class:`ClusterSnapshot` together with the id maps the
shell needs to write the decision back.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import chain

from django.conf import settings

from scheduler import budgets
from scheduler.cluster_config import cluster_config
from scheduler.core.bands import Band
from scheduler.core.budget import effective_band
from scheduler.core.kueue import (
    BACKEND_KEY,
    ROUTE_KUBERNETES,
    ROUTE_WORKERS,
    KueueInput,
    RoutingTable,
    route_job,
)
from scheduler.core.types import (
    ACTIVE_STATES,
    TERMINAL_JOB_STATES,
    TERMINAL_STATES,
    ClusterSnapshot,
    Constraint,
    ConstraintOp,
    Decision,
    Device,
    DeviceType,
    JobSpec,
    JobState,
    Resources,
    SchedulerConfig,
    TaskSnapshot,
    TaskState,
    WorkerSpec,
)
from scheduler.models import Attempt, BackendState, Job, Task, Worker

TERMINAL_TASK_VALUES = [s.value for s in TERMINAL_STATES]
ACTIVE_TASK_VALUES = [s.value for s in ACTIVE_STATES]
TERMINAL_JOB_VALUES = [s.value for s in TERMINAL_JOB_STATES]
LIVE_TASK_VALUES = [s.value for s in TaskState if s not in TERMINAL_STATES]
LIVE_JOB_VALUES = [s.value for s in JobState if s not in TERMINAL_JOB_STATES]
# Plain dict look-ups: calling an Enum per row costs more than the rest of the row's work.
TASK_STATES = {s.value: s for s in TaskState}
BANDS = {int(b): b for b in Band}


@dataclass(frozen=True, slots=True)
class TaskRow:
    """What the shell needs to write a task back: its primary key and its state when read."""

    pk: int
    job_pk: int
    state: str
    worker_pk: int | None
    attempt_count: int


@dataclass(frozen=True, slots=True)
class LoadedSnapshot:
    """What the tick decides over. ``snapshot`` is the core's part (tasks routed to Kubernetes
    left out, see :func:`split_kueue`); ``kueue`` the Kubernetes promotion drain's input;
    ``routes`` the jobs routed for the first time this tick (job pk -> backend), to stamp."""

    snapshot: ClusterSnapshot
    tasks: dict[str, TaskRow]
    job_pks: dict[str, int]
    worker_pks: dict[str, int]
    kueue: KueueInput = field(default_factory=KueueInput)
    routes: dict[int, str] = field(default_factory=dict)


def scheduler_config() -> SchedulerConfig:
    return SchedulerConfig(
        max_tasks_per_job_per_cycle=settings.MAX_TASKS_PER_JOB_PER_CYCLE,
        max_assignments_per_worker=settings.MAX_ASSIGNMENTS_PER_WORKER,
        max_building_tasks=settings.MAX_BUILDING_TASKS,
        budget_defaults=budgets.budget_defaults(),
    )


def device_from_columns(device_type: str, variant: str, count: int) -> Device:
    kind = DeviceType(device_type)
    if kind is DeviceType.CPU:
        return Device()
    return Device(type=kind, variant=variant or None, count=count)


def constraints_from_json(raw: list[dict]) -> tuple[Constraint, ...]:
    """Stored constraints were validated at submission; this only converts them. The reserved
    ``backend`` key routes the job (``scheduler.core.kueue.route_job``) and is kept out of the
    core's constraints, which workers could never satisfy."""
    result = []
    for item in raw:
        if item.get("key") == BACKEND_KEY:
            continue
        value = item.get("value")
        if isinstance(value, list):
            value = tuple(value)
        result.append(Constraint(key=item["key"], op=ConstraintOp(item["op"]), value=value, soft=bool(item.get("soft"))))
    return tuple(result)


def load_snapshot(now_ms: int) -> LoadedSnapshot:
    """Read the cluster in five queries: workers, jobs, tasks, unfinished attempts, budgets."""
    workers: list[WorkerSpec] = []
    worker_names: dict[int, str] = {}
    worker_pks: dict[str, int] = {}
    for pk, name, healthy, draining, cpu, mem, dtype, variant, count, attributes in Worker.objects.order_by(
        "name"
    ).values_list(
        "pk",
        "name",
        "healthy",
        "draining",
        "cpu_millicores",
        "memory_bytes",
        "device_type",
        "device_variant",
        "device_count",
        "attributes",
    ):
        worker_names[pk] = name
        worker_pks[name] = pk
        workers.append(
            WorkerSpec(
                id=name,
                cpu_millicores=cpu,
                memory_bytes=mem,
                device=device_from_columns(dtype, variant, count),
                attributes={str(k): str(v) for k, v in (attributes or {}).items()},
                healthy=healthy and not draining,
            )
        )

    # Attempts that still hold capacity: not the task's live attempt, and not yet confirmed finished.
    # Attempts that ended (preempted, lost, killed) but whose process the worker has not yet
    # confirmed finished: their tasks' resources stay committed on that worker.
    held_attempts = Attempt.objects.filter(finished_at__isnull=True, worker__isnull=False).exclude(
        state__in=ACTIVE_TASK_VALUES
    )
    unfinished = dict(held_attempts.values_list("task_id", "worker_id"))

    # Two index-friendly reads each for jobs and tasks (an OR of the two would scan whole tables,
    # which grow with history): the live ones by state, and finished ones whose attempt still
    # holds a worker.
    job_columns = (
        "pk",
        "name",
        "user",
        "band",
        "parent__name",
        "submitted_at_ms",
        "root_submitted_at_ms",
        "replicas",
        "cpu_millicores",
        "memory_bytes",
        "device_type",
        "device_variant",
        "device_count",
        "group_by",
        "constraints",
        "scheduling_deadline_ms",
        "max_retries_preemption",
        "max_retries_failure",
    )
    job_rows = chain(
        Job.objects.filter(state__in=LIVE_JOB_VALUES).values_list(*job_columns),
        Job.objects.filter(pk__in=held_attempts.values("task__job_id"))
        .exclude(state__in=LIVE_JOB_VALUES)
        .values_list(*job_columns),
    )
    jobs: dict[str, JobSpec] = {}
    job_names: dict[int, str] = {}
    job_pks: dict[str, int] = {}
    resources_cache: dict[tuple, Resources] = {}
    for (
        pk,
        name,
        user,
        band,
        parent,
        submitted,
        root_submitted,
        replicas,
        cpu,
        mem,
        dtype,
        variant,
        count,
        group_by,
        constraints,
        deadline,
        retries_preemption,
        retries_failure,
    ) in job_rows:
        key = (cpu, mem, dtype, variant, count)
        resources = resources_cache.get(key)
        if resources is None:
            resources = resources_cache[key] = Resources(cpu, mem, device_from_columns(dtype, variant, count))
        job_names[pk] = name
        job_pks[name] = pk
        jobs[name] = JobSpec(
            id=name,
            user=user,
            band=BANDS[band],
            parent=parent,
            submitted_at_ms=submitted,
            root_submitted_at_ms=root_submitted,
            replicas=replicas,
            resources=resources,
            group_by=group_by or None,
            constraints=constraints_from_json(constraints) if constraints else (),
            scheduling_deadline_ms=deadline,
            max_retries_preemption=retries_preemption,
            max_retries_failure=retries_failure,
        )

    tasks: list[TaskSnapshot] = []
    rows: dict[str, TaskRow] = {}
    task_columns = ("pk", "job_id", "index", "state", "worker_id", "band", "preemption_count", "attempt_count")
    task_rows = chain(
        Task.objects.filter(state__in=LIVE_TASK_VALUES).values_list(*task_columns),
        Task.objects.filter(pk__in=held_attempts.values("task_id"))
        .filter(state__in=TERMINAL_TASK_VALUES)
        .values_list(*task_columns),
    )
    for pk, job_pk, index, state, worker_pk, band, preemption_count, attempt_count in task_rows:
        job_name = job_names.get(job_pk)
        if job_name is None:  # a job finished between our two reads; it is not ours to decide
            continue
        task_id = f"{job_name}/{index}"
        unfinished_worker = unfinished.get(pk)
        tasks.append(
            TaskSnapshot(
                id=task_id,
                job_id=job_name,
                index=index,
                state=TASK_STATES[state],
                worker=worker_names.get(worker_pk) if worker_pk else None,
                band=BANDS[band] if band is not None and state != TaskState.PENDING.value else None,
                preemption_count=preemption_count,
                unfinished_attempt_worker=worker_names.get(unfinished_worker) if unfinished_worker else None,
            )
        )
        rows[task_id] = TaskRow(pk, job_pk, state, worker_pk, attempt_count)

    snapshot = ClusterSnapshot(
        now_ms=now_ms,
        config=scheduler_config(),
        budgets=budgets.effective_budgets(now_ms),
        workers=tuple(workers),
        jobs=jobs,
        tasks=tuple(tasks),
    )
    snapshot, kueue, routes = split_kueue(snapshot)
    return LoadedSnapshot(
        snapshot=snapshot, tasks=rows, job_pks=job_pks, worker_pks=worker_pks, kueue=kueue, routes=routes
    )


def split_kueue(snapshot: ClusterSnapshot) -> tuple[ClusterSnapshot, KueueInput, dict[int, str]]:
    """Take the work routed to Kubernetes out of the core's snapshot (four small queries).

    Kueue admits those tasks, so the core never sees them pending, and never sees the worker
    row standing for the cluster: their active tasks stay in (they count towards spend) with no
    worker, so they are neither capacity nor preemption victims. Jobs never routed are routed
    here (:func:`scheduler.core.kueue.route_job`); the tick stamps them.
    """
    config = cluster_config()
    kube = config.kubernetes
    kube_rows = {
        name: (healthy, draining)
        for name, healthy, draining in Worker.objects.filter(backend=ROUTE_KUBERNETES).values_list(
            "name", "healthy", "draining"
        )
    }
    live_jobs = Job.objects.exclude(state__in=TERMINAL_JOB_VALUES)
    kube_jobs = set(live_jobs.filter(backend=ROUTE_KUBERNETES).values_list("name", flat=True))
    unrouted = [
        (pk, name, raw) for pk, name, raw in live_jobs.filter(backend="").values_list("pk", "name", "constraints")
        if name in snapshot.jobs
    ]
    core_workers = tuple(w for w in snapshot.workers if w.id not in kube_rows)
    routes: dict[int, str] = {}
    if unrouted:
        table = RoutingTable(
            worker_devices=frozenset(
                {(w.device.type, w.device.variant) for w in core_workers}
                | {(DeviceType.TPU, g.device_variant) for g in config.scale_groups if config.tpu.enabled}
            ),
            kubernetes_devices=frozenset(DeviceType(d) for d in kube.device_types) if kube.enabled else frozenset(),
        )
        for pk, name, raw in unrouted:
            # The core's copy has no ``backend`` constraint; routing reads it from the row.
            pins = tuple(
                Constraint(BACKEND_KEY, ConstraintOp.EQ, str(c.get("value")))
                for c in raw or () if c.get("key") == BACKEND_KEY and c.get("op") == "eq" and not c.get("soft")
            )
            spec = snapshot.jobs[name]
            route = routes[pk] = route_job(replace(spec, constraints=spec.constraints + pins), table)
            if route == ROUTE_KUBERNETES:
                kube_jobs.add(name)
    if not kube_jobs and not kube_rows:
        return snapshot, KueueInput(), routes

    core_tasks: list[TaskSnapshot] = []
    pending: list[TaskSnapshot] = []
    active: list[TaskSnapshot] = []
    unfinished: set[str] = set()
    for task in snapshot.tasks:
        if task.job_id in kube_jobs:
            if task.state is TaskState.PENDING:
                pending.append(task)
                if task.unfinished_attempt_worker is not None:
                    unfinished.add(task.id)
                continue
            if task.state in ACTIVE_STATES:
                active.append(task)
            task = replace(task, worker=None, unfinished_attempt_worker=None)
        elif task.worker in kube_rows or task.unfinished_attempt_worker in kube_rows:
            # A finished Kubernetes job whose last pod has not gone yet.
            task = replace(
                task,
                worker=None if task.worker in kube_rows else task.worker,
                unfinished_attempt_worker=(
                    None if task.unfinished_attempt_worker in kube_rows else task.unfinished_attempt_worker
                ),
            )
        core_tasks.append(task)

    blocked = ""
    row = kube_rows.get(kube.worker_name)
    state = BackendState.objects.filter(name=ROUTE_KUBERNETES).values("tokens", "tokens_at_ms", "last_error").first()
    if not kube.enabled:
        blocked = "disabled in the cluster config"
    elif row is None:
        blocked = "not set up yet (waiting for the first Kubernetes sync)"
    elif not row[0] or row[1]:
        error = (state or {}).get("last_error") or "see the backend's last error"
        blocked = f"unhealthy: {error}" if not row[0] else "draining"
    kueue = KueueInput(
        jobs={name: snapshot.jobs[name] for name in kube_jobs if name in snapshot.jobs},
        pending=tuple(pending),
        unfinished=frozenset(unfinished),
        active=tuple(active),
        worker=kube.worker_name if row is not None else None,
        blocked=blocked,
        per_minute=kube.promotions_per_minute,
        tokens=(state or {}).get("tokens"),
        tokens_at_ms=(state or {}).get("tokens_at_ms"),
    )
    return replace(snapshot, workers=core_workers, tasks=tuple(core_tasks)), kueue, routes


def explanation_to_json(snapshot: ClusterSnapshot, decision: Decision) -> dict:
    """The queue as the console shows it: every still-pending task's band, position and reason.

    Shape: ``{"tasks": {task_id: [effective band rank, position in band (1-based), reason index]},
    "reasons": [text, ...], "band_counts": {rank: n}}``. Reasons are interned because thousands
    of tasks usually share a handful of them.
    """
    assigned = {a.task for a in decision.assignments}
    reasons: list[str] = []
    reason_index: dict[str, int] = {}
    positions: dict[int, int] = {}
    tasks: dict[str, list] = {}
    ordered = list(decision.order)
    seen = set(ordered)
    # Pending tasks held back by the gates are queued after the ones that passed.
    ordered.extend(t for t in decision.pending_reasons if t not in seen)
    for task_id in ordered:
        if task_id in assigned or task_id not in decision.pending_reasons:
            continue
        band = decision.effective_bands.get(task_id)
        if band is None:
            # Requeued this tick (a preemption victim or a gang sibling): it was not pending when
            # the tick started, so it queues next tick in its requested band, downgraded as usual.
            job = snapshot.jobs[task_id.rsplit("/", 1)[0]]
            band = effective_band(
                job.band, job.user, decision.spend, snapshot.budgets, snapshot.config.budget_defaults
            )
        band = int(band)
        positions[band] = positions.get(band, 0) + 1
        text = reason_text(decision.pending_reasons[task_id])
        index = reason_index.get(text)
        if index is None:
            index = reason_index[text] = len(reasons)
            reasons.append(text)
        tasks[task_id] = [band, positions[band], index]
    return {"tasks": tasks, "reasons": reasons, "band_counts": {str(k): v for k, v in sorted(positions.items())}}


def reason_text(reason: object) -> str:
    text = getattr(reason, "text", None)
    return text() if callable(text) else str(reason)
