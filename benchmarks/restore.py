"""Write a core snapshot into the database as rows, for benchmarks and local replays.

Bulk inserts only; this bypasses ``services`` on purpose (it recreates arbitrary states, including
ones the services would never produce, such as a cluster already 70% full).
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import connection, transaction
from django.db.models import F

from scheduler.backends import admissions
from scheduler.core.kueue import settled_route
from scheduler.core.types import ACTIVE_STATES, ClusterSnapshot, DeviceType, TaskState
from scheduler.store.submission_order import next_submission_times
from scheduler.models import (
    Attempt,
    DispatchIntent,
    Job,
    PreemptionEvent,
    SubmissionBound,
    Task,
    TickRecord,
    UserBudget,
    Worker,
)

BATCH = 5_000


def clear_cluster() -> None:
    # SubmissionBound with the jobs: its bounds hold up to job ids that RESTART IDENTITY hands out again.
    models = [PreemptionEvent, DispatchIntent, Attempt, Task, Job, Worker, UserBudget, TickRecord, SubmissionBound]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            tables = ", ".join(m._meta.db_table for m in models)
            cursor.execute(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
        else:
            for model in models:
                cursor.execute(f"DELETE FROM {model._meta.db_table}")


def _submitted_route(device: DeviceType, constraints) -> str:
    """The route submission stamps (scheduler.jobs.submit.route_at_submission): "" for the jobs
    whose route waits for the first tick. Core constraints carry no ``backend`` pin."""
    return settled_route(device, None, tuple((a.route, a.device_types) for a in admissions())) or ""


def _device_columns(device) -> dict:
    if device.type is DeviceType.CPU:
        return {"device_type": "cpu", "device_variant": "", "device_count": 0}
    return {"device_type": device.type.value, "device_variant": device.variant or "", "device_count": device.count}


@transaction.atomic
def restore_snapshot(snapshot: ClusterSnapshot) -> None:
    clear_cluster()
    now = datetime.fromtimestamp(snapshot.now_ms / 1000, tz=UTC)
    UserBudget.objects.bulk_create(
        [
            UserBudget(user_id=b.user, budget_limit=b.budget_limit, max_band=int(b.max_band))
            for b in snapshot.budgets.values()
        ],
        batch_size=BATCH,
    )
    Worker.objects.bulk_create(
        [
            Worker(
                name=w.id,
                healthy=w.healthy,
                cpu_millicores=w.cpu_millicores,
                memory_bytes=w.memory_bytes,
                attributes=dict(w.attributes),
                **_device_columns(w.device),
            )
            for w in snapshot.workers
        ],
        batch_size=BATCH,
    )
    worker_pk = dict(Worker.objects.values_list("name", "pk"))
    job_pk: dict[str, int] = {}
    for depth in sorted({j.depth for j in snapshot.jobs.values()}):
        level = [j for j in snapshot.jobs.values() if j.depth == depth]
        Job.objects.bulk_create(
            [
                Job(
                    name=j.id,
                    parent_id=job_pk.get(j.parent) if j.parent else None,
                    user=j.user,
                    band=int(j.band),
                    depth=j.depth,
                    submitted_at_ms=j.submitted_at_ms,
                    root_submitted_at_ms=j.root_submitted_at_ms,
                    replicas=j.replicas,
                    cpu_millicores=j.resources.cpu_millicores,
                    memory_bytes=j.resources.memory_bytes,
                    group_by=j.group_by,
                    constraints=[
                        {
                            "key": c.key,
                            "op": c.op.value,
                            "value": list(c.value) if isinstance(c.value, tuple) else c.value,
                            "soft": c.soft,
                        }
                        for c in j.constraints
                    ],
                    scheduling_deadline_ms=j.scheduling_deadline_ms,
                    max_retries_preemption=j.max_retries_preemption,
                    max_retries_failure=j.max_retries_failure,
                    route=_submitted_route(j.resources.device.type, j.constraints),
                    **_device_columns(j.resources.device),
                )
                for j in level
            ],
            batch_size=BATCH,
        )
        job_pk.update(Job.objects.filter(depth=depth).values_list("name", "pk"))
    listed = {t.id: t for t in snapshot.tasks}
    tasks = []
    for job in snapshot.jobs.values():
        for index in range(job.replicas):
            t = listed.get(f"{job.id}/{index}")
            active = t is not None and t.state in ACTIVE_STATES
            tasks.append(
                Task(
                    job_id=job_pk[job.id],
                    index=index,
                    state=(t.state if t else TaskState.PENDING).value,
                    worker_id=worker_pk[t.worker] if active and t.worker else None,
                    band=int(t.band) if active and t.band is not None else None,
                    preemption_count=t.preemption_count if t else 0,
                    attempt_count=1 if active else 0,
                )
            )
    Task.objects.bulk_create(tasks, batch_size=BATCH)
    running_jobs = {t.job_id for t in snapshot.tasks if t.state in ACTIVE_STATES}
    Job.objects.filter(name__in=running_jobs).update(state="running")
    task_pk = {
        (job_id, index): pk
        for pk, job_id, index in Task.objects.filter(attempt_count=1).values_list("pk", "job_id", "index")
    }
    Attempt.objects.bulk_create(
        [
            Attempt(
                task_id=task_pk[(job_pk[t.job_id], t.index)],
                number=1,
                worker_id=worker_pk[t.worker],
                state=t.state.value,
                band=int(t.band if t.band is not None else snapshot.jobs[t.job_id].band),
                created_at=now,
                started_at=now,
            )
            for t in snapshot.tasks
            if t.state in ACTIVE_STATES and t.worker
        ],
        batch_size=BATCH,
    )


@transaction.atomic
def churn(now_ms: int, finished: int, submitted: int, *, label: str, spread: bool = False) -> None:
    """A tick interval's worth of cluster life: ``finished`` running tasks end (their workers
    report success) and ``submitted`` new single-task CPU jobs arrive, as rows written directly.
    ``label`` makes the new jobs' names unique; their submission times are the submission
    clock's (``next_submission_times``). ``spread``: the tasks that end are active ones
    (the ticks' own placements too, which no agent starts here) taken a few from each worker in
    turn, rather than the first running ones by id (packed on few workers)."""
    now = datetime.fromtimestamp(now_ms / 1000, tz=UTC)
    if spread:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY worker_id ORDER BY id) AS turn "
                f"FROM {Task._meta.db_table} WHERE state IN ('running', 'assigned', 'building')) AS t "
                "ORDER BY turn, id LIMIT %s",
                [finished],
            )
            running = [pk for (pk,) in cursor.fetchall()]
    else:
        running = list(
            Task.objects.filter(state=TaskState.RUNNING.value).order_by("pk").values_list("pk", flat=True)[:finished]
        )
    Attempt.objects.filter(task_id__in=running, number=F("task__attempt_count")).update(
        state="succeeded", finished_at=now, exit_code=0
    )
    Task.objects.filter(pk__in=running).update(state="succeeded", worker=None, updated_at=now)
    # Submission times as the submission clock hands them to jobs arriving at ``now_ms`` all at
    # once: consecutive, after every time handed out before (no two jobs share one: see
    # store.submission_order). Sharing ``now_ms``, as these jobs once did, no real burst can.
    first_ms = next_submission_times(now_ms, submitted) if submitted else now_ms
    jobs = Job.objects.bulk_create(
        Job(
            name=f"/churn{i % 20}/{label}-{i}",
            user=f"churn{i % 20}",
            band=2 if i % 3 else 3,
            depth=1,
            submitted_at_ms=first_ms + i,
            root_submitted_at_ms=first_ms + i,
            replicas=1,
            cpu_millicores=1000,
            memory_bytes=2 * 1024**3,
            route=_submitted_route(DeviceType.CPU, ()),
        )
        for i in range(submitted)
    )
    Task.objects.bulk_create(Task(job=job, index=0) for job in jobs)
