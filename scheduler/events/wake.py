"""Waking long polls: one look at the stream per web process, not one per waiting request.

A long poll (``GET events/?wait=N``) that finds nothing registers here and sleeps on an event
of its own; it holds no database connection while it sleeps (:class:`DatabaseSlots`). One
thread per process (the :class:`Waker`, started by the first waiter) looks for new events
for all of them:

- on PostgreSQL it ``LISTEN``s on :data:`CHANNEL`. The sequencer sends one ``NOTIFY`` in each
  transaction that moved events into the stream, so the notification arrives when those events
  have committed, never before; one per move, not one per event;
- on every engine, and between notifications, it looks every ``IRIS_EVENTS_POLL_SECONDS``
  (the fallback: SQLite has no notifications, and a notification lost with a dropped
  connection costs at most one step). A look first moves what has committed into the stream
  (:func:`~scheduler.events.sequence.sequence_events`) unless a move was notified within the
  last step, so a submission's event reaches a waiting watcher within a step or two even when
  nothing else reads, and the processes' wakers do not each move on every step.

A look reads the new events, keeps the newest ``RECENT`` of them, and wakes the waiters whose
filters one of them matches (:meth:`Waiter.may_match`: job, user and kinds; not visibility, so
it may wake a waiter whose page then holds nothing it may see, never the reverse). A woken
waiter builds its page from the events kept (:meth:`Waker.events_after`), filtered exactly as
the stream's query filters (:func:`scheduler.events.stream.page_from`), with no query of its
own; it reads the stream itself only when they do not reach back to its cursor. A watcher of
one job therefore costs nothing while other jobs' events go by, and one read per process
serves every watcher a tick wakes.

The events kept, and each look's new ones, are also indexed by job and by user
(:class:`Recent`): a waiter or a page with a job or user filter looks only at that job's or
user's events, never at all of a tick's thousands (200 watchers of one user each, scanning a
5,000-event tick to the end, were a million matches per look).

With nobody waiting the thread waits on a condition and queries nothing.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from bisect import bisect_right
from collections.abc import Iterable

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections
from django.db.models import Max, Subquery, TextField
from django.db.models.functions import Cast

from scheduler.events.sequence import CHANNEL, sequence_events
from scheduler.models import Event

log = logging.getLogger(__name__)

# Events one look reads per statement, and statements at most: a backlog larger than that (a
# burst tick's starts) wakes every waiter instead, each to read its own page.
LOOK_LIMIT = 5000
LOOK_CHUNKS = 4
# Recent events kept (between this and twice this), to build woken waiters' pages and to check
# a waiter that registers after they were read.
RECENT = 10000
# Seconds with nobody waiting after which the waker closes its connections until someone waits.
IDLE_SECONDS = 60.0


# The columns of an event a look reads as they are (its ``data`` is read as JSON text).
SEEN_COLUMNS = ("id", "kind", "created_at", "user", "job", "task_index", "attempt", "tick")


class SeenEvent:
    """An event as a look read it: the :class:`~scheduler.models.Event` fields a page filters
    on and its answer shows, under the same names, without a model instance; ``data`` is
    decoded from the row's JSON text on first use. Every web process's waker reads every event,
    and a model instance each, its data decoded, was about two thirds of a look's CPU (20 µs
    an event, against 6)."""

    __slots__ = (*SEEN_COLUMNS, "_data_text", "_data", "_iris_json", "_iris_frame")

    def __init__(self, row: tuple):
        (self.id, self.kind, self.created_at, self.user, self.job, self.task_index, self.attempt, self.tick) = row[:-1]
        self._data_text = row[-1]
        self._data = None

    @property
    def data(self) -> dict:
        if self._data is None:
            self._data = json.loads(self._data_text)
        return self._data

    def __repr__(self) -> str:
        return f"<SeenEvent {self.id} {self.kind} {self.job or self.user}>"


def seen_rows(after: int):
    """The look's query: the events after id ``after`` up to the newest, oldest first, as rows.

    Bounded above by the newest id (a subquery: one statement) so that PostgreSQL reads them by
    the primary key whatever the table's statistics say: with ``id > after`` alone, on a table
    never analysed (a restored database; autovacuum behind), the planner took a third of the
    table for the answer and scanned and sorted all of it on every look (11-25 ms on the
    benchmark's 35,000 events, each web process several times a second), where the key's range
    takes under a millisecond."""
    newest = Event.objects.order_by("-id").values("id")[:1]
    return (
        Event.objects.filter(id__gt=after, id__lte=Subquery(newest))
        .order_by("id")
        .values_list(*SEEN_COLUMNS, Cast("data", TextField()))
    )


def read_seen(after: int, limit: int) -> list[SeenEvent]:
    """The events after id ``after``, oldest first, at most ``limit``."""
    return [SeenEvent(row) for row in seen_rows(after)[:limit]]


class Waiter:
    """One waiting read: the id after which it wants events, its filters, and its wake-up."""

    __slots__ = ("cursor", "job", "user", "kinds", "woken")

    def __init__(self, cursor: int, job: str = "", user: str = "", kinds: Iterable[str] = ()):
        self.cursor, self.job, self.user, self.kinds = cursor, job, user, frozenset(kinds)
        self.woken = threading.Event()

    def may_match(self, event: Event | SeenEvent) -> bool:
        """Whether ``event`` passes this read's filters (the stream's filters on ``job``,
        ``user`` and ``kind``; visibility is left to the page)."""
        return (
            event.id > self.cursor
            and (not self.job or event.job == self.job)
            and (not self.user or event.user == self.user)
            and (not self.kinds or event.kind in self.kinds)
        )


class Recent:
    """Events in id order, with the same events listed per job and per user (each list in id
    order too): the candidates for a filter are the smallest list that holds every event it
    can match."""

    __slots__ = ("events", "by_job", "by_user")

    def __init__(self, events: list[SeenEvent] | None = None):
        self.events: list[SeenEvent] = []
        self.by_job: dict[str, list[SeenEvent]] = {}
        self.by_user: dict[str, list[SeenEvent]] = {}
        self.extend(events or ())

    def extend(self, events: Iterable[SeenEvent]) -> None:
        for event in events:
            self.events.append(event)
            if event.job:
                self.by_job.setdefault(event.job, []).append(event)
            self.by_user.setdefault(event.user, []).append(event)

    def candidates(self, job: str = "", user: str = "") -> list[SeenEvent]:
        """Every event that can pass the filters ``job`` and ``user`` (a superset; in id order)."""
        if job:
            return self.by_job.get(job, [])
        if user:
            return self.by_user.get(user, [])
        return self.events

    def after(self, cursor: int, job: str = "", user: str = "") -> list[SeenEvent]:
        """:meth:`candidates` after ``cursor``."""
        events = self.candidates(job, user)
        return events[bisect_right(events, cursor, key=_event_id) :]

    def any_match(self, waiter: Waiter) -> bool:
        return any(waiter.may_match(event) for event in self.after(waiter.cursor, waiter.job, waiter.user))


class Waker:
    """The process's one looker (see the module's docstring). ``looks`` counts its looks at the
    stream, for tests and the benchmark."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._waiters: set[Waiter] = set()
        self._thread: threading.Thread | None = None
        # Every event up to ``_last`` has been seen by a look (None: no look yet), and every one
        # in ``(_floor, _last]`` is in ``_recent``.
        self._last: int | None = None
        self._floor = 0
        self._recent = Recent()
        self._listener = None
        self._stopping = False
        self._notified_at = 0.0  # time.monotonic() of the last NOTIFY received
        self.looks = 0

    # --- the waiters' side ------------------------------------------------------------------

    def wait(self, waiter: Waiter, timeout: float) -> bool:
        """Sleep until an event may match ``waiter`` (True) or ``timeout`` seconds pass (False)."""
        self.add(waiter)
        try:
            return waiter.woken.wait(max(timeout, 0.0))
        finally:
            self.remove(waiter)

    def add(self, waiter: Waiter) -> None:
        with self._lock:
            self._start()
            # Events already looked at after the waiter's cursor: check them now.
            if (
                self._last is not None
                and waiter.cursor < self._last
                and (waiter.cursor < self._floor or self._recent.any_match(waiter))
            ):
                waiter.woken.set()
                return
            self._waiters.add(waiter)
            self._lock.notify_all()

    def remove(self, waiter: Waiter) -> None:
        with self._lock:
            self._waiters.discard(waiter)

    def events_after(self, cursor: int, job: str = "", user: str = "") -> tuple[list[SeenEvent], int] | None:
        """Every event after ``cursor`` that a look has seen and that can pass the filters
        ``job`` and ``user`` (all of that job's, else of that user's, else all), oldest first,
        and the id up to which looks have seen every event; ``None`` when the events kept do not
        reach back to ``cursor`` (or no look has run): then read the stream."""
        with self._lock:
            if self._last is None or cursor < self._floor:
                return None
            if cursor >= self._last:
                return [], self._last
            return self._recent.after(cursor, job, user), self._last

    # --- the looker -------------------------------------------------------------------------

    def _start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._thread = threading.Thread(target=self._run, name="iris-events-waker", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while self._await_waiters():
                try:
                    self._look()
                except DatabaseError:
                    log.warning("the event waker's look failed; trying again in a step", exc_info=True)
                    connection.close()
                    time.sleep(settings.EVENTS_POLL_SECONDS)
                    continue
                self._sleep(settings.EVENTS_POLL_SECONDS)
        finally:
            self._close_listener()
            connection.close()

    def _await_waiters(self) -> bool:
        """Return once someone waits (True), or when stopped (False). After ``IDLE_SECONDS``
        with nobody waiting, close the connections and forget the cursor until someone does."""
        with self._lock:
            if self._waiters or self._stopping:
                return not self._stopping
            self._lock.wait_for(lambda: self._waiters or self._stopping, IDLE_SECONDS)
            if not self._waiters and not self._stopping:
                self._close_listener()
                connection.close()
                self._last = None
                self._recent = Recent()
                self._lock.wait_for(lambda: self._waiters or self._stopping)
            return not self._stopping

    def stop(self) -> None:
        """End the thread (its connections closed); the next waiter starts another. For tests,
        whose database is dropped at the end."""
        with self._lock:
            thread = self._thread
            self._stopping = True
            self._lock.notify_all()
        if thread is not None:
            thread.join(timeout=10)
        with self._lock:
            self._stopping = False
            self._thread = None
            self._last = None
            self._recent = Recent()

    def _look(self) -> None:
        if connection.vendor == "postgresql":
            self._listening()  # before the read below; failing, the steps poll
        self.looks += 1
        if time.monotonic() - self._notified_at >= settings.EVENTS_POLL_SECONDS:
            # Nobody moved events within a step (a move notifies): move them. Otherwise the
            # mover that just notified did, and every process's waker moving on each of its
            # steps would only wake the watchers of busy users more often.
            sequence_events()
        with self._lock:
            if self._last is None:
                # The first look starts from the oldest cursor waiting; a later waiter with an
                # older one is below the floor and is woken to read for itself.
                self._last = self._floor = min((w.cursor for w in self._waiters), default=0)
        # A tick's thousands of events in chunks, each dispatched as it is read; a backlog
        # larger than the events kept wakes everyone instead (each reads its own page).
        for _ in range(LOOK_CHUNKS):
            rows = read_seen(self._last, LOOK_LIMIT)
            if not rows:
                return
            new = Recent(rows)
            with self._lock:
                self._last = rows[-1].id
                self._recent.extend(rows)
                if len(self._recent.events) > 2 * RECENT:
                    # Drop the oldest (now and then, not on every look): the floor rises to them.
                    self._floor = self._recent.events[-RECENT - 1].id
                    self._recent = Recent(self._recent.events[-RECENT:])
                self._wake({w for w in self._waiters if new.any_match(w)})
            if len(rows) < LOOK_LIMIT:
                return
        newest = _newest_id()
        if newest <= self._last:
            return  # the last chunk was full, but the last too
        with self._lock:
            self._last = self._floor = newest
            self._recent = Recent()
            self._wake(set(self._waiters))

    def _wake(self, woken: set[Waiter]) -> None:
        for waiter in woken:
            waiter.woken.set()
        self._waiters -= woken

    def _sleep(self, seconds: float) -> None:
        """Wait ``seconds``, or less when PostgreSQL notifies that events were moved."""
        if connection.vendor != "postgresql":
            time.sleep(seconds)
            return
        try:
            listener = self._listen()  # listening since before the look (_listening)
            deadline = time.monotonic() + seconds
            # In slices of at most a second, so that stop() is not kept waiting a whole step.
            while not self._stopping and (left := deadline - time.monotonic()) > 0:
                if list(listener.notifies(timeout=min(left, 1.0), stop_after=1)):
                    self._notified_at = time.monotonic()
                    return
        except Exception:  # noqa: BLE001 - any failure of the listener falls back to the step
            log.warning("the event waker lost its LISTEN connection; polling until it is back", exc_info=True)
            self._close_listener()
            time.sleep(seconds)

    def _listening(self) -> None:
        """LISTEN before a look reads, so that a move committed after the read is notified to
        the sleep that follows, not missed until the next step. Failing (logged), the steps poll."""
        try:
            self._listen()
        except Exception:  # noqa: BLE001 - the listener's failure falls back to the step
            log.warning("the event waker cannot LISTEN; polling until it can", exc_info=True)
            self._close_listener()

    def _listen(self):
        if self._listener is None or self._listener.closed:
            import psycopg

            params = connection.get_connection_params()
            params.pop("cursor_factory", None)
            params.pop("context", None)
            self._listener = psycopg.connect(**params, autocommit=True)
            self._listener.execute(f"LISTEN {CHANNEL}")
        return self._listener

    def _close_listener(self) -> None:
        if self._listener is not None:
            try:
                self._listener.close()
            except Exception:  # noqa: BLE001
                pass
        self._listener = None


def _event_id(event: SeenEvent) -> int:
    return event.id


def _newest_id() -> int:
    return Event.objects.aggregate(newest=Max("id"))["newest"] or 0


class DatabaseSlots:
    """At most ``IRIS_EVENTS_DB_CONNECTIONS`` threads of this process read the event stream at
    once, each on one of as many database connections the process keeps open: acquiring a slot
    lends the thread a connection from the pool (installed as its ``default`` connection until
    it releases it), and the thread gives it back before it sleeps. So a waiting request holds
    no connection, 200 watchers woken by one tick open no more than this many (PostgreSQL's
    default ``max_connections`` is 100), and a request does not pay for a new connection (a
    PostgreSQL backend started and set up) each time.

    A thread inside a transaction (a caller's; a test's) keeps its own connection: the pool's
    would not see what it sees. Re-entrant per thread: acquiring a slot already held does
    nothing, as does releasing one not held. One thread at a time uses a lent connection (the
    slots guarantee it), so Django's check against sharing it between threads is lifted."""

    def __init__(self, count: int):
        self._semaphore = threading.BoundedSemaphore(max(1, count))
        self._free: list = []
        self._all: list = []
        self._pool_lock = threading.Lock()
        self._held = threading.local()

    def acquire(self) -> None:
        if getattr(self._held, "slot", False):
            return
        self._semaphore.acquire()
        self._held.slot = True
        self._held.own = None
        if connection.in_atomic_block:
            return
        with self._pool_lock:
            if self._free:
                lent = self._free.pop()
            else:
                lent = connections.create_connection(DEFAULT_DB_ALIAS)
                lent.inc_thread_sharing()
                self._all.append(lent)
        self._held.own = connections[DEFAULT_DB_ALIAS]
        connections[DEFAULT_DB_ALIAS] = lent
        lent.close_if_unusable_or_obsolete()  # CONN_MAX_AGE, and a connection left broken

    def release(self) -> None:
        if not getattr(self._held, "slot", False):
            return
        own = self._held.own
        if own is not None:
            lent = connections[DEFAULT_DB_ALIAS]
            connections[DEFAULT_DB_ALIAS] = own
            if lent.in_atomic_block:  # never left so by the stream's reads; do not lend it on
                lent.close()
            with self._pool_lock:
                self._free.append(lent)
        self._held.slot = False
        self._held.own = None
        self._semaphore.release()

    def close(self) -> None:
        """Close the pool's connections (tests: before their database is dropped)."""
        with self._pool_lock:
            for lent in self._all:
                if lent in self._free:
                    lent.close()


_WAKER: Waker | None = None
_SLOTS: DatabaseSlots | None = None
_LOCK = threading.Lock()


def waker() -> Waker:
    """This process's waker (created on first use)."""
    global _WAKER
    with _LOCK:
        if _WAKER is None:
            _WAKER = Waker()
        return _WAKER


def stop_waker() -> None:
    """Stop this process's waker thread, if it runs, and close the slots' connections (tests:
    before their database is dropped)."""
    if _WAKER is not None:
        _WAKER.stop()
    if _SLOTS is not None:
        _SLOTS.close()


def database_slots() -> DatabaseSlots:
    """This process's :class:`DatabaseSlots` (``IRIS_EVENTS_DB_CONNECTIONS`` of them)."""
    global _SLOTS
    with _LOCK:
        if _SLOTS is None:
            _SLOTS = DatabaseSlots(settings.EVENTS_DB_CONNECTIONS)
        return _SLOTS
