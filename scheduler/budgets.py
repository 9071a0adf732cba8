"""Read side of budgets: the defaults, and each user's effective budget right now.

Effective values are the best of the user's row (or the cluster defaults) and every active
uplift grant: the highest ``max_band`` (lowest rank) and the largest ``budget_limit``, where 0
(unlimited) beats any number.
"""

from __future__ import annotations

from collections.abc import Iterable
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


def raised_by_grants(
    user: str, limit: int, band: int, grants: Iterable[tuple[int | None, int | None]]
) -> BudgetSpec:
    """A user's budget (``limit``, ``band`` rank: their row or the defaults) raised by the
    ``(budget_limit, max_band)`` of each grant active now; a grant's None leaves that value."""
    for grant_limit, grant_band in grants:
        if grant_limit is not None:
            limit = better_limit(limit, grant_limit)
        if grant_band is not None:
            band = min(band, grant_band)
    return BudgetSpec(user=user, budget_limit=limit, max_band=Band(band))


def effective_budgets(now_ms: int) -> dict[str, BudgetSpec]:
    """Every user with a row or an active grant, in two queries. Others get the defaults."""
    defaults = budget_defaults()
    rows = {user: (limit, band) for user, limit, band in UserBudget.objects.values_list("user_id", "budget_limit", "max_band")}
    result = {user: BudgetSpec(user=user, budget_limit=limit, max_band=Band(band)) for user, (limit, band) in rows.items()}
    now = datetime.fromtimestamp(now_ms / 1000, tz=UTC)
    active: dict[str, list[tuple[int | None, int | None]]] = {}
    for user, limit, band in UpliftGrant.objects.filter(
        state=UpliftGrant.State.APPROVED, starts_at__lte=now, expires_at__gt=now
    ).values_list("user_id", "budget_limit", "max_band"):
        active.setdefault(user, []).append((limit, band))
    for user, grants in active.items():
        result[user] = raised_by_grants(user, *rows.get(user, (defaults.budget_limit, int(defaults.max_band))), grants)
    return result
