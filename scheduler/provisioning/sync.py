"""Polled backends: apply the reports of every backend that is polled (``Backend.sync``)."""

from __future__ import annotations

import logging
from datetime import datetime

from django.utils import timezone

from scheduler import backends
from scheduler.execution.attempts import apply_reports

log = logging.getLogger(__name__)


def sync_backends(now: datetime | None = None) -> int:
    """Apply the reports of every backend that is polled (``Backend.sync``). Returns how many applied."""
    now = now or timezone.now()
    applied = 0
    for name in backends.polled_backend_names():
        try:
            reports = list(backends.get_backend(name).sync(now))
        except Exception:  # noqa: BLE001 -- one backend's outage must not stop the others
            log.warning("backend %s failed to sync", name, exc_info=True)
            continue
        applied += apply_reports(reports, now).applied
    return applied
