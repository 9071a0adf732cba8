"""The outbox drain against a real database: delivery order, superseded and held intents,
retries with backoff, crashes between claiming and recording, and a bounded number of
statements per batch."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler import backends
from scheduler.backends import AttemptRef, AttemptReport, AttemptStatus, Backend, BackendError, Delivery
from scheduler.core.bands import Band
from scheduler.execution.attempts import apply_reports
from scheduler.execution.dispatcher import LEASE_NAME, drain
from scheduler.execution.outbox import intent_counts, request_dispatch, retry_intents, stuck_intents
from scheduler.jobs.cancel import cancel_job
from scheduler.models import Attempt, DispatchIntent, SchedulerLease, Task, Worker
from scheduler.tick.run import run_tick
from tests.personas import NOW_MS, make_job, make_user, make_worker, start_running

pytestmark = pytest.mark.django_db


class RecordingBackend(Backend):
    """Accepts every order and remembers it."""

    name = "recording"
    heartbeats = False

    def __init__(self, fail_with: BaseException | None = None, fail_after: int = 0):
        self.starts = []
        self.stops = []
        self.fail_with = fail_with
        self.fail_after = fail_after

    def start(self, order):
        if self.fail_with is not None and len(self.starts) >= self.fail_after:
            raise self.fail_with
        self.starts.append(order)
        return Delivery.DELIVERED

    def stop(self, order):
        self.stops.append(order)
        return Delivery.DONE


def assign(job, worker, index: int = 0) -> Task:
    """What the tick writes for a new assignment: task ASSIGNED, attempt 1, a START intent."""
    now = timezone.now()
    task = job.tasks.get(index=index)
    Task.objects.filter(pk=task.pk).update(state="assigned", worker=worker, band=job.band, attempt_count=1)
    Attempt.objects.create(task=task, number=1, worker=worker, state="assigned", band=job.band, created_at=now)
    DispatchIntent.objects.create(task=task, attempt_number=1, kind="start", worker=worker, created_at=now)
    return task


def intent(task, kind="start", number=1) -> DispatchIntent:
    return DispatchIntent.objects.get(task=task, attempt_number=number, kind=kind)


def test_drain_hands_new_attempts_to_the_workers_backend_in_id_order():
    recording = RecordingBackend()
    backends.register_backend("recording", recording)
    worker = make_worker("w1")
    Worker.objects.filter(pk=worker.pk).update(backend="recording")
    job = make_job("/alice/train", replicas=2)
    job.command = ["python", "train.py"]
    job.save()

    run_tick(NOW_MS)
    result = drain()

    assert result.delivered == 2
    assert [o.task for o in recording.starts] == ["/alice/train/0", "/alice/train/1"]
    order = recording.starts[0]
    assert order.command == ("python", "train.py")
    assert order.band is Band.INTERACTIVE and order.worker == "w1"
    assert order.environment["IRIS_TASK_ID"] == "/alice/train/0"
    assert order.environment["IRIS_ATTEMPT"] == "1" and order.environment["IRIS_BAND"] == "interactive"
    assert set(DispatchIntent.objects.values_list("state", "tries")) == {("delivered", 1)}


def test_second_drain_sends_nothing_again():
    recording = RecordingBackend()
    backends.register_backend("local", recording)
    assign(make_job("/alice/a"), make_worker("w1"))

    drain()
    again = drain()

    assert len(recording.starts) == 1
    assert again.batches == 0


def test_start_of_attempt_cancelled_before_delivery_is_never_sent_and_frees_capacity_at_once():
    recording = RecordingBackend()
    backends.register_backend("local", recording)
    alice = make_user("alice")
    task = assign(make_job("/alice/a"), make_worker("w1"))

    cancel_job(alice, "/alice/a")
    drain()

    assert recording.starts == [] and recording.stops == []
    assert intent(task, "start").state == "done"
    assert intent(task, "stop").state == "done"
    attempt = Attempt.objects.get(task=task)
    assert attempt.state == "killed" and attempt.finished_at is not None


def test_cancelling_a_running_job_writes_a_stop_intent_for_its_attempt():
    alice = make_user("alice")
    task = start_running(make_job("/alice/a"), make_worker("w1"))

    cancel_job(alice, "/alice/a")

    stop = intent(task, "stop")
    assert (stop.state, stop.reason, stop.worker.name) == ("pending", "Killed by alice", "w1")
    # The process still runs: capacity stays held until the worker confirms.
    assert Attempt.objects.get(task=task).finished_at is None


def test_preemptor_start_is_held_until_its_victims_attempt_has_finished():
    worker = make_worker("w1", cpu=4, memory_gib=16)
    victim = start_running(make_job("/bob/batch", band=Band.BATCH, cpu=4, memory_gib=8), worker)
    preemptor_job = make_job("/alice/prod", band=Band.PRODUCTION, cpu=4, memory_gib=8)

    run_tick(NOW_MS)
    first = drain()

    preemptor = preemptor_job.tasks.get()
    assert preemptor.state == "assigned" and preemptor.worker_id == worker.pk
    assert intent(victim, "stop").state == "delivered"
    held = intent(preemptor, "start")
    assert held.state == "pending" and held.tries == 0
    assert held.last_error == "held: waiting for the attempt it preempted on w1 to finish"
    assert first.held == 1

    apply_reports([AttemptReport(AttemptRef(victim.pk, 1), AttemptStatus.PREEMPTED, exit_code=-15, worker="w1")])
    drain()

    assert intent(preemptor, "start").state == "delivered"
    assert intent(victim, "stop").state == "done"


def test_failed_delivery_retries_with_doubling_backoff_then_gives_up_and_requeues_the_task(settings):
    settings.DISPATCH_MAX_TRIES = 3
    settings.DISPATCH_RETRY_SECONDS = 2
    flaky = RecordingBackend(fail_with=BackendError("cluster API timed out"))
    backends.register_backend("local", flaky)
    task = assign(make_job("/alice/a"), make_worker("w1"))
    t0 = timezone.now()

    drain(now=t0)
    first = intent(task)
    assert (first.state, first.tries, first.next_try_at) == ("pending", 1, t0 + timedelta(seconds=2))
    assert first.last_error == "BackendError: cluster API timed out"

    assert drain(now=t0 + timedelta(seconds=1)).batches == 0  # not due yet
    drain(now=t0 + timedelta(seconds=2))
    assert intent(task).next_try_at == t0 + timedelta(seconds=2 + 4)
    drain(now=t0 + timedelta(seconds=6))

    failed = intent(task)
    assert (failed.state, failed.tries) == ("failed", 3)
    assert list(stuck_intents(t0)) == [failed]
    # The task cannot start where it was placed: it goes back to the queue.
    task.refresh_from_db()
    assert (task.state, task.worker_id, task.preemption_count) == ("pending", None, 1)
    attempt = Attempt.objects.get(task=task)
    assert attempt.state == "worker_failed" and attempt.finished_at is not None


def test_worker_on_an_unknown_backend_keeps_its_intent_retrying_with_the_reason():
    worker = make_worker("w1")
    Worker.objects.filter(pk=worker.pk).update(backend="kubernetes-not-yet")
    task = assign(make_job("/alice/a"), worker)

    drain()

    pending = intent(task)
    assert pending.state == "pending" and pending.tries == 1
    assert pending.last_error.startswith("UnknownBackend: no backend named 'kubernetes-not-yet'")


def test_operator_retry_sends_a_failed_intent_once_more():
    flaky = RecordingBackend(fail_with=BackendError("down"))
    backends.register_backend("local", flaky)
    worker = make_worker("w1")
    task = start_running(make_job("/alice/a"), worker)
    DispatchIntent.objects.create(
        task=task, attempt_number=1, kind="stop", worker=worker, state="failed", tries=8, created_at=timezone.now()
    )
    backends.register_backend("local", RecordingBackend())

    assert retry_intents() == 1
    drain()

    assert intent(task, "stop").state == "done"


def test_a_crash_between_sending_and_recording_loses_nothing_and_counts_the_try():
    class Crash(BaseException):
        """Stands for the process dying: nothing after it runs."""

    worker = make_worker("w1")
    tasks = [assign(make_job(f"/alice/j{i}"), worker) for i in range(3)]
    backends.register_backend("local", RecordingBackend(fail_with=Crash(), fail_after=1))

    with pytest.raises(Crash):
        drain()

    # Every intent is still in the outbox; each try that may have reached the backend is counted.
    assert [(intent(t).state, intent(t).tries) for t in tasks] == [("pending", 1)] * 3
    recovered = RecordingBackend()
    backends.register_backend("local", recovered)
    drain()
    assert [intent(t).state for t in tasks] == ["delivered"] * 3
    assert [o.task for o in recovered.starts] == ["/alice/j0/0", "/alice/j1/0", "/alice/j2/0"]


def test_a_drain_while_another_holds_the_lease_does_nothing():
    assign(make_job("/alice/a"), make_worker("w1"))
    SchedulerLease.objects.create(name=LEASE_NAME, holder="someone", expires_at=timezone.now() + timedelta(seconds=30))

    assert drain() is None
    assert DispatchIntent.objects.get().state == "pending"


def test_a_dead_drains_lease_is_taken_over_once_expired():
    assign(make_job("/alice/a"), make_worker("w1"))
    SchedulerLease.objects.create(name=LEASE_NAME, holder="dead", expires_at=timezone.now() - timedelta(seconds=1))

    assert drain().delivered == 1


def test_drain_works_through_batches_in_id_order():
    recording = RecordingBackend()
    backends.register_backend("local", recording)
    worker = make_worker("w1", cpu=64, memory_gib=256)
    for i in range(7):
        assign(make_job(f"/alice/j{i}"), worker)

    result = drain(batch_size=3)

    assert (result.batches, result.delivered) == (3, 7)
    assert [o.task for o in recording.starts] == [f"/alice/j{i}/0" for i in range(7)]


def drain_statements(n: int) -> int:
    DispatchIntent.objects.all().delete()
    drain()  # the lease row exists from now on, as in any running cluster
    worker = make_worker(f"w{n}", cpu=1000, memory_gib=1000)
    for i in range(n):
        assign(make_job(f"/alice/n{n}-{i}"), worker)
    victim = start_running(make_job(f"/bob/v{n}"), worker)
    DispatchIntent.objects.create(task=victim, attempt_number=1, kind="stop", worker=worker, created_at=timezone.now())
    with CaptureQueriesContext(connection) as queries:
        result = drain()
    assert result.delivered == n + 1
    return len(queries)


def test_statements_per_drain_do_not_grow_with_the_number_of_intents():
    assert drain_statements(3) == drain_statements(60)


def test_stuck_intents_lists_failed_retrying_and_old_undelivered_ones(settings):
    settings.DISPATCH_STUCK_SECONDS = 60
    worker = make_worker("w1")
    now = timezone.now()
    fresh = assign(make_job("/alice/fresh"), worker)
    old = assign(make_job("/alice/old"), worker)
    retrying = assign(make_job("/alice/retrying"), worker)
    failed = assign(make_job("/alice/failed"), worker)
    DispatchIntent.objects.filter(task=old).update(created_at=now - timedelta(minutes=5), state="delivered")
    DispatchIntent.objects.filter(task=retrying).update(tries=2, last_error="boom")
    DispatchIntent.objects.filter(task=failed).update(state="failed", tries=8)

    stuck = {i.task_id for i in stuck_intents(now)}
    counts = intent_counts(now)

    assert stuck == {old.pk, retrying.pk, failed.pk}
    assert fresh.pk not in stuck
    assert counts == {"pending": 2, "delivered": 1, "failed": 1, "stuck": 3}


def test_tick_that_assigns_requests_a_drain_after_commit(django_capture_on_commit_callbacks):
    make_worker("w1")
    make_job("/alice/a")

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        run_tick(NOW_MS)

    assert request_dispatch in callbacks


def test_a_broker_outage_never_fails_the_request_for_a_drain(monkeypatch, caplog):
    from celery import current_app

    tried = []

    def broker_down(name, *args, **kwargs):
        tried.append(name)
        raise ConnectionError("broker unreachable")

    monkeypatch.setattr(current_app, "send_task", broker_down)

    request_dispatch()  # does not raise: it tried, and said why beat will deliver instead
    assert tried == ["scheduler.dispatch"]
    assert "could not enqueue a dispatch; beat's next drain will deliver the intents" in caplog.text


def test_a_stop_for_an_attempt_whose_worker_was_removed_finishes_the_attempt():
    alice = make_user("alice")
    worker = make_worker("w1")
    task = start_running(make_job("/alice/a"), worker)
    cancel_job(alice, "/alice/a")
    worker.delete()

    result = drain()

    assert result.finished == 1
    assert intent(task, "stop").state == "done"
    attempt = Attempt.objects.get(task=task)
    assert attempt.state == "killed" and attempt.finished_at is not None
