"""``GET events/``: the job and budget event stream, resumable, as a bounded long poll or as
server-sent events (``Accept: text/event-stream``)."""

from __future__ import annotations

from dataclasses import replace

from django.conf import settings
from django.db import connection
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.authentication import SessionAuthentication
from rest_framework.response import Response

from scheduler.api.authentication import RepeatTokenAuthentication
from scheduler.api.serializers.events import (
    HEARTBEAT_FRAME,
    EventFilterSerializer,
    EventPageSerializer,
    current_zone,
    event_frames,
    event_page_json,
    stream_start_frame,
)
from scheduler.api.views.base import IrisView
from scheduler.events.sequence import sequence_events
from scheduler.events.stream import follow_events, newest_event_id, parse_event_query, wait_for_events
from scheduler.events.wake import database_slots

EVENT_STREAM = "text/event-stream"


def wants_stream(request) -> bool:
    """Whether the client asks for server-sent events (its ``Accept`` names ``text/event-stream``)."""
    return EVENT_STREAM in request.headers.get("Accept", "")


class EventsView(IrisView):
    """A long poll waits holding a web thread but no database connection: the request holds
    one of its process's database slots from authentication on, and gives it back (with its
    pooled connection) while it waits and when it ends (``scheduler/events/wake.py``).

    A stream is one request for many pages: authenticated, its query checked and "now" fixed
    as a long poll's are (an error is the same JSON error), then its pages written as they
    arrive by :func:`~scheduler.events.stream.follow_events`, each read under a slot of its
    own. Every page after the first costs its frames, not a request (the token, DRF, Django's
    middleware); a watcher stays connected for ``IRIS_EVENTS_STREAM_SECONDS``."""

    authentication_classes = [RepeatTokenAuthentication, SessionAuthentication]
    error_statuses = ("400", "401")

    def dispatch(self, request, *args, **kwargs):
        # Given back however the request ends (an answer, an error, an exception raised on).
        # A stream's pages are read after this, each under a slot of its own.
        try:
            return super().dispatch(request, *args, **kwargs)
        finally:
            database_slots().release()

    def initial(self, request, *args, **kwargs):
        database_slots().acquire()
        super().initial(request, *args, **kwargs)

    def perform_content_negotiation(self, request, force=False):
        # A stream's answer is not a DRF renderer's; its errors are JSON, as everyone's.
        return super().perform_content_negotiation(request, force=force or wants_stream(request))

    @extend_schema(
        operation_id="events_list",
        summary="Job and budget events after an id, oldest first; waits up to `wait` seconds for one, "
        "or streams them as server-sent events (Accept: text/event-stream)",
        parameters=[
            EventFilterSerializer,
            OpenApiParameter("Last-Event-ID", str, OpenApiParameter.HEADER, description="as since="),
        ],
        responses={
            (200, "application/json"): EventPageSerializer,
            (200, EVENT_STREAM): OpenApiTypes.STR,
        },
        description="A page of events (application/json), or with `Accept: text/event-stream` a stream of "
        "server-sent events: a first frame with the id it starts after, then one frame per event as it "
        "arrives (`id:` its id, `data:` its JSON as in a page), a comment line as a heartbeat; it ends "
        "after IRIS_EVENTS_STREAM_SECONDS (resume with Last-Event-ID). Errors are JSON either way.",
        tags=["events"],
    )
    def get(self, request):
        query = parse_event_query(request.query_params, request.headers.get("Last-Event-ID"))
        if wants_stream(request):
            return self.event_stream(request, query)
        page = wait_for_events(request.user, query)
        return Response(event_page_json(page))

    def event_stream(self, request, query) -> StreamingHttpResponse:
        if query.since is None:
            sequence_events()  # "now" after everything committed, as a read that does not wait
            query = replace(query, since=newest_event_id())
        actor, zone = request.user, current_zone()
        seconds, heartbeat = settings.EVENTS_STREAM_SECONDS, settings.EVENTS_HEARTBEAT_SECONDS

        def frames():
            # The thread's own connection, if a middleware or an earlier request opened it, is not
            # kept for the stream's life: its pages read on the slots' pooled connections.
            if not connection.in_atomic_block:
                connection.close()
            yield stream_start_frame(query.since, retry_seconds=1)
            for page in follow_events(actor, query, seconds=seconds, heartbeat=heartbeat):
                yield HEARTBEAT_FRAME if page is None else event_frames(page, zone)

        response = StreamingHttpResponse(frames(), content_type=EVENT_STREAM)
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx: pass each frame on as it is written
        return response
