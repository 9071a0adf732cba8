"""The live state the tick writes for each job it changed a task of (``tick.apply.live_job_states``)
is found from those jobs' own tasks; it equals a pass over every task of the snapshot, the way it
was found before, after every step of a long random run of real writes."""

from __future__ import annotations

import random

import pytest

from scheduler.core.types import ACTIVE_STATES, JobState
from scheduler.models import Job
from scheduler.tick import apply
from tests.store.test_cluster_rows import Operations, cluster

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def states_by_a_pass_over_every_task(loaded, decision, kept) -> list[tuple[int, str]]:
    active: dict[str, bool] = {t.rsplit("/", 1)[0]: False for t in kept}
    for task in loaded.snapshot.tasks:
        if task.job_id in active and not active[task.job_id]:
            state = decision.after[task.id].state if task.id in kept else task.state
            active[task.job_id] = state in ACTIVE_STATES
    running, pending = JobState.RUNNING.value, JobState.PENDING.value
    return [
        (loaded.job_pks[job], running if is_active else pending)
        for job, is_active in sorted(active.items())
        if not loaded.job_states.get(job)
    ]


def test_each_changed_jobs_live_state_equals_a_pass_over_every_task(monkeypatch):
    real = apply.live_job_states
    compared = []

    def checked(loaded, decision, kept):
        states = real(loaded, decision, kept)
        assert states == states_by_a_pass_over_every_task(loaded, decision, kept)
        compared.append(len(states))
        return states

    monkeypatch.setattr(apply, "live_job_states", checked)
    cluster()
    ops = Operations()
    plan = random.Random(11)
    weights = {"submit": 4, "tick": 5, "report": 3, "cancel": 1, "lose_worker": 1, "heal_workers": 1}
    for _ in range(100):
        name = plan.choices(list(weights), weights=list(weights.values()))[0]
        getattr(ops, name)(plan.randrange(50))
    # The run wrote both states, for jobs of several tasks too.
    assert sum(compared) > 20
    assert Job.objects.filter(state="running", replicas__gt=1).exists()
