"""The notification rows: a user's settings, the delivery outbox, and the fan-out's watermark.

They live beside ``scheduler/models.py`` (which re-exports them, so Django and the
migrations find them there) to keep that module under the layout test's 700 lines. Only Django
is imported: ``scheduler.models`` imports this module.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class NotificationSettings(models.Model):
    """What one user wants to be told of, per channel (``scheduler.notifications.topics``).

    A user without a row has the defaults of their role (admins: uplift requests by email;
    researchers: nothing). The webhook secret is kept as given, since signing needs it; the API
    and the console never show it back."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_settings"
    )
    email_topics = models.JSONField(default=list, blank=True)
    webhook_topics = models.JSONField(default=list, blank=True)
    webhook_url = models.CharField(max_length=2000, blank=True, default="")
    webhook_secret = models.CharField(max_length=200, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"notification settings of {self.user_id}"


class NotificationDelivery(models.Model):
    """One notification to send: an event, to one user, by one channel; unique on the three, so a
    fan-out that runs twice over the same events writes nothing twice.

    ``next_try_at`` is when the row is next due: for ``pending`` and ``retrying`` the next try,
    for ``sending`` the end of its claim (a deliverer killed mid-send leaves its row ``sending``;
    past that time it is claimed again). ``body`` is the exact JSON sent (the webhook signs these
    bytes), kept here so retention pruning the event does not change a retry."""

    class State(models.TextChoices):
        PENDING = "pending"
        SENDING = "sending"
        RETRYING = "retrying"
        SENT = "sent"
        FAILED = "failed"

    event_id = models.BigIntegerField()
    channel = models.CharField(max_length=16)
    user = models.CharField(max_length=150)
    topic = models.CharField(max_length=32)
    kind = models.CharField(max_length=32)
    job = models.CharField(max_length=500, blank=True, default="")
    body = models.TextField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    tries = models.IntegerField(default=0)
    next_try_at = models.DateTimeField()
    claim = models.CharField(max_length=32, blank=True, default="")
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["event_id", "channel", "user"], name="scheduler_delivery_once"),
        ]
        indexes = [
            models.Index(fields=["state", "next_try_at"], name="scheduler_delivery_due"),
            models.Index(fields=["user", "id"], name="scheduler_delivery_user"),
        ]

    def __str__(self) -> str:
        return f"{self.channel} of event {self.event_id} to {self.user}: {self.state}"


class NotificationCursor(models.Model):
    """How far the fan-out has read the event stream: every event with an id at most
    ``last_event_id`` has had its deliveries made. One row (``name="events"``)."""

    name = models.CharField(primary_key=True, max_length=32)
    last_event_id = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name} at {self.last_event_id}"
