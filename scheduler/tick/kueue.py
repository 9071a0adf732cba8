"""The tick's admitting half: split the work routed to an admitting backend (Kubernetes, whose
pods Kueue admits) out of the core's snapshot, plan the promotions (pure,
:mod:`scheduler.core.kueue`) and save the routes and the promotion bucket inside the tick's
transaction. Which backends admit is the backend registry's (``scheduler.backends.admissions``);
the promotion plan serves the first of them (the one built in: ``kubernetes``).
"""

from __future__ import annotations

from dataclasses import replace
from collections.abc import Mapping

from django.db import connection

from scheduler.backends import Admission, admissions
from scheduler.foundation.cluster_config import cluster_config
from scheduler.core.kueue import (
    BACKEND_KEY,
    KueueInput,
    KueuePlan,
    RoutingTable,
    pinned_backend_in,
    plan_promotions,
    route_job,
)
from scheduler.core.types import (
    ACTIVE_STATES,
    ClusterSnapshot,
    Constraint,
    ConstraintOp,
    Decision,
    DeviceType,
    TaskSnapshot,
    TaskState,
)
from scheduler.models import BackendState, Job, Worker


def split_kueue(snapshot: ClusterSnapshot) -> tuple[ClusterSnapshot, KueueInput, dict[int, str]]:
    """Take the work routed to Kubernetes out of the core's snapshot (four small queries; one
    when no backend admits).

    Kueue admits those tasks, so the core never sees them pending, and never sees the worker
    row standing for the cluster: their active tasks stay in (they count towards spend) with no
    worker, so they are neither capacity nor preemption victims. Jobs never routed are routed
    here (:func:`scheduler.core.kueue.route_job`); the tick stamps them.
    """
    config = cluster_config()
    admitting = admissions(config)
    kube: Admission | None = admitting[0] if admitting else None  # the one the promotion plan serves
    route_name = kube.route if kube is not None else None
    live_jobs = Job.objects.filter(finished_state__isnull=True)
    # Without an admitting backend no worker row stands for one and no job is routed to one.
    kube_rows = {}
    kube_jobs = set()
    if kube is not None:
        kube_rows = {
            name: (healthy, draining)
            for name, healthy, draining in Worker.objects.filter(backend=route_name).values_list(
                "name", "healthy", "draining"
            )
        }
        kube_jobs = set(live_jobs.filter(route=route_name).values_list("name", flat=True))
    unrouted = [
        (pk, name, raw)
        for pk, name, raw in live_jobs.filter(route="").values_list("pk", "name", "constraints")
        if name in snapshot.jobs
    ]
    core_workers = tuple(w for w in snapshot.workers if w.id not in kube_rows) if kube_rows else snapshot.workers
    routes: dict[int, str] = {}
    if unrouted:
        table = RoutingTable(
            worker_devices=frozenset(
                {(w.device.type, w.device.variant) for w in core_workers}
                | {(DeviceType.TPU, g.device_variant) for g in config.scale_groups if config.tpu.enabled}
            ),
            admitting=tuple((a.route, a.device_types) for a in admitting),
        )
        for pk, name, raw in unrouted:
            # The core's copy has no ``backend`` constraint; routing reads it from the row.
            pinned = pinned_backend_in(raw, table.admitting_routes)
            pins = (Constraint(BACKEND_KEY, ConstraintOp.EQ, pinned),) if pinned else ()
            spec = snapshot.jobs[name]
            route = routes[pk] = route_job(replace(spec, constraints=spec.constraints + pins), table)
            if route == route_name:
                kube_jobs.add(name)
    if kube is None or (not kube_jobs and not kube_rows):
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
    state = BackendState.objects.filter(name=kube.route).values("tokens", "tokens_at_ms", "last_error").first()
    if not kube.enabled:
        blocked = "disabled in the cluster config"
    elif row is None:
        blocked = f"not set up yet (waiting for the first {kube.route} sync)"
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
        route=kube.route,
        tokens=(state or {}).get("tokens"),
        tokens_at_ms=(state or {}).get("tokens_at_ms"),
    )
    return replace(snapshot, workers=core_workers, tasks=tuple(core_tasks)), kueue, routes


def plan_kueue(snapshot: ClusterSnapshot, kueue: KueueInput, decision: Decision) -> KueuePlan:
    """The tick's Kubernetes promotions for this snapshot (pure; see ``scheduler.core.kueue``).

    Uses the spend the core computed, so both halves of the tick see the same budgets."""
    return plan_promotions(kueue, decision.spend, snapshot.budgets, snapshot.config.budget_defaults, snapshot.now_ms)


def save_kueue_state(routes: Mapping[int, str], kueue: KueueInput, plan: KueuePlan) -> None:
    """Inside the tick's transaction: stamp newly routed jobs (one statement per backend) and
    store the promotion bucket (one statement when Kubernetes work exists)."""
    by_route: dict[str, list[int]] = {}
    for pk, route in routes.items():
        by_route.setdefault(route, []).append(pk)
    table = Job._meta.db_table
    for route, pks in sorted(by_route.items()):
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute(f"UPDATE {table} SET route = %s WHERE route = '' AND id = ANY(%s)", [route, pks])
            else:
                cursor.execute(
                    f"UPDATE {table} SET route = %s WHERE route = '' AND id IN (SELECT value FROM json_each(%s))",
                    [route, "[" + ",".join(str(int(pk)) for pk in pks) + "]"],
                )
    if kueue.jobs or kueue.worker:
        updated = BackendState.objects.filter(name=kueue.route).update(
            tokens=plan.tokens, tokens_at_ms=plan.tokens_at_ms
        )
        if not updated:
            BackendState.objects.create(name=kueue.route, tokens=plan.tokens, tokens_at_ms=plan.tokens_at_ms)
