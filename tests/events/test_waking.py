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


def test_a_watcher_of_one_user_is_not_woken_by_anothers_events_and_woken_reads_no_page_of_its_own(
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
    looks_before, reads_before = waker().looks, len(reads)
    assert 1 <= reads_before <= 10  # a first read each, until the waker has looked

    for n in range(5):
        stage("alice", f"/alice/a{n}")
    until(lambda: (waker()._last or 0) >= since + 5 and waker().looks >= looks_before + 3, "the waker saw them")
    assert len(reads) == reads_before and waiting() == 10  # alice's events woke none of them

    stage("bob", "/bob/b")
    for thread, _ in watchers:
        thread.join(30)

    assert [[e.job for e in out["page"].events] for _, out in watchers] == [["/bob/b"]] * 10
    assert len(reads) == reads_before  # woken, each built its page from the waker's events


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
    from scheduler.models import Event

    row = Event(id=7, job="/alice/a", user="alice", kind="started")

    assert Waiter(6).may_match(row)
    assert not Waiter(7).may_match(row)
    assert Waiter(6, job="/alice/a", user="alice", kinds=["started", "finished"]).may_match(row)
    assert not Waiter(6, job="/alice/b").may_match(row)
    assert not Waiter(6, user="bob").may_match(row)
    assert not Waiter(6, kinds=["finished"]).may_match(row)


def test_the_wakers_index_finds_a_match_exactly_when_a_scan_of_every_event_does():
    from itertools import product

    from scheduler.events.wake import Recent, SeenEvent

    shapes = [("submitted", "alice", "/alice/a"), ("started", "bob", "/bob/b"), ("limit_crossed", "bob", "")]
    events = [
        SeenEvent((i, kind, None, user, job, None, None, None, "{}"))
        for i, (kind, user, job) in enumerate(shapes * 3, 1)
    ]
    recent = Recent(events)
    for cursor, job, user, kinds in product(
        (0, 4, 8, 9),
        ("", "/alice/a", "/bob/b", "/carol/c"),
        ("", "alice", "bob", "carol"),
        ((), ("started",), ("limit_crossed", "submitted")),
    ):
        waiter = Waiter(cursor, job=job, user=user, kinds=kinds)
        assert recent.any_match(waiter) == any(waiter.may_match(e) for e in events), (cursor, job, user, kinds)


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


def test_a_page_built_from_the_wakers_events_is_the_page_the_stream_reads(alice, bob, olivia):
    """``page_from`` (the waker's events as its look reads them, filtered in Python, from the
    candidates its index gives for the filters) against ``read_events`` (the query), for a
    researcher and an operator, job and budget events, every filter; and the same answer."""
    from scheduler.api.serializers.events import event_page_json
    from scheduler.events.stream import page_from, read_events
    from scheduler.events.wake import Recent, read_seen
    from scheduler.models import Event

    with transaction.atomic():
        record(
            [
                Draft("submitted", timezone.now(), "alice", "/alice/a"),
                Draft("started", timezone.now(), "alice", "/alice/a", task_index=0, attempt=1, tick=3),
                Draft("uplift_requested", timezone.now(), "alice"),
                Draft("submitted", timezone.now(), "bob", "/bob/b"),
                Draft("limit_crossed", timezone.now(), "bob"),
                Draft("finished", timezone.now(), "bob", "/bob/b", data={"outcome": "succeeded"}),
            ]
        )
    sequence_events()
    events = list(Event.objects.order_by("id"))
    newest, first = events[-1].id, events[0].id
    recent = Recent(read_seen(0, 100))
    queries = [
        EventQuery(),
        EventQuery(user="alice"),
        EventQuery(user="bob"),
        EventQuery(job="/bob/b"),
        EventQuery(kinds=("submitted", "limit_crossed")),
        EventQuery(user="bob", kinds=("limit_crossed",)),
        EventQuery(limit=2),
    ]
    for actor in (alice, bob, olivia):
        for query in queries:
            for since in (0, first, first + 2):
                query_since = EventQuery(**{**query.__dict__, "since": since})
                read = read_events(actor, query_since, sequence=False)
                candidates = recent.after(since, query.job, query.user)
                for built in (
                    page_from(actor, query_since, since, events, newest),
                    page_from(actor, query_since, since, candidates, newest),
                ):
                    assert [e.id for e in built.events] == [e.id for e in read.events], (actor, query_since)
                    assert (built.next, built.more, built.seen) == (read.next, read.more, read.seen)
                    assert event_page_json(built) == event_page_json(read)


@pytest.mark.parametrize(("chunks", "own_reads"), [(3, 0), (1, 1)])
def test_a_tick_sized_backlog_is_read_in_chunks_and_a_larger_one_wakes_everyone_to_read(
    alice, bob, settings, monkeypatch, chunks, own_reads
):
    """Six events at two a statement: three chunks read them all, the last full (the watcher's page comes from
    the waker's events); with one chunk allowed the rest is a backlog, and the woken watcher
    reads its page itself."""
    from scheduler.events import wake

    settings.EVENTS_POLL_SECONDS = 0.05
    monkeypatch.setattr(wake, "LOOK_LIMIT", 2)
    monkeypatch.setattr(wake, "LOOK_CHUNKS", chunks)
    reads = []
    real_read = stream_module.read_events
    monkeypatch.setattr(
        stream_module, "read_events", lambda actor, query, **kw: reads.append(1) or real_read(actor, query, **kw)
    )
    since = newest_event_id()
    thread, out = in_thread(alice, EventQuery(since=since, user="bob", wait=20))
    until(lambda: waiting() == 1 and waker().looks >= 1, "the watcher waits, after the waker's first look")
    reads_before = len(reads)

    with transaction.atomic():
        record([Draft("submitted", timezone.now(), "alice", f"/alice/a{n}") for n in range(5)])
        record([Draft("submitted", timezone.now(), "bob", "/bob/b")])
    thread.join(30)

    assert [e.job for e in out["page"].events] == ["/bob/b"]
    assert len(reads) - reads_before == own_reads


def test_a_server_sent_event_stream_waits_on_the_waker_between_pages_holding_no_connection(
    alice, settings, monkeypatch
):
    """A stream (``Accept: text/event-stream``) outside a transaction: between its pages it waits
    on the waker as a long poll does, with no database connection, and a page after the waker's
    first look is built from the waker's events, with no read of its own."""
    from tests.personas import token_client

    settings.EVENTS_POLL_SECONDS = 0.05
    settings.EVENTS_HEARTBEAT_SECONDS = 20
    reads, held = [], []
    real_read, real_wait = stream_module.read_events, Waker.wait
    monkeypatch.setattr(
        stream_module, "read_events", lambda actor, query, **kw: reads.append(1) or real_read(actor, query, **kw)
    )

    def wait(self, waiter, timeout):
        held.append(connection.connection is not None)  # this thread's connection, as it waits
        return real_wait(self, waiter, timeout)

    monkeypatch.setattr(Waker, "wait", wait)
    client = token_client(alice)
    response = client.get("/api/v1/events/?since=now&user=alice", HTTP_ACCEPT="text/event-stream")
    chunks = iter(response.streaming_content)
    next(chunks)  # the start frame

    def stage_when_waiting(job):
        try:
            until(lambda: waiting() == 1 and waker().looks >= 1, "the stream waits")
            stage("alice", job)
        finally:
            connections.close_all()

    pages = []
    for job in ("/alice/a", "/alice/b"):
        writer = threading.Thread(target=stage_when_waiting, args=(job,), daemon=True)
        writer.start()
        reads_before = len(reads)
        pages.append(next(chunks).decode())
        writer.join(30)
    response.close()
    first, second = pages

    assert "/alice/a" in first and "/alice/b" not in first
    assert second.startswith("id: ") and "/alice/b" in second
    assert len(reads) == reads_before  # the second page: the waker's events
    if connection.vendor == "postgresql":
        assert held and not any(held)
