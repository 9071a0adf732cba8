"""Your notification settings (``me/notifications/``): what you are told of, by which channel,
and what became of the recent notifications. The body is checked by
``scheduler.notifications.preferences.update_preferences`` (one set of rules with the console)."""

from __future__ import annotations

from rest_framework import serializers

from scheduler.notification_models import NotificationDelivery
from scheduler.notifications.topics import ALL_TOPICS, CHANNELS


def topic() -> serializers.ChoiceField:
    return serializers.ChoiceField(choices=ALL_TOPICS)


class DeliverySerializer(serializers.Serializer):
    event = serializers.IntegerField(source="event_id", help_text="the event's id (GET events/; the Idempotency-Key)")
    kind = serializers.CharField(help_text="the event's kind")
    topic = serializers.ChoiceField(choices=ALL_TOPICS)
    job = serializers.SerializerMethodField()
    channel = serializers.ChoiceField(choices=CHANNELS)
    state = serializers.ChoiceField(
        choices=NotificationDelivery.State.values,
        help_text="pending, sending, sent, retrying (a try failed; next_try_at says when again) or failed (gave up)",
    )
    tries = serializers.IntegerField()
    next_try_at = serializers.DateTimeField(allow_null=True, help_text="when a pending or retrying one is tried")
    sent_at = serializers.DateTimeField(allow_null=True)
    last_error = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()

    def get_job(self, row) -> str | None:
        return row.job or None

    def to_representation(self, row):
        data = super().to_representation(row)
        if row.state in (NotificationDelivery.State.SENT, NotificationDelivery.State.FAILED):
            data["next_try_at"] = None
        return data


class NotificationSettingsSerializer(serializers.Serializer):
    user = serializers.CharField()
    email = serializers.CharField(allow_blank=True, help_text="where email goes (the account's; empty: none is sent)")
    choices = serializers.ListField(child=topic(), help_text="the events you may choose")
    email_events = serializers.ListField(child=topic())
    webhook_events = serializers.ListField(child=topic())
    webhook_url = serializers.CharField(allow_blank=True)
    webhook_secret_set = serializers.BooleanField(help_text="a secret is kept (it is never shown back)")
    is_default = serializers.BooleanField(help_text="nothing chosen yet: your role's defaults")
    deliveries = DeliverySerializer(many=True, help_text="your newest notifications, newest first")


class NotificationSettingsUpdateSerializer(serializers.Serializer):
    """The body of ``PUT me/notifications/``: every field optional; one left out keeps its value."""

    email_events = serializers.ListField(child=topic(), required=False)
    webhook_events = serializers.ListField(child=topic(), required=False, help_text="needs a webhook_url")
    webhook_url = serializers.CharField(
        required=False, allow_blank=True, help_text="http(s) URL the events are POSTed to; empty removes the webhook"
    )
    webhook_secret = serializers.CharField(
        required=False,
        write_only=True,
        help_text="16 to 200 characters, the key of each request's X-Iris-Signature; required with a first webhook_url",
    )
