"""The prompt tick rests after the previous tick's end (issue 26): a tick asked for, or beat's,
that would start less than ``IRIS_PROMPT_TICK_MIN_INTERVAL_MS`` after the previous tick ended
moves to the end of that rest, and a submitted job is still placed by it."""

from __future__ import annotations

import pytest
from celery import current_app
from django.core.cache import cache

from scheduler import tasks
from scheduler.foundation import enqueue
from scheduler.foundation.enqueue import PROMPT_TICK, _requested, task_started
from scheduler.jobs.prompt_tick import end_prompt_tick, request_prompt_tick
from scheduler.models import Task
from tests.personas import make_worker, submit


@pytest.fixture(autouse=True)
def _spaced(settings, monkeypatch):
    """The cache starts empty (no tick ran, no request waits), the interval is 500 ms and the rest
    does not follow a tick's duration (the tests at the end set that)."""
    cache.clear()
    settings.PROMPT_TICK_MIN_INTERVAL_MS = 500
    settings.PROMPT_TICK_REST_RATIO = 0.0
    monkeypatch.setattr(enqueue, "_not_before", {})
    monkeypatch.setattr(enqueue, "_running_since", {})
    yield
    cache.clear()


@pytest.fixture
def now(monkeypatch):
    clock = [1_000.0]
    monkeypatch.setattr(enqueue.time, "time", lambda: clock[0])
    return clock


@pytest.fixture
def sent(monkeypatch):
    messages = []
    monkeypatch.setattr(current_app, "send_task", lambda name, **kwargs: messages.append((name, kwargs)))
    return messages


@pytest.fixture
def ticks(monkeypatch):
    ran = []
    monkeypatch.setattr(tasks, "run_tick", lambda: ran.append("tick"))
    return ran


def a_tick_ran(now, *, started: float, took: float) -> None:
    """A tick started at ``started`` and ended ``took`` seconds later (the clock is left at its end),
    through the tick task's own first and last steps."""
    now[0] = started
    task_started(PROMPT_TICK, keep_seconds=2)
    now[0] = started + took
    end_prompt_tick()


def test_a_request_after_a_tick_ended_waits_the_interval_from_its_end_not_its_start(now, sent):
    a_tick_ran(now, started=1_000.0, took=1.0)  # longer than the interval
    now[0] += 0.2
    request_prompt_tick()
    assert sent[-1][1]["countdown"] == pytest.approx(0.3)  # 500 ms after the end, not at once


def test_a_request_while_a_tick_runs_waits_at_most_the_interval_from_its_start(now, sent):
    a_tick_ran(now, started=1_000.0, took=0.1)
    now[0] = 1_002.0
    task_started(PROMPT_TICK, keep_seconds=2)  # the next tick starts and is still running
    now[0] += 0.2
    request_prompt_tick()
    assert sent[-1][1]["countdown"] == pytest.approx(0.3)  # its end is not known yet


def test_a_requested_tick_too_soon_after_the_last_ones_end_moves_to_the_end_of_the_rest(now, sent, ticks):
    request_prompt_tick()  # a submission asks; sent at once (no tick ran yet)
    assert len(sent) == 1 and "countdown" not in sent[0][1]
    a_tick_ran(now, started=1_000.0, took=1.5)  # beat's tick ran meanwhile; the request waited behind it
    cache.set(_requested(PROMPT_TICK), 1)  # a submission during that tick asked again
    now[0] += 0.1
    tasks.tick()  # the request's message, right after that tick's end
    assert ticks == []
    assert sent[-1] == (PROMPT_TICK, {"countdown": pytest.approx(0.4), "expires": pytest.approx(5.4), "retry": False})
    assert cache.get(_requested(PROMPT_TICK)) == 1  # still held: submissions meanwhile are covered by it
    request_prompt_tick()
    assert len(sent) == 2
    now[0] += 0.4
    tasks.tick()  # the message sent again, at the end of the rest
    assert ticks == ["tick"]
    assert cache.get(_requested(PROMPT_TICK)) is None


def test_beats_tick_right_after_another_leaves_the_work_to_the_prompt_tick_waiting(now, sent, ticks):
    a_tick_ran(now, started=1_000.0, took=1.0)
    request_prompt_tick()  # waiting for the end of the rest
    assert len(sent) == 1
    now[0] += 0.1
    tasks.tick(scheduled=True)
    assert ticks == [] and len(sent) == 1


def test_beats_tick_right_after_another_asks_for_a_tick_at_the_end_of_the_rest(now, sent, ticks):
    a_tick_ran(now, started=1_000.0, took=1.0)
    now[0] += 0.1
    tasks.tick(scheduled=True)
    assert ticks == []
    assert sent == [(PROMPT_TICK, {"countdown": pytest.approx(0.4), "expires": pytest.approx(5.4), "retry": False})]
    assert cache.get(_requested(PROMPT_TICK)) == 1


def test_a_tick_past_the_rest_runs_and_records_its_start_and_end_even_when_it_fails(now, sent, monkeypatch):
    a_tick_ran(now, started=1_000.0, took=1.0)
    now[0] += 0.6

    def fails():
        now[0] += 2.0
        raise RuntimeError("tick failed")

    monkeypatch.setattr(tasks, "run_tick", fails)
    with pytest.raises(RuntimeError):
        tasks.tick(scheduled=True)
    assert sent == []
    now[0] += 0.1
    request_prompt_tick()  # 100 ms after the failed tick's end
    assert sent[-1][1]["countdown"] == pytest.approx(0.4)


def test_a_moved_tick_whose_message_cannot_be_sent_forgets_its_request(now, monkeypatch, ticks):
    def down(name, **kwargs):
        raise ConnectionRefusedError("broker down")

    monkeypatch.setattr(current_app, "send_task", down)
    a_tick_ran(now, started=1_000.0, took=1.0)
    cache.set(_requested(PROMPT_TICK), 1)
    tasks.tick()
    assert ticks == [] and cache.get(_requested(PROMPT_TICK)) is None  # the next submission asks again


def test_with_no_interval_every_tick_runs_at_once(now, sent, ticks, settings):
    settings.PROMPT_TICK_MIN_INTERVAL_MS = 0
    a_tick_ran(now, started=1_000.0, took=1.0)
    tasks.tick()
    tasks.tick(scheduled=True)
    assert ticks == ["tick", "tick"] and sent == []


def test_beat_sends_its_tick_as_scheduled(settings):
    assert settings.CELERY_BEAT_SCHEDULE["scheduling-tick"]["kwargs"] == {"scheduled": True}


@pytest.mark.django_db
def test_a_job_submitted_right_after_a_tick_is_placed_by_the_moved_tick(
    alice, now, sent, django_capture_on_commit_callbacks
):
    """Placement is still prompt: the job's own request, moved once, places it at the end of the rest."""
    make_worker("w1")
    a_tick_ran(now, started=1_000.0, took=1.0)
    with django_capture_on_commit_callbacks(execute=True):
        job = submit(alice, "prompt")  # commits, then asks for a tick: 500 ms after the last one's end
    assert sent[-1][1]["countdown"] == pytest.approx(0.5)
    now[0] += 0.3  # the worker runs the message early (another tick kept it waiting, say)
    tasks.tick()
    assert Task.objects.get(job=job).state == "pending"
    now[0] += 0.2
    tasks.tick()  # the moved message
    assert Task.objects.get(job=job).state == "assigned"


def test_a_tick_longer_than_the_interval_is_followed_by_a_rest_as_long_as_it_took(now, sent, ticks, settings):
    """With IRIS_PROMPT_TICK_REST_RATIO 1, a 2 s tick is followed by 2 s without a tick: a request
    waits for the end of that rest, and a tick that starts earlier moves there."""
    settings.PROMPT_TICK_REST_RATIO = 1.0
    a_tick_ran(now, started=1_000.0, took=2.0)
    now[0] += 0.6  # past the 500 ms interval, inside the 2 s rest
    request_prompt_tick()
    assert sent[-1][1]["countdown"] == pytest.approx(1.4)
    tasks.tick()  # the message, run early
    assert ticks == [] and sent[-1][1]["countdown"] == pytest.approx(1.4)
    now[0] += 1.4
    tasks.tick()
    assert ticks == ["tick"]


def test_a_short_tick_rests_the_interval_and_a_long_one_at_most_the_tick_period(now, sent, settings):
    settings.PROMPT_TICK_REST_RATIO = 2.0
    settings.TICK_SECONDS = 5
    a_tick_ran(now, started=1_000.0, took=0.1)  # 2 x 0.1 s is shorter than the interval
    request_prompt_tick()
    assert sent[-1][1]["countdown"] == pytest.approx(0.5)
    cache.delete(_requested(PROMPT_TICK))
    enqueue._not_before.clear()
    a_tick_ran(now, started=1_010.0, took=4.0)  # 2 x 4 s is longer than a beat period
    request_prompt_tick()
    assert sent[-1][1]["countdown"] == pytest.approx(5.0)


def test_a_request_while_a_long_tick_runs_still_counts_from_its_start(now, sent, settings):
    """The running tick's duration is not known yet: the earliest moment stands (the tick that
    starts too soon moves itself, as above)."""
    settings.PROMPT_TICK_REST_RATIO = 1.0
    a_tick_ran(now, started=1_000.0, took=3.0)
    now[0] = 1_010.0
    task_started(PROMPT_TICK, keep_seconds=2)
    now[0] += 0.1
    request_prompt_tick()
    assert sent[-1][1]["countdown"] == pytest.approx(0.4)
