"""Long polls woken by the process's one waker (``scheduler.events.wake``), on SQLite and on
PostgreSQL: a waiting watcher gets a new event once it is sequenced (on PostgreSQL by the
sequencer's NOTIFY, with the waker's own step far longer than the wait), a watcher of one user
is not woken by another's events, and a waiting request holds no database connection."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from scheduler.events import stream as stream_module
from scheduler.events.record import Draft, record
from scheduler.events.sequence import sequence_events
from scheduler.events.stream import EventQuery, newest_event_id, wait_for_events
from scheduler.events.wake import DatabaseSlots, Waiter, Waker, waker

pytestmark = pytest.mark.django_db(transaction=True)


def stage(user: str, job: str, kind: str = "submitted") -> None:
    with transaction.atomic():
        record([Draft(kind, timezone.now(), user, job)])


def in_thread(actor, query: EventQuery) -> tuple[threading.Thread, dict]:
    """``wait_for_events`` in a thread of its own (as a web thread would); its page in ``out``."""
    out: dict = {}

    def run():
        try:
            out["page"] = wait_for_events(actor, query)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def until(condition, what: str, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


def waiting() -> int:
    with waker()._lock:
        return len(waker()._waiters)


def test_a_watcher_waiting_gets_an_event_staged_after_it_began_without_anyone_reading(alice, settings):
    """The waker's own look moves the committed event into the stream and wakes the watcher."""
    settings.EVENTS_POLL_SECONDS = 0.05
    since = newest_event_id()
    thread, out = in_thread(alice, EventQuery(since=since, wait=20))
    until(lambda: waiting() == 1, "the watcher waits")

    stage("alice", "/alice/a")
    thread.join(30)

    assert [(e.kind, e.job) for e in out["page"].events] == [("submitted", "/alice/a")]


@pytest.mark.postgres
def test_on_postgresql_the_sequencers_notify_wakes_a_watcher_long_before_the_wakers_own_step(alice, settings):
    """The waker's step (60 s) is longer than the wait (15 s): only the NOTIFY of the move can
    wake it in time; without it the watcher's page would be empty."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: set IRIS_DATABASE_URL=postgresql://...")
    settings.EVENTS_POLL_SECONDS = 60
    since = newest_event_id()
    thread, out = in_thread(alice, EventQuery(since=since, wait=15))
    until(lambda: waiting() == 1 and waker().looks >= 1, "the watcher waits, after the waker's first look")

    stage("alice", "/alice/a")
    sequence_events()  # as the Celery task after a tick, or another process's read
    thread.join(30)

    assert [e.job for e in out["page"].events] == ["/alice/a"]


def test_a_watcher_of_one_user_is_not_woken_by_anothers_events_and_reads_only_when_woken(
    alice, bob, settings, monkeypatch
):
    settings.EVENTS_POLL_SECONDS = 0.05
    reads = []
    real_read = stream_module.read_events
    monkeypatch.setattr(
        stream_module, "read_events", lambda actor, query, **kw: reads.append(1) or real_read(actor, query, **kw)
    )
    since = newest_event_id()
    watchers = [in_thread(alice, EventQuery(since=since, user="bob", wait=20)) for _ in range(10)]
    until(lambda: waiting() == 10, "the ten watchers wait")
    looks_before = waker().looks

    for n in range(5):
        stage("alice", f"/alice/a{n}")
    until(lambda: (waker()._last or 0) >= since + 5 and waker().looks >= looks_before + 3, "the waker saw them")
    assert len(reads) == 10  # each watcher's first read; alice's events woke none of them

    stage("bob", "/bob/b")
    for thread, _ in watchers:
        thread.join(30)

    assert [[e.job for e in out["page"].events] for _, out in watchers] == [["/bob/b"]] * 10
    assert len(reads) == 20  # one read each when woken


@pytest.mark.postgres
def test_a_waiting_request_holds_no_database_connection(alice, settings, monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: set IRIS_DATABASE_URL=postgresql://...")
    settings.EVENTS_POLL_SECONDS = 0.05
    held = []
    real_wait = Waker.wait

    def wait(self, waiter, timeout):
        held.append(connection.connection is not None)  # this thread's connection, as it waits
        return real_wait(self, waiter, timeout)

    monkeypatch.setattr(Waker, "wait", wait)
    thread, out = in_thread(alice, EventQuery(since=newest_event_id(), wait=1))
    thread.join(30)

    assert out["page"].events == [] and held == [False]


def test_the_wakers_match_is_the_streams_filters():
    row = (7, "/alice/a", "alice", "started")

    assert Waiter(6).may_match(row)
    assert not Waiter(7).may_match(row)
    assert Waiter(6, job="/alice/a", user="alice", kinds=["started", "finished"]).may_match(row)
    assert not Waiter(6, job="/alice/b").may_match(row)
    assert not Waiter(6, user="bob").may_match(row)
    assert not Waiter(6, kinds=["finished"]).may_match(row)


def test_database_slots_bound_the_threads_reading_at_once_and_are_reentrant():
    slots = DatabaseSlots(2)
    inside, most = [0], [0]
    lock = threading.Lock()

    def reader():
        slots.acquire()
        slots.acquire()  # held already: no second slot
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.02)
        with lock:
            inside[0] -= 1
        slots.release()
        slots.release()

    threads = [threading.Thread(target=reader) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert most[0] == 2
