"""An event as the notifications send it: the same JSON object ``GET /api/v1/events/`` returns
for it (``tests/notifications`` holds the two equal), so a receiver parses one shape."""

from __future__ import annotations

from datetime import UTC
from typing import Any

import orjson

from scheduler.models import Event


def event_json(event: Event) -> dict[str, Any]:
    at = event.created_at.astimezone(UTC).isoformat()
    if at.endswith("+00:00"):
        at = at[: -len("+00:00")] + "Z"
    return {
        "id": event.id,
        "kind": event.kind,
        "at": at,
        "user": event.user,
        "job": event.job or None,
        "task": f"{event.job}/{event.task_index}" if event.task_index is not None else None,
        "attempt": event.attempt,
        "tick": event.tick,
        "data": dict(event.data or {}),
    }


def event_body(event: Event) -> str:
    """The exact text a delivery sends (and a webhook signs), fixed when the delivery is made."""
    return orjson.dumps(event_json(event)).decode()
