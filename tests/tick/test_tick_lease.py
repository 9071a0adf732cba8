"""The tick lease (issue 13 §6): short, renewed while the tick runs, given back with the commit.

A tick killed between its commit and the release of its lease used to stop scheduling for the
whole 60 s lease. Now the lease lasts ``IRIS_TICK_LEASE_SECONDS`` (10 s) from its last renewal,
the tick renews it at every phase boundary, and it gives the lease back inside its write
transaction. The clock the lease is taken by is an argument, so nothing here waits.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone as dt_timezone

import pytest
from django.conf import settings
from django.utils import timezone

from scheduler.models import Attempt, SchedulerLease, Task, TickRecord
from scheduler.tick import run
from scheduler.tick.run import LeaseLost, acquire_lease, run_tick
from tests.personas import NOW_MS, make_job, make_worker

pytestmark = pytest.mark.django_db

T0 = datetime(2027, 1, 15, 12, 0, 0, tzinfo=dt_timezone.utc)


class Clock:
    """A wall clock that moves only when told to."""

    def __init__(self, at: datetime = T0) -> None:
        self.at = at

    def __call__(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> datetime:
        self.at += timedelta(seconds=seconds)
        return self.at


@pytest.fixture
def cluster():
    make_worker("w1")
    make_job("/alice/a")


def test_the_default_lease_is_short():
    assert settings.TICK_LEASE_SECONDS == 10


def test_a_dead_ticks_lease_blocks_the_next_tick_for_at_most_the_short_lease(cluster):
    # A tick took (or last renewed) the lease, then died: the row is left, never released.
    assert acquire_lease("dead", T0)

    assert run_tick(NOW_MS, clock=Clock(T0 + timedelta(seconds=9.9))) is None
    outcome = run_tick(NOW_MS, clock=Clock(T0 + timedelta(seconds=10)))

    assert outcome is not None and outcome.assigned == 1


def test_a_dead_ticks_lease_is_taken_over_on_the_real_clock_within_the_short_lease(cluster):
    # The same against the wall clock: the dead tick last renewed 11 s ago.
    assert acquire_lease("dead", timezone.now() - timedelta(seconds=settings.TICK_LEASE_SECONDS + 1))
    assert run_tick(NOW_MS) is not None


def test_a_tick_killed_after_its_commit_leaves_the_lease_free(cluster, monkeypatch):
    # The process dies after the commit, before the release that follows it (``release_lease``,
    # which the tick still calls after its transaction, for a tick that failed).
    monkeypatch.setattr(run, "release_lease", lambda holder: None)
    assert run_tick(NOW_MS) is not None
    monkeypatch.undo()

    lease = SchedulerLease.objects.get(name="tick")
    assert lease.holder == "" and lease.expires_at is None
    make_job("/alice/b")
    assert run_tick(NOW_MS) is not None  # at once, not a lease later


def test_a_tick_killed_after_its_commit_frees_the_lease_in_real_time(cluster, monkeypatch):
    # The same with the real clock: a dead tick that committed blocks nobody, now.
    monkeypatch.setattr(run, "release_lease", lambda holder: None)
    run_tick(NOW_MS)
    monkeypatch.undo()
    assert acquire_lease("next", timezone.now())


def test_a_long_tick_that_renews_is_not_taken_over(cluster, monkeypatch):
    # Loading and deciding take 8 s each (24 s in all with the write, over twice the lease);
    # a rival tries to take the lease in the middle of each phase and never can.
    clock = Clock()
    rival_tries = []
    real_load, real_decide = run.load_snapshot, run.decide

    def slow(real):
        def phase(*args):
            clock.advance(4)
            rival_tries.append(acquire_lease("rival", clock()))
            clock.advance(4)
            return real(*args)

        return phase

    monkeypatch.setattr(run, "load_snapshot", slow(real_load))
    monkeypatch.setattr(run, "decide", slow(real_decide))

    outcome = run_tick(NOW_MS, clock=clock)

    assert rival_tries == [False, False]
    assert outcome is not None and outcome.assigned == 1
    assert Task.objects.get().state == "assigned"


def test_a_tick_that_lost_its_lease_does_not_commit(cluster, monkeypatch):
    # Deciding took longer than the lease: another tick took it over meanwhile.
    clock = Clock()
    real_decide = run.decide

    def stalled_decide(snapshot):
        clock.advance(settings.TICK_LEASE_SECONDS + 1)
        assert acquire_lease("newer", clock())
        return real_decide(snapshot)

    monkeypatch.setattr(run, "decide", stalled_decide)

    with pytest.raises(LeaseLost):
        run_tick(NOW_MS, clock=clock)

    assert Task.objects.get().state == "pending"
    assert not Attempt.objects.exists() and not TickRecord.objects.exists()
    assert SchedulerLease.objects.get(name="tick").holder == "newer"  # the loser leaves it alone


def test_a_tick_that_lost_its_lease_while_loading_stops_before_deciding(cluster, monkeypatch):
    clock = Clock()
    real_load = run.load_snapshot
    decided = []

    def stalled_load(now):
        loaded = real_load(now)
        clock.advance(settings.TICK_LEASE_SECONDS + 1)
        assert acquire_lease("newer", clock())
        return loaded

    monkeypatch.setattr(run, "load_snapshot", stalled_load)
    monkeypatch.setattr(run, "decide", lambda snapshot: decided.append(snapshot))

    with pytest.raises(LeaseLost):
        run_tick(NOW_MS, clock=clock)
    assert decided == []
