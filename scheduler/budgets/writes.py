"""Budget writes: set a user's budget, request / approve / deny an uplift, expire grants.

Every change writes one :class:`AuditEntry` (who, what, before, after, why) in one shape:
:func:`budget_state` for a budget row, :func:`grant_state` for a grant.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from django.db import transaction
from django.utils import timezone

from scheduler.foundation import roles
from scheduler.foundation.access import require_admin, require_authenticated
from scheduler.budgets.queries import user_is_known
from scheduler.budgets.rules import budget_defaults, effective_budget_for
from scheduler.core.bands import ADMIN_BANDS, Band
from scheduler.foundation.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from scheduler.foundation.inputs import (
    MAX_INT64,
    parse_band,
    parse_budget_limit,
    parse_duration_seconds,
    parse_int,
    parse_text,
    parse_user_id,
)
from scheduler.events import kinds
from scheduler.events.record import Draft, record
from scheduler.models import AuditEntry, UpliftGrant, UserBudget
from scheduler.store.locks import hold_until_commit

log = logging.getLogger(__name__)

# An uplift lasts at most this long; longer needs a budget change, which is reviewed differently.
MAX_UPLIFT_SECONDS = 90 * 24 * 3600
# And at least a minute: shorter would expire before anyone could use it.
MIN_UPLIFT_SECONDS = 60
# Who the audit log names for grants that ran out.
EXPIRY_ACTOR = "grant-expiry"


def audit(actor, action: str, target: str, before: Any, after: Any, reason: str) -> AuditEntry:
    """Record who changed a budget or grant, in the audit table and (after commit) the log."""
    actor_name = actor.username if actor is not None and actor.is_authenticated else "system"
    transaction.on_commit(
        partial(
            log.info,
            "%s %s by %s: %s -> %s",
            action,
            target,
            actor_name,
            before,
            after,
            extra={"action": action, "target": target, "actor": actor_name},
        )
    )
    return AuditEntry.objects.create(
        actor=actor if actor is not None and actor.is_authenticated else None,
        actor_name=actor_name,
        action=action,
        target=target,
        before=before,
        after=after,
        reason=reason,
    )


def set_budget(
    actor,
    user_id: Any,
    *,
    budget_limit: Any = None,
    max_band: Any = None,
    reason: Any = "",
    create_user_budget: Any = False,
) -> UserBudget:
    """Admins set a user's budget row (upsert). Omitted values keep the current ones (or defaults).

    A user nobody knows (no account, budget, grant or job) is refused as NOT_FOUND, so a typo
    never creates a budget for a name no one uses; ``create_user_budget`` says it is meant (a
    budget set up before the person's first login).
    """
    require_admin(actor, "set budgets")
    user = parse_user_id(user_id)
    if not isinstance(create_user_budget, bool):
        raise InvalidArgument("expected true or false", field="create_user_budget")
    if budget_limit in (None, "") and max_band in (None, ""):
        raise InvalidArgument("give budget_limit, max_band or both", field="budget_limit")
    limit = parse_budget_limit(budget_limit) if budget_limit not in (None, "") else None
    band = parse_band(max_band, "max_band") if max_band not in (None, "") else None
    why = parse_text(reason, "reason", required=True)
    if not create_user_budget and not user_is_known(user):
        raise NotFound(
            f"no user, budget, grant or job is named {user!r}. To set up a budget for a new user on purpose, "
            f"say so (create_user_budget: true; iris admin budget set --new-user; the console's 'new user' box)",
            field="user",
        )
    defaults = budget_defaults()
    with transaction.atomic():
        row = UserBudget.objects.select_for_update().filter(user_id=user).first()
        before = budget_state(row.budget_limit, row.max_band) if row else None
        if row is None:
            row = UserBudget(user_id=user, budget_limit=defaults.budget_limit, max_band=int(defaults.max_band))
        if limit is not None:
            row.budget_limit = limit
        if band is not None:
            row.max_band = int(band)
        row.save()
        audit(actor, "budget.set", user, before, budget_state(row.budget_limit, row.max_band), why)
    return row


def budget_state(budget_limit: int, max_band: int) -> dict:
    """A budget row as audit entries record it (API writes and the cluster config's tiers)."""
    return {"budget_limit": budget_limit, "max_band": Band(max_band).wire}


def grant_values(max_band: int | None, budget_limit: int | None) -> dict[str, Any]:
    """What a grant raises, as every audit entry about a grant records it."""
    return {"max_band": None if max_band is None else Band(max_band).wire, "budget_limit": budget_limit}


def grant_state(grant: UpliftGrant) -> dict[str, Any]:
    """A grant as the request / approve / deny audit entries record it. Expiry records the
    state and :func:`grant_values` only (the rest does not change when a grant expires)."""
    return {
        "state": grant.state,
        **grant_values(grant.max_band, grant.budget_limit),
        "duration_seconds": grant.duration_seconds,
        "starts_at": grant.starts_at.isoformat() if grant.starts_at else None,
        "expires_at": grant.expires_at.isoformat() if grant.expires_at else None,
    }


def admin_band_message(band: Band) -> str:
    return (
        f"no uplift grants {band.name}: only admins submit SYSTEM and PRODUCTION work, whatever their "
        f"budget; ask for INTERACTIVE or a budget_limit"
    )


def request_uplift(
    actor,
    *,
    user: Any = None,
    max_band: Any = None,
    budget_limit: Any = None,
    reason: Any = "",
    duration_seconds: Any = None,
) -> UpliftGrant:
    """Ask for a time-bounded raise of ``max_band`` and/or ``budget_limit``. Researchers ask for themselves."""
    require_authenticated(actor)
    target = parse_user_id(user) if user not in (None, "") else actor.username
    if target != actor.username and not roles.is_admin(actor):
        raise PermissionDenied(f"you may request uplifts only for yourself ('{actor.username}')", field="user")
    if max_band in (None, "") and budget_limit in (None, ""):
        raise InvalidArgument("ask for max_band, budget_limit or both", field="max_band")
    band = parse_band(max_band, "max_band") if max_band not in (None, "") else None
    if band in ADMIN_BANDS:
        raise InvalidArgument(admin_band_message(band), field="max_band", details={"max_band": band.wire})
    limit = parse_budget_limit(budget_limit) if budget_limit not in (None, "") else None
    why = parse_text(reason, "reason", required=True)
    duration = parse_duration_seconds(
        duration_seconds, "duration_seconds", minimum=MIN_UPLIFT_SECONDS, maximum=MAX_UPLIFT_SECONDS
    )
    if band is not None and limit is None:
        # A request that raises nothing: the band is already within reach (ranks: larger is lower).
        current = effective_budget_for(target).max_band
        if band >= current:
            raise FailedPrecondition(
                f"'{target}' may already submit {band.name} work (max band now: {current.name}); "
                f"ask for a band above it, or for a budget_limit",
                field="max_band",
                details={"max_band": current.wire},
            )
    with transaction.atomic():
        # Two identical requests at once must not both pass the check below.
        hold_until_commit(f"uplift-request:{target}")
        same = (
            UpliftGrant.objects.filter(
                user_id=target,
                state=UpliftGrant.State.REQUESTED,
                max_band=int(band) if band is not None else None,
                budget_limit=limit,
            )
            .order_by("pk")
            .first()
        )
        if same is not None:
            raise FailedPrecondition(
                f"uplift {same.pk} already asks for the same for '{target}' and waits for an admin; "
                f"no second request is needed",
                field="max_band" if band is not None else "budget_limit",
                details={"uplift": same.pk},
            )
        grant = UpliftGrant.objects.create(
            user_id=target,
            requested_by=actor,
            max_band=int(band) if band is not None else None,
            budget_limit=limit,
            reason=why,
            duration_seconds=duration,
        )
        audit(actor, "uplift.request", f"uplift {grant.pk} for {target}", None, grant_state(grant), why)
        record([uplift_event(kinds.UPLIFT_REQUESTED, grant, requested_by=actor.username)])
    return grant


def _decide_uplift(actor, grant_id: Any, *, approve: bool, duration_seconds: Any, note: Any) -> UpliftGrant:
    verb = "approve" if approve else "deny"
    require_admin(actor, f"{verb} uplifts")
    pk = parse_int(grant_id, "id", minimum=1, maximum=MAX_INT64)
    text = parse_text(note, "note")
    duration = (
        parse_duration_seconds(
            duration_seconds, "duration_seconds", minimum=MIN_UPLIFT_SECONDS, maximum=MAX_UPLIFT_SECONDS
        )
        if duration_seconds not in (None, "")
        else None
    )
    with transaction.atomic():
        grant = UpliftGrant.objects.select_for_update().filter(pk=pk).first()
        if grant is None:
            raise NotFound(f"uplift {pk} does not exist", field="id")
        if grant.state != UpliftGrant.State.REQUESTED:
            raise FailedPrecondition(f"uplift {pk} was already decided ({grant.state})", field="id")
        if approve and grant.max_band is not None and Band(grant.max_band) in ADMIN_BANDS:
            # Requested before such requests were refused: it would raise nothing anyone can use.
            raise FailedPrecondition(
                admin_band_message(Band(grant.max_band)), field="id", details={"max_band": Band(grant.max_band).wire}
            )
        before = grant_state(grant)
        now = timezone.now()
        grant.decided_by = actor
        grant.decided_at = now
        grant.decision_note = text
        if approve:
            if duration is not None:
                grant.duration_seconds = duration
            grant.state = UpliftGrant.State.APPROVED
            grant.starts_at = now
            grant.expires_at = now + timedelta(seconds=grant.duration_seconds)
        else:
            grant.state = UpliftGrant.State.DENIED
        grant.save()
        audit(
            actor,
            f"uplift.{verb}",
            f"uplift {pk} for {grant.user_id}",
            before,
            grant_state(grant),
            text or grant.reason,
        )
        if approve:
            record(
                [uplift_event(kinds.UPLIFT_APPROVED, grant, by=actor.username, expires_at=grant.expires_at.isoformat())]
            )
        else:
            record([uplift_event(kinds.UPLIFT_DENIED, grant, by=actor.username, note=text)])
    return grant


def approve_uplift(actor, grant_id: Any, *, duration_seconds: Any = None, note: Any = "") -> UpliftGrant:
    """Admins approve a requested grant: it starts now and expires after its duration."""
    return _decide_uplift(actor, grant_id, approve=True, duration_seconds=duration_seconds, note=note)


def deny_uplift(actor, grant_id: Any, *, note: Any = "") -> UpliftGrant:
    return _decide_uplift(actor, grant_id, approve=False, duration_seconds=None, note=note)


def expire_uplifts(now: datetime | None = None) -> int:
    """Approved grants with ``expires_at <= now`` become expired; return how many. Beat runs this
    every minute (``scheduler.expire_uplifts``).

    Effective budgets already ignore a grant once ``expires_at`` has passed
    (:mod:`scheduler.budgets.rules`); marking it expired makes the state visible in lists and
    writes the audit trail. The due grants are locked first (``FOR UPDATE`` on PostgreSQL;
    SQLite's write transaction locks the database), then moved in one UPDATE and audited once
    each, so two runs at once never audit the same grant twice.
    """
    now = now or timezone.now()
    with transaction.atomic():
        due = list(
            UpliftGrant.objects.select_for_update()
            .filter(state=UpliftGrant.State.APPROVED, expires_at__lte=now)
            .values("pk", "user_id", "max_band", "budget_limit", "expires_at")
        )
        if not due:
            return 0
        ids = [g["pk"] for g in due]
        UpliftGrant.objects.filter(pk__in=ids, state=UpliftGrant.State.APPROVED).update(state=UpliftGrant.State.EXPIRED)
        AuditEntry.objects.bulk_create(
            AuditEntry(
                actor_name=EXPIRY_ACTOR,
                action="uplift.expire",
                target=f"uplift {g['pk']} for {g['user_id']}",
                before={"state": UpliftGrant.State.APPROVED.value, **grant_values(g["max_band"], g["budget_limit"])},
                after={"state": UpliftGrant.State.EXPIRED.value, **grant_values(g["max_band"], g["budget_limit"])},
                reason=f"expired at {g['expires_at'].isoformat()}",
            )
            for g in due
        )
        record(
            Draft(
                kinds.UPLIFT_EXPIRED,
                now,
                g["user_id"],
                data={"uplift": g["pk"], **grant_values(g["max_band"], g["budget_limit"])},
            )
            for g in due
        )
    return len(due)


def uplift_event(kind: str, grant: UpliftGrant, **fields: Any) -> Draft:
    """An uplift's event: its user's, naming the grant and what it raises."""
    data = {"uplift": grant.pk, **grant_values(grant.max_band, grant.budget_limit), **fields}
    if kind == kinds.UPLIFT_REQUESTED:
        data["duration_seconds"] = grant.duration_seconds
    return Draft(kind, timezone.now(), grant.user_id, data=data)
