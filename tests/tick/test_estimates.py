"""The estimator's shell: history read from attempts, estimates stored for every pending task,
and the API, the console and the what-if reading them in a constant number of queries."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduler.core.bands import Band
from scheduler.models import Attempt, EstimatedStart, Task
from scheduler.store import clock
from scheduler.board.estimates import EstimatorSchedule, estimator_schedule, shown_estimates
from scheduler.tick.estimates import estimate_start_times, estimate_start_times_if_due, read_history, store_estimates
from scheduler.core.estimate import StartEstimate
from tests.personas import make_job, make_worker, start_running, token_client

pytestmark = pytest.mark.django_db

MINUTE = 60_000


def finished_runs(count: int, minutes: int, *, prefix: str = "/alice/old", worker=None, state: str = "succeeded"):
    """``count`` finished one-task jobs of 1 core / 1 GiB that each held their slot ``minutes``."""
    end = timezone.now() - timedelta(minutes=1)
    for i in range(count):
        job = make_job(f"{prefix}{i}", cpu=1, memory_gib=1)
        task = Task.objects.get(job=job)
        Task.objects.filter(pk=task.pk).update(state=state, attempt_count=1)
        Attempt.objects.create(
            task=task,
            number=1,
            worker=worker,
            state=state,
            band=job.band,
            created_at=end - timedelta(minutes=minutes),
            started_at=end - timedelta(minutes=minutes),
            finished_at=end,
        )
        type(job).objects.filter(pk=job.pk).update(state=state)


def one_slot_cluster():
    """One 1-core worker busy with /alice/run (started now); /alice/wait needs the same slot."""
    worker = make_worker("w1", cpu=1, memory_gib=1)
    start_running(make_job("/alice/run", cpu=1, memory_gib=1), worker)
    make_job("/alice/wait", cpu=1, memory_gib=1)
    return worker


def test_history_counts_natural_ends_only():
    worker = make_worker("w1")
    finished_runs(3, 10, worker=worker)
    finished_runs(2, 1, prefix="/alice/killed", worker=worker, state="killed")
    history, _ = read_history(clock.now_ms())
    assert list(history.by_band) == [Band.INTERACTIVE]
    assert list(history.by_band[Band.INTERACTIVE]) == [10 * MINUTE] * 3


def test_the_estimator_stores_a_range_from_the_simulation():
    worker = one_slot_cluster()
    finished_runs(3, 10, worker=worker)
    now = clock.now_ms()
    run = estimate_start_times(now)
    row = EstimatedStart.objects.get(task="/alice/wait/0")
    assert (run.pending, run.estimated) == (1, 1)
    assert row.method == "simulation" and row.as_of_ms == now and row.job == "/alice/wait"
    # /alice/run took its slot just before `now` and runs 10 minutes: the next tick after.
    assert 9 * MINUTE <= row.p50_ms - now <= 10 * MINUTE + 5_000
    assert row.p90_ms >= row.p50_ms


def test_no_history_stores_null_with_a_reason_and_the_api_says_so(alice):
    one_slot_cluster()
    estimate_start_times()
    row = EstimatedStart.objects.get(task="/alice/wait/0")
    assert row.p50_ms is None and "not enough history" in row.reason
    body = token_client(alice).get("/api/v1/jobs/alice/wait:explain").json()
    assert body["estimated_start"] is None
    assert "not enough history" in body["estimated_start_reason"]
    assert body["tasks"][0]["estimated_start"] is None


def test_the_queue_page_says_why_a_task_has_no_estimate_not_only_in_a_title(alice):
    one_slot_cluster()
    from scheduler.tick.run import run_tick

    run_tick()
    client = Client()
    client.force_login(alice)
    # Not estimated: the estimator has not run here at all. The reason is said once, under the
    # band's table, and the row points to it.
    make_job("/alice/wait-too", cpu=1, memory_gib=1)
    run_tick()
    html = client.get("/queue/").content.decode()
    unseen = "not estimated yet: the estimator has not run yet"
    assert html.count(unseen) == 1 + 2  # the note, and each row's title
    assert f'<li id="no-estimate-interactive-1">No estimate: {unseen}</li>' in html
    assert html.count('<a href="#no-estimate-interactive-1" class="note-ref">1</a>') == 2
    estimate_start_times()
    assert (
        '<li id="no-estimate-interactive-1">No estimate: not enough history' in client.get("/queue/").content.decode()
    )


def test_each_run_replaces_the_stored_estimates():
    store_estimates({"/alice/gone/0": StartEstimate(1, 2, 3, "simulation")})
    make_worker("w1")
    make_job("/alice/new")
    estimate_start_times()
    assert list(EstimatedStart.objects.values_list("task", flat=True)) == ["/alice/new/0"]


def test_explain_queue_and_pages_show_the_same_estimate(alice):
    worker = one_slot_cluster()
    finished_runs(3, 30, worker=worker)
    from scheduler.tick.run import run_tick

    run_tick()
    estimate_start_times()
    row = EstimatedStart.objects.get(task="/alice/wait/0")
    api = token_client(alice)
    explain = api.get("/api/v1/jobs/alice/wait:explain").json()
    assert explain["estimated_start"]["method"] == "simulation"
    assert explain["estimated_start_text"].startswith("would start in about 3")  # 29-30 min
    queue = api.get("/api/v1/queue/").json()["results"]
    assert [e["estimated_start"] for e in queue] == [explain["estimated_start"]]
    client = Client()
    client.force_login(alice)
    page = client.get("/jobs/alice/wait/").content.decode()
    assert explain["estimated_start_text"] in page
    shown = shown_estimates([row.task], clock.now_ms())[row.task]
    assert shown.span(clock.now_ms()) in client.get("/queue/").content.decode()


def iso_ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def passed_estimate(job: str, *, waits: list[int], minutes_ago: int = 5) -> None:
    """A stored estimate for ``job``'s task whose p90 passed ``minutes_ago`` minutes ago, and the
    INTERACTIVE band waits it is conditioned on."""
    now = clock.now_ms()
    estimate = StartEstimate(
        now - 10 * MINUTE, now - (minutes_ago + 2) * MINUTE, now - minutes_ago * MINUTE, "simulation"
    )
    store_estimates({f"{job}/0": estimate}, waits={Band.INTERACTIVE: waits}, as_of_ms=now - 10 * MINUTE)


def test_a_passed_estimate_is_conditioned_on_the_wait_and_says_it_is_late(alice):
    one_slot_cluster()
    from scheduler.models import Job

    # Submitted 20 minutes ago; the band's waits longer than that: 30, 40, 50, 60 minutes.
    Job.objects.filter(name="/alice/wait").update(submitted_at_ms=clock.now_ms() - 20 * MINUTE)
    passed_estimate("/alice/wait", waits=[1 * MINUTE, 5 * MINUTE, 30 * MINUTE, 40 * MINUTE, 50 * MINUTE, 60 * MINUTE])
    from scheduler.tick.run import run_tick

    run_tick()
    api = token_client(alice)
    before = clock.now_ms()
    queue = api.get("/api/v1/queue/").json()["results"]
    shown = queue[0]["estimated_start"]
    explain = api.get("/api/v1/jobs/alice/wait:explain").json()
    # Never in the past: the p90 shown is after the moment it was read.
    assert iso_ms(shown["p90"]) >= before and iso_ms(shown["p50"]) >= before
    assert shown["late"] is True and shown["method"] == "wait_history" and shown["passed_p90"]
    # Conditioned on 20 minutes waited: the median of 30/40/50/60 (40 min after submission,
    # about 20 from now) and their 90th percentile (60 min: about 40 from now).
    assert 19 * MINUTE <= iso_ms(shown["p50"]) - before <= 21 * MINUTE
    assert 39 * MINUTE <= iso_ms(shown["p90"]) - before <= 41 * MINUTE
    # The same conditioned range on every surface (as of the moment each was read).
    assert {**explain["estimated_start"], "as_of": None} == {**shown, "as_of": None}
    assert explain["estimated_start_text"].startswith("later than estimated (by ")
    assert "; now in about 20-40 min" in explain["estimated_start_text"]
    client = Client()
    client.force_login(alice)
    assert "later than estimated; now in about 20-40 min" in client.get("/queue/").content.decode()
    assert explain["estimated_start_text"] in client.get("/jobs/alice/wait/").content.decode()


def test_a_passed_estimate_with_no_longer_waits_shows_no_range_and_says_why(alice):
    one_slot_cluster()
    from scheduler.models import Job

    Job.objects.filter(name="/alice/wait").update(submitted_at_ms=clock.now_ms() - 90 * MINUTE)
    passed_estimate("/alice/wait", waits=[1 * MINUTE, 5 * MINUTE, 30 * MINUTE, 60 * MINUTE])
    from scheduler.tick.run import run_tick

    run_tick()
    entry = token_client(alice).get("/api/v1/queue/").json()["results"][0]
    assert entry["estimated_start"] is None
    assert entry["estimated_start_reason"].startswith("later than estimated (by ")
    assert (
        "its job has waited 90 min since it was submitted, and only 0 of the 4 recent INTERACTIVE waits were longer"
        in entry["estimated_start_reason"]
    )


def test_a_passed_estimate_in_a_band_with_too_few_waits_says_so_not_that_it_waited_long(alice):
    # Submitted a minute ago: it has not waited long; the band simply has two waits on record.
    one_slot_cluster()
    from scheduler.models import Job

    Job.objects.filter(name="/alice/wait").update(submitted_at_ms=clock.now_ms() - 1 * MINUTE)
    passed_estimate("/alice/wait", waits=[30 * MINUTE, 60 * MINUTE])
    from scheduler.tick.run import run_tick

    run_tick()
    entry = token_client(alice).get("/api/v1/queue/").json()["results"][0]
    assert entry["estimated_start"] is None
    assert "too few recent INTERACTIVE waits are known (2) to say more" in entry["estimated_start_reason"]
    assert "has waited" not in entry["estimated_start_reason"]


def test_pages_read_estimates_in_constant_queries(alice):
    worker = make_worker("w1", cpu=1, memory_gib=1)
    start_running(make_job("/alice/run", cpu=1, memory_gib=1), worker)
    finished_runs(3, 10, worker=worker)
    from scheduler.board.read import forget as forget_board
    from scheduler.tick.run import run_tick

    client = Client()
    client.force_login(alice)

    def counts(jobs: int) -> tuple[int, int, int]:
        for i in range(jobs):
            make_job(f"/alice/w{jobs}x{i}", cpu=1, memory_gib=1, replicas=3)
        run_tick()
        estimate_start_times()
        forget_board()
        out = []
        for url in ("/queue/", f"/jobs/alice/w{jobs}x0/", f"/api/v1/jobs/alice/w{jobs}x0:explain"):
            forget_board()
            with CaptureQueriesContext(connection) as captured:
                assert client.get(url).status_code == 200
            out.append(len(captured))
        return tuple(out)

    small = counts(2)
    assert EstimatedStart.objects.exclude(p50_ms=None).count() == 6
    assert counts(12) == small


def test_recent_submissions_arrive_again_one_window_later(settings):
    from scheduler.tick.estimates import recent_submissions

    settings.ESTIMATE_ARRIVALS_MINUTES = 60
    now = clock.now_ms()
    make_job("/alice/old", submitted_at_ms=now - 2 * 60 * MINUTE)
    make_job("/bob/recent", submitted_at_ms=now - 10 * MINUTE, replicas=2)
    assert [(at - now, job.id, job.replicas) for at, job in recent_submissions(now)] == [
        (50 * MINUTE, "/bob/recent", 2)
    ]


def test_a_cluster_younger_than_the_window_has_its_jobs_again_one_span_later(settings):
    from scheduler.tick.estimates import recent_submissions

    settings.ESTIMATE_ARRIVALS_MINUTES = 60
    now = clock.now_ms()
    make_job("/alice/first", submitted_at_ms=now - 20 * MINUTE)
    make_job("/bob/recent", submitted_at_ms=now - 5 * MINUTE)
    # Twenty minutes old: its twenty minutes again over the next twenty, once.
    assert [(at - now, job.id) for at, job in recent_submissions(now)] == [
        (0, "/alice/first"),
        (15 * MINUTE, "/bob/recent"),
    ]


def test_the_estimator_has_its_own_beat_entry_and_task():
    from django.conf import settings

    from scheduler import tasks

    entry = settings.CELERY_BEAT_SCHEDULE["estimate-starts"]
    assert entry["task"] == tasks.estimate_starts.name == "scheduler.estimate_starts"
    assert entry["options"]["expires"] == entry["schedule"] == settings.ESTIMATE_MIN_SECONDS == 10


def test_the_estimator_runs_again_after_ten_times_its_last_run_within_the_bounds(settings):
    settings.ESTIMATE_MIN_SECONDS, settings.ESTIMATE_SECONDS = 10, 120
    make_worker("w1")
    make_job("/alice/new")
    now = clock.now_ms()
    assert estimate_start_times_if_due(now) is not None  # never run: due
    # A cheap run: due 10 s later, taken by a beat up to half a beat (5 s) before.
    assert estimate_start_times_if_due(now + 4_999) is None
    assert estimate_start_times_if_due(now + 5_000) is not None
    # A run that took 3 s: the next 30 s after it started; one of 60 s: 120 s after (the most).
    for run_ms, gap_ms in ((3_000, 30_000), (60_000, 120_000)):
        store_estimates({}, waits={}, as_of_ms=now, run_ms=run_ms)
        assert estimator_schedule() == EstimatorSchedule(now, now + gap_ms)
        assert estimate_start_times_if_due(now + gap_ms - 5_001) is None
        assert estimate_start_times_if_due(now + gap_ms - 5_000) is not None


def test_a_task_queued_since_the_last_run_says_when_it_was_and_when_the_next_is_due(alice):
    one_slot_cluster()
    store_estimates({}, waits={}, as_of_ms=iso_ms("2026-05-01T12:00:00Z"), run_ms=2_000)
    at = iso_ms("2026-05-01T12:00:05Z")
    late = iso_ms("2026-05-01T12:00:30Z")
    assert shown_estimates(["/alice/wait/0"], at)["/alice/wait/0"].reason == (
        "not estimated yet: queued since the estimator's last run (12:00:00Z; the next is due at 12:00:20Z)"
    )
    assert shown_estimates(["/alice/wait/0"], late)["/alice/wait/0"].reason == (
        "not estimated yet: queued since the estimator's last run (12:00:00Z; the next was due at 12:00:20Z, not done yet)"
    )
