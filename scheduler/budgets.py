"""Read side of budgets: the defaults, and each user's effective budget right now.

Effective values are the best of the user's row (or the cluster defaults) and every active
uplift grant: the highest ``max_band`` (lowest rank) and the largest ``budget_limit``, where 0
(unlimited) beats any number.
"""

from __future__ import annotations

from datetime import UTC, datetime

from scheduler.cluster_config import cluster_config
from scheduler.core.bands import Band
from scheduler.core.types import BudgetDefaults, BudgetSpec
from scheduler.models import UpliftGrant, UserBudget


def budget_defaults() -> BudgetDefaults:
    return cluster_config().budget_defaults


def better_limit(a: int, b: int) -> int:
    """The more generous of two limits; 0 means unlimited."""
    if a == 0 or b == 0:
        return 0
    return max(a, b)


def effective_budgets(now_ms: int) -> dict[str, BudgetSpec]:
    """Every user with a row or an active grant, in two queries. Others get the defaults."""
    defaults = budget_defaults()
    result = {
        user: BudgetSpec(user=user, budget_limit=limit, max_band=Band(band))
        for user, limit, band in UserBudget.objects.values_list("user_id", "budget_limit", "max_band")
    }
    now = datetime.fromtimestamp(now_ms / 1000, tz=UTC)
    grants = UpliftGrant.objects.filter(
        state=UpliftGrant.State.APPROVED, starts_at__lte=now, expires_at__gt=now
    ).values_list("user_id", "budget_limit", "max_band")
    for user, limit, band in grants:
        base = result.get(user) or BudgetSpec(user, defaults.budget_limit, defaults.max_band)
        result[user] = BudgetSpec(
            user=user,
            budget_limit=base.budget_limit if limit is None else better_limit(base.budget_limit, limit),
            max_band=base.max_band if band is None else Band(min(base.max_band, band)),
        )
    return result
