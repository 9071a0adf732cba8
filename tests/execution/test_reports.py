"""Applying what really happened: reports move attempts and tasks forward only, retries follow
the job's budgets, gangs run whole, jobs finish with their tasks, and silent workers are lost."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.backends import AttemptRef, AttemptReport, AttemptStatus
from scheduler.core.bands import Band
from scheduler.execution.attempts import apply_reports
from scheduler.execution.dispatcher import drain
from scheduler.execution.workers import agent_heartbeat, check_workers
from scheduler.models import Attempt, DispatchIntent, Job, Task, Worker
from scheduler.provisioning.sync import sync_backends
from scheduler.tick.run import run_tick
from tests.personas import NOW_MS, make_job, make_worker, start_running

pytestmark = pytest.mark.django_db


def report(task, status, *, attempt=1, exit_code=None, worker="w1", message=""):
    return apply_reports(
        [AttemptReport(AttemptRef(task.pk, attempt), AttemptStatus(status), exit_code, message, worker)]
    )


def attempt_of(task, number=1) -> Attempt:
    return Attempt.objects.get(task=task, number=number)


def refreshed(task) -> Task:
    task.refresh_from_db()
    return task


def assigned_task(job_name="/alice/a", worker=None, **job_options) -> Task:
    worker = worker or make_worker("w1")
    make_job(job_name, **job_options)
    run_tick(NOW_MS)
    return Task.objects.get(job__name=job_name, index=0)


def test_running_report_starts_the_attempt_and_acknowledges_its_start_intent():
    task = assigned_task()

    report(task, "running")

    attempt = attempt_of(task)
    assert attempt.state == "running" and attempt.started_at is not None
    assert refreshed(task).state == "running"
    assert DispatchIntent.objects.get(task=task, kind="start").state == "done"


def test_exit_zero_succeeds_the_task_frees_capacity_and_finishes_the_job():
    task = assigned_task()
    report(task, "running")

    report(task, "succeeded", exit_code=0)

    attempt = attempt_of(task)
    assert (attempt.state, attempt.exit_code) == ("succeeded", 0)
    assert attempt.finished_at is not None
    assert (refreshed(task).state, task.worker_id) == ("succeeded", None)
    assert Job.objects.get(pk=task.job_id).state == "succeeded"


def test_a_failure_within_max_retries_failure_requeues_and_the_next_one_fails_the_job():
    task = assigned_task()
    Job.objects.filter(pk=task.job_id).update(max_retries_failure=1)
    report(task, "running")

    report(task, "failed", exit_code=3)

    assert (refreshed(task).state, task.failure_count, task.preemption_count) == ("pending", 1, 0)
    assert attempt_of(task).error == "exited with code 3"
    run_tick(NOW_MS)
    report(task, "running", attempt=2)
    report(task, "failed", attempt=2, exit_code=3)

    assert (refreshed(task).state, task.failure_count) == ("failed", 2)
    assert Job.objects.get(pk=task.job_id).state == "failed"


def test_a_failure_by_a_signal_reads_as_that_signal():
    task = assigned_task()
    report(task, "running")

    report(task, "failed", exit_code=-9)

    assert (attempt_of(task).exit_code, attempt_of(task).error) == (-9, "killed by signal 9 (SIGKILL)")


def test_default_max_retries_failure_of_zero_fails_on_the_first_non_zero_exit():
    task = assigned_task()

    report(task, "failed", exit_code=1)

    assert (refreshed(task).state, task.failure_count) == ("failed", 1)


def test_a_late_running_report_never_revives_a_finished_attempt():
    task = assigned_task()
    report(task, "running")
    report(task, "succeeded", exit_code=0)
    finished = attempt_of(task)

    outcome = report(task, "running")

    assert outcome.applied == 0
    attempt = attempt_of(task)
    assert (attempt.state, attempt.finished_at, attempt.started_at) == (
        "succeeded",
        finished.finished_at,
        finished.started_at,
    )
    assert refreshed(task).state == "succeeded"


def test_a_duplicate_failure_report_is_counted_once():
    task = assigned_task()
    Job.objects.filter(pk=task.job_id).update(max_retries_failure=5)
    report(task, "failed", exit_code=2)

    outcome = report(task, "failed", exit_code=2)

    assert outcome.ignored == 1
    assert refreshed(task).failure_count == 1


def test_an_exit_after_the_tick_preempted_the_task_only_frees_capacity():
    worker = make_worker("w1", cpu=4, memory_gib=16)
    victim = start_running(make_job("/bob/batch", band=Band.BATCH, cpu=4, memory_gib=8), worker)
    make_job("/alice/prod", band=Band.PRODUCTION, cpu=4, memory_gib=8)
    run_tick(NOW_MS)
    assert (refreshed(victim).state, victim.preemption_count) == ("pending", 1)

    report(victim, "preempted", exit_code=-15)

    attempt = attempt_of(victim)
    assert attempt.state == "preempted" and attempt.error.startswith("Preempted by /alice/prod/0")
    assert (attempt.finished_at is not None, attempt.exit_code) == (True, -15)
    # The report neither charges the task again nor changes its state.
    assert (refreshed(victim).state, victim.preemption_count) == ("pending", 1)


def test_a_report_from_another_worker_is_ignored():
    task = assigned_task()
    make_worker("w2")

    outcome = report(task, "succeeded", exit_code=0, worker="w2")

    assert outcome.ignored == 1
    assert attempt_of(task).state == "assigned"


def test_a_backend_eviction_retries_within_max_retries_preemption():
    task = assigned_task()
    Job.objects.filter(pk=task.job_id).update(max_retries_preemption=1)
    report(task, "running")

    report(task, "preempted", message="evicted by Kueue")
    assert (refreshed(task).state, task.preemption_count) == ("pending", 1)
    run_tick(NOW_MS)
    report(task, "preempted", attempt=2, message="evicted by Kueue")

    assert (refreshed(task).state, task.preemption_count) == ("preempted", 2)
    assert attempt_of(task, 2).state == "preempted"
    assert Job.objects.get(pk=task.job_id).state == "preempted"


def silent_worker(name="w1", seconds_ago=60) -> Worker:
    worker = make_worker(name)
    Worker.objects.filter(pk=worker.pk).update(last_heartbeat=timezone.now() - timedelta(seconds=seconds_ago))
    return worker


def test_a_worker_silent_past_the_grace_period_is_lost_and_its_tasks_retry(settings):
    settings.WORKER_GRACE_SECONDS = 30
    worker = silent_worker("w1", seconds_ago=31)
    task = start_running(make_job("/alice/a"), worker)
    fresh = silent_worker("w2", seconds_ago=5)

    lost = check_workers()

    assert lost == ["w1"]
    assert Worker.objects.get(pk=worker.pk).healthy is False
    assert Worker.objects.get(pk=fresh.pk).healthy is True
    attempt = attempt_of(task)
    assert attempt.state == "worker_failed" and attempt.finished_at is not None
    assert "no heartbeat" in attempt.error
    assert (refreshed(task).state, task.preemption_count, task.worker_id) == ("pending", 1, None)
    assert check_workers() == []  # declared once


def test_a_lost_worker_ends_tasks_out_of_preemption_retries_as_worker_failed():
    worker = silent_worker()
    task = start_running(make_job("/alice/a"), worker)
    Job.objects.filter(pk=task.job_id).update(max_retries_preemption=0)

    check_workers()

    assert refreshed(task).state == "worker_failed"
    assert Job.objects.get(pk=task.job_id).state == "failed"


def test_a_worker_that_never_heartbeated_is_not_watched():
    worker = make_worker("by-hand")  # registered by an operator, no agent
    start_running(make_job("/alice/a"), worker)

    assert check_workers() == []
    assert Worker.objects.get(pk=worker.pk).healthy is True


def gang(name="/alice/gang", replicas=3, **options):
    workers = [make_worker(f"h{i}", tpu_name="slice-a", tpu_worker_id=i) for i in range(replicas)]
    job = make_job(name, replicas=replicas, group_by="tpu-name", **options)
    tasks = [start_running(job, workers[i], index=i) for i in range(replicas)]
    return job, tasks


def test_a_gang_member_failing_for_good_ends_its_siblings_and_stops_their_processes():
    job, tasks = gang()

    report(tasks[1], "failed", exit_code=1, worker="h1")

    assert [refreshed(t).state for t in tasks] == ["cosched_failed", "failed", "cosched_failed"]
    stops = DispatchIntent.objects.filter(kind="stop").order_by("task_id")
    assert [(s.task_id, s.state) for s in stops] == [(tasks[0].pk, "pending"), (tasks[2].pk, "pending")]
    assert stops[0].reason.startswith("Gang member /alice/gang/1 ended")
    # The siblings' processes still run: their capacity is held until they stop.
    assert attempt_of(tasks[0]).finished_at is None
    assert Job.objects.get(pk=job.pk).state == "failed"


def test_a_gang_member_lost_with_retries_left_requeues_the_whole_gang_free_of_charge():
    job, tasks = gang()

    report(tasks[0], "worker_lost", worker="h0")

    assert [refreshed(t).state for t in tasks] == ["pending"] * 3
    assert [t.preemption_count for t in tasks] == [1, 0, 0]
    assert [attempt_of(t).state for t in tasks] == ["worker_failed", "preempted", "preempted"]
    assert DispatchIntent.objects.filter(kind="stop").count() == 2


def heartbeat(running=(), worker="w1"):
    return agent_heartbeat(worker, [AttemptRef(*key) for key in running])


def test_heartbeat_hands_the_agent_its_delivered_starts_and_stops():

    task = assigned_task()
    drain()

    box = heartbeat()

    assert [(o.ref, o.task) for o in box.starts] == [(AttemptRef(task.pk, 1), "/alice/a/0")]
    assert box.stops == []
    assert Worker.objects.get(name="w1").last_heartbeat is not None


def test_heartbeat_does_not_hand_out_a_start_the_agent_already_runs():

    task = assigned_task()
    drain()

    box = heartbeat(running=[(task.pk, 1)])

    assert box.starts == []
    assert DispatchIntent.objects.get(task=task, kind="start").state == "done"


def test_heartbeat_finds_an_active_attempt_a_restarted_agent_no_longer_runs():
    task = assigned_task()
    report(task, "running")  # the agent confirmed it started

    heartbeat(running=[])  # ... and after a restart does not run it

    assert attempt_of(task).state == "worker_failed"
    assert refreshed(task).state == "pending"


def test_heartbeat_finishes_an_ended_attempt_the_agent_does_not_run():
    worker = make_worker("w1", cpu=4, memory_gib=16)
    victim = start_running(make_job("/bob/batch", band=Band.BATCH, cpu=4, memory_gib=8), worker)
    make_job("/alice/prod", band=Band.PRODUCTION, cpu=4, memory_gib=8)
    run_tick(NOW_MS)

    heartbeat(running=[])

    assert attempt_of(victim).finished_at is not None


def test_heartbeat_tells_the_agent_to_stop_what_it_should_not_run():
    task = assigned_task()

    box = heartbeat(running=[(task.pk, 7), (999_999, 1)])

    assert sorted((o.ref.task_pk, o.ref.attempt) for o in box.stops) == [(task.pk, 7), (999_999, 1)]


def test_reports_of_a_polled_backend_are_applied_and_only_polled_backends_are_asked():
    from scheduler import backends
    from scheduler.backends import Backend, Delivery

    task = assigned_task()

    class Polled(Backend):
        name = "polled"

        def start(self, order):
            return Delivery.DONE

        def stop(self, order):
            return Delivery.DONE

        def sync(self, now):
            return [AttemptReport(AttemptRef(task.pk, 1), AttemptStatus.SUCCEEDED, exit_code=0)]

    backends.register_backend("polled", Polled())

    assert "polled" in backends.polled_backend_names()
    assert "local" not in backends.polled_backend_names()  # agents push their reports
    assert "local" in backends.heartbeat_backend_names()
    assert sync_backends() >= 1
    assert refreshed(task).state == "succeeded"
