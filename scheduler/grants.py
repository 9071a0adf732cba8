"""Uplift grants running out: approved grants past their expiry become expired.

Effective budgets already ignore a grant once ``expires_at`` has passed (see
``scheduler.budgets``); marking it expired makes the state visible in lists and writes the
audit trail. Beat runs this every minute (``scheduler.expire_uplifts``).
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from scheduler.core.bands import Band
from scheduler.models import AuditEntry, UpliftGrant

ACTOR = "grant-expiry"
ACTION = "uplift.expire"


def expire_uplifts(now: datetime) -> int:
    """Mark approved grants with ``expires_at <= now`` expired; return how many.

    The due grants are locked first (``FOR UPDATE`` on PostgreSQL; SQLite's write transaction
    locks the database), then moved in one UPDATE and audited once each, so two runs at once
    (beat and a tick) never audit the same grant twice.
    """
    with transaction.atomic():
        due = list(
            UpliftGrant.objects.select_for_update()
            .filter(state=UpliftGrant.State.APPROVED, expires_at__lte=now)
            .values("pk", "user_id", "max_band", "budget_limit", "expires_at")
        )
        if not due:
            return 0
        ids = [g["pk"] for g in due]
        UpliftGrant.objects.filter(pk__in=ids, state=UpliftGrant.State.APPROVED).update(
            state=UpliftGrant.State.EXPIRED
        )
        AuditEntry.objects.bulk_create(
            AuditEntry(
                actor_name=ACTOR,
                action=ACTION,
                target=f"uplift {g['pk']} for {g['user_id']}",
                before={"state": UpliftGrant.State.APPROVED.value, **_grant_values(g)},
                after={"state": UpliftGrant.State.EXPIRED.value, **_grant_values(g)},
                reason=f"expired at {g['expires_at'].isoformat()}",
            )
            for g in due
        )
    return len(due)


def _grant_values(grant: dict) -> dict:
    band = grant["max_band"]
    return {"max_band": None if band is None else Band(band).wire, "budget_limit": grant["budget_limit"]}
