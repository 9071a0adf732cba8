"""Delivering the outbox: claim due rows, send each, mark it sent only after the send succeeded.

The guarantee is **at least once, with a stable idempotency key** (the event id; an email's
``Message-ID``), not exactly once. A deliverer claims rows in a short transaction (``SELECT ...
FOR UPDATE SKIP LOCKED`` on PostgreSQL, so two deliverers never claim one row; SQLite's writers
serialise at BEGIN) by moving them to ``sending`` with a claim token and a claim deadline, commits,
sends with no transaction open, then marks each row sent (after a 2xx, or the mail backend
taking the message) or retrying (with exponential backoff) in a statement that matches its claim
token, so a deliverer that outlived its claim cannot overwrite the next one's outcome. A
deliverer killed (a Celery worker SIGKILLed) after claiming leaves the row ``sending``; once
the claim deadline passes, the next run claims and sends it again. If the kill came after the
receiver got the request but before the row was marked, the receiver gets it twice, with the
same ``Idempotency-Key``: nothing is lost, and a receiver that remembers keys does its work once.
Exactly once would need the receiver's answer and our mark to commit together, which no HTTP
receiver or SMTP server offers.
"""

from __future__ import annotations

import logging
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from scheduler.events.sequence import sequence_events
from scheduler.notifications import topics as t
from scheduler.notifications.fanout import fan_out
from scheduler.notifications.email import send_email
from scheduler.notification_models import NotificationDelivery
from scheduler.notifications.webhook import WebhookFailed, post_event

log = logging.getLogger(__name__)

State = NotificationDelivery.State
# The states a row can be claimed in (``sending``: its claim ran out, its deliverer died).
OPEN = (State.PENDING, State.RETRYING, State.SENDING)
# Rows one claim takes, per send thread: a claim's rows are sent in about this many rounds.
ROUNDS_PER_CLAIM = 4
# The longest wait between tries, whatever the doubling says (seconds).
MAX_BACKOFF_SECONDS = 3600
# At most this much of an error is kept on the row (shown on the settings page).
ERROR_CHARS = 500


@dataclass(frozen=True)
class Delivered:
    sent: int = 0
    retrying: int = 0
    failed: int = 0


def claim_batch() -> int:
    """Rows one claim takes: ``ROUNDS_PER_CLAIM`` per send thread."""
    return ROUNDS_PER_CLAIM * settings.NOTIFY_CONCURRENCY


def claim_seconds() -> float:
    """How long a claim holds its rows: every round of the claim timing out, and room to mark
    them. A row still unsent past this (an SMTP exchange slower than its per-step timeout) may
    be claimed and sent again by another deliverer: a repeat with the same key, never a loss."""
    return max(30.0, (ROUNDS_PER_CLAIM + 2) * settings.NOTIFY_WEBHOOK_TIMEOUT_SECONDS)


def backoff_seconds(tries: int) -> float:
    """The wait before try ``tries + 1``: ``IRIS_NOTIFY_RETRY_SECONDS`` doubled per try, capped."""
    return min(MAX_BACKOFF_SECONDS, settings.NOTIFY_RETRY_SECONDS * 2 ** max(0, tries - 1))


def claim_due(now: datetime, *, limit: int | None = None) -> list[NotificationDelivery]:
    """Claim up to ``limit`` due rows for this caller (three statements, one short transaction)."""
    token = secrets.token_hex(16)
    limit = limit or claim_batch()
    with transaction.atomic():
        due = NotificationDelivery.objects.filter(state__in=OPEN, next_try_at__lte=now).order_by("next_try_at", "id")
        if connection.features.has_select_for_update_skip_locked:
            due = due.select_for_update(skip_locked=True)
        ids = list(due.values_list("id", flat=True)[:limit])
        if not ids:
            return []
        # The state and time are checked again: a row another deliverer claimed in between (on
        # SQLite) has moved on, and is not claimed twice.
        NotificationDelivery.objects.filter(id__in=ids, state__in=OPEN, next_try_at__lte=now).update(
            state=State.SENDING,
            claim=token,
            tries=F("tries") + 1,
            next_try_at=now + timedelta(seconds=claim_seconds()),
        )
    return list(NotificationDelivery.objects.filter(claim=token).order_by("id"))


def deliver_due(*, clock=timezone.now, limit: int | None = None) -> Delivered:
    """Send every due delivery, claim by claim, until none is due. Returns what became of them.

    The rows of one claim are sent side by side, one receiver's (a user's channel) one after
    another in event order (``IRIS_NOTIFY_CONCURRENCY`` threads, which do the network part
    only: every database statement is this thread's), then marked: the sent ones in one
    statement, each failed one in its own."""
    limit = limit or claim_batch()
    sent = retrying = failed = 0
    with ThreadPoolExecutor(max_workers=settings.NOTIFY_CONCURRENCY, thread_name_prefix="notify") as pool:
        while True:
            rows = claim_due(clock(), limit=limit)
            if not rows:
                break
            users = {
                u.username: u
                for u in get_user_model()
                .objects.filter(username__in={r.user for r in rows})
                .select_related("notification_settings")
            }
            # One receiver's rows go one after another, in event order (a user's webhook hears of
            # their events in order when each is sent at the first try); receivers side by side.
            groups: dict[tuple[str, str], list[int]] = {}
            for i, row in enumerate(rows):
                groups.setdefault((row.user, row.channel), []).append(i)
            sends = [_sender(row, users.get(row.user)) for row in rows]
            errors: list[str | None] = [None] * len(rows)
            for indexes, results in zip(
                groups.values(),
                pool.map(_attempt_in_order, [[sends[i] for i in g] for g in groups.values()]),
                strict=True,
            ):
                for i, error in zip(indexes, results, strict=True):
                    errors[i] = error
            done = [row.pk for row, error in zip(rows, errors, strict=True) if error is None]
            if done:
                NotificationDelivery.objects.filter(pk__in=done, claim=rows[0].claim).update(
                    state=State.SENT, sent_at=clock(), last_error="", claim=""
                )
            sent += len(done)
            for row, error in zip(rows, errors, strict=True):
                if error is not None:
                    outcome = _mark_failed(row, clock(), error)
                    retrying += outcome == State.RETRYING
                    failed += outcome == State.FAILED
            if len(rows) < limit:
                break
    return Delivered(sent, retrying, failed)


def _attempt_in_order(sends) -> list[str | None]:
    return [_attempt(send) for send in sends]


def _attempt(send) -> str | None:
    """Run one send; its error as text, or None when it succeeded."""
    try:
        send()
    except Exception as exc:  # noqa: BLE001 (any failure of a send is the row's error, retried)
        return _error_text(exc)
    return None


class Undeliverable(Exception):
    """The channel is gone (no address, no webhook): retried like any failure, in case it returns."""


def _sender(row: NotificationDelivery, user):
    """What sending ``row`` takes, read here (the database is this thread's), done by the
    returned callable (network only)."""
    if user is None or not user.is_active:
        return _raise(Undeliverable(f"no active user {row.user!r}"))
    if row.channel == t.EMAIL:
        if not user.email:
            return _raise(Undeliverable("the account has no email address"))
        address = user.email
        return lambda: send_email(address=address, user=row.user, event_id=row.event_id, topic=row.topic, body=row.body)
    prefs = getattr(user, "notification_settings", None)
    if prefs is None or not prefs.webhook_url or not prefs.webhook_secret:
        return _raise(Undeliverable("no webhook URL is set any more"))
    url, secret = prefs.webhook_url, prefs.webhook_secret
    return lambda: post_event(
        url,
        secret,
        row.body,
        event_id=row.event_id,
        user=row.user,
        topic=row.topic,
        kind=row.kind,
        timestamp=int(time.time()),
        timeout=settings.NOTIFY_WEBHOOK_TIMEOUT_SECONDS,
    )


def _raise(exc: Exception):
    def fail():
        raise exc

    return fail


def _error_text(exc: Exception) -> str:
    if isinstance(exc, WebhookFailed | Undeliverable):
        return str(exc)[:ERROR_CHARS]
    return f"{type(exc).__name__}: {exc}"[:ERROR_CHARS]


def _mark_failed(row: NotificationDelivery, now: datetime, error: str) -> str:
    if row.tries >= settings.NOTIFY_MAX_TRIES:
        state, next_try = State.FAILED, now
    else:
        state, next_try = State.RETRYING, now + timedelta(seconds=backoff_seconds(row.tries))
    changed = NotificationDelivery.objects.filter(pk=row.pk, claim=row.claim).update(
        state=state, next_try_at=next_try, last_error=error, claim=""
    )
    if changed:
        log.info("notification %s of event %s to %s: %s (%s)", row.channel, row.event_id, row.user, state, error)
    return state


def run_notifications() -> Delivered:
    """The beat task's whole run: move committed events into the stream, make their deliveries,
    send what is due."""
    sequence_events()
    fan_out()
    return deliver_due()
