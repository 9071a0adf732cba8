"""Spend as pages read it (``budgets.rules.spend_now``): the newest tick's sample plus its own
changes equals the spend summed live from the active tasks right after that tick, and a tick
too old to stand for now gives way to the live sum."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.budgets.rules import live_spend, spend_fresh_for, spend_now
from scheduler.core.bands import Band
from scheduler.models import Task, TickRecord
from scheduler.tick.run import run_tick
from tests.personas import NOW_MS, make_job, make_worker, start_running

pytestmark = pytest.mark.django_db

USERS = ("alice", "bob", "carol")
BANDS = (Band.PRODUCTION, Band.INTERACTIVE, Band.INTERACTIVE, Band.BATCH)
SHAPES = ((1, 1, ("cpu", "", 0)), (4, 16, ("cpu", "", 0)), (2, 8, ("gpu", "h100", 1)), (0.5, 3, ("cpu", "", 0)))


def _cluster(seed: int) -> None:
    """A few workers with some work running on them and more queued, of every band and shape,
    enough that a tick both places and preempts."""
    rng = random.Random(seed)
    workers = [make_worker(f"c{i}", cpu=8, memory_gib=32) for i in range(2)]
    workers.append(make_worker("g0", cpu=8, memory_gib=64, device=("gpu", "h100", 2)))
    for i in range(rng.randint(6, 12)):
        user, band = rng.choice(USERS), rng.choice(BANDS)
        cpu, memory, device = rng.choice(SHAPES)
        job = make_job(
            f"/{user}/j{i}", band=band, cpu=cpu, memory_gib=memory, device=device, replicas=rng.randint(1, 3)
        )
        if band is not Band.PRODUCTION and rng.random() < 0.5:
            worker = workers[2] if device[0] == "gpu" else rng.choice(workers[:2])
            start_running(job, worker)


@pytest.mark.parametrize("seed", range(6))
def test_after_each_tick_the_published_spend_is_the_live_spend(seed):
    _cluster(seed)
    for step in range(3):
        run_tick(NOW_MS + step * 5000)
        now = spend_now()
        assert now.tick == TickRecord.objects.latest("pk").pk
        assert now.spend == live_spend(), f"seed {seed}, tick {step + 1}"
        assert spend_now(["bob", "nobody"]).spend == {u: v for u, v in live_spend().items() if u == "bob"}


def test_a_tick_that_preempts_takes_the_victims_spend_away():
    worker = make_worker("w1", cpu=4, memory_gib=16)
    start_running(make_job("/bob/interactive", cpu=4, memory_gib=8), worker)
    make_job("/alice/prod", band=Band.PRODUCTION, cpu=4, memory_gib=8)
    assert live_spend() == {"bob": 28}

    run_tick(NOW_MS)

    assert Task.objects.get(job__name="/bob/interactive").state == "pending"
    record = TickRecord.objects.get()
    assert (record.spend, record.spend_change) == ({"bob": 28}, {"alice": 28, "bob": -28})
    assert spend_now().spend == live_spend() == {"alice": 28}


def test_before_any_tick_and_when_the_newest_is_too_old_spend_is_summed_live():
    start_running(make_job("/alice/train", cpu=4, memory_gib=16), make_worker("w1"))
    assert spend_now().spend == {"alice": 36} and spend_now().tick is None
    TickRecord.objects.create(
        started_at=timezone.now() - spend_fresh_for() - timedelta(seconds=1),
        now_ms=NOW_MS,
        duration_ms=1,
        spend={"alice": 999},
    )
    assert (spend_now().spend, spend_now().tick) == ({"alice": 36}, None)
    fresh = TickRecord.objects.create(started_at=timezone.now(), now_ms=NOW_MS, duration_ms=1, spend={"alice": 999})
    assert (spend_now().spend, spend_now().tick) == ({"alice": 999}, fresh.pk)
