"""The fan-out: new events in the stream become delivery rows, one per (event, channel, user).

It reads the stream by id after a watermark (:class:`~scheduler.models.NotificationCursor`),
off every writer's path (a submission stays five statements; the tick does not wait for it).
Why a watermark misses nothing: event ids are handed out in the order events became readable
(``scheduler.events.sequence``), so once the newest id N is visible every id below N is too. One
run, in one transaction: lock the cursor row, read the newest id, the notified events between
the watermark and it (at most ``batch``), the settings of the users they concern, insert the
deliveries and move the watermark. A run killed before its commit leaves both as they were; a
second run over the same events (two deliverers on SQLite, or a watermark set back by hand)
inserts nothing twice, because a delivery is unique on (event, channel, user).

Who hears of what: an event of a job is its user's (``Event.user``, the job's owner); an uplift
request is every active admin's. A channel is used when the user chose the event's topic for it
and it can be used: email needs an address on the account, a webhook its URL.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Max, Q
from django.utils import timezone

from scheduler.foundation.roles import ADMIN_GROUP
from scheduler.models import Event
from scheduler.notifications import topics as t
from scheduler.notification_models import NotificationCursor, NotificationDelivery, NotificationSettings
from scheduler.notifications.payload import event_body

CURSOR = "events"
# Events read per transaction; a larger backlog takes several.
BATCH = 2000


def fan_out(*, now: datetime | None = None, batch: int = BATCH) -> int:
    """Make the deliveries of every event sequenced since the last run. Returns how many were
    made. Runs its own transactions (never inside another one)."""
    now = now or timezone.now()
    _ensure_cursor()
    made = 0
    while True:
        with transaction.atomic():
            cursor = NotificationCursor.objects.select_for_update().get(name=CURSOR)
            newest = Event.objects.aggregate(newest=Max("id"))["newest"] or 0
            if newest <= cursor.last_event_id:
                return made
            events = list(
                Event.objects.filter(id__gt=cursor.last_event_id, id__lte=newest, kind__in=t.NOTIFIED_KINDS).order_by(
                    "id"
                )[:batch]
            )
            rows = deliveries_for(events, now)
            NotificationDelivery.objects.bulk_create(rows, ignore_conflicts=True)
            full = len(events) == batch
            NotificationCursor.objects.filter(name=CURSOR).update(last_event_id=events[-1].id if full else newest)
        made += len(rows)
        if not full:
            return made


def _ensure_cursor() -> None:
    if NotificationCursor.objects.filter(name=CURSOR).exists():
        return
    try:
        with transaction.atomic():
            NotificationCursor.objects.create(name=CURSOR, last_event_id=0)
    except IntegrityError:
        pass  # another run made it first


class _Recipient:
    __slots__ = ("username", "email", "email_topics", "webhook_topics", "webhook_url")

    def __init__(self, username, email, email_topics, webhook_topics, webhook_url):
        self.username, self.email = username, email
        self.email_topics, self.webhook_topics, self.webhook_url = email_topics, webhook_topics, webhook_url

    def channels(self, topic: str) -> Iterable[str]:
        if topic in self.email_topics and self.email:
            yield t.EMAIL
        if topic in self.webhook_topics and self.webhook_url:
            yield t.WEBHOOK


def deliveries_for(events: list[Event], now: datetime) -> list[NotificationDelivery]:
    """The delivery rows ``events`` make (unsaved); two queries whatever their number."""
    topics = [(e, t.topic_of(e.kind, e.data or {})) for e in events]
    owners = {e.user for e, topic in topics if topic in t.JOB_TOPICS and e.user}
    recipients = _owners(owners)
    admins = _admins() if any(topic == t.UPLIFT_REQUESTED for _, topic in topics) else []
    rows = []
    for event, topic in topics:
        if topic is None:
            continue
        who = admins if topic == t.UPLIFT_REQUESTED else [r for r in (recipients.get(event.user),) if r is not None]
        body = None
        for recipient in who:
            for channel in recipient.channels(topic):
                body = body or event_body(event)
                rows.append(
                    NotificationDelivery(
                        event_id=event.id,
                        channel=channel,
                        user=recipient.username,
                        topic=topic,
                        kind=event.kind,
                        job=event.job,
                        body=body,
                        next_try_at=now,
                        created_at=now,
                    )
                )
    return rows


def _owners(usernames: set[str]) -> dict[str, _Recipient]:
    """The job owners' chosen settings (a user without a row is told of no job event)."""
    if not usernames:
        return {}
    rows = NotificationSettings.objects.filter(user__username__in=usernames, user__is_active=True).select_related(
        "user"
    )
    return {
        row.user.username: _Recipient(
            row.user.username, row.user.email, row.email_topics, row.webhook_topics, row.webhook_url
        )
        for row in rows
    }


def _admins() -> list[_Recipient]:
    """Every active admin with their settings, or an admin's defaults for those without."""
    users = (
        get_user_model()
        .objects.filter(Q(is_superuser=True) | Q(groups__name=ADMIN_GROUP), is_active=True)
        .distinct()
        .select_related("notification_settings")
        .order_by("username")
    )
    found = []
    for user in users:
        row = getattr(user, "notification_settings", None)
        if row is None:
            found.append(_Recipient(user.username, user.email, t.ADMIN_DEFAULT_EMAIL_TOPICS, (), ""))
        else:
            found.append(_Recipient(user.username, user.email, row.email_topics, row.webhook_topics, row.webhook_url))
    return found
