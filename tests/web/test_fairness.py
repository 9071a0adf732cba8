"""The fairness page and GET /api/v1/fairness/ (issue 15 §2): after a real tick, the per-band
numbers are what the tick decided (read back from the rows it wrote and the queue it stored);
preemption losses and starving tasks over 24 hours; a fixed number of queries."""

from __future__ import annotations

import importlib
import re

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Q
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django.utils.html import escape

from scheduler.core.bands import Band
from scheduler.core.budget import resource_value
from scheduler.store.job_rows import job_resources
from scheduler.board.read import forget as forget_board
from scheduler.models import Attempt, Job, PreemptionEvent, Task, TickRecord, UserBudget, Worker
from scheduler.store.states import ACTIVE_VALUES
from scheduler.tick.run import run_tick
from tests.personas import NOW_MS, make_job, make_worker, start_running, token_client

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_queue_index():
    forget_board()
    yield
    forget_board()


def small_cluster():
    UserBudget.objects.create(user_id="alice", budget_limit=10, max_band=Band.INTERACTIVE)
    w1, w2 = make_worker("w1", cpu=8, memory_gib=32), make_worker("w2", cpu=8, memory_gib=32)
    start_running(make_job("/alice/run", cpu=4, memory_gib=8), w1)  # alice: over her limit of 10
    make_job("/bob/new", replicas=2, cpu=4, memory_gib=8)
    make_job("/carol/big", cpu=8, memory_gib=8)
    make_job("/carol/small", cpu=1, memory_gib=1)
    make_job("/dave/batch", band=Band.BATCH, replicas=3, cpu=8, memory_gib=8)
    return w1, w2


def test_the_api_serves_what_the_tick_decided(alice):
    small_cluster()
    run_tick(NOW_MS)
    tick = TickRecord.objects.latest("pk")
    body = token_client(alice).get("/api/v1/fairness/").json()
    assert body["tick"] == tick.pk

    # What the tick left: running value per (band, user) from the rows it wrote; pending from its queue.
    running: dict[tuple[str, str], int] = {}
    for task in Task.objects.filter(state__in=ACTIVE_VALUES).select_related("job"):
        key = (Band(task.band).wire, task.job.user)
        running[key] = running.get(key, 0) + resource_value(job_resources(task.job))
    pending: dict[tuple[str, str], int] = {}
    for entry in token_client(alice).get("/api/v1/queue/?page_size=500").json()["results"]:
        key = (entry["band"], entry["user"])
        pending[key] = pending.get(key, 0) + 1
    placed_users = {
        (Band(t.band).wire, t.job.user)
        for t in Task.objects.filter(attempts__created_at__isnull=False, state="assigned").select_related("job")
    }

    served = {(b["band"], u["user"]): u for b in body["bands"] for u in b["users"]}
    assert set(served) == set(running) | set(pending)
    for key, u in served.items():
        assert (u["running_value"], u["pending"]) == (running.get(key, 0), pending.get(key, 0)), key
        assert u["got_turn"] == (key in placed_users), key
    assert served[("interactive", "alice")]["over_budget"] is True
    assert served[("interactive", "bob")]["over_budget"] is False
    for band in body["bands"]:
        assert band["running_value"] == sum(running.get((band["band"], u["user"]), 0) for u in band["users"])
        assert all(u["equal_share"] == pytest.approx(1 / len(band["users"])) for u in band["users"])
    interactive = next(b for b in body["bands"] if b["band"] == "interactive")
    waiting = interactive["smallest_waiting"]
    assert waiting["job"] == "/carol/small" and waiting["reason"]["text"]


def test_the_page_shows_each_band_and_the_smallest_waiting_job_and_is_in_the_navigation(clients, alice):
    small_cluster()
    run_tick(NOW_MS)
    body = token_client(alice).get("/api/v1/fairness/").json()
    html = clients["alice"].get("/fairness/").content.decode()
    assert '<a href="/fairness/" aria-current="page">Fairness</a>' in html
    for band in body["bands"]:
        assert f'data-band="{band["band"]}"' in html
        waiting = band["smallest_waiting"]
        if waiting:
            assert f'data-job="{waiting["job"]}"' in html and escape(waiting["reason"]["text"]) in html
    assert '<polyline class="share-line' in html  # the share chart, from this tick's sample
    assert clients["anonymous"].get("/fairness/").status_code == 302


def preempted_at(job: Job, worker: Worker, preemptor: Task, ran: timedelta, ago: timedelta, times: int = 1) -> Task:
    """A task of ``job`` whose attempt ran ``ran`` before being preempted ``ago``, with its event
    as the tick writes it (``tests/tick/test_tick.py`` checks the tick's own)."""
    task = start_running(job, worker)
    now = timezone.now()
    Attempt.objects.filter(task=task).update(started_at=now - ago - ran, state="preempted")
    Task.objects.filter(pk=task.pk).update(state="pending", worker=None, preemption_count=times)
    PreemptionEvent.objects.create(
        victim=task,
        preemptor=preemptor,
        victim_band=int(Band.BATCH),
        preemptor_band=int(Band.INTERACTIVE),
        worker=worker,
        reason="test",
        created_at=now - ago,
        victim_user=job.user,
        victim_job=job,
        lost_point_ms=resource_value(job_resources(job)) * round(ran.total_seconds() * 1000),
    )
    return task


def test_work_lost_to_preemption_and_starving_tasks_over_the_last_24_hours(alice):
    w = make_worker("w1", cpu=64, memory_gib=256)
    preemptor = start_running(make_job("/alice/prod", cpu=1), w)
    victim_job = make_job("/bob/sweep", band=Band.BATCH, replicas=3, cpu=4, memory_gib=8)
    value = resource_value(job_resources(victim_job))
    preempted_at(victim_job, w, preemptor, ran=timedelta(hours=2), ago=timedelta(hours=1))
    preempted_at(
        make_job("/bob/unlucky", band=Band.BATCH, cpu=4, memory_gib=8),
        w,
        preemptor,
        ran=timedelta(minutes=30),
        ago=timedelta(minutes=5),
        times=5,
    )
    old = make_job("/carol/old", band=Band.BATCH, cpu=4, memory_gib=8)
    preempted_at(old, w, preemptor, ran=timedelta(hours=1), ago=timedelta(hours=30), times=9)  # outside the window

    body = token_client(alice).get("/api/v1/fairness/").json()
    assert body["lost_work"] == [{"user": "bob", "preemptions": 2, "point_hours": pytest.approx(value * 2.5)}]
    # The page rounds it and names its unit (it showed "1032.652").
    from tests.web.conftest import client_for

    html = client_for(alice).get("/fairness/").content.decode()
    cell = re.search(r'<tr data-user="bob">.*?<td class="num">([^<]*)</td></tr>', html, re.S).group(1)
    assert re.fullmatch(r"[\d,]+(\.\d)? point-hours", cell), cell
    assert body["starving"] == [
        {
            "task": "/bob/unlucky/0",
            "job": "/bob/unlucky",
            "user": "bob",
            "band": "batch",
            "state": "pending",
            "preemptions": 5,
            "history": "/jobs/bob/unlucky/",
        }
    ]
    assert body["starvation_threshold"] == 3


def fairness_queries(client, url: str) -> int:
    forget_board()
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def test_the_page_and_the_api_run_a_fixed_number_of_queries(clients, alice):
    small_cluster()
    run_tick(NOW_MS)
    api = token_client(alice)
    few = (fairness_queries(clients["alice"], "/fairness/"), fairness_queries(api, "/api/v1/fairness/"))
    w = Worker.objects.get(name="w2")
    preemptor = Task.objects.filter(state__in=ACTIVE_VALUES).first()
    for n in range(20):
        preempted_at(
            make_job(f"/user{n}/x", band=Band.BATCH, cpu=1),
            w,
            preemptor,
            ran=timedelta(minutes=n + 1),
            ago=timedelta(minutes=1),
            times=4,
        )
        make_job(f"/user{n}/wait", cpu=2)
    for t in range(3):
        run_tick(NOW_MS + 1000 * (t + 1))
    many = (fairness_queries(clients["alice"], "/fairness/"), fairness_queries(api, "/api/v1/fairness/"))
    assert few == many


def test_a_band_of_many_users_lists_the_most_under_served_first_and_opens_whole(clients):
    from scheduler.core.fairness import FAIRNESS_VERSION
    from scheduler.views.fairness import BAND_ROWS

    # 40 users: u00..u29 hold the band (u00 the most), u30..u39 hold nothing and wait.
    users = {f"u{i:02d}": [100 - i if i < 30 else 0, 0 if i < 30 else 2, 0, 0] for i in range(40)}
    sample = {
        "version": FAIRNESS_VERSION,
        "bands": {"batch": {"running_value": sum(r[0] for r in users.values()), "users": users}},
    }
    TickRecord.objects.create(started_at=timezone.now(), now_ms=NOW_MS, duration_ms=1, fairness=sample)
    html = clients["bob"].get("/fairness/").content.decode()
    listed = re.findall(r'<tr data-user="(u\d+)">', html)
    assert len(listed) == BAND_ROWS
    assert listed[:10] == [f"u{i}" for i in range(30, 40)]  # waiting with no share: first
    assert listed[10:] == [f"u{i:02d}" for i in range(BAND_ROWS - 10)]  # then the largest shares
    assert f"{BAND_ROWS} of 40 users" in html and 'href="/fairness/?band=batch#band-batch">Show all 40' in html
    whole = clients["bob"].get("/fairness/?band=batch").content.decode()
    assert len(re.findall(r'<tr data-user="(u\d+)">', whole)) == 40 and "Show all" not in whole


def test_the_share_chart_reads_each_ticks_sample_once_per_process():
    from scheduler.core.fairness import FAIRNESS_VERSION
    from scheduler.tick import fairness

    fairness._share_points.clear()
    now = timezone.now()

    def tick(minutes_ago: float, share_of_alice: int) -> TickRecord:
        users = {"alice": [share_of_alice, 0, 0, 0], "bob": [100 - share_of_alice, 0, 0, 0]}
        sample = {"version": FAIRNESS_VERSION, "bands": {"batch": {"running_value": 100, "users": users}}}
        at = now - timedelta(minutes=minutes_ago)
        return TickRecord.objects.create(started_at=at, now_ms=NOW_MS, duration_ms=1, fairness=sample)

    for i in range(400):
        tick(24 * 60 - 3 * i - 1, i % 100)
    since = now - fairness.WINDOW
    with CaptureQueriesContext(connection) as first:
        series = fairness.share_series(since)
    with CaptureQueriesContext(connection) as again:
        assert fairness.share_series(since) == series
    assert (len(first), len(again)) == (3, 2)  # the samples are read once
    points = series[Band.BATCH]
    assert fairness.CHART_POINTS // 2 <= len(points) <= fairness.CHART_POINTS + 1
    newest = tick(0, 7)
    with CaptureQueriesContext(connection) as after_a_tick:
        latest = fairness.share_series(since)[Band.BATCH]
    assert len(after_a_tick) == 3 and "IN (%d)" % newest.pk in after_a_tick[-1]["sql"].replace("'", "")
    assert latest[-1][1].shares == {"alice": 0.07, "bob": 0.93}
    # The same slots as before the tick (the previous newest, unless it is a slot, gives way).
    before = {at for at, _ in points}
    assert {at for at, _ in latest[:-1]} <= before and len(before - {at for at, _ in latest}) <= 1


def test_migration_0030_fills_the_events_already_kept_with_what_the_page_computed_from_their_joins():
    """Events written before the tick carried ``victim_user`` and ``lost_point_ms``: the
    migration's fill gives each what ``lost_work`` computed from the event's task, job and latest
    attempt started by then (value × ran), on this database's SQL."""
    fill_sql = importlib.import_module("scheduler.migrations.0030_preemption_victim_user_lost_work").fill_sql
    w = make_worker("w1", cpu=64, memory_gib=256)
    preemptor = start_running(make_job("/alice/prod", cpu=1), w)
    ran_job = make_job("/bob/ran", band=Band.BATCH, cpu=4, memory_gib=8)
    gpu_job = make_job("/carol/gpu", band=Band.BATCH, cpu=2, memory_gib=3, device=("gpu", "h100", 2))
    never = make_job("/dave/never", band=Band.BATCH, cpu=4, memory_gib=8)
    ran = preempted_at(ran_job, w, preemptor, ran=timedelta(hours=2), ago=timedelta(hours=1))
    preempted_at(gpu_job, w, preemptor, ran=timedelta(minutes=30), ago=timedelta(minutes=5))
    preempted_at(never, w, preemptor, ran=timedelta(minutes=30), ago=timedelta(minutes=5))
    Attempt.objects.filter(task__job=never).update(started_at=None)
    # A start after the eviction (a late report) is not the evicted attempt's.
    Attempt.objects.create(
        task=ran, number=2, worker=w, state="running", band=int(Band.BATCH),
        created_at=timezone.now(), started_at=timezone.now(),
    )  # fmt: skip
    PreemptionEvent.objects.update(victim_user="", lost_point_ms=0)

    with connection.cursor() as cursor:
        cursor.execute(fill_sql(connection.vendor))

    filled = {e.victim_user: e.lost_point_ms for e in PreemptionEvent.objects.all()}
    assert filled.keys() == {"bob", "carol", "dave"}
    assert filled["bob"] == pytest.approx(resource_value(job_resources(ran_job)) * 2 * 3_600_000, rel=1e-6)
    # 2 GPUs, 3 GiB, 2 cores: 2,013 points, for 30 minutes (SQLite subtracts Julian days: to a few µs).
    assert filled["carol"] == pytest.approx(2_013 * 1_800_000, rel=1e-6)
    assert filled["dave"] == 0


def test_the_starving_tasks_partial_index_holds_exactly_the_tasks_the_page_asks_for():
    """``task_starving``'s condition is written as a number in the model (models import no
    tick code): it must stay the page's threshold, or the page's query stops using it."""
    from scheduler.tick.fairness import STARVATION_PREEMPTIONS

    (index,) = [i for i in Task._meta.indexes if i.name == "task_starving"]
    assert index.condition == Q(preemption_count__gt=STARVATION_PREEMPTIONS)
