"""A user's notification settings: read (with their role's defaults), validated and written, and
the recent deliveries the settings page lists. The API (``me/notifications/``) and the console's
settings page both go through here, so they share one set of rules and one wording.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django.db import transaction

from scheduler.foundation import roles
from scheduler.foundation.access import require_authenticated
from scheduler.foundation.errors import InvalidArgument
from scheduler.foundation.inputs import check_text
from scheduler.notifications import topics as t
from scheduler.notification_models import NotificationDelivery, NotificationSettings

# The body fields a write may carry (each optional: what is left out keeps its value).
FIELDS = ("email_events", "webhook_events", "webhook_url", "webhook_secret")
MAX_URL_LENGTH = 2000
# A secret shorter than 16 characters is guessable by brute force against a captured signature.
MIN_SECRET_LENGTH = 16
MAX_SECRET_LENGTH = 200
# Deliveries the settings page and GET me/notifications/ list (newest first).
RECENT_DELIVERIES = 20


@dataclass(frozen=True)
class Preferences:
    """What one user has chosen (or their role's defaults, ``is_default``)."""

    user: str
    email: str  # the address email goes to (the account's; empty: no email is sent)
    choices: tuple[str, ...]  # the topics this user may choose
    email_events: tuple[str, ...]
    webhook_events: tuple[str, ...]
    webhook_url: str
    webhook_secret_set: bool
    is_default: bool


def default_email_topics(user) -> tuple[str, ...]:
    return t.ADMIN_DEFAULT_EMAIL_TOPICS if roles.is_admin(user) else ()


def preferences_of(user) -> Preferences:
    """``user``'s settings, or their role's defaults when they have chosen nothing yet."""
    require_authenticated(user)
    row = NotificationSettings.objects.filter(user=user).first()
    return _preferences(user, row)


def _preferences(user, row: NotificationSettings | None) -> Preferences:
    choices = t.topics_for(roles.is_admin(user))
    if row is None:
        return Preferences(user.username, user.email, choices, default_email_topics(user), (), "", False, True)
    return Preferences(
        user=user.username,
        email=user.email,
        choices=choices,
        email_events=tuple(row.email_topics),
        webhook_events=tuple(row.webhook_topics),
        webhook_url=row.webhook_url,
        webhook_secret_set=bool(row.webhook_secret),
        is_default=False,
    )


def update_preferences(user, body: Mapping[str, Any]) -> Preferences:
    """Change ``user``'s settings to what ``body`` says (fields left out keep their value), all or
    nothing: every field is checked before anything is written. ``INVALID_ARGUMENT`` names the
    field that is wrong."""
    require_authenticated(user)
    if not isinstance(body, Mapping):
        raise InvalidArgument("expected a JSON object")
    unknown = sorted(k for k in body if k not in FIELDS)
    if unknown:
        raise InvalidArgument(f"unknown field; the fields are {', '.join(FIELDS)}", field=str(unknown[0]))
    choices = t.topics_for(roles.is_admin(user))
    with transaction.atomic():
        row = NotificationSettings.objects.select_for_update().filter(user=user).first()
        current = _preferences(user, row)
        email_events = _topics(body, "email_events", choices, current.email_events)
        webhook_events = _topics(body, "webhook_events", choices, current.webhook_events)
        url = _url(body["webhook_url"]) if "webhook_url" in body else current.webhook_url
        secret = _secret(body["webhook_secret"]) if "webhook_secret" in body else None
        if not url:
            if secret:
                raise InvalidArgument("choose a webhook_url with the secret", field="webhook_secret")
            secret = ""  # no webhook: no secret kept either
            if webhook_events:
                raise InvalidArgument("choose a webhook_url before webhook events", field="webhook_events")
        elif secret is None and not (row is not None and row.webhook_secret):
            raise InvalidArgument(
                f"required with a webhook_url: {MIN_SECRET_LENGTH} to {MAX_SECRET_LENGTH} characters the "
                "receiver also knows, to check each request's X-Iris-Signature",
                field="webhook_secret",
            )
        if row is None:
            row = NotificationSettings(user=user)
        row.email_topics = list(email_events)
        row.webhook_topics = list(webhook_events)
        row.webhook_url = url
        if secret is not None:
            row.webhook_secret = secret
        row.save()
    return _preferences(user, row)


def _topics(body: Mapping[str, Any], name: str, choices: tuple[str, ...], current: tuple[str, ...]) -> tuple[str, ...]:
    if name not in body:
        return tuple(c for c in current if c in choices)
    value = body[name]
    if value is None:
        value = []
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise InvalidArgument("expected a list of event names", field=name)
    chosen = {v.strip() for v in value if v.strip()}
    for topic in sorted(chosen):
        if topic not in choices:
            if topic in t.ALL_TOPICS:
                raise InvalidArgument(f"{topic!r} is for admins only", field=name)
            raise InvalidArgument(f"unknown event {topic!r}; choose among {', '.join(choices)}", field=name)
    return tuple(c for c in choices if c in chosen)


def _url(value: Any) -> str:
    name = "webhook_url"
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidArgument(f"expected a string, got {type(value).__name__}", field=name)
    url = check_text(value.strip(), name)
    if not url:
        return ""
    if len(url) > MAX_URL_LENGTH:
        raise InvalidArgument(f"at most {MAX_URL_LENGTH} characters", field=name)
    if any(c.isspace() for c in url):
        raise InvalidArgument("must not contain spaces", field=name)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError as exc:
        raise InvalidArgument(f"not a URL ({exc})", field=name) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgument("expected an http:// or https:// URL with a host", field=name)
    return url


def _secret(value: Any) -> str:
    name = "webhook_secret"
    if not isinstance(value, str):
        raise InvalidArgument("expected a string", field=name)
    secret = check_text(value, name)
    if not (MIN_SECRET_LENGTH <= len(secret) <= MAX_SECRET_LENGTH):
        raise InvalidArgument(f"must be {MIN_SECRET_LENGTH} to {MAX_SECRET_LENGTH} characters", field=name)
    if any(c.isspace() or not c.isprintable() for c in secret):
        raise InvalidArgument("must be printable characters without spaces", field=name)
    return secret


def recent_deliveries(user, limit: int = RECENT_DELIVERIES) -> list[NotificationDelivery]:
    """``user``'s newest deliveries, newest first (one query)."""
    require_authenticated(user)
    return list(NotificationDelivery.objects.filter(user=user.username).order_by("-id")[:limit])
