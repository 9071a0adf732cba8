"""``GET events/``: the job and budget event stream, resumable, with a bounded long poll."""

from __future__ import annotations

import copy
import threading
from time import monotonic

from django.utils import timezone
from drf_spectacular.drainage import set_override
from drf_spectacular.utils import OpenApiParameter, extend_schema
from knox.crypto import hash_token
from rest_framework.authentication import SessionAuthentication
from rest_framework.response import Response

from scheduler.api.authentication import ApiTokenAuthentication, ApiTokenScheme
from scheduler.api.serializers.events import EventFilterSerializer, EventPageSerializer, event_page_json
from scheduler.api.views.base import IrisView
from scheduler.events.stream import parse_event_query, wait_for_events
from scheduler.events.wake import database_slots

# Seconds a web process takes a token the stream has checked without checking it again. A
# watcher comes back with the same token after every answer (a busy user's twice a second),
# and each check was a statement. Within these seconds a deleted token, or a user made
# inactive, is still taken by the stream (by no other endpoint); expiry is checked every time.
TOKEN_CHECK_SECONDS = 10.0
# Checks remembered at most (all forgotten when full: a bound, not a policy).
TOKEN_CHECKS_KEPT = 10_000


class RepeatTokenAuthentication(ApiTokenAuthentication):
    """The API's token authentication, with a success remembered by this process for
    :data:`TOKEN_CHECK_SECONDS`, keyed by the token's digest (the hash knox stores, of the
    whole token: only its holder can hit it). Each request gets its own copy of the user."""

    _checked: dict[str, tuple[float, object, object]] = {}
    _lock = threading.Lock()

    def authenticate_credentials(self, token: bytes):
        try:
            digest = hash_token(token.decode("utf-8"))
        except (TypeError, ValueError):  # not hex (binascii.Error), not UTF-8: knox's refusal
            return super().authenticate_credentials(token)
        now = monotonic()
        with self._lock:
            checked = self._checked.get(digest)
        if checked is not None:
            at, user, auth_token = checked
            if now - at < TOKEN_CHECK_SECONDS and (auth_token.expiry is None or auth_token.expiry >= timezone.now()):
                return copy.copy(user), auth_token
        user, auth_token = super().authenticate_credentials(token)
        with self._lock:
            if len(self._checked) >= TOKEN_CHECKS_KEPT:
                self._checked.clear()
            self._checked[digest] = (now, user, auth_token)
        return copy.copy(user), auth_token


class RepeatTokenScheme(ApiTokenScheme):
    """The schema's description of :class:`RepeatTokenAuthentication`: the API's token scheme,
    the same ``knoxApiToken`` component (the same header, the same tokens)."""

    target_class = "scheduler.api.views.events.RepeatTokenAuthentication"


set_override(RepeatTokenAuthentication, "suppress_collision_warning", True)


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
