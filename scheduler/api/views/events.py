"""``GET events/``: the job and budget event stream, resumable, with a bounded long poll."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.authentication import SessionAuthentication
from rest_framework.response import Response

from scheduler.api.authentication import RepeatTokenAuthentication
from scheduler.api.serializers.events import EventFilterSerializer, EventPageSerializer, event_page_json
from scheduler.api.views.base import IrisView
from scheduler.events.stream import parse_event_query, wait_for_events
from scheduler.events.wake import database_slots


class EventsView(IrisView):
    """A long poll waits holding a web thread but no database connection: the request holds
    one of its process's database slots from authentication on, and gives it back (with its
    pooled connection) while it waits and when it ends (``scheduler/events/wake.py``)."""

    authentication_classes = [RepeatTokenAuthentication, SessionAuthentication]
    error_statuses = ("400", "401")

    def dispatch(self, request, *args, **kwargs):
        # Given back however the request ends (an answer, an error, an exception raised on).
        try:
            return super().dispatch(request, *args, **kwargs)
        finally:
            database_slots().release()

    def initial(self, request, *args, **kwargs):
        database_slots().acquire()
        super().initial(request, *args, **kwargs)

    @extend_schema(
        operation_id="events_list",
        summary="Job and budget events after an id, oldest first; waits up to `wait` seconds for one",
        parameters=[
            EventFilterSerializer,
            OpenApiParameter("Last-Event-ID", str, OpenApiParameter.HEADER, description="as since="),
        ],
        responses={200: EventPageSerializer},
        tags=["events"],
    )
    def get(self, request):
        query = parse_event_query(request.query_params, request.headers.get("Last-Event-ID"))
        page = wait_for_events(request.user, query)
        return Response(event_page_json(page))
