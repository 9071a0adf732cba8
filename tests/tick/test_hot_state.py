"""The tick's per-placement write to a job, its flip between pending and running, writes no index
of the job table on PostgreSQL: it is a heap-only (HOT) update (migration 0025). And since the
rows the tick keeps between ticks do not follow those flips, the tick writes each job's live
state wherever the row differs, whatever it read."""

from __future__ import annotations

import pytest
from django.db import connection

from scheduler.models import Job, Task
from scheduler.tick import run as tick_run
from scheduler.tick.run import run_tick
from tests.personas import NOW_MS, make_job, make_worker

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def job_updates() -> tuple[int, int]:
    """(rows updated, of them heap-only) in the job table by this connection, as far as its
    statistics are not yet flushed: read twice inside one transaction, the difference is what
    the transaction did between the two readings."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = %s",
            [Job._meta.db_table],
        )
        return cursor.fetchone()


def test_placing_and_preempting_live_jobs_are_heap_only_updates_of_the_job_table(monkeypatch):
    for n in range(8):
        make_job(f"/bob/batch-{n}", band=3, cpu=1, memory_gib=1)
    run_tick(NOW_MS)  # no worker yet: the jobs are routed and stay pending
    for n in range(8):
        make_worker(f"w{n}", cpu=1, memory_gib=4)
    seen = []
    real_apply = tick_run.apply_decision

    def apply_and_count(*args, **kwargs):
        before = job_updates()  # inside the tick's write transaction
        outcome = real_apply(*args, **kwargs)
        after = job_updates()
        seen.append((after[0] - before[0], after[1] - before[1]))
        return outcome

    monkeypatch.setattr(tick_run, "apply_decision", apply_and_count)
    assert run_tick(NOW_MS + 1000).assigned == 8
    assert set(Job.objects.values_list("state", flat=True)) == {"running"}
    Task.objects.update(state="running")  # as their agents report (only running work is preempted)
    # Four production jobs take half the workers: four BATCH jobs go back to pending.
    for n in range(4):
        make_job(f"/alice/prod-{n}", band=1, cpu=1, memory_gib=1)
    assert run_tick(NOW_MS + 2000).preempted == 4
    assert sorted(Job.objects.values_list("state", flat=True)) == ["pending"] * 4 + ["running"] * 8

    placed, preempted = seen
    assert placed == (8, 8)  # (updated, of them heap-only)
    assert preempted == (8, 8)  # 4 placed (pending -> running), 4 preempted (running -> pending)


def test_the_tick_writes_a_jobs_live_state_that_its_kept_rows_did_not_see():
    """Another writer (here: the test, as another tick process would) flipped the job back to
    pending without a change stamp: the tick's kept rows still take it as it was, and placing
    its task again must still write the job running."""
    make_worker("w1", cpu=8, memory_gib=32)
    job = make_job("/bob/train", cpu=1, memory_gib=1)
    run_tick(NOW_MS)
    assert Job.objects.get(pk=job.pk).state == "running"

    Task.objects.filter(job=job).update(state="pending", worker=None)  # stamped: a task change
    Job.objects.filter(pk=job.pk).update(state="pending")  # a live flip: not stamped
    outcome = run_tick(NOW_MS + 1000)

    assert outcome.assigned == 1
    assert Job.objects.get(pk=job.pk).state == "running"


def test_a_job_whose_state_stays_is_not_written(monkeypatch):
    """The tick sends every live job it changed a task of; the row is written only where its
    state differs (``bulk.update_rows(changed_only=True)``): no new row version otherwise."""
    make_worker("w0", cpu=1, memory_gib=4)
    job = make_job("/bob/pair", replicas=2, cpu=1, memory_gib=1)
    assert run_tick(NOW_MS).assigned == 1  # one task placed: the job runs
    make_worker("w1", cpu=1, memory_gib=4)
    seen = []
    real_apply = tick_run.apply_decision

    def apply_and_count(*args, **kwargs):
        before = job_updates()
        outcome = real_apply(*args, **kwargs)
        seen.append(job_updates()[0] - before[0])
        return outcome

    monkeypatch.setattr(tick_run, "apply_decision", apply_and_count)
    assert run_tick(NOW_MS + 1000).assigned == 1  # the second task: the job was running already
    assert Job.objects.get(pk=job.pk).state == "running"
    assert seen == [0]
