"""Notification emails, through Django's email framework (``EMAIL_BACKEND``: files under
``IRIS_DATA_DIR/mail`` by default, SMTP with ``IRIS_EMAIL_BACKEND=smtp``; README, "Configuration").

One email per delivery, plain text. Its ``Message-ID`` is fixed by the event and the user, so a
mail client shows a retried email (one sent again after a crash before it was marked sent) once.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from django.conf import settings
from django.core.mail import EmailMessage

from scheduler.notifications import topics as t


def subject_and_text(topic: str, event: dict[str, Any]) -> tuple[str, str]:
    """What the email says about ``event`` (its JSON, as sent to webhooks)."""
    data = event.get("data") or {}
    job, task = event.get("job") or "", event.get("task") or event.get("job") or ""
    if topic == t.STARTED:
        line = f"{task} started on {data.get('worker')} (attempt {event.get('attempt')}, {data.get('band')})"
    elif topic == t.PREEMPTED:
        line = (
            f"{task} was preempted by {data.get('by')} ({data.get('by_user')}, {data.get('by_band')}); it is requeued"
        )
    elif topic == t.DOWNGRADED:
        line = f"{job} now queues as {str(data.get('to_band', '')).upper()} (was {str(data.get('from_band', '')).upper()}): its user is over the budget limit"
    elif topic in (t.FINISHED, t.FAILED):
        line = f"{job} finished: {data.get('outcome')}"
    elif topic == t.UPLIFT_REQUESTED:
        wants = []
        if data.get("budget_limit") is not None:
            wants.append(f"limit {data['budget_limit']:,}")
        if data.get("max_band"):
            wants.append(f"max band {str(data['max_band']).upper()}")
        hours = (data.get("duration_seconds") or 0) / 3600
        line = (
            f"{event.get('user')} requests uplift {data.get('uplift')}: {', '.join(wants) or 'a grant'} for {hours:g} h"
        )
    else:
        line = f"{event.get('kind')} {job or event.get('user')}"
    console = settings.CONSOLE_URL.rstrip("/")
    where = f"{console}/jobs{job}/" if job else f"{console}/manage/uplifts/"
    text = (
        f"{line}.\n\n{where}\n\n"
        f"Event {event.get('id')} at {event.get('at')}:\n{orjson.dumps(event, option=orjson.OPT_INDENT_2).decode()}\n\n"
        f"What you are told of, and how: {console}/settings/notifications/\n"
    )
    return f"[Iris] {line}", text


def send_email(*, address: str, user: str, event_id: int, topic: str, body: str) -> None:
    """Send one notification email; raises what the backend raises when it cannot."""
    subject, text = subject_and_text(topic, orjson.loads(body))
    EmailMessage(
        subject,
        text,
        settings.DEFAULT_FROM_EMAIL,
        [address],
        headers={"Message-ID": message_id(event_id, user), "X-Iris-Event-Id": str(event_id)},
    ).send()


def message_id(event_id: int, user: str) -> str:
    """The same for every try of one delivery (a user name may hold characters an address may not)."""
    return f"<event-{event_id}.{hashlib.sha256(user.encode()).hexdigest()[:16]}@iris-notifications>"
