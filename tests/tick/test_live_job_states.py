"""The live state the tick writes for each job it changed a task of (``tick.apply.live_job_states``)
is found from those jobs' own tasks; it equals a pass over every task of the snapshot, the way it
was found before, after every step of a long random run of real writes."""

from __future__ import annotations

import random

import pytest

from scheduler.core.types import ACTIVE_STATES, JobState
from scheduler.core.bands import Band
from scheduler.models import Attempt, Job, Task
from scheduler.tick import apply
from scheduler.tick.run import run_tick
from tests.personas import NOW_MS, make_job
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


@pytest.fixture
def compared(monkeypatch) -> list[int]:
    """Every tick's ``live_job_states`` checked against the pass; the number of states each gave.
    (The pass reads the tick's decision, which ``task_writes`` is given first.)"""
    real, real_writes = apply.live_job_states, apply.task_writes
    sizes: list[int] = []
    decisions = []

    def writes(loaded, decision, *rest):
        decisions.append(decision)
        return real_writes(loaded, decision, *rest)

    def checked(loaded, kept, jobs_active):
        states = real(loaded, kept, jobs_active)
        assert states == states_by_a_pass_over_every_task(loaded, decisions[-1], kept)
        sizes.append(len(states))
        return states

    monkeypatch.setattr(apply, "task_writes", writes)
    monkeypatch.setattr(apply, "live_job_states", checked)
    return sizes


def test_each_changed_jobs_live_state_equals_a_pass_over_every_task(compared):
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


def test_jobs_whose_running_tasks_are_preempted_are_written_as_the_pass_finds_them(compared):
    """Batch work of one- and many-task jobs (gangs too) fills the cluster and runs; production
    work arrives and preempts it, round after round."""
    cluster()
    plan = random.Random(5)
    now = NOW_MS
    for round_ in range(10):
        for n in range(plan.randrange(2, 5)):
            gang = plan.random() < 0.25
            make_job(
                f"/bob/batch-{round_}-{n}",
                band=Band.BATCH,
                replicas=2 if gang else plan.choice([1, 1, 2, 3]),
                cpu=plan.choice([1, 2]),
                group_by="rack" if gang else None,
            )
        now += 1000
        run_tick(now)
        Task.objects.filter(state="assigned").update(state="running")  # as their agents report
        for n in range(plan.randrange(1, 3)):
            make_job(
                f"/alice/prod-{round_}-{n}",
                band=Band.PRODUCTION,
                replicas=plan.choice([1, 2]),
                cpu=plan.choice([1, 2, 4]),
            )
        now += 1000
        run_tick(now)
        Task.objects.filter(state="assigned").update(state="running")
    assert Attempt.objects.filter(state="preempted").count() > 5
    assert Job.objects.filter(state="pending", tasks__attempt_count__gt=0).exists()  # preempted back
    assert sum(compared) > 10
