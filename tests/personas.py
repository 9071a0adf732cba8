"""Personas and builders shared by the API, console and dispatch tests.

alice and bob are researchers (bob is "the other researcher" for alice's things; charlie the
outsider in the dispatch tests), olivia is an operator, ada an admin, and ``agent`` the token
user worker agents sign in as (``iris-agents``). The fixtures live in ``tests/conftest.py``;
each test package builds its own signed-in clients (API tokens or console sessions).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from scheduler.api.agent import AGENT_GROUP
from scheduler.core.bands import Band
from scheduler.jobs.submit import submit_job
from scheduler.models import Attempt, Job, Worker
from scheduler.roles import ensure_groups

PASSWORD = "correct horse battery staple"
GIB = 1 << 30
# PBKDF2's deliberate slowness is not under test; personas sign in with this instead.
FAST_PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def make_user(username: str, role: str = "researcher"):
    """A user in the groups of ``role``: researcher (none), operator, admin or agent."""
    admins, operators = ensure_groups()
    user = get_user_model().objects.create_user(username=username, password=PASSWORD)
    if role == "admin":
        user.groups.add(admins)
    elif role == "operator":
        user.groups.add(operators)
    elif role == "agent":
        user.groups.add(Group.objects.get_or_create(name=AGENT_GROUP)[0])
    return user


def submit(user, name: str = "train", **spec) -> Job:
    """Submit through the service, as the API and the console would."""
    return submit_job(user, {"name": name, **spec})


def make_worker(name: str = "w1", *, cpu: float = 32, memory_gib: int = 256, device=("cpu", "", 0), **attributes) -> Worker:
    """A healthy worker that heartbeated just now."""
    return Worker.objects.create(
        name=name, cpu_millicores=int(cpu * 1000), memory_bytes=memory_gib * GIB, device_type=device[0],
        device_variant=device[1], device_count=device[2],
        attributes={k.replace("_", "-"): str(v) for k, v in attributes.items()}, last_heartbeat=timezone.now(),
    )


def run_tasks(job: Job, worker: Worker, count: int | None = None, *, band: Band | None = None) -> None:
    """Put the first ``count`` tasks of ``job`` in RUNNING on ``worker`` with a live attempt each."""
    tasks = list(job.tasks.order_by("index")[: count if count is not None else job.replicas])
    stamped = int(band if band is not None else job.band)
    now = timezone.now()
    for task in tasks:
        task.state, task.worker, task.band, task.attempt_count = "running", worker, stamped, 1
        task.save()
        Attempt.objects.create(task=task, number=1, worker=worker, state="running", band=stamped, created_at=now,
                               started_at=now)
    Job.objects.filter(pk=job.pk).update(state="running")


def token_client(user=None) -> APIClient:
    """An API client signed in as ``user`` with a real token (anonymous for None)."""
    client = APIClient()
    if user is not None:
        token, _ = Token.objects.get_or_create(user=user)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client
