"""Clients and builders for the API tests (the personas are in tests/personas.py).

``anonymous`` sends no credentials; each signed-in client authenticates with a real token
through the real middleware and database.
"""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.utils import timezone

from scheduler.budgets.rules import live_spend
from scheduler.budgets.writes import request_uplift
from scheduler.core.bands import Band
from scheduler.models import Job, TickRecord
from scheduler.store.clock import now_ms
from scheduler.tick.run import run_tick
from tests.personas import make_worker, submit, token_client

PERSONAS = ("anonymous", "alice", "bob", "olivia", "ada")


@pytest.fixture(autouse=True)
def _fast_passwords(fast_passwords):
    """Four personas per test add up (see ``fast_passwords`` in tests/conftest.py)."""


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Throttle counters live in the cache; tests must not share them."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def users(alice, bob, olivia, ada):
    return {"alice": alice, "bob": bob, "olivia": olivia, "ada": ada}


@pytest.fixture
def clients(users):
    """A client per persona, anonymous included."""
    return {"anonymous": token_client(None), **{name: token_client(user) for name, user in users.items()}}


@pytest.fixture
def as_alice(alice):
    return token_client(alice)


@pytest.fixture
def as_bob(bob):
    return token_client(bob)


@pytest.fixture
def as_olivia(olivia):
    return token_client(olivia)


@pytest.fixture
def as_ada(ada):
    return token_client(ada)


# --- builders -------------------------------------------------------------------------------------


# Reason records for hand-made ticks (the shapes ``core.explain.reason_record`` stores).
NO_WORKERS = {"code": "no_healthy_workers"}
SHORT_OF_CPU = {
    "code": "insufficient_cpu",
    "resource": "cpu",
    "need": 1000,
    "best_free": 0,
    "workers": 1,
    "matching": 1,
}
HELD = {"code": "per_job_cap", "limit": 4}


def make_tick(
    tasks: dict[str, tuple[Band, int, dict]], spend: dict | None = None, limits: dict | None = None
) -> TickRecord:
    """A tick whose explanation queues ``tasks``: {task id: (effective band, position, reason record)};
    the requested band is the job's (or the effective band for a job with no row). Its spend is
    what a real tick would have sampled (the active tasks), unless ``spend`` says otherwise."""
    reasons: list[dict] = []
    explained: dict[str, dict[str, list]] = {}
    bands = dict(Job.objects.values_list("name", "band"))
    for task_id, (band, _, reason) in sorted(tasks.items(), key=lambda item: (int(item[1][0]), item[1][1])):
        if reason not in reasons:
            reasons.append(reason)
        requested = bands.get(task_id.rpartition("/")[0], int(band))
        columns = explained.setdefault(str(int(band)), {"ids": [], "reasons": [], "requested": []})
        columns["ids"].append(task_id)
        columns["reasons"].append(reasons.index(reason))
        columns["requested"].append(requested)
    TickRecord.objects.filter(explanation__isnull=False).update(explanation=None)
    return TickRecord.objects.create(
        started_at=timezone.now(),
        now_ms=now_ms(),
        duration_ms=1.0,
        pending=len(tasks),
        left_pending=len(tasks),
        spend=live_spend() if spend is None else spend,  # what a tick samples: the active tasks
        limits=limits or {},
        explanation={"version": 3, "bands": explained, "reasons": reasons},
    )


def error_of(response) -> dict:
    """The JSON error body, checked for its shape."""
    body = response.json()
    assert set(body) == {"code", "message", "details"}, body
    assert isinstance(body["message"], str) and body["message"]
    assert isinstance(body["details"], dict)
    return body


@pytest.fixture
def as_agent(db):
    """The agent of worker w1, signed in with its own worker credential."""
    from tests.personas import agent_client

    return agent_client("w1")


@pytest.fixture
def event_history(alice, bob):
    """Job and budget events of two users: a worker, a job each, a tick that places them, and
    alice's uplift request (the event stream's tests, pages and streams alike)."""
    make_worker("w1")
    submit(alice, "train")
    submit(bob, "eval")
    run_tick()
    request_uplift(alice, budget_limit=500, reason="deadline", duration_seconds=3600)
