"""Clients and builders for the console's Django test-client tests (personas: tests/personas.py).

``anonymous`` is signed out; clients sign in through the real session middleware.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from scheduler.budgets.writes import request_uplift, set_budget
from scheduler.core.bands import Band
from scheduler.board.read import forget as forget_board
from scheduler.models import PreemptionEvent, Task, TickRecord, UserBudget, Worker
from tests.personas import make_user, make_worker, run_tasks, submit


@pytest.fixture(autouse=True)
def _fast_passwords(fast_passwords):
    """See ``fast_passwords`` in tests/conftest.py."""


@pytest.fixture(autouse=True)
def _fresh_queue_index():
    """The queue index is cached per process by tick pk; pks restart with each test database."""
    forget_board()
    yield
    forget_board()


def client_for(user=None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@pytest.fixture
def clients(alice, bob, olivia, ada):
    return {
        "anonymous": client_for(None),
        "alice": client_for(alice),
        "bob": client_for(bob),
        "olivia": client_for(olivia),
        "ada": client_for(ada),
    }


# --- builders -------------------------------------------------------------------------------------


def preempt(victim: Task, preemptor: Task, worker: Worker, tick: TickRecord | None = None) -> PreemptionEvent:
    return PreemptionEvent.objects.create(
        tick=tick,
        victim=victim,
        preemptor=preemptor,
        victim_band=int(victim.band or victim.job.band),
        preemptor_band=int(preemptor.job.band),
        worker=worker,
        reason=f"Preempted by {preemptor.name} ({Band(preemptor.job.band).name} over BATCH)",
        created_at=timezone.now(),
        victim_user=victim.job.user,
        victim_job_id=victim.job_id,
        lost_point_ms=0,
    )


def build_cluster(n: int, admin, *, start: int = 0) -> dict:
    """``n`` researchers (numbered from ``start``), each with a budget, an uplift request, a
    running job, a pending job, a BATCH job preempted by admin work, and a worker of their own;
    then two ticks, so the queue has an explanation and the budgets have spend samples.

    Everything the console's pages list grows with ``n``; their query counts must not.
    """
    from scheduler.tick.run import run_tick

    users = [make_user(f"user{i:03d}") for i in range(start, start + n)]
    workers = [make_worker(f"w{i:03d}", cpu=4, memory_gib=16) for i in range(start, start + n)]
    bully = submit(admin, f"/{admin.username}/prod{start}", priority="production", replicas=n, cpu=1, memory="1Gi")
    for i, user in enumerate(users):
        UserBudget.objects.create(user_id=user.username, budget_limit=5 if i % 2 else 0, max_band=int(Band.INTERACTIVE))
        request_uplift(user, budget_limit=1000, reason="deadline", duration_seconds=3600)
        running = submit(user, "running", replicas=2, cpu=2, memory="4Gi")
        run_tasks(running, workers[i], 1)
        submit(user, "waiting", replicas=3, cpu=64, memory="1Gi")  # fits nowhere: stays pending
        batch = submit(user, "batchy", priority="batch", replicas=1, cpu=1, memory="1Gi")
        run_tasks(batch, workers[i])
        preempt(batch.tasks.get(), bully.tasks.get(index=i), workers[i])
        set_budget(admin, user.username, budget_limit=10 if i % 2 else 0, reason="tiered")
    run_tick()
    run_tick()
    return {"users": users, "workers": workers}
