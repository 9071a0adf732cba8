"""Personas and builders for the API tests.

alice and bob are researchers (bob is "the other researcher" for alice's things), olivia is an
operator, ada an admin; ``anonymous`` sends no credentials. Each signed-in client authenticates
with a real token through the real middleware and database.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from scheduler import services
from scheduler.core.bands import Band
from scheduler.models import Attempt, Job, TickRecord, Worker
from scheduler.roles import ensure_groups

PASSWORD = "correct horse battery staple"
GIB = 1 << 30
PERSONAS = ("anonymous", "alice", "bob", "olivia", "ada")


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    """PBKDF2's deliberate slowness is not under test here; four personas per test add up."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Throttle counters live in the cache; tests must not share them."""
    cache.clear()
    yield
    cache.clear()


def make_user(username: str, role: str = "researcher"):
    admins, operators = ensure_groups()
    user = get_user_model().objects.create_user(username=username, password=PASSWORD)
    if role == "admin":
        user.groups.add(admins)
    elif role == "operator":
        user.groups.add(operators)
    return user


@pytest.fixture
def alice(db):
    return make_user("alice")


@pytest.fixture
def bob(db):
    return make_user("bob")


@pytest.fixture
def olivia(db):
    return make_user("olivia", "operator")


@pytest.fixture
def ada(db):
    return make_user("ada", "admin")


def client_for(user=None) -> APIClient:
    client = APIClient()
    if user is not None:
        token, _ = Token.objects.get_or_create(user=user)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def users(alice, bob, olivia, ada):
    return {"alice": alice, "bob": bob, "olivia": olivia, "ada": ada}


@pytest.fixture
def clients(users):
    """A client per persona, anonymous included."""
    return {"anonymous": client_for(None), **{name: client_for(user) for name, user in users.items()}}


@pytest.fixture
def as_alice(alice):
    return client_for(alice)


@pytest.fixture
def as_bob(bob):
    return client_for(bob)


@pytest.fixture
def as_olivia(olivia):
    return client_for(olivia)


@pytest.fixture
def as_ada(ada):
    return client_for(ada)


# --- builders -------------------------------------------------------------------------------------


def submit(user, name: str = "train", **spec) -> Job:
    """Submit through the service, as the API would."""
    return services.submit_job(user, {"name": name, **spec})


def make_worker(name: str = "w1", *, cpu: float = 32, memory_gib: int = 256, device=None, **attributes) -> Worker:
    device = device or ("cpu", "", 0)
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


def make_tick(tasks: dict[str, tuple[Band, int, str]]) -> TickRecord:
    """A tick whose explanation queues ``tasks``: {task id: (effective band, position, reason)}."""
    reasons: list[str] = []
    explained = {}
    counts: dict[str, int] = {}
    for task_id, (band, position, reason) in tasks.items():
        if reason not in reasons:
            reasons.append(reason)
        explained[task_id] = [int(band), position, reasons.index(reason)]
        counts[str(int(band))] = counts.get(str(int(band)), 0) + 1
    TickRecord.objects.filter(explanation__isnull=False).update(explanation=None)
    return TickRecord.objects.create(
        started_at=timezone.now(), now_ms=services.current_ms(), duration_ms=1.0, pending=len(tasks),
        explanation={"tasks": explained, "reasons": reasons, "band_counts": counts},
    )


def error_of(response) -> dict:
    """The JSON error body, checked for its shape."""
    body = response.json()
    assert set(body) == {"code", "message", "details"}, body
    assert isinstance(body["message"], str) and body["message"]
    assert isinstance(body["details"], dict)
    return body
