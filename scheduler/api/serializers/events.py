"""The event stream (``GET events/``): one event, the page of events, the query string."""

from __future__ import annotations

import json

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduler.events.kinds import ALL_KINDS


class EventSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=ALL_KINDS)
    at = serializers.DateTimeField(source="created_at")
    user = serializers.CharField()
    job = serializers.SerializerMethodField()
    task = serializers.SerializerMethodField()
    attempt = serializers.IntegerField(allow_null=True)
    tick = serializers.IntegerField(allow_null=True)
    data = serializers.DictField()

    @extend_schema_field({"type": "string", "nullable": True})
    def get_job(self, event) -> str | None:
        return event.job or None

    @extend_schema_field({"type": "string", "nullable": True})
    def get_task(self, event) -> str | None:
        return f"{event.job}/{event.task_index}" if event.task_index is not None else None


class EventPageSerializer(serializers.Serializer):
    """The page's schema. Answers are written by :func:`event_page_json`, held equal to this by
    a test."""

    events = EventSerializer(many=True)
    next = serializers.IntegerField(help_text="resume with since=this (or Last-Event-ID: this)")
    more = serializers.BooleanField(help_text="more events matched than limit: read again at once")


_AT = serializers.DateTimeField()


def _at(value, zone) -> str:
    """``_AT.to_representation(value)`` (ISO 8601 in the current time zone, ``+00:00`` written
    ``Z``) with the current time zone ``zone`` looked up by the caller once per page: looked up
    per event (Django's thread-local, through asgiref) it was about a tenth of a woken watcher's
    CPU."""
    if zone is None or timezone.is_naive(value):
        return _AT.to_representation(value)
    text = value.astimezone(zone).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def current_zone():
    """The time zone DRF's ``DateTimeField`` writes in (None without ``USE_TZ``)."""
    return timezone.get_current_timezone() if settings.USE_TZ else None


def event_json(event, zone=current_zone) -> dict:
    """:class:`EventSerializer`'s answer for ``event`` as a plain dict, built once per event
    object and kept on it: the events a web process's waker read are shared by every watcher
    it wakes, so 200 watchers woken by one tick cost one dict per event, not 200 (DRF's
    serializer was about two fifths of a long poll's CPU). ``zone``: the current time zone, or
    the function that gives it."""
    if callable(zone):
        zone = zone()
    # Kept with the zone it was written in: a request in another zone builds its own.
    cached_zone, cached = getattr(event, "_iris_json", None) or (None, None)
    if cached is None or cached_zone != zone:
        cached = {
            "id": event.id,
            "kind": event.kind,
            "at": _at(event.created_at, zone),
            "user": event.user,
            "job": event.job or None,
            "task": f"{event.job}/{event.task_index}" if event.task_index is not None else None,
            "attempt": event.attempt,
            "tick": event.tick,
            "data": dict(event.data),
        }
        event._iris_json = (zone, cached)
    return cached


def event_page_json(page) -> dict:
    """:class:`EventPageSerializer`'s answer for ``page`` (an ``EventPage``)."""
    zone = current_zone()
    return {"events": [event_json(event, zone) for event in page.events], "next": page.next, "more": page.more}


# A server-sent event stream's frames (``Accept: text/event-stream``; the WHATWG HTML standard's
# "Server-sent events"). Each event is one frame, ``id: <id>`` and ``data: <the event's JSON, as
# in a page>``, so an ``EventSource`` resumes after the last one it got (``Last-Event-ID``). The
# default event type ("message") for every kind: the kind is in the data.
HEARTBEAT_FRAME = ": keep-alive\n\n"


def stream_start_frame(since: int, retry_seconds: float) -> str:
    """The first frame: how long a client waits before it reconnects, and the id the stream
    starts after (a frame with an id and no data sets ``Last-Event-ID`` and is no event, so a
    stream "from now" that ends before an event resumes from where it began)."""
    return f"retry: {int(retry_seconds * 1000)}\nid: {since}\n\n"


def event_frame(event, zone) -> str:
    """One event's frame, written once per event object and zone and kept on it, as
    :func:`event_json` keeps its dict: every stream the waker wakes with the same event writes
    the same text."""
    cached_zone, frame = getattr(event, "_iris_frame", None) or (None, None)
    if frame is None or cached_zone != zone:
        data = json.dumps(event_json(event, zone), ensure_ascii=False, separators=(",", ":"))
        frame = f"id: {event.id}\ndata: {data}\n\n"
        event._iris_frame = (zone, frame)
    return frame


def event_frames(page, zone) -> str:
    """A page's events as frames, in one string (written out in one piece); ``zone``: the
    request's current time zone (:func:`current_zone`, looked up while the request is served:
    a stream is written after its view has returned)."""
    return "".join(event_frame(event, zone) for event in page.events)


class EventFilterSerializer(serializers.Serializer):
    """The query string, for the schema (``scheduler.events.stream.parse_event_query`` checks it)."""

    since = serializers.CharField(
        required=False, help_text="an event id: events after it (default 0, the oldest kept); 'now': only new ones"
    )
    job = serializers.CharField(required=False, help_text="a job id: its events and its tasks'")
    user = serializers.CharField(required=False, help_text="whose events (a job's owner, a budget's user)")
    kind = serializers.CharField(required=False, help_text="one kind or several, comma-separated")
    wait = serializers.IntegerField(
        required=False, help_text="seconds to wait for an event when none is there yet (long poll; bounded)"
    )
    limit = serializers.IntegerField(required=False, help_text="at most this many events (default 100, at most 1,000)")
