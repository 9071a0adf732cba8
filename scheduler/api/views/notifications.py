"""``me/notifications/``: your notification settings and recent notifications."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from scheduler.api.serializers.notifications import (
    NotificationSettingsSerializer,
    NotificationSettingsUpdateSerializer,
)
from scheduler.api.views.base import IrisView
from scheduler.notifications.preferences import preferences_of, recent_deliveries, update_preferences


def _answer(user, prefs) -> Response:
    data = {**prefs.__dict__, "deliveries": recent_deliveries(user)}
    return Response(NotificationSettingsSerializer(data).data)


class NotificationSettingsView(IrisView):
    error_statuses = ("400", "401")

    @extend_schema(
        operation_id="me_notifications_retrieve",
        summary="What you are told of, by email and webhook, and your newest notifications with their state",
        responses={200: NotificationSettingsSerializer},
        tags=["auth"],
    )
    def get(self, request):
        return _answer(request.user, preferences_of(request.user))

    @extend_schema(
        operation_id="me_notifications_update",
        summary="Change what you are told of (fields left out keep their value)",
        request=NotificationSettingsUpdateSerializer,
        responses={200: NotificationSettingsSerializer},
        tags=["auth"],
    )
    def put(self, request):
        return _answer(request.user, update_preferences(request.user, self.body()))
