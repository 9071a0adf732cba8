"""Small builders for database tests. Rows are written directly: the tick must cope with any
state, not only the states the services produce."""

from __future__ import annotations

from django.utils import timezone

from scheduler.core.bands import Band
from scheduler.models import Attempt, Job, Task, Worker

GIB = 1024**3
NOW_MS = 1_800_000_000_000


def make_worker(name: str = "w1", *, cpu: float = 8, memory_gib: int = 32, device=("cpu", "", 0), **attributes) -> Worker:
    dtype, variant, count = device
    return Worker.objects.create(
        name=name,
        cpu_millicores=int(cpu * 1000),
        memory_bytes=memory_gib * GIB,
        device_type=dtype,
        device_variant=variant,
        device_count=count,
        attributes={k.replace("_", "-"): str(v) for k, v in attributes.items()},
    )


def make_job(
    name: str,
    *,
    band: Band = Band.INTERACTIVE,
    replicas: int = 1,
    cpu: float = 1,
    memory_gib: int = 1,
    device=("cpu", "", 0),
    submitted_at_ms: int | None = None,
    group_by: str | None = None,
    deadline_ms: int | None = None,
    parent: Job | None = None,
) -> Job:
    dtype, variant, count = device
    submitted = submitted_at_ms if submitted_at_ms is not None else NOW_MS - 60_000 + Job.objects.count()
    job = Job.objects.create(
        name=name,
        parent=parent,
        user=name.split("/")[1],
        band=int(band),
        depth=name.count("/") - 1,
        submitted_at_ms=submitted,
        root_submitted_at_ms=parent.root_submitted_at_ms if parent else submitted,
        replicas=replicas,
        cpu_millicores=int(cpu * 1000),
        memory_bytes=memory_gib * GIB,
        device_type=dtype,
        device_variant=variant,
        device_count=count,
        group_by=group_by,
        scheduling_deadline_ms=deadline_ms,
    )
    Task.objects.bulk_create(Task(job=job, index=i) for i in range(replicas))
    return job


def start_running(job: Job, worker: Worker, *, band: Band | None = None, index: int = 0) -> Task:
    """Put one task of ``job`` in RUNNING on ``worker`` with a live attempt."""
    task = job.tasks.get(index=index)
    stamped = int(band if band is not None else job.band)
    task.state = "running"
    task.worker = worker
    task.band = stamped
    task.attempt_count = 1
    task.save()
    Attempt.objects.create(
        task=task, number=1, worker=worker, state="running", band=stamped, created_at=timezone.now(), started_at=timezone.now()
    )
    job.state = "running"
    job.save(update_fields=["state"])
    return task
