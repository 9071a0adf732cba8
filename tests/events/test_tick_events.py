"""The tick's queue events (one per job, only when its band or position class changes), what a
new tick process reads back, the tick's share of the statements, and retention."""

from __future__ import annotations

import random
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler.core.bands import Band
from scheduler.core.explain import queued_job_counts, queued_jobs
from scheduler.events import kinds
from scheduler.events.kinds import last_position_of_class, position_class
from scheduler.events.retention import prune_events
from scheduler.events.sequence import sequence_events
from scheduler.models import Event
from scheduler.tick import events as tick_events
from scheduler.tick import history
from scheduler.tick.run import run_tick
from tests.personas import make_job, make_worker

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("position", "cls"), [(1, 0), (2, 1), (10, 1), (11, 2), (100, 2), (101, 3), (1000, 3), (1001, 4)]
)
def test_position_classes_are_the_head_then_powers_of_ten(position, cls):
    assert position_class(position) == cls


def test_each_class_ends_at_its_last_position():
    """The events pass finds a class's run of positions by its last one: the two rules agree."""
    for cls in range(6):
        last = last_position_of_class(cls)
        assert position_class(last) == cls and position_class(last + 1) == cls + 1


def queued(job: str) -> list[dict]:
    sequence_events()
    return [e.data for e in Event.objects.filter(kind=kinds.QUEUED, job=job).order_by("id")]


def test_a_job_is_queued_again_only_when_its_position_class_changes():
    # 12 one-task jobs and no worker: /alice/j11 is 12th (class 2).
    for i in range(12):
        make_job(f"/alice/j{i:02d}", cpu=2)
    run_tick()
    run_tick()  # nothing moved: no new queue events (the decision is even reused)
    assert [d["position"] for d in queued("/alice/j11")] == [12]
    # one worker for two tasks: j00 and j01 start; j11 moves to 10th (class 2 -> 1), j02 to the
    # head (1 -> 0); j03's 4th -> 2nd stays in class 1, so it is not queued again
    make_worker("w1", cpu=4, memory_gib=64)
    run_tick()

    assert [(d["position"], d["position_class"]) for d in queued("/alice/j11")] == [(12, 2), (10, 1)]
    assert [d["position"] for d in queued("/alice/j02")] == [3, 1]
    assert [d["position"] for d in queued("/alice/j03")] == [4]
    assert [d["position"] for d in queued("/alice/j01")] == [2]  # started since: no queue event
    assert Event.objects.filter(kind=kinds.STARTED).count() == 2


def test_a_new_tick_process_reads_the_last_queue_events_back_and_repeats_none():
    for i in range(3):
        make_job(f"/alice/j{i}", cpu=2)
    run_tick()
    sequence_events()
    before = Event.objects.count()

    tick_events.forget()  # as a new process: nothing in memory
    make_job("/bob/new", cpu=2)
    run_tick()
    sequence_events()

    assert list(Event.objects.filter(id__gt=0).values_list("kind", "job").order_by("id"))[before:] == [
        ("queued", "/bob/new")
    ]


def test_the_tick_writes_its_events_in_one_statement_whatever_their_number(django_capture_on_commit_callbacks):
    make_worker("w1", cpu=64, memory_gib=512)
    for i in range(40):
        make_job(f"/alice/j{i}", cpu=1)
    # The first tick of a process reads the last queue events back; what it recorded is kept on commit.
    with django_capture_on_commit_callbacks(execute=True):
        run_tick()
    for i in range(40, 80):
        make_job(f"/alice/j{i}", cpu=1)

    with CaptureQueriesContext(connection) as queries:
        outcome = run_tick()

    staged = [q["sql"] for q in queries if "scheduler_stagedevent" in q["sql"]]
    assert len(staged) == 1 and ("COPY" in staged[0] or "INSERT" in staged[0])
    sequence_events()
    started = Event.objects.filter(kind=kinds.STARTED, tick=outcome.tick_id).count()
    queued_now = Event.objects.filter(kind=kinds.QUEUED, tick=outcome.tick_id).count()
    assert started == outcome.assigned > 1 and queued_now > 10


def test_events_past_their_retention_are_pruned_oldest_first_and_the_newest_kept(settings):
    now = timezone.now()
    make_job("/alice/a")
    Event.objects.bulk_create(
        Event(kind="submitted", created_at=now - timedelta(days=d), user="alice", job=f"/alice/{d}")
        for d in (40, 35, 31, 2)
    )
    assert prune_events(now, 30, batch=2, deadline=time.monotonic() + 60).deleted == 3
    assert list(Event.objects.values_list("job", flat=True)) == ["/alice/2"]

    Event.objects.all().update(created_at=now - timedelta(days=90))
    assert prune_events(now, 30, batch=2, deadline=time.monotonic() + 60).deleted == 0  # the newest stays


def test_prune_history_prunes_events_by_their_own_setting(settings):
    settings.EVENT_HISTORY_DAYS = 1
    now = timezone.now()
    Event.objects.bulk_create(
        Event(kind="submitted", created_at=now - timedelta(days=d), user="alice", job=f"/alice/{d}") for d in (3, 0)
    )

    done = history.prune_history(now)

    assert done.events == 1 and done.finished


def queue_events_by_task(queue, memory, tick_pk, wall):
    """The queue events as the tick found them before it used the queue's job column: one pass
    over every queued task (the reference the column's shortcut must match)."""
    firsts = {}
    for band, task_ids in queue.items():
        for position, task_id in enumerate(task_ids, 1):
            firsts.setdefault(task_id.rsplit("/", 1)[0], (band, position, len(task_ids)))
    for job in [j for j in memory if j not in firsts]:
        del memory[job]
    drafts = []
    for job, (band, position, length) in firsts.items():
        cls = position_class(position)
        before = memory.get(job)
        if before == (band.value, cls):
            continue
        from_band = Band(before[0]) if before is not None else band
        if from_band != band:
            kind = kinds.DOWNGRADED if band.value > from_band.value else kinds.REPROMOTED
            drafts.append((kind, job, {"from_band": from_band.wire, "to_band": band.wire}))
        data = {"band": band.wire, "position": position, "of": length, "position_class": cls}
        drafts.append((kinds.QUEUED, job, data))
        memory[job] = (band.value, cls)
    return drafts


def test_queue_events_from_the_job_column_match_a_pass_over_every_task():
    # Jobs with many tasks, interleaved in each band's order, some in two bands; some jobs
    # remembered in the same band and class, some in another, some gone from the queue.
    rng = random.Random(23)
    jobs = [f"/u{i % 7}/job{i}" for i in range(60)]
    queue = {}
    for band in (Band.PRODUCTION, Band.INTERACTIVE, Band.BATCH):
        tasks = [f"{job}/{k}" for job in rng.sample(jobs, 25) for k in range(rng.randint(1, 30))]
        rng.shuffle(tasks)
        queue[band] = tasks
    memory = {job: (rng.choice([1, 2, 3]), rng.randint(0, 3)) for job in rng.sample(jobs, 40)}
    memory["/gone/job"] = (2, 1)
    wall = timezone.now()

    expected_memory = dict(memory)
    expected = queue_events_by_task(queue, expected_memory, 7, wall)
    before = dict(memory)
    drafts = tick_events._queue_events(queued_jobs(queue), memory, {}, 7, wall)

    assert [(d.kind, d.job, dict(d.data)) for d in drafts] == expected
    assert memory == expected_memory
    # The same with the publication's job counts (each band's jobs in order, not found again).
    jobs_in_queue = queued_jobs(queue)
    counted = tick_events._queue_events(jobs_in_queue, before, {}, 7, wall, queued_job_counts(jobs_in_queue))
    assert [(d.kind, d.job, dict(d.data)) for d in counted] == expected
    assert before == expected_memory
    assert len(expected) > 20


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_queue_events_over_long_queues_match_a_pass_over_every_task(seed):
    """Queues long enough for the classes up to 1,001-10,000, most jobs remembered as the previous
    tick left them (a run of one class is compared in bulk), then the queue moved: heads started,
    some jobs left, new ones came."""
    rng = random.Random(seed)
    jobs = [f"/u{i % 11}/job{i}" for i in range(3000)]
    wall = timezone.now()
    previous = {
        band: [f"{job}/{k}" for job in rng.sample(jobs, 1200) for k in range(rng.randint(1, 3))]
        for band in (Band.PRODUCTION, Band.INTERACTIVE, Band.BATCH)
    }
    memory: dict = {}
    queue_events_by_task(previous, memory, 6, wall)
    current = {}
    for band, tasks in previous.items():
        left = set(rng.sample(jobs, 100))
        moved = [t for t in tasks[rng.randint(0, 40) :] if t.rsplit("/", 1)[0] not in left]
        current[band] = moved + [f"/new/{band.wire}{i}/0" for i in range(rng.randint(0, 50))]
    memory["/gone/job"] = (2, 1)

    expected_memory = dict(memory)
    expected = queue_events_by_task(current, expected_memory, 7, wall)
    before = dict(memory)
    drafts = tick_events._queue_events(queued_jobs(current), memory, {}, 7, wall)

    assert [(d.kind, d.job, dict(d.data)) for d in drafts] == expected
    assert memory == expected_memory
    # The same with the publication's job counts (each band's jobs in order, not found again).
    jobs_in_queue = queued_jobs(current)
    counted = tick_events._queue_events(jobs_in_queue, before, {}, 7, wall, queued_job_counts(jobs_in_queue))
    assert [(d.kind, d.job, dict(d.data)) for d in counted] == expected
    assert before == expected_memory
    assert 0 < len(expected) < len(expected_memory) / 2  # some moved, most did not
