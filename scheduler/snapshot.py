"""The one boundary adapter: database rows -> core types, and a decision -> what the console reads.

``load_snapshot`` reads everything a tick decides over with a fixed number of queries, whatever
the size of the cluster, and returns the :class:`ClusterSnapshot` together with the id maps the
shell needs to write the decision back.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from django.conf import settings

from scheduler import budgets
from scheduler.cluster_config import cluster_config
from scheduler.cluster_rows import TaskRow, read_cluster
from scheduler.core.budget import effective_band
from scheduler.core.kueue import (
    BACKEND_KEY,
    ROUTE_KUBERNETES,
    KueueInput,
    RoutingTable,
    route_job,
)
from scheduler.core.types import (
    ACTIVE_STATES,
    TERMINAL_JOB_STATES,
    ClusterSnapshot,
    Constraint,
    ConstraintOp,
    Decision,
    DeviceType,
    SchedulerConfig,
    TaskSnapshot,
    TaskState,
)
from scheduler.models import BackendState, Job, Worker

TERMINAL_JOB_VALUES = [s.value for s in TERMINAL_JOB_STATES]


@dataclass(frozen=True, slots=True)
class LoadedSnapshot:
    """What the tick decides over. ``snapshot`` is the core's part (tasks routed to Kubernetes
    left out, see :func:`split_kueue`); ``kueue`` the Kubernetes promotion drain's input;
    ``routes`` the jobs routed for the first time this tick (job pk -> backend), to stamp;
    ``refresh`` whether the rows were read whole (``all``) or as changes (``changes``);
    ``job_states`` each job's state as read (job name -> state value)."""

    snapshot: ClusterSnapshot
    tasks: dict[str, TaskRow]
    job_pks: dict[str, int]
    worker_pks: dict[str, int]
    job_states: dict[str, str] = field(default_factory=dict)
    kueue: KueueInput = field(default_factory=KueueInput)
    routes: dict[int, str] = field(default_factory=dict)
    refresh: str = "all"


def scheduler_config() -> SchedulerConfig:
    return SchedulerConfig(
        max_tasks_per_job_per_cycle=settings.MAX_TASKS_PER_JOB_PER_CYCLE,
        max_assignments_per_worker=settings.MAX_ASSIGNMENTS_PER_WORKER,
        max_building_tasks=settings.MAX_BUILDING_TASKS,
        budget_defaults=budgets.budget_defaults(),
    )


def load_snapshot(now_ms: int) -> LoadedSnapshot:
    """The cluster at ``now_ms`` as the core sees it, with the keys to write the decision back.

    The rows come from :func:`scheduler.cluster_rows.read_cluster` (whole, or only what changed
    since this process's previous read, in a fixed number of queries either way); budgets and
    the Kubernetes split take a few small queries more.
    """
    view = read_cluster()
    snapshot = ClusterSnapshot(
        now_ms=now_ms,
        config=scheduler_config(),
        budgets=budgets.effective_budgets(now_ms),
        workers=view.workers,
        jobs=view.jobs,
        tasks=view.tasks,
    )
    snapshot, kueue, routes = split_kueue(snapshot)
    return LoadedSnapshot(
        snapshot=snapshot,
        tasks=view.task_rows,
        job_pks=view.job_pks,
        worker_pks=view.worker_pks,
        job_states=view.job_states,
        kueue=kueue,
        routes=routes,
        refresh=view.refresh,
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
    # Reasons are shared objects (one per job or request shape): render each once.
    index_of_reason: dict[int, int] = {}
    positions: dict[int, int] = {}
    tasks: dict[str, list] = {}
    pending_reasons = decision.pending_reasons
    effective_bands = decision.effective_bands
    ordered = list(decision.order)
    seen = set(ordered)
    # Pending tasks held back by the gates are queued after the ones that passed.
    ordered.extend(t for t in pending_reasons if t not in seen)
    for task_id in ordered:
        reason = pending_reasons.get(task_id)
        if reason is None or task_id in assigned:
            continue
        band = effective_bands.get(task_id)
        if band is None:
            # Requeued this tick (a preemption victim or a gang sibling): it was not pending when
            # the tick started, so it queues next tick in its requested band, downgraded as usual.
            job = snapshot.jobs[task_id.rsplit("/", 1)[0]]
            band = effective_band(
                job.band, job.user, decision.spend, snapshot.budgets, snapshot.config.budget_defaults
            )
        band = int(band)
        position = positions[band] = positions.get(band, 0) + 1
        index = index_of_reason.get(id(reason))
        if index is None:
            text = reason_text(reason)
            index = reason_index.get(text)
            if index is None:
                index = reason_index[text] = len(reasons)
                reasons.append(text)
            index_of_reason[id(reason)] = index
        tasks[task_id] = [band, position, index]
    return {"tasks": tasks, "reasons": reasons, "band_counts": {str(k): v for k, v in sorted(positions.items())}}


def reason_text(reason: object) -> str:
    text = getattr(reason, "text", None)
    return text() if callable(text) else str(reason)
