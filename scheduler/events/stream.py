"""Reading the event stream: ``GET /api/v1/events/`` and ``iris job watch|wait``.

A read returns the events after ``since`` (an event id: the request's ``since``, else its
``Last-Event-ID`` header) in id order, filtered by job, user and kind, at most ``limit`` of
them. Each read is its own short statements in autocommit, and first moves what has committed
into the stream (:func:`scheduler.events.sequence.sequence_events`).

With ``wait`` seconds, a read that finds none is a long poll: it gives back its database
connection and sleeps until the process's waker (:mod:`scheduler.events.wake`: one look per
process, woken on PostgreSQL by the sequencer's ``NOTIFY``) sees an event its filters match,
then reads again; or until ``wait`` runs out. A read inside a transaction (a caller's; a
test's) cannot give its connection back, and the waker's connection would not see what it
sees: it looks again itself every ``IRIS_EVENTS_POLL_SECONDS`` instead.

A server-sent event stream (``Accept: text/event-stream``) is :func:`follow_events`: one
request that long-polls again and again, for ``IRIS_EVENTS_STREAM_SECONDS``, each wait between
pages holding no database connection, as a long poll's does.

Who sees what (the job pages' rule, ``scheduler.foundation.access``): every signed-in user sees
every job's events, as every job page shows every job; budget events (uplifts, a limit
crossed) are their user's own, as ``GET uplifts/`` lists them: researchers see their own,
operators and admins everyone's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from django.conf import settings
from django.db import connection
from django.db.models import Max, Q, QuerySet

from scheduler.events.kinds import ALL_KINDS
from scheduler.events.sequence import sequence_events
from scheduler.events.wake import SeenEvent, Waiter, database_slots, waker
from scheduler.foundation import roles
from scheduler.foundation.access import require_authenticated
from scheduler.foundation.errors import InvalidArgument
from scheduler.foundation.inputs import MAX_INT64, parse_int, parse_segment, parse_text, parse_user_id
from scheduler.models import MAX_ID_LENGTH, Event

# Events one read returns at most (and by default); ``next`` resumes after the last one.
MAX_LIMIT = 1000
DEFAULT_LIMIT = 100


@dataclass(frozen=True)
class EventQuery:
    """A parsed read: ``since`` is the id after which events are wanted (``None``: from now)."""

    since: int | None = 0
    job: str = ""
    user: str = ""
    kinds: tuple[str, ...] = ()
    wait: float = 0.0
    limit: int = DEFAULT_LIMIT


@dataclass(frozen=True)
class EventPage:
    events: list[Event | SeenEvent]  # read here, or by the waker (the same fields, same names)
    next: int  # the id to resume after: the last event's, or ``since`` when there was none
    more: bool  # more events matched than ``limit``: read again at once
    # Every event up to this id that this read could return is in ``events`` (the newest event
    # when the read began; the last returned when there were more): where a wait starts.
    seen: int = 0


def parse_event_query(params, last_event_id: str | None = None) -> EventQuery:
    """The query string (and the ``Last-Event-ID`` header) as an :class:`EventQuery`; every bad
    value is ``INVALID_ARGUMENT`` naming its field."""
    raw_since = params.get("since")
    if raw_since in (None, "") and last_event_id not in (None, ""):
        raw_since, since_field = last_event_id, "Last-Event-ID"
    else:
        since_field = "since"
    if isinstance(raw_since, str) and raw_since.strip() == "now":
        since = None
    else:
        since = parse_int(raw_since, since_field, minimum=0, maximum=MAX_INT64, default=0)
    job = ""
    if params.get("job") not in (None, ""):
        text = parse_text(params.get("job"), "job", max_length=MAX_ID_LENGTH)
        segments = text.strip("/").split("/")
        for segment in segments:
            parse_segment(segment, "job")
        if len(segments) < 2:
            raise InvalidArgument("a job id has the form /<user>/<name>[/<child>...]", field="job")
        job = "/" + "/".join(segments)
    user = parse_user_id(params.get("user"), "user") if params.get("user") not in (None, "") else ""
    kinds: tuple[str, ...] = ()
    if params.get("kind") not in (None, ""):
        kinds = tuple(k.strip() for k in parse_text(params.get("kind"), "kind").split(",") if k.strip())
        unknown = [k for k in kinds if k not in ALL_KINDS]
        if unknown:
            raise InvalidArgument(
                f"unknown event kind {unknown[0]!r}; the kinds are {', '.join(ALL_KINDS)}", field="kind"
            )
    max_wait = settings.EVENTS_MAX_WAIT_SECONDS
    wait = parse_int(params.get("wait"), "wait", minimum=0, maximum=int(max_wait), default=0, unit="seconds")
    limit = parse_int(params.get("limit"), "limit", minimum=1, maximum=MAX_LIMIT, default=DEFAULT_LIMIT)
    return EventQuery(since=since, job=job, user=user, kinds=kinds, wait=float(wait), limit=limit)


def visible_events(actor) -> QuerySet[Event]:
    """The events ``actor`` may read (:func:`matches` says the same of one event)."""
    require_authenticated(actor)
    events = Event.objects.all()
    if not roles.is_operator(actor):
        events = events.filter(~Q(job="") | Q(user=actor.username))
    return events


def matches(actor, query: EventQuery, event: Event | SeenEvent) -> bool:
    """Whether :func:`read_events` would return ``event`` to ``actor`` for ``query`` (its
    visibility and filters, in Python: for pages built from the waker's events; a test holds
    the two equal)."""
    return (
        (event.job != "" or event.user == actor.username or roles.is_operator(actor))
        and (not query.job or event.job == query.job)
        and (not query.user or event.user == query.user)
        and (not query.kinds or event.kind in query.kinds)
    )


def page_from(actor, query: EventQuery, since: int, events: list[Event | SeenEvent], seen: int) -> EventPage:
    """The page :func:`read_events` would read after ``since``, from ``events``: every event
    after ``since`` up to ``seen``, oldest first."""
    rows = [event for event in events if event.id > since and matches(actor, query, event)]
    more = len(rows) > query.limit
    rows = rows[: query.limit]
    return EventPage(
        events=rows,
        next=rows[-1].id if rows else since,
        more=more,
        seen=rows[-1].id if more else max(seen, since),
    )


def newest_event_id() -> int:
    """The id of the newest event in the stream (0 if none): where a read "from now" starts."""
    return Event.objects.aggregate(newest=Max("id"))["newest"] or 0


def read_events(actor, query: EventQuery, *, sequence: bool = True) -> EventPage:
    """One look: move what committed into the stream (unless ``sequence`` is false), then the
    events after ``query.since``."""
    if sequence:
        sequence_events()
    newest = newest_event_id()
    since = newest if query.since is None else query.since
    events = visible_events(actor).filter(id__gt=since, id__lte=newest)
    if query.job:
        events = events.filter(job=query.job)
    if query.user:
        events = events.filter(user=query.user)
    if query.kinds:
        events = events.filter(kind__in=query.kinds)
    rows = list(events.order_by("id")[: query.limit + 1])
    more = len(rows) > query.limit
    rows = rows[: query.limit]
    seen = rows[-1].id if more else max(newest, since)
    return EventPage(events=rows, next=rows[-1].id if rows else since, more=more, seen=seen)


def wait_for_events(
    actor,
    query: EventQuery,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> EventPage:
    """:func:`read_events`, and while it finds nothing and ``query.wait`` has not passed, wait
    for the waker (or, inside a transaction, ``sleep`` a step) and read again. A read "from
    now" fixes "now" at the first read. Holds one of the process's database slots while it
    reads, none while it waits (:class:`~scheduler.events.wake.DatabaseSlots`).

    A long poll outside a transaction leaves the moving of staged events to the waker, whose
    look moves what has committed every step (and is woken by any other move), and reads its
    pages from the events the waker has seen when they reach back to its ``since``
    (:func:`page_from`): a watcher resuming from its last page, woken by a tick, queries
    nothing but its token. A read that does not wait moves and reads for itself."""
    deadline = clock() + query.wait
    slots = database_slots()
    slots.acquire()
    waiting = query.wait > 0 and not connection.in_atomic_block
    try:
        page = _page_seen(actor, query) if waiting and query.since is not None else None
        if page is None:
            page = read_events(actor, query, sequence=not waiting)
        query = EventQuery(**{**query.__dict__, "since": page.next})
        seen = page.seen
        while not page.events and clock() < deadline:
            if not waiting:
                sleep(min(settings.EVENTS_POLL_SECONDS, max(deadline - clock(), 0.0)))
                page = read_events(actor, query)
            else:
                slots.release()
                woken = waker().wait(
                    Waiter(seen, job=query.job, user=query.user, kinds=query.kinds), deadline - clock()
                )
                slots.acquire()
                if not woken:
                    break
                page = _page_seen(actor, query) or read_events(actor, query, sequence=False)
            seen = max(seen, page.seen)
        return page
    finally:
        slots.release()


def follow_events(
    actor,
    query: EventQuery,
    *,
    seconds: float,
    heartbeat: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[EventPage | None]:
    """The pages of events after ``query.since`` (an id: the caller fixes "now") as they arrive,
    each with at least one event, oldest first, each resuming after the last; ``None`` after
    ``heartbeat`` seconds without one; for ``seconds``, then the end. Each page is
    :func:`wait_for_events` (``query.wait`` is not used): the same filters, visibility and
    order, a database slot held while it reads, none while it waits or while the caller
    writes the page out."""
    end = clock() + seconds
    since = query.since
    while (left := end - clock()) > 0:
        page = wait_for_events(actor, replace(query, since=since, wait=min(heartbeat, left)), sleep=sleep, clock=clock)
        since = page.next
        yield page if page.events else None


def _page_seen(actor, query: EventQuery) -> EventPage | None:
    """The page after ``query.since`` from the events the waker has seen, or ``None`` when they
    do not reach back that far."""
    seen = waker().events_after(query.since, job=query.job, user=query.user)
    if seen is None:
        return None
    events, last = seen
    return page_from(actor, query, query.since, events, last)
