"""Reconcile the cluster config's budget tiers into the ``UserBudget`` table.

The config is the source of truth for the users it lists: each listed user gets a row with the
values of the last tier that names them (tiers apply in list order, later tiers win). Users the
config does not list are left alone: they get no row (the defaults apply when read), and rows
an admin set for them through the API stay as they are.

Reconciling is idempotent: a second run with the same config changes nothing and writes no
audit entries.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from scheduler.budgets.writes import budget_state
from scheduler.foundation.cluster_config import ClusterConfig
from scheduler.core.bands import Band
from scheduler.models import AuditEntry, UserBudget

ACTOR = "cluster-config"
ACTION = "budget.set"


def desired_budgets(config: ClusterConfig) -> dict[str, tuple[int, Band, int]]:
    """user -> (budget_limit, max_band, index of the tier that won), later tiers winning."""
    desired: dict[str, tuple[int, Band, int]] = {}
    for index, tier in enumerate(config.user_budgets):
        for user in tier.user_ids:
            desired[user] = (tier.budget_limit, tier.max_band, index)
    return desired


def reconcile_budget_tiers(config: ClusterConfig) -> int:
    """Upsert one ``UserBudget`` per listed user in one transaction; return how many rows changed.

    Each created or changed row gets one ``AuditEntry`` (actor ``cluster-config``) naming the
    tier that set it. A user named by several tiers is written once, with the last tier's values.
    """
    desired = desired_budgets(config)
    if not desired:
        return 0
    with transaction.atomic():
        existing = {
            row.user_id: row for row in UserBudget.objects.select_for_update().filter(user_id__in=list(desired))
        }
        created: list[UserBudget] = []
        updated: list[UserBudget] = []
        audit: list[AuditEntry] = []
        for user, (limit, band, tier_index) in desired.items():
            row = existing.get(user)
            before = None if row is None else budget_state(row.budget_limit, row.max_band)
            after = budget_state(limit, band)
            if before == after:
                continue
            if row is None:
                created.append(UserBudget(user_id=user, budget_limit=limit, max_band=band))
            else:
                row.budget_limit, row.max_band = limit, band
                updated.append(row)
            audit.append(
                AuditEntry(
                    actor_name=ACTOR,
                    action=ACTION,
                    target=user,
                    before=before,
                    after=after,
                    reason=f"user_budgets[{tier_index}] of {config.source}",
                )
            )
        UserBudget.objects.bulk_create(created)
        # bulk_update skips auto_now, so the stamp is set by hand.
        stamp = timezone.now()
        for row in updated:
            row.updated_at = stamp
        UserBudget.objects.bulk_update(updated, ["budget_limit", "max_band", "updated_at"])
        AuditEntry.objects.bulk_create(audit)
    return len(audit)
