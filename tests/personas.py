"""The one set of personas and row builders for every database test (API, console, CLI,
dispatch, tick, cloud).

Personas: alice and bob are researchers (bob is "the other researcher" for alice's things),
charlie the outsider, olivia an operator, ada an admin; worker agents are not users: each
signs in with its own worker's credential (``agent_client``). The fixtures live in ``tests/conftest.py``; each test
package builds its own signed-in clients (API tokens or console sessions).

Builders: ``submit`` goes through the use case, as the API and the console would; ``make_job``,
``make_worker`` and ``start_running`` / ``run_tasks`` write rows directly, because the tick must
cope with any state, not only the states the use cases produce. A default worker is healthy,
heartbeated just now, with 32 cores and 256 GiB; tests that need a small one say so.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.test import APIClient

from scheduler.core.bands import Band
from scheduler.execution.enrolment import issue_worker_credential
from scheduler.jobs.submit import submit_job
from scheduler.models import ApiToken, Attempt, Job, Task, Worker
from scheduler.foundation.roles import ensure_groups

PASSWORD = "correct horse battery staple"
GIB = 1 << 30
# A fixed "now" (2027-01-15) for tests that write submission times themselves.
NOW_MS = 1_800_000_000_000
# PBKDF2's deliberate slowness is not under test; personas sign in with this instead.
FAST_PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def make_user(username: str, role: str = "researcher"):
    """A user in the groups of ``role``: researcher (none), operator or admin."""
    admins, operators = ensure_groups()
    user = get_user_model().objects.create_user(username=username, password=PASSWORD)
    if role == "admin":
        user.groups.add(admins)
    elif role == "operator":
        user.groups.add(operators)
    return user


def submit(user, name: str = "train", **spec) -> Job:
    """Submit through the service, as the API and the console would (a command is required;
    tests that do not care run ``true``)."""
    return submit_job(user, {"name": name, "command": ["true"], **spec})


def make_worker(
    name: str = "w1", *, cpu: float = 32, memory_gib: int = 256, device=("cpu", "", 0), **attributes
) -> Worker:
    """A healthy worker that heartbeated just now."""
    return Worker.objects.create(
        name=name,
        cpu_millicores=int(cpu * 1000),
        memory_bytes=memory_gib * GIB,
        device_type=device[0],
        device_variant=device[1],
        device_count=device[2],
        attributes={k.replace("_", "-"): str(v) for k, v in attributes.items()},
        last_heartbeat=timezone.now(),
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
    """A job row and its pending tasks, written directly (no submission rules)."""
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
        task=task,
        number=1,
        worker=worker,
        state="running",
        band=stamped,
        created_at=timezone.now(),
        started_at=timezone.now(),
    )
    job.state = "running"
    job.save(update_fields=["state"])
    return task


def run_tasks(job: Job, worker: Worker, count: int | None = None, *, band: Band | None = None) -> None:
    """Put the first ``count`` tasks of ``job`` in RUNNING on ``worker`` with a live attempt each."""
    tasks = list(job.tasks.order_by("index")[: count if count is not None else job.replicas])
    stamped = int(band if band is not None else job.band)
    now = timezone.now()
    for task in tasks:
        task.state, task.worker, task.band, task.attempt_count = "running", worker, stamped, 1
        task.save()
        Attempt.objects.create(
            task=task, number=1, worker=worker, state="running", band=stamped, created_at=now, started_at=now
        )
    Job.objects.filter(pk=job.pk).update(state="running")


def token_client(user=None) -> APIClient:
    """An API client signed in as ``user`` with a real token (anonymous for None)."""
    client = APIClient()
    if user is not None:
        _, key = ApiToken.objects.create(user=user, name="tests")
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def agent_client(worker_name: str = "w1") -> APIClient:
    """An API client signed in as the agent of worker ``worker_name``, with its own credential."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Worker {issue_worker_credential(worker_name, by='tests')}")
    return client
