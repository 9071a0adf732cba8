"""/metrics after a scripted sequence of submissions and ticks: the values, not only the names."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from scheduler.core.bands import Band
from scheduler.foundation.errors import ServiceError
from scheduler.models import DispatchIntent, PreemptionEvent, TickRecord, UserBudget
from scheduler.foundation import instruments
from scheduler.observability.metrics import top_users
from tests.personas import make_worker, run_tasks, submit, token_client

pytestmark = pytest.mark.django_db


def test_a_scripted_sequence_shows_in_the_counters_and_gauges(alice, bob, scrape, tick):
    before = scrape()
    worker = make_worker("w1", cpu=8)
    UserBudget.objects.create(user_id="bob", budget_limit=1, max_band=Band.INTERACTIVE)
    first = submit(bob, "first", cpu=1)
    run_tasks(first, worker)  # bob now spends more than his limit of 1
    submit(bob, "second", cpu=1)  # interactive requested: placed in batch (over budget)
    submit(alice, "train", cpu=1, replicas=2)
    with pytest.raises(ServiceError):
        submit(alice, "train", cpu=1)  # the name is taken
    with pytest.raises(ServiceError):
        submit(alice, "bad", cpu=1, priority="nope")

    outcome = tick()
    after = scrape()

    def delta(name, **labels):
        return after.value(name, **labels) - before.value(name, **labels)

    assert outcome.assigned == 3
    assert delta("iris_ticks_total", outcome="ran") == 1
    assert delta("iris_tick_duration_seconds_count", phase="total") == 1
    assert delta("iris_tick_duration_seconds_count", phase="decide") == 1
    assert delta("iris_tick_duration_seconds_sum", phase="total") == pytest.approx(outcome.duration_ms / 1000)
    assert delta("iris_assignments_total", band="interactive") == 2
    assert delta("iris_assignments_total", band="batch") == 1
    assert delta("iris_budget_downgrades_total", requested_band="interactive", band="batch") == 1
    assert delta("iris_task_wait_seconds_count", band="interactive") == 2
    assert delta("iris_task_wait_seconds_count", band="batch") == 1
    assert delta("iris_submissions_total", code="OK") == 3
    assert delta("iris_submissions_total", code="FAILED_PRECONDITION") == 1
    assert delta("iris_submissions_total", code="INVALID_ARGUMENT") == 1

    # State, read from the database at the scrape.
    assert after.value("iris_running_tasks", band="interactive") == 3  # alice's two, bob's first
    assert after.value("iris_running_tasks", band="batch") == 1
    assert after.value("iris_pending_tasks", band="interactive") == 0
    assert after.value("iris_downgraded_tasks", requested_band="interactive", band="batch") == 1
    assert after.value("iris_workers", backend="local", device="cpu", health="healthy") == 1
    assert after.value("iris_dispatch_intents", state="pending", backend="local") == 3  # three STARTs to send
    assert after.value("iris_dispatch_stuck_intents") == 0
    newest = TickRecord.objects.get(pk=outcome.tick_id)
    assert after.value("iris_last_tick_timestamp_seconds") == pytest.approx(newest.started_at.timestamp())
    assert after.value("iris_user_spend_points", user="bob") == newest.spend["bob"] > 1
    assert after.value("iris_user_budget_limit_points", user="bob") == 1
    assert after.value("iris_users_over_budget") == 1
    assert after.value("iris_database_up") == 1


def test_a_tick_that_finds_the_lease_taken_counts_as_skipped(scrape, tick):
    from scheduler.tick.run import acquire_lease

    before = scrape().value("iris_ticks_total", outcome="skipped")
    assert acquire_lease("someone-else", timezone.now())

    assert tick() is None
    assert scrape().value("iris_ticks_total", outcome="skipped") == before + 1


def test_a_tick_that_raises_counts_as_failed_and_nothing_else(alice, scrape, tick, monkeypatch):
    from scheduler.tick import run as tick_module

    make_worker("w1")
    submit(alice, "train", cpu=1)
    before = scrape()

    def broken_decide(snapshot):
        raise RuntimeError("the core failed")

    monkeypatch.setattr(tick_module, "decide", broken_decide)
    with pytest.raises(RuntimeError):
        tick()

    after = scrape()
    assert after.value("iris_ticks_total", outcome="failed") == before.value("iris_ticks_total", outcome="failed") + 1
    assert after.value("iris_ticks_total", outcome="ran") == before.value("iris_ticks_total", outcome="ran")
    assert after.value("iris_assignments_total", band="interactive") == before.value(
        "iris_assignments_total", band="interactive"
    )


def test_pending_tasks_count_by_the_band_the_tick_queued_them_in(alice, scrape, tick):
    submit(alice, "waits", cpu=1, replicas=3)  # no worker: they stay pending

    tick()

    result = scrape()
    assert result.value("iris_pending_tasks", band="interactive") == 3
    assert result.value("iris_pending_tasks", band="batch") == 0


def test_preemptions_count_by_band_and_per_user(alice, bob, ada, scrape, tick):
    before = scrape()
    worker = make_worker("w1", cpu=1)
    victim = submit(bob, "low", cpu=1, priority="batch")
    run_tasks(victim, worker)
    submit(ada, "urgent", cpu=1, priority="production")

    outcome = tick()
    after = scrape()

    assert outcome.preempted == 1
    assert after.value("iris_preemptions_total", victim_band="batch", preemptor_band="production") == (
        before.value("iris_preemptions_total", victim_band="batch", preemptor_band="production") + 1
    )
    assert after.value("iris_user_preemptions", user="bob") == 1
    assert not after.has("iris_user_preemptions", user="ada")


def test_preemptions_older_than_the_window_are_not_counted(bob, ada, scrape, tick):
    worker = make_worker("w1", cpu=1)
    run_tasks(submit(bob, "low", cpu=1, priority="batch"), worker)
    submit(ada, "urgent", cpu=1, priority="production")
    tick()
    PreemptionEvent.objects.update(
        created_at=timezone.now() - timedelta(seconds=settings.METRICS_PREEMPTION_WINDOW_SECONDS + 1)
    )

    assert scrape().value("iris_user_preemptions", user="bob") == 0


def test_per_user_series_are_bounded_by_the_top_spenders_and_an_other_bucket(settings, scrape):
    settings.METRICS_TOP_USERS = 2
    TickRecord.objects.create(
        started_at=timezone.now(),
        now_ms=0,
        duration_ms=1,
        spend={"ann": 50, "ben": 30, "cat": 20, "dan": 5},
        limits={"ann": 100, "ben": 10, "cat": 0, "dan": 1},
    )

    result = scrape()

    spenders = {s.labels["user"]: s.value for s in result.samples if s.name == "iris_user_spend_points"}
    assert spenders == {"ann": 50, "ben": 30, "__other__": 25}
    limits = {s.labels["user"]: s.value for s in result.samples if s.name == "iris_user_budget_limit_points"}
    assert limits == {"ann": 100, "ben": 10}
    assert result.value("iris_users_over_budget") == 2  # ben and dan; cat is unlimited


def test_top_users_breaks_ties_by_name():
    assert top_users({"b": 1, "a": 1, "c": 3}, 2) == ([("c", 3), ("a", 1)], 1.0)


def test_workers_count_by_health(scrape):
    make_worker("ok")
    draining = make_worker("draining")
    draining.draining = True
    draining.save()
    sick = make_worker("sick")
    sick.healthy = False
    sick.save()

    result = scrape()

    for health in ("healthy", "draining", "unhealthy"):
        assert result.value("iris_workers", backend="local", device="cpu", health=health) == 1


def test_failed_deliveries_count_by_backend_and_outcome(alice, scrape, tick, settings):
    from scheduler.execution import dispatcher

    settings.DISPATCH_MAX_TRIES = 1
    worker = make_worker("w1")
    worker.backend = "nowhere"  # no such backend: each delivery fails
    worker.save()
    submit(alice, "train", cpu=1)
    tick()
    before = scrape().value("iris_dispatch_delivery_failures_total", backend="nowhere", outcome="failed")

    dispatcher.drain()

    result = scrape()
    assert result.value("iris_dispatch_delivery_failures_total", backend="nowhere", outcome="failed") == before + 1
    assert result.value("iris_dispatch_intents", state="failed", backend="nowhere") == 1
    assert result.value("iris_dispatch_stuck_intents") == DispatchIntent.objects.filter(state="failed").count() == 1


def test_events_from_another_process_are_summed_into_the_scrape(scrape):
    before = scrape().value("iris_submissions_total", code="FROM_TWO_PROCESSES")
    instruments.SUBMISSIONS.labels(code="FROM_TWO_PROCESSES").inc(2)
    other = (
        "import django; django.setup(); from scheduler.foundation import instruments; "
        "instruments.SUBMISSIONS.labels(code='FROM_TWO_PROCESSES').inc(5)"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "iris_web.settings"}
    subprocess.run([sys.executable, "-c", other], check=True, env=env, cwd=settings.BASE_DIR, timeout=60)

    assert scrape().value("iris_submissions_total", code="FROM_TWO_PROCESSES") == before + 7


def test_metrics_are_for_allowed_networks_and_operators(client, alice, olivia):
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.0.2.10").status_code == 403
    assert token_client(alice).get("/metrics", REMOTE_ADDR="192.0.2.10").status_code == 403
    assert token_client(olivia).get("/metrics", REMOTE_ADDR="192.0.2.10").status_code == 200
    bad = token_client()
    bad.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    assert bad.get("/metrics", REMOTE_ADDR="192.0.2.10").status_code == 403


def test_the_allow_list_is_a_setting(client, settings):
    from scheduler.views.health import allowed_networks

    settings.METRICS_ALLOW = ["192.0.2.0/24"]
    allowed_networks.cache_clear()
    try:
        assert client.get("/metrics", REMOTE_ADDR="192.0.2.10").status_code == 200
        assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403
    finally:
        allowed_networks.cache_clear()


def test_observing_many_waits_at_once_equals_observing_them_one_by_one():
    from prometheus_client import CollectorRegistry, Histogram

    registry = CollectorRegistry()
    one_by_one = Histogram("one", "", ["band"], buckets=instruments.WAIT_BUCKETS, registry=registry)
    together = Histogram("together", "", ["band"], buckets=instruments.WAIT_BUCKETS, registry=registry)
    # On and around every bound, below the first, above the last, and repeated.
    waits = [0.0, 0.001] + [b + d for b in instruments.WAIT_BUCKETS for d in (-0.5, 0.0, 0.5)] + [1e9, 7.0, 7.0]
    for wait in waits:
        one_by_one.labels(band="batch").observe(wait)
    instruments.observe_all(together.labels(band="batch"), waits)

    def samples(name):
        (family,) = [family for family in registry.collect() if family.name == name]
        return [
            (s.name.removeprefix(name), s.labels, s.value) for s in family.samples if not s.name.endswith("_created")
        ]

    one, many = samples("one"), samples("together")
    assert [(n, labels) for n, labels, _ in one] == [(n, labels) for n, labels, _ in many]
    assert [v for *_, v in one] == pytest.approx([v for *_, v in many])
    assert len(one) == len(instruments.WAIT_BUCKETS) + 3  # the buckets, +Inf, count and sum
