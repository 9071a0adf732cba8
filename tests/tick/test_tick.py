"""The tick against a real database: atomic apply, stamped bands, preemption events, the lease,
conflicts with concurrent writes, and a constant number of statements."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler.core.bands import Band
from scheduler.core.decision import decide
from scheduler.core.wire import decision_to_json, snapshot_from_json, snapshot_to_json
from scheduler.models import Attempt, DispatchIntent, Job, PreemptionEvent, SchedulerLease, Task, TickRecord, UserBudget
from scheduler.store import bulk
from scheduler.store.cluster_rows import forget_cluster_rows
from scheduler.tick.apply import apply_decision
from scheduler.tick.load import load_snapshot
from scheduler.tick.run import LeaseLost, acquire_lease, confirm_lease, run_tick
from tests.personas import NOW_MS, make_job, make_worker, start_running

pytestmark = pytest.mark.django_db


def test_tick_assigns_pending_task_and_stamps_band_and_attempt():
    worker = make_worker("w1")
    job = make_job("/alice/train")

    outcome = run_tick(NOW_MS)

    task = Task.objects.get(job=job)
    assert (task.state, task.worker_id, task.band, task.attempt_count) == ("assigned", worker.pk, Band.INTERACTIVE, 1)
    attempt = Attempt.objects.get(task=task)
    assert (attempt.number, attempt.worker_id, attempt.state, attempt.band) == (
        1,
        worker.pk,
        "assigned",
        Band.INTERACTIVE,
    )
    assert Job.objects.get(pk=job.pk).state == "running"
    record = TickRecord.objects.get(pk=outcome.tick_id)
    assert (record.assigned, record.preempted, record.expired, record.pending) == (1, 0, 0, 1)


def test_over_budget_interactive_is_stamped_batch_at_assignment():
    UserBudget.objects.create(user_id="alice", budget_limit=10, max_band=Band.INTERACTIVE)
    worker = make_worker("w1", cpu=16, memory_gib=64)
    # 4 cores and 16 GiB: value 36 > limit 10, so alice is over budget.
    start_running(make_job("/alice/big", cpu=4, memory_gib=16), worker)
    make_job("/alice/small")

    run_tick(NOW_MS)

    task = Task.objects.get(job__name="/alice/small")
    assert task.state == "assigned"
    assert task.band == Band.BATCH
    assert TickRecord.objects.get().spend == {"alice": 36}


def test_tick_preempts_lower_band_records_event_and_holds_victim_capacity():
    worker = make_worker("w1", cpu=4, memory_gib=16)
    victim = start_running(make_job("/bob/batch", band=Band.BATCH, cpu=4, memory_gib=8), worker)
    make_job("/alice/prod", band=Band.PRODUCTION, cpu=4, memory_gib=8)

    outcome = run_tick(NOW_MS)

    victim.refresh_from_db()
    preemptor = Task.objects.get(job__name="/alice/prod")
    assert (victim.state, victim.worker_id, victim.preemption_count) == ("pending", None, 1)
    assert (preemptor.state, preemptor.worker_id, preemptor.band) == ("assigned", worker.pk, Band.PRODUCTION)
    victim_attempt = Attempt.objects.get(task=victim, number=1)
    assert victim_attempt.state == "preempted"
    assert victim_attempt.error == "Preempted by /alice/prod/0"
    assert victim_attempt.finished_at is None  # capacity held until the worker confirms
    event = PreemptionEvent.objects.get()
    assert (event.victim_id, event.preemptor_id, event.worker_id, event.tick_id) == (
        victim.pk,
        preemptor.pk,
        worker.pk,
        outcome.tick_id,
    )
    assert (event.victim_band, event.preemptor_band) == (Band.BATCH, Band.PRODUCTION)
    # The event carries what the history and the fairness page read: the victim's user and the
    # work lost, its value (4 cores, 8 GiB: 28 points) × how long its attempt had run.
    ran_ms = round((event.created_at - victim_attempt.started_at).total_seconds() * 1000)
    assert ran_ms > 0
    assert (event.victim_user, event.lost_point_ms) == ("bob", 28 * ran_ms)
    # And its job, which the history's most preempted jobs group by (not each event's task).
    assert event.victim_job_id == event.victim.job_id == Job.objects.get(name="/bob/batch").pk


def test_the_work_lost_is_the_evicted_attempts_not_an_earlier_ones():
    worker = make_worker("w1", cpu=4, memory_gib=16)
    victim = start_running(make_job("/bob/batch", band=Band.BATCH, cpu=4, memory_gib=8), worker)
    # Its first attempt ran an hour and was preempted; the second started ten minutes ago.
    now = timezone.now()
    Attempt.objects.filter(task=victim).update(
        state="preempted", started_at=now - timedelta(hours=1), finished_at=now - timedelta(minutes=11)
    )
    second = Attempt.objects.create(
        task=victim,
        number=2,
        worker=worker,
        state="running",
        band=int(Band.BATCH),
        created_at=now - timedelta(minutes=11),
        started_at=now - timedelta(minutes=10),
    )
    Task.objects.filter(pk=victim.pk).update(attempt_count=2, preemption_count=1)
    make_job("/alice/prod", band=Band.PRODUCTION, cpu=4, memory_gib=8)

    run_tick(NOW_MS)

    event = PreemptionEvent.objects.get()
    ran_ms = round((event.created_at - second.started_at).total_seconds() * 1000)
    assert 600_000 <= ran_ms < 660_000
    assert (event.victim_id, event.victim_user, event.lost_point_ms) == (victim.pk, "bob", 28 * ran_ms)


def test_a_job_whose_only_task_was_preempted_is_pending_again_and_queued_in_its_own_band():
    worker = make_worker("w1", cpu=4, memory_gib=16)
    victim_job = make_job("/bob/batch", band=Band.BATCH, cpu=4, memory_gib=8)
    start_running(victim_job, worker)
    make_job("/alice/prod", band=Band.PRODUCTION, cpu=4, memory_gib=8)

    run_tick(NOW_MS)

    victim_job.refresh_from_db()
    assert victim_job.state == "pending"
    assert Job.objects.get(name="/alice/prod").state == "running"
    bands = TickRecord.objects.get().explanation["bands"]
    assert list(bands) == [str(int(Band.BATCH))]
    queued = bands[str(int(Band.BATCH))]
    assert (queued["ids"], queued["requested"]) == (["/bob/batch/0"], [Band.BATCH])


def test_victim_unfinished_attempt_keeps_its_worker_full_on_the_next_tick():
    worker = make_worker("w1", cpu=4, memory_gib=16)
    start_running(make_job("/bob/batch", band=Band.BATCH, cpu=4, memory_gib=8), worker)
    make_job("/alice/prod", band=Band.PRODUCTION, cpu=4, memory_gib=8)
    run_tick(NOW_MS)

    # The preempted attempt has not finished, and the preemptor holds the rest: the requeued
    # victim cannot be placed back on the same worker.
    run_tick(NOW_MS + 5000)
    assert Task.objects.get(job__name="/bob/batch").state == "pending"


def test_expired_task_and_its_job_become_unschedulable():
    make_worker("w1", cpu=1, memory_gib=1)
    job = make_job("/alice/late", cpu=4, deadline_ms=NOW_MS - 1)

    outcome = run_tick(NOW_MS)

    assert Task.objects.get(job=job).state == "unschedulable"
    job.refresh_from_db()
    assert job.state == "unschedulable"
    assert job.finished_at is not None
    assert outcome.expired == 1


def test_running_tasks_of_a_job_past_its_deadline_are_killed_and_told_to_stop():
    worker = make_worker("w1", cpu=2, memory_gib=4)
    job = make_job("/alice/late", replicas=2, cpu=2, deadline_ms=NOW_MS - 1)
    running = start_running(job, worker)

    run_tick(NOW_MS)

    running.refresh_from_db()
    assert running.state == "killed"
    attempt = Attempt.objects.get(task=running)
    assert attempt.state == "killed"
    assert attempt.error == "Killed: job /alice/late ended unschedulable"
    assert DispatchIntent.objects.filter(task=running, kind="stop").exists()
    assert Job.objects.get(pk=job.pk).state == "unschedulable"


def test_tick_and_simulate_give_the_same_decision(tmp_path, capsys):
    make_worker("w1", cpu=4, memory_gib=16)
    make_worker("tpu-0", cpu=8, memory_gib=64, device=("tpu", "v5p-8", 4), tpu_name="s1", tpu_worker_id=0)
    make_worker("tpu-1", cpu=8, memory_gib=64, device=("tpu", "v5p-8", 4), tpu_name="s1", tpu_worker_id=1)
    UserBudget.objects.create(user_id="bob", budget_limit=5, max_band=Band.INTERACTIVE)
    start_running(make_job("/bob/run", cpu=2, memory_gib=2), make_worker("w2"))
    make_job("/alice/gang", replicas=2, device=("tpu", "v5p-8", 4), group_by="tpu-name")
    make_job("/bob/more", replicas=3)
    make_job("/carol/batch", band=Band.BATCH, replicas=6)

    snapshot_json = snapshot_to_json(load_snapshot(NOW_MS).snapshot)
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(snapshot_json))
    capsys.readouterr()
    call_command("simulate", str(path))
    simulated = json.loads(capsys.readouterr().out)

    outcome = run_tick(NOW_MS)

    assert decision_to_json(outcome.decision) == simulated
    assert simulated == decision_to_json(decide(snapshot_from_json(snapshot_json)))
    assert {a["task"] for a in simulated["assignments"]} == set(
        f"{t.job.name}/{t.index}" for t in Task.objects.filter(state="assigned").select_related("job")
    )


def test_tick_failing_midway_writes_nothing(monkeypatch):
    make_worker("w1")
    make_job("/alice/a", replicas=2)
    calls = []

    def failing_on_third_write(real):
        def write(*args, **kwargs):
            calls.append(args[0])
            if len(calls) == 3:
                raise RuntimeError("worker killed mid-tick")
            return real(*args, **kwargs)

        return write

    monkeypatch.setattr(bulk, "update_rows", failing_on_third_write(bulk.update_rows))
    monkeypatch.setattr(bulk, "insert_rows", failing_on_third_write(bulk.insert_rows))
    with pytest.raises(RuntimeError):
        run_tick(NOW_MS)

    assert len(calls) == 3  # two writes had been made before the failure
    assert set(Task.objects.values_list("state", flat=True)) == {"pending"}
    assert not Attempt.objects.exists()
    assert not TickRecord.objects.exists()
    assert SchedulerLease.objects.get(name="tick").holder == ""  # released for the next tick


def test_a_tick_does_not_run_while_another_holds_the_lease():
    make_worker("w1")
    make_job("/alice/a")

    assert acquire_lease("someone-else", timezone.now())
    assert run_tick(NOW_MS) is None
    assert Task.objects.get().state == "pending"


def test_a_tick_that_lost_its_lease_commits_nothing():
    make_worker("w1")
    make_job("/alice/a")

    assert acquire_lease("stalled", timezone.now())
    loaded = load_snapshot(NOW_MS)
    decision = decide(loaded.snapshot)
    # The stalled tick's lease expired and a newer tick took it over.
    SchedulerLease.objects.filter(name="tick").update(holder="newer")
    with pytest.raises(LeaseLost), transaction.atomic():
        confirm_lease("stalled")
        apply_decision(loaded, decision, timezone.now(), 0.0, 0.0)
    assert Task.objects.get().state == "pending"


def test_a_job_cancelled_while_the_tick_decided_is_not_overwritten():
    make_worker("w1", cpu=16)
    make_job("/alice/keep")
    cancelled = make_job("/alice/gone", replicas=2)

    loaded = load_snapshot(NOW_MS)
    decision = decide(loaded.snapshot)
    assert {a.task for a in decision.assignments} >= {"/alice/gone/0", "/alice/gone/1"}
    Task.objects.filter(job=cancelled).update(state="killed")

    with transaction.atomic():
        outcome = apply_decision(loaded, decision, timezone.now(), 0.0, 0.0)

    assert set(Task.objects.filter(job=cancelled).values_list("state", flat=True)) == {"killed"}
    assert not Attempt.objects.filter(task__job=cancelled).exists()
    assert Task.objects.get(job__name="/alice/keep").state == "assigned"
    assert outcome.skipped_conflicts == 2


def test_a_gang_with_one_moved_member_is_not_half_assigned():
    for i in range(2):
        make_worker(f"tpu-{i}", device=("tpu", "v5p-8", 4), tpu_name="s1", tpu_worker_id=i)
    gang = make_job("/alice/gang", replicas=2, device=("tpu", "v5p-8", 4), group_by="tpu-name")

    loaded = load_snapshot(NOW_MS)
    decision = decide(loaded.snapshot)
    assert len(decision.assignments) == 2
    Task.objects.filter(job=gang, index=1).update(state="killed")

    with transaction.atomic():
        apply_decision(loaded, decision, timezone.now(), 0.0, 0.0)

    assert Task.objects.get(job=gang, index=0).state == "pending"
    assert not Attempt.objects.exists()


@pytest.mark.django_db(transaction=True)  # committed writes: later ticks read only the changes
def test_statements_per_tick_do_not_grow_with_the_number_of_tasks():
    """Both kinds of tick: one that reads the whole cluster (a tick process's first) and one that
    reads only the rows changed since the previous tick (PostgreSQL; SQLite reads whole)."""

    def statements_for(jobs: int, name: str) -> tuple[int, int]:
        for i in range(jobs):
            make_job(f"/user{i % 7}/{name}{i}", replicas=3, band=Band.BATCH if i % 3 else Band.INTERACTIVE)
        forget_cluster_rows()
        with CaptureQueriesContext(connection) as whole:
            run_tick(NOW_MS)
        for i in range(jobs):
            make_job(f"/user{i % 7}/{name}-more{i}", replicas=3)
        with CaptureQueriesContext(connection) as changes:
            outcome = run_tick(NOW_MS)
        assert outcome.refresh == ("changes" if connection.vendor == "postgresql" else "all")
        return len(whole.captured_queries), len(changes.captured_queries)

    for i in range(60):
        make_worker(f"w{i}", cpu=64, memory_gib=256)
    run_tick(NOW_MS)  # the first tick ever also creates the lease row
    small = statements_for(5, "small")
    large = statements_for(60, "large")
    assert small == large


@pytest.mark.django_db(transaction=True)
def test_two_ticks_racing_never_assign_a_task_twice():
    for i in range(4):
        make_worker(f"w{i}", cpu=64, memory_gib=256)
    for i in range(20):
        make_job(f"/user{i % 3}/job{i}", replicas=4)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def racer():
        try:
            barrier.wait()
            run_tick(NOW_MS)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=racer) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert not errors
    assigned = Task.objects.filter(state="assigned").count()
    assert assigned > 0
    assert Attempt.objects.count() == assigned
    assert Attempt.objects.filter(number__gt=1).count() == 0


def test_a_tick_over_an_unchanged_cluster_reuses_the_decision_and_records_the_same(monkeypatch):
    from scheduler.tick import run

    make_worker("w1", cpu=2, memory_gib=4)
    make_job("/alice/big", cpu=8)  # never fits: the cluster stays as it is
    make_job("/bob/late", cpu=8, deadline_ms=NOW_MS + 60_000)
    calls = []
    real_decide = run.decide
    monkeypatch.setattr(run, "decide", lambda snapshot: calls.append(snapshot.now_ms) or real_decide(snapshot))

    run_tick(NOW_MS)
    reused = run_tick(NOW_MS + 1_000)
    run.forget_decision()
    fresh = run_tick(NOW_MS + 2_000)
    at_deadline = run_tick(NOW_MS + 60_000)

    assert calls == [NOW_MS, NOW_MS + 2_000, NOW_MS + 60_000]  # the second tick did not decide
    assert decision_to_json(reused.decision) == decision_to_json(fresh.decision)
    first, second, third = TickRecord.objects.order_by("pk")[:3]
    fields = ("pending", "left_pending", "assigned", "preempted", "expired", "spend", "limits")
    assert [getattr(second, f) for f in fields] == [getattr(third, f) for f in fields]
    assert at_deadline.expired == 1


def test_a_reused_tick_writes_no_queue_but_names_the_tick_holding_it_and_pages_show_it_as_of_that_tick(
    monkeypatch, django_capture_on_commit_callbacks
):
    from scheduler.api.serializers import ExplainSerializer
    from scheduler.jobs.explain import explain_job
    from scheduler.board.read import queue_index
    from scheduler.board import publish
    from scheduler.board.read import whatif_basis

    make_worker("w1", cpu=2, memory_gib=4)
    job = make_job("/alice/big", cpu=8)  # never fits: the cluster stays as it is
    built = []
    real_explanation, real_fairness = publish.explanation_to_json, publish.fairness_sample
    monkeypatch.setattr(
        publish, "explanation_to_json", lambda *a, **k: built.append("explanation") or real_explanation(*a, **k)
    )
    monkeypatch.setattr(publish, "fairness_sample", lambda *a, **k: built.append("fairness") or real_fairness(*a, **k))

    with django_capture_on_commit_callbacks(execute=True):
        run_tick(NOW_MS)
    stored_first = TickRecord.objects.values_list("explanation", "whatif_basis").get()
    first_index = queue_index()
    with django_capture_on_commit_callbacks(execute=True):
        run_tick(NOW_MS + 90_000)

    assert built == ["fairness", "explanation"]  # the second tick built neither again
    first, second = TickRecord.objects.order_by("pk")
    # The second record writes no explanation or basis bytes: it names the first, which keeps them.
    assert (second.explanation, second.whatif_basis, second.explanation_tick_id) == (None, None, first.pk)
    assert (first.explanation, first.whatif_basis, first.explanation_tick_id) == (*stored_first, None)
    assert (second.fairness, second.left_pending, second.pending) == (first.fairness, first.left_pending, 1)
    # What the pages read is the reused tick's: its number and its clock (ages at the tick),
    # with the first tick's queue.
    index = queue_index()
    assert (index.tick_pk, index.tick_now_ms, index.tick_at) == (second.pk, NOW_MS + 90_000, second.started_at)
    assert (index.ids, index.reasons, index.reason_of) == (first_index.ids, first_index.reasons, first_index.reason_of)
    assert index.ids is first_index.ids  # the first tick's parse, kept: the same queue
    assert sum(index.band_counts().values()) == 1
    basis = whatif_basis()
    assert (basis.tick, basis.tick_at) == (second.pk, second.started_at) and basis.workers
    shown = json.dumps(ExplainSerializer(explain_job(job)).data, default=str)  # as the API serves it
    assert f"tick {second.pk}" in shown and f"tick {first.pk}" not in shown

    with django_capture_on_commit_callbacks(execute=True):
        run_tick(NOW_MS + 95_000)  # reused again: still the first record's queue
    third = TickRecord.objects.order_by("-pk").first()
    assert (third.explanation, third.explanation_tick_id) == (None, first.pk)
    assert queue_index().tick_pk == third.pk

    make_worker("w2", cpu=16, memory_gib=32)  # something changed: the next tick builds again
    with django_capture_on_commit_callbacks(execute=True):
        outcome = run_tick(NOW_MS + 100_000)
    fourth = TickRecord.objects.get(pk=outcome.tick_id)
    assert fourth.explanation is not None and fourth.explanation_tick_id is None
    # Only the newest holder keeps the (large) queue.
    assert TickRecord.objects.filter(explanation__isnull=False).get() == fourth
    assert queue_index().tick_pk == fourth.pk
    assert outcome.assigned == 1 and built == ["fairness", "explanation"] * 2


def test_a_reused_tick_writes_its_kept_queue_itself_when_its_holder_no_longer_holds_it(
    django_capture_on_commit_callbacks,
):
    """Another tick process stored a queue since this process's last tick (and cleared the
    record this process would name): the reused tick writes the bytes it kept, and clears the
    other's, so the newest tick's queue is still the one it decided."""
    from scheduler.board.read import queue_index
    from scheduler.models import compress_json

    make_worker("w1", cpu=2, memory_gib=4)
    make_job("/alice/big", cpu=8)  # never fits: the cluster stays as it is
    with django_capture_on_commit_callbacks(execute=True):
        first = run_tick(NOW_MS).tick_id
    kept = TickRecord.objects.values_list("explanation", "whatif_basis").get(pk=first)
    TickRecord.objects.filter(pk=first).update(explanation=None, whatif_basis=None)
    other = TickRecord.objects.create(
        started_at=timezone.now(),
        now_ms=NOW_MS,
        duration_ms=1,
        explanation=compress_json({"version": -1}),
        whatif_basis=compress_json({}),
    )

    with django_capture_on_commit_callbacks(execute=True):
        outcome = run_tick(NOW_MS + 1000)

    second = TickRecord.objects.get(pk=outcome.tick_id)
    assert (second.explanation, second.whatif_basis, second.explanation_tick_id) == (*kept, None)
    assert TickRecord.objects.filter(explanation__isnull=False).get() == second
    assert TickRecord.objects.get(pk=other.pk).whatif_basis is None
    index = queue_index()
    assert index.tick_pk == second.pk and sum(index.band_counts().values()) == 1
    with django_capture_on_commit_callbacks(execute=True):
        third = run_tick(NOW_MS + 2000).tick_id  # and the next reused tick names that record
    assert TickRecord.objects.get(pk=third).explanation_tick_id == second.pk
