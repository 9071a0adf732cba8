"""Retention: old tick records, preemption events and shipped logs are deleted by
``scheduler.prune_history``, in bounded batches within a time budget; the newest tick and
everything recent are kept, and preemption history outlives its ticks."""

from __future__ import annotations

import itertools
import os
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler import tasks
from scheduler.core.bands import Band
from scheduler.execution.logs import log_file, prune_shipped_logs, store_chunk
from scheduler.models import PreemptionEvent, TickRecord
from scheduler.store.pruning import delete_in_batches
from scheduler.tick import history
from scheduler.tick.history import prune_preemption_events, prune_tick_records
from tests.personas import make_job

pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)


def tick_at(at) -> TickRecord:
    return TickRecord.objects.create(started_at=at, now_ms=int(at.timestamp() * 1000), duration_ms=1)


def test_tick_records_past_the_window_are_deleted_in_batches_and_recent_ones_kept():
    now = timezone.now()
    old = [tick_at(now - 10 * DAY + i * timedelta(minutes=1)) for i in range(5)]
    recent = [tick_at(now - 7 * DAY + timedelta(minutes=1)), tick_at(now - timedelta(minutes=1))]

    assert prune_tick_records(now, keep_days=8, batch=2) == 5

    assert set(TickRecord.objects.values_list("pk", flat=True)) == {t.pk for t in recent}
    assert not TickRecord.objects.filter(pk__in=[t.pk for t in old]).exists()


def test_the_newest_tick_is_kept_however_old_it_is():
    now = timezone.now()
    tick_at(now - 30 * DAY)
    newest = tick_at(now - 20 * DAY)

    assert prune_tick_records(now, keep_days=8) == 1
    assert list(TickRecord.objects.values_list("pk", flat=True)) == [newest.pk]


def test_preemption_events_outlive_their_tick():
    now = timezone.now()
    old = tick_at(now - 9 * DAY)
    tick_at(now)
    victim, preemptor = make_job("/alice/batch").tasks.get(), make_job("/bob/prod").tasks.get()
    event = PreemptionEvent.objects.create(
        tick=old,
        victim=victim,
        preemptor=preemptor,
        victim_band=int(Band.BATCH),
        preemptor_band=int(Band.PRODUCTION),
        reason="r",
        created_at=old.started_at,
        victim_user="alice",
        victim_job_id=victim.job_id,
        lost_point_ms=0,
    )

    assert prune_tick_records(now, keep_days=8) == 1
    event.refresh_from_db()
    assert event.tick_id is None and event.reason == "r"


def test_zero_days_keeps_every_tick():
    now = timezone.now()
    tick_at(now - 400 * DAY)
    tick_at(now)
    assert prune_tick_records(now, keep_days=0) == 0
    assert TickRecord.objects.count() == 2


def aged(path, days: float, now: float) -> None:
    os.utime(path, (now - days * 86400, now - days * 86400))


def test_shipped_logs_not_written_for_the_window_are_deleted_with_their_empty_directories(settings, tmp_path):
    settings.SHIPPED_LOG_DIR = tmp_path / "shipped"
    now = time.time()
    store_chunk(1, 1, 0, b"old\n")
    store_chunk(2, 1, 0, b"old too\n")
    store_chunk(2, 2, 0, b"recent\n")
    aged(log_file(settings.SHIPPED_LOG_DIR, 1, 1), 31, now)
    aged(log_file(settings.SHIPPED_LOG_DIR, 2, 1), 40, now)
    aged(log_file(settings.SHIPPED_LOG_DIR, 2, 2), 29, now)

    assert prune_shipped_logs(now, keep_days=30) == (2, len(b"old\n") + len(b"old too\n"))

    assert not (settings.SHIPPED_LOG_DIR / "1").exists()
    assert not log_file(settings.SHIPPED_LOG_DIR, 2, 1).exists()
    assert log_file(settings.SHIPPED_LOG_DIR, 2, 2).read_bytes() == b"recent\n"
    assert prune_shipped_logs(now, keep_days=0) == (0, 0)


def test_an_agent_shipping_a_pruned_log_is_told_to_start_again_from_the_beginning(settings, tmp_path):
    settings.SHIPPED_LOG_DIR = tmp_path / "shipped"
    now = time.time()
    store_chunk(7, 1, 0, b"first part\n")
    aged(log_file(settings.SHIPPED_LOG_DIR, 7, 1), 31, now)
    prune_shipped_logs(now, keep_days=30)

    answer = store_chunk(7, 1, len(b"first part\n"), b"second part\n")

    assert (answer.size, answer.truncated) == (0, False)
    assert store_chunk(7, 1, 0, b"first part\nsecond part\n").size == len(b"first part\nsecond part\n")


def test_the_task_prunes_by_the_settings_and_runs_hourly_from_beat(settings, tmp_path):
    settings.SHIPPED_LOG_DIR = tmp_path / "shipped"
    settings.TICK_HISTORY_DAYS, settings.SHIPPED_LOG_DAYS = 2, 1
    now = timezone.now()
    tick_at(now - 3 * DAY)
    kept = tick_at(now - timedelta(hours=1))
    store_chunk(3, 1, 0, b"x")
    aged(log_file(settings.SHIPPED_LOG_DIR, 3, 1), 2, time.time())

    tasks.prune_history()

    assert list(TickRecord.objects.values_list("pk", flat=True)) == [kept.pk]
    assert not (settings.SHIPPED_LOG_DIR / "3").exists()
    entry = settings.CELERY_BEAT_SCHEDULE["prune-history"]
    assert entry["task"] == tasks.prune_history.name == "scheduler.prune_history"
    assert entry["schedule"] == 3600


def test_the_tick_holding_the_stored_queue_is_kept_while_newer_reused_ticks_name_it(django_capture_on_commit_callbacks):
    """An idle cluster: every tick since the first reused its decision and names the first
    tick's record for the queue (``TickRecord.explanation_tick``). Pruning keeps that record,
    however old, and the queue pages still show the queue as of the newest tick."""
    from scheduler.board.read import queue_index
    from scheduler.tick.run import run_tick
    from tests.personas import make_worker

    now = timezone.now()
    make_worker("w1", cpu=2, memory_gib=4)
    make_job("/alice/big", cpu=8)  # never fits: nothing changes from tick to tick
    ticks = []
    for age in (20 * DAY, 15 * DAY, timedelta(minutes=1)):
        with django_capture_on_commit_callbacks(execute=True):
            ticks.append(run_tick(int((now - age).timestamp() * 1000), clock=lambda at=now - age: at).tick_id)
    holder, old_reuse, newest = ticks
    assert list(TickRecord.objects.order_by("pk").values_list("explanation_tick", flat=True)) == [None, holder, holder]

    assert prune_tick_records(now, keep_days=8) == 1  # the 15-day-old reused tick only

    assert set(TickRecord.objects.values_list("pk", flat=True)) == {holder, newest}
    assert TickRecord.objects.get(pk=holder).explanation is not None
    index = queue_index()
    assert index.tick_pk == newest and sum(index.band_counts().values()) == 1


def test_a_record_that_no_longer_holds_the_queue_is_pruned_and_ticks_naming_it_let_go():
    from scheduler.models import compress_json

    now = timezone.now()
    former = tick_at(now - 20 * DAY)  # held the queue once; a newer tick cleared it
    named = TickRecord.objects.create(started_at=now - 19 * DAY, now_ms=1, duration_ms=1, explanation_tick=former)
    holder = TickRecord.objects.create(
        started_at=now - 18 * DAY, now_ms=2, duration_ms=1, explanation=compress_json({"tasks": {}})
    )
    newest = TickRecord.objects.create(started_at=now - 10 * DAY, now_ms=3, duration_ms=1, explanation_tick=holder)

    assert prune_tick_records(now, keep_days=8) == 2

    assert set(TickRecord.objects.values_list("pk", flat=True)) == {holder.pk, newest.pk}
    assert not TickRecord.objects.filter(pk__in=[former.pk, named.pk]).exists()


# --- preemption events, and batches within a time budget -------------------------------------------


VICTIMS = itertools.count()


def events_at(*ages: timedelta, now=None) -> list[PreemptionEvent]:
    now = now or timezone.now()
    n = next(VICTIMS)
    victim, preemptor = make_job(f"/alice/victim-{n}").tasks.get(), make_job(f"/bob/preemptor-{n}").tasks.get()
    return [
        PreemptionEvent.objects.create(
            victim=victim,
            preemptor=preemptor,
            victim_band=int(Band.BATCH),
            preemptor_band=int(Band.PRODUCTION),
            reason=f"r{i}",
            created_at=now - age,
            victim_user="alice",
            victim_job_id=victim.job_id,
            lost_point_ms=0,
        )
        for i, age in enumerate(ages)
    ]


def test_preemption_events_past_the_window_are_deleted_and_recent_ones_kept():
    now = timezone.now()
    old = events_at(100 * DAY, 91 * DAY, 95 * DAY, now=now)
    recent = events_at(89 * DAY, timedelta(minutes=5), now=now)

    done = prune_preemption_events(now, keep_days=90, batch=2)

    assert (done.deleted, done.finished) == (3, True)
    assert set(PreemptionEvent.objects.values_list("pk", flat=True)) == {e.pk for e in recent}
    assert not PreemptionEvent.objects.filter(pk__in=[e.pk for e in old]).exists()
    assert prune_preemption_events(now, keep_days=0).deleted == 0


def test_each_delete_statement_holds_at_most_one_batch_of_rows():
    now = timezone.now()
    events_at(*(100 * DAY + i * timedelta(minutes=1) for i in range(7)), now=now)

    with CaptureQueriesContext(connection) as queries:
        assert prune_preemption_events(now, keep_days=90, batch=3).deleted == 7

    deletes = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith("DELETE") and "scheduler_preemptionevent" in q["sql"]
    ]
    assert [d.count(",") + 1 for d in deletes] == [3, 3, 1], deletes


def test_pruning_stops_at_its_deadline_and_the_next_run_goes_on():
    now = timezone.now()
    events_at(*(100 * DAY + i * timedelta(minutes=1) for i in range(5)), now=now)
    ticks = iter(range(100))  # a clock that moves one second per look

    first = delete_in_batches(PreemptionEvent.objects.order_by("pk"), batch=2, deadline=2, clock=lambda: next(ticks))

    assert (first.deleted, first.finished) == (4, False)  # looked at 0 and 1: two batches; at 2 it stops
    assert PreemptionEvent.objects.count() == 1
    again = delete_in_batches(PreemptionEvent.objects.order_by("pk"), batch=2, deadline=float("inf"))
    assert (again.deleted, again.finished) == (1, True)


def test_a_run_with_no_time_left_deletes_nothing_and_says_so(settings):
    settings.PRUNE_BUDGET_SECONDS = 0
    settings.PREEMPTION_HISTORY_DAYS = 1
    events_at(10 * DAY)
    done = history.prune_history(timezone.now())
    assert (done.preemption_events, done.finished) == (0, False)
    assert PreemptionEvent.objects.count() == 1


def test_the_task_prunes_preemption_events_by_their_own_setting(settings, tmp_path):
    settings.SHIPPED_LOG_DIR = tmp_path / "shipped"
    settings.PREEMPTION_HISTORY_DAYS, settings.TICK_HISTORY_DAYS, settings.PRUNE_BATCH_ROWS = 3, 0, 1
    now = timezone.now()
    old_tick = tick_at(now - 30 * DAY)
    tick_at(now)
    kept = events_at(2 * DAY, now=now)
    events_at(4 * DAY, 5 * DAY, now=now)

    tasks.prune_history()

    assert list(PreemptionEvent.objects.values_list("pk", flat=True)) == [kept[0].pk]
    assert TickRecord.objects.filter(pk=old_tick.pk).exists()  # 0 days: tick records kept for ever
