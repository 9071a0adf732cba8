"""The change stamp of new rows and of the tick's task writes costs no PL/pgSQL call per row
(migration 0031), and still holds the writing transaction's id, which the tick's change reads
(``scheduler.store.cluster_rows``) depend on. Other writers' updates are stamped by the
trigger as before (``tests/store/test_cluster_rows.py``)."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from scheduler.models import Attempt, Job, Task
from scheduler.tick import run as tick_run
from scheduler.tick.apply import current_task_states, keyed_by_position, lock_jobs
from scheduler.tick.run import run_tick
from tests.personas import NOW_MS, make_job, make_worker

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# The stamping functions, before migration 0031 and after (the job table's was its own).
STAMPING_FUNCTIONS = ("iris_stamp_change", "iris_stamp_job_change")


@pytest.fixture
def counted_functions():
    """Count PL/pgSQL calls in this connection (``pg_stat_xact_user_functions``)."""
    with connection.cursor() as cursor:
        cursor.execute("SET track_functions = 'pl'")
    yield
    with connection.cursor() as cursor:
        cursor.execute("RESET track_functions")


def stamping_calls() -> int:
    """Calls of the stamping functions in the current transaction so far."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions WHERE funcname = ANY(%s)",
            [list(STAMPING_FUNCTIONS)],
        )
        return int(cursor.fetchone()[0])


def transaction_id() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_xact_id()::text::bigint")
        return cursor.fetchone()[0]


def stamps(model, pks) -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT DISTINCT change_xid FROM {model._meta.db_table} WHERE id = ANY(%s)", [list(pks)])
        return {stamp for (stamp,) in cursor.fetchall()}


def test_new_jobs_and_tasks_are_stamped_with_their_transaction_without_a_trigger_call(counted_functions):
    with transaction.atomic():
        xid = transaction_id()
        job = make_job("/bob/sweep", replicas=3)
        assert stamping_calls() == 0
    assert stamps(Job, [job.pk]) == {xid}
    assert stamps(Task, Task.objects.filter(job=job).values_list("pk", flat=True)) == {xid}


def test_a_placing_tick_stamps_its_tasks_and_attempts_and_flips_its_jobs_without_a_trigger_call(
    counted_functions, monkeypatch
):
    for n in range(4):
        make_worker(f"w{n}", cpu=2, memory_gib=8)
    jobs = [make_job(f"/bob/train-{n}", replicas=2, cpu=1, memory_gib=1) for n in range(4)]
    seen = {}
    real_apply = tick_run.apply_decision

    def apply_and_count(*args, **kwargs):
        before = stamping_calls()  # inside the tick's write transaction
        outcome = real_apply(*args, **kwargs)
        seen["stamping calls"] = stamping_calls() - before
        seen["xid"] = transaction_id()
        return outcome

    monkeypatch.setattr(tick_run, "apply_decision", apply_and_count)
    assert run_tick(NOW_MS).assigned == 8

    assert seen["stamping calls"] == 0
    tasks = Task.objects.filter(job__in=jobs)
    assert set(tasks.values_list("state", flat=True)) == {"assigned"}
    assert stamps(Task, tasks.values_list("pk", flat=True)) == {seen["xid"]}
    assert stamps(Attempt, Attempt.objects.filter(task__in=tasks).values_list("pk", flat=True)) == {seen["xid"]}


def test_another_writers_task_update_and_a_jobs_end_are_still_stamped_by_the_trigger():
    job = make_job("/bob/train")
    task = Task.objects.get(job=job)
    with transaction.atomic():
        xid = transaction_id()
        Task.objects.filter(pk=task.pk).update(state="killed")
        Job.objects.filter(pk=job.pk).update(state="killed")
    assert stamps(Task, [task.pk]) == {xid}
    assert stamps(Job, [job.pk]) == {xid}


def test_a_live_jobs_flip_keeps_its_stamp():
    job = make_job("/bob/train")
    before = stamps(Job, [job.pk])
    Job.objects.filter(pk=job.pk).update(state="running")
    assert stamps(Job, [job.pk]) == before


def test_the_lock_read_returns_each_tasks_position_and_the_write_finds_the_task_there():
    job = make_job("/bob/sweep", replicas=3)
    pks = sorted(Task.objects.filter(job=job).values_list("pk", flat=True))
    with transaction.atomic():
        states, positions = current_task_states(pks)
        assert states == {pk: ("pending", None) for pk in pks}
        with connection.cursor() as cursor:
            for pk in pks:
                cursor.execute(f"SELECT id FROM {Task._meta.db_table} WHERE ctid = %s::tid", [positions[pk]])
                assert cursor.fetchone() == (pk,)


def test_the_job_lock_returns_each_jobs_position_and_the_tick_flips_and_ends_jobs_found_there():
    jobs = [make_job(f"/bob/j{i}") for i in range(3)]
    with transaction.atomic():
        positions = lock_jobs({job.pk for job in jobs} | {10**9})  # the last one is not there
        assert set(positions) == {job.pk for job in jobs}
        with connection.cursor() as cursor:
            for job in jobs:
                cursor.execute(f"SELECT id FROM {Job._meta.db_table} WHERE ctid = %s::tid", [positions[job.pk]])
                assert cursor.fetchone() == (job.pk,)
    # Rows of jobs not locked (gone) are dropped, as an UPDATE by id would have matched nothing.
    assert keyed_by_position([(jobs[0].pk, "running"), (10**9, "running")], positions) == [
        (positions[jobs[0].pk], jobs[0].pk, "running")
    ]


def test_a_tick_that_ends_a_job_and_flips_others_writes_each_by_its_locked_position():
    worker = make_worker("w1", cpu=4)
    placed = make_job("/bob/placed", cpu=1)
    # Past its scheduling deadline and too large for any worker: the tick ends it unschedulable.
    expired = make_job("/bob/expired", cpu=64, deadline_ms=NOW_MS - 1)
    with CaptureQueriesContext(connection) as queries:
        outcome = run_tick(NOW_MS)
    job_writes = [
        q["sql"] for q in queries.captured_queries if q["sql"].startswith(f"UPDATE {Job._meta.db_table} SET state")
    ]
    assert len(job_writes) == 2
    assert all(f"{Job._meta.db_table}.ctid = v.ctid" in sql for sql in job_writes)
    assert outcome.assigned == 1 and worker
    assert Job.objects.get(pk=placed.pk).state == "running"
    assert Job.objects.get(pk=expired.pk).state == "unschedulable"
