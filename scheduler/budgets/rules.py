"""Budget rules on rows: the defaults, each user's effective budget (row or defaults raised by
active uplift grants), and spend (as the newest tick left it, or live).

Effective values are the best of the user's row (or the cluster defaults) and every active
uplift grant: the highest ``max_band`` (lowest rank) and the largest ``budget_limit``, where 0
(unlimited) beats any number.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db.models import Count
from django.utils import timezone

from scheduler.board.read import Spend, published_spend
from scheduler.foundation.cluster_config import cluster_config
from scheduler.core.bands import Band
from scheduler.core.budget import resource_value
from scheduler.core.types import BudgetDefaults, BudgetSpec
from scheduler.models import Task, UpliftGrant, UserBudget
from scheduler.store.job_rows import resource_fields, resources_from_columns
from scheduler.store.states import ACTIVE_VALUES


def spend_fresh_for() -> timedelta:
    """How old the newest tick may be for its spend to stand for now: three beats (30 s at
    least). Older (the scheduler is stopped or stuck), spend is summed live instead."""
    return timedelta(seconds=max(30, 3 * settings.TICK_SECONDS))


def spend_now(users: list[str] | None = None) -> Spend:
    """Every page's spend: as the newest tick committed it (one small query; the tick that
    starts or stops a task writes its spend change with it, so only attempts that ended since
    are not in it yet), or :func:`live_spend` when no tick is that recent."""
    published = published_spend()
    if published is None or timezone.now() - published.at > spend_fresh_for():
        return Spend(live_spend(users))
    spend = published.spend
    if users is not None:
        spend = {user: spend[user] for user in sorted(set(users)) if user in spend}
    return Spend(spend, published.tick, published.at)


def live_spend(users: list[str] | None = None) -> dict[str, int]:
    """Spend per user right now, in ONE aggregate query.

    Active tasks (ASSIGNED/BUILDING/RUNNING) of jobs requested above BATCH are counted per user
    and resource shape in SQL; the core's ``resource_value`` prices each shape. The Python loop
    runs over (user, shape) groups, never over tasks. Users with zero spend are left out.
    """
    # The job's state as well (an active task's job is never finished: a cancel or a job's end
    # finishes its tasks in the same transaction, and the tick reads only unfinished jobs): the
    # (finished_state, user) index then finds the live jobs instead of the planner hashing every
    # job of a year's history to join them (docs/benchmarks.md, "A year of history").
    rows = Task.objects.filter(state__in=ACTIVE_VALUES, job__band__lt=int(Band.BATCH), job__finished_state__isnull=True)
    if users is not None:
        rows = rows.filter(job__user__in=users)
    groups = (
        rows.order_by()
        .values_list(
            "job__user",
            *resource_fields("job__"),
        )
        .annotate(n=Count("id"))
    )
    spend: dict[str, int] = {}
    for user, cpu, memory, device_type, variant, count, n in groups:
        value = resource_value(resources_from_columns(cpu, memory, device_type, variant, count)) * n
        if value:
            spend[user] = spend.get(user, 0) + value
    return dict(sorted(spend.items()))


def effective_budget_for(user: str, at_ms: int | None = None) -> BudgetSpec:
    """One user's effective budget: row (or defaults) raised by active grants. Two queries."""
    # Not truncated to milliseconds: a grant approved a moment ago must already count.
    at = timezone.now() if at_ms is None else datetime.fromtimestamp(at_ms / 1000, tz=UTC)
    grants = UpliftGrant.objects.filter(
        user_id=user, state=UpliftGrant.State.APPROVED, starts_at__lte=at, expires_at__gt=at
    ).values_list("budget_limit", "max_band")
    return effective_budget_of(user, budget_rows_of([user]).get(user), grants)


def effective_budget_of(
    user: str, row: tuple[int, int] | None, grants: Iterable[tuple[int | None, int | None]]
) -> BudgetSpec:
    """One user's effective budget from rows already read: its ``(budget_limit, max_band)`` row
    (None: the defaults) raised by the ``(budget_limit, max_band)`` of each grant active now."""
    if row is None:
        defaults = budget_defaults()
        row = (defaults.budget_limit, int(defaults.max_band))
    return raised_by_grants(user, row[0], row[1], grants)


def budget_rows_of(users: list[str] | None = None) -> dict[str, tuple[int, int]]:
    """``{user: (budget_limit, max_band rank)}`` of the budget rows (of ``users``). One query."""
    rows = UserBudget.objects.all() if users is None else UserBudget.objects.filter(user_id__in=users)
    return {user: (limit, band) for user, limit, band in rows.values_list("user_id", "budget_limit", "max_band")}


def budget_defaults() -> BudgetDefaults:
    return cluster_config().budget_defaults


def better_limit(a: int, b: int) -> int:
    """The more generous of two limits; 0 means unlimited."""
    if a == 0 or b == 0:
        return 0
    return max(a, b)


def raised_by_grants(user: str, limit: int, band: int, grants: Iterable[tuple[int | None, int | None]]) -> BudgetSpec:
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
    rows = {
        user: (limit, band)
        for user, limit, band in UserBudget.objects.values_list("user_id", "budget_limit", "max_band")
    }
    result = {
        user: BudgetSpec(user=user, budget_limit=limit, max_band=Band(band)) for user, (limit, band) in rows.items()
    }
    now = datetime.fromtimestamp(now_ms / 1000, tz=UTC)
    active: dict[str, list[tuple[int | None, int | None]]] = {}
    for user, limit, band in UpliftGrant.objects.filter(
        state=UpliftGrant.State.APPROVED, starts_at__lte=now, expires_at__gt=now
    ).values_list("user_id", "budget_limit", "max_band"):
        active.setdefault(user, []).append((limit, band))
    for user, grants in active.items():
        result[user] = raised_by_grants(user, *rows.get(user, (defaults.budget_limit, int(defaults.max_band))), grants)
    return result
