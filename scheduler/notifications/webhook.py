"""Webhook requests: the event's JSON POSTed to the user's URL, signed with their secret.

What a receiver gets (docs/api.md, "Webhooks"):

- the body: the event as ``GET events/`` returns it (:mod:`scheduler.notifications.payload`);
- ``X-Iris-Timestamp``: the Unix time (seconds) the request was signed;
- ``X-Iris-Signature: sha256=<hex>``: HMAC-SHA256 with the secret as key over the timestamp, a
  full stop, and the body's bytes (``f"{timestamp}.".encode() + body``): a receiver recomputes it,
  compares in constant time, and rejects an old timestamp, so a captured request cannot be replayed
  later nor its body changed;
- ``Idempotency-Key`` (and ``X-Iris-Event-Id``): the event id, the same on every retry of the
  delivery, so a receiver that has seen it can answer 2xx and do nothing; ``X-Iris-User`` whose
  notification it is (a receiver shared by several users keys on both), ``X-Iris-Topic``.

Any 2xx is success; anything else, a redirect included (never followed), a timeout or a refused
connection is a failure the outbox retries with backoff.
"""

from __future__ import annotations

import hashlib
import hmac
import urllib.error
import urllib.request

SIGNATURE_HEADER = "X-Iris-Signature"
TIMESTAMP_HEADER = "X-Iris-Timestamp"
IDEMPOTENCY_HEADER = "Idempotency-Key"
USER_AGENT = "iris-web-notifications/1"
# At most this much of a failed answer's body is kept as the delivery's error.
ERROR_BODY_CHARS = 200


class WebhookFailed(Exception):
    """The receiver did not answer 2xx (the message says what happened)."""


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-Iris-Signature`` value of ``body`` signed at ``timestamp``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def verify(secret: str, timestamp: str, body: bytes, header: str) -> bool:
    """What a receiver does (here for the tests and docs/api.md's example): recompute, compare in
    constant time. (A receiver also rejects timestamps more than a few minutes old.)"""
    try:
        expected = signature(secret, int(timestamp), body)
    except ValueError:
        return False
    return hmac.compare_digest(expected, header)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # a 3xx is then raised as an HTTPError: a failure, never followed


_opener = urllib.request.build_opener(_NoRedirects)


def post_event(
    url: str, secret: str, body: str, *, event_id: int, user: str, topic: str, kind: str, timestamp: int, timeout: float
) -> int:
    """POST ``body`` to ``url``; returns the 2xx status, raises :class:`WebhookFailed` otherwise."""
    data = body.encode()
    request = urllib.request.Request(
        url,
        data=data,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: signature(secret, timestamp, data),
            IDEMPOTENCY_HEADER: str(event_id),
            "X-Iris-Event-Id": str(event_id),
            "X-Iris-Event": kind,
            "X-Iris-Topic": topic,
            "X-Iris-User": user,
        },
    )
    try:
        with _opener.open(request, timeout=timeout) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        text = exc.read(ERROR_BODY_CHARS).decode("utf-8", "replace") if exc.fp is not None else ""
        raise WebhookFailed(f"HTTP {exc.code}" + (f": {text.strip()}" if text.strip() else "")) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise WebhookFailed(f"could not reach the webhook: {reason}") from None
    if not 200 <= status < 300:
        raise WebhookFailed(f"HTTP {status}")
    return status
