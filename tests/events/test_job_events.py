"""Job and budget events recorded with their changes (issue 27): a job driven through every
state it can pass, read back from the stream in order, each event once."""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest
from django.db import transaction
from django.utils import timezone

from scheduler.backends.base import AttemptRef, AttemptReport, AttemptStatus
from scheduler.budgets.writes import approve_uplift, deny_uplift, expire_uplifts, request_uplift
from scheduler.core.bands import Band
from scheduler.events import kinds
from scheduler.events.sequence import sequence_events
from scheduler.events.stream import EventQuery, read_events
from scheduler.execution.attempts import apply_reports
from scheduler.jobs.cancel import cancel_job
from scheduler.models import Event, Job, StagedEvent, Task, UserBudget
from scheduler.tick.run import run_tick
from tests.personas import NOW_MS, make_job, make_worker, start_running, submit

pytestmark = pytest.mark.django_db


def stream(actor, **filters) -> list[Event]:
    return read_events(actor, EventQuery(limit=1000, **filters)).events


def kinds_of(events) -> list[str]:
    return [e.kind for e in events]


def report(task: Task, attempt: int, status: AttemptStatus, worker: str, **fields) -> None:
    apply_reports([AttemptReport(AttemptRef(task.pk, attempt), status, worker=worker, **fields)])


def drive_alice_train(alice, ada):
    """/alice/train: submitted, queued as BATCH (alice over her limit: downgraded), re-promoted
    when her other job ends, started, running, preempted by a PRODUCTION job and requeued,
    downgraded again (its own run took alice over her limit), started again, cancelled."""
    UserBudget.objects.create(user_id="alice", budget_limit=10, max_band=Band.INTERACTIVE)
    small = make_worker("small", cpu=4, memory_gib=16)
    big = start_running(make_job("/alice/big", cpu=4, memory_gib=16), small)  # spend 36 > 10
    job = submit(alice, "train", cpu=8, memory="8Gi")
    run_tick()  # no worker fits: queued, and as BATCH
    report(big, 1, AttemptStatus.SUCCEEDED, "small", exit_code=0)
    run_tick()  # alice within her limit again: back to INTERACTIVE
    make_worker("w8", cpu=8, memory_gib=64)
    run_tick()  # started on w8
    task = job.tasks.get()
    report(task, 1, AttemptStatus.RUNNING, "w8")
    make_job("/ada/prod", band=Band.PRODUCTION, cpu=8, memory_gib=8)
    run_tick()  # preempted by /ada/prod/0, requeued
    report(task, 1, AttemptStatus.PREEMPTED, "w8")  # the worker confirms: no event (the tick said it)
    prod = Task.objects.get(job__name="/ada/prod")
    report(prod, 1, AttemptStatus.SUCCEEDED, "w8", exit_code=0)
    run_tick()  # started again, attempt 2
    cancel_job(alice, "/alice/train")
    return job


def test_a_job_through_every_state_records_each_event_once_in_order(alice, ada):
    drive_alice_train(alice, ada)

    events = stream(alice, job="/alice/train")

    assert kinds_of(events) == [
        "submitted",
        "downgraded",
        "queued",
        "repromoted",
        "queued",
        "started",
        "running",
        "preempted",
        "requeued",
        "downgraded",  # requeued while alice's own train ran her over her limit: queued as BATCH
        "queued",
        "started",
        "cancelled",
    ]
    assert [e.id for e in events] == sorted({e.id for e in events})
    by_kind = {}
    for e in events:
        by_kind.setdefault(e.kind, []).append(e)
    assert by_kind["submitted"][0].data == {"band": "interactive", "replicas": 1, "parent": None}
    assert by_kind["downgraded"][0].data == {"from_band": "interactive", "to_band": "batch"}
    assert by_kind["queued"][0].data == {"band": "batch", "position": 1, "of": 1, "position_class": 0}
    assert by_kind["repromoted"][0].data == {"from_band": "batch", "to_band": "interactive"}
    assert [(e.data["worker"], e.attempt, e.task_index) for e in by_kind["started"]] == [("w8", 1, 0), ("w8", 2, 0)]
    preempted = by_kind["preempted"][0]
    assert (preempted.data["by"], preempted.data["by_user"], preempted.data["by_band"]) == (
        "/ada/prod/0",
        "ada",
        "production",
    )
    assert by_kind["cancelled"][0].data == {"by": "alice", "root": "/alice/train"}
    assert {e.user for e in events} == {"alice"}
    assert not StagedEvent.objects.exists()


def test_a_limit_crossed_both_ways_is_a_budget_event_of_its_user(alice, ada):
    drive_alice_train(alice, ada)

    crossed = stream(alice, kinds=(kinds.LIMIT_CROSSED,))

    assert [(e.user, e.data["over"]) for e in crossed][:2] == [("alice", True), ("alice", False)]


def test_ends_reported_by_workers_are_task_and_job_events(alice):
    make_worker("w1")
    ok, failing, lost = (submit(alice, name, max_retries_failure=0) for name in ("ok", "bad", "gone"))
    run_tick()
    report(ok.tasks.get(), 1, AttemptStatus.SUCCEEDED, "w1", exit_code=0)
    report(failing.tasks.get(), 1, AttemptStatus.FAILED, "w1", exit_code=3)
    Job.objects.filter(pk=lost.pk).update(max_retries_preemption=0)  # a lost worker ends it for good
    report(lost.tasks.get(), 1, AttemptStatus.WORKER_LOST, "w1")

    ends = {e.job: e.data["outcome"] for e in stream(alice, kinds=(kinds.FINISHED,))}
    finished_tasks = {
        e.job: (e.data["outcome"], e.data["exit_code"]) for e in stream(alice, kinds=(kinds.TASK_FINISHED,))
    }

    assert ends == {"/alice/ok": "succeeded", "/alice/bad": "failed", "/alice/gone": "lost"}
    assert finished_tasks["/alice/bad"] == ("failed", 3)
    failed = stream(alice, job="/alice/bad", kinds=(kinds.TASK_FINISHED,))[0]
    assert failed.data["reason"] == "exited with code 3"


def test_uplift_requests_and_decisions_are_budget_events_seen_by_their_user_and_operators(alice, bob, ada, olivia):
    first = request_uplift(alice, budget_limit=400, reason="deadline", duration_seconds=3600)
    second = request_uplift(alice, budget_limit=500, reason="sweep", duration_seconds=3600)
    approve_uplift(ada, first.pk)
    deny_uplift(ada, second.pk, note="not now")
    expire_uplifts(timezone.now() + timedelta(hours=2))

    mine = stream(alice, user="alice")

    assert kinds_of(mine) == [
        "uplift_requested",
        "uplift_requested",
        "uplift_approved",
        "uplift_denied",
        "uplift_expired",
    ]
    assert mine[0].data == {
        "uplift": first.pk,
        "max_band": None,
        "budget_limit": 400,
        "requested_by": "alice",
        "duration_seconds": 3600,
    }
    assert mine[3].data == {"uplift": second.pk, "max_band": None, "budget_limit": 500, "by": "ada", "note": "not now"}
    assert stream(bob, user="alice") == []  # another researcher's budget events are theirs
    assert len(stream(olivia, user="alice")) == 5


def test_a_rolled_back_change_leaves_no_event(alice):
    with pytest.raises(RuntimeError), transaction.atomic():
        submit(alice, "never")
        raise RuntimeError("abort")

    assert stream(alice) == []
    assert not StagedEvent.objects.exists()


def test_staged_events_take_ids_in_staging_order_after_the_ones_already_sequenced(alice):
    submit(alice, "one")
    sequence_events()
    submit(alice, "two")
    submit(alice, "three")
    assert StagedEvent.objects.count() == 2

    events = stream(alice)

    assert [e.job for e in events] == ["/alice/one", "/alice/two", "/alice/three"]
    assert events[0].id < events[1].id < events[2].id


def test_a_tick_stages_its_starts_and_the_ends_it_decides_in_order():
    """One tick's own events, as staged rows: each assignment's ``started`` (worker, attempt,
    band) first, then a task the tick ended and the ``finished`` of its job (a scheduling
    deadline passed); a job that merely started is not finished."""
    make_worker("w1", cpu=1, memory_gib=1)
    make_job("/alice/late", cpu=4, deadline_ms=NOW_MS - 1)
    make_job("/bob/fits", band=Band.BATCH)

    run_tick(NOW_MS)

    staged = [
        (e.kind, e.user, e.job, e.task_index, e.attempt, orjson.loads(e.data))
        for e in StagedEvent.objects.exclude(kind__in=(kinds.QUEUED, kinds.SUBMITTED)).order_by("id")
    ]
    assert staged[0] == ("started", "bob", "/bob/fits", 0, 1, {"worker": "w1", "attempt": 1, "band": "batch"})
    ends = [(kind, job, data.get("outcome")) for kind, _, job, _, _, data in staged[1:]]
    assert ends == [("task_finished", "/alice/late", "unschedulable"), ("finished", "/alice/late", "unschedulable")]
