"""Read side of budgets: the budget pages' rows, uplift grants, the audit log, spend over time."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.utils import timezone

from scheduler.board.counts import NO_WORK, UserCounts
from scheduler.budgets.rules import budget_defaults, budget_rows_of, raised_by_grants, spend_now
from scheduler.core.bands import Band
from scheduler.core.budget import effective_band, is_over_budget
from scheduler.core.explain import Downgrade
from scheduler.models import AuditEntry, Job, UpliftGrant, UserBudget
from scheduler.store.tick_samples import thinned_tick_rows

OPEN_GRANT_STATES = (UpliftGrant.State.REQUESTED, UpliftGrant.State.APPROVED)


@dataclass
class BudgetView:
    """A user's budget as people read it: configured, effective now, spend, and open grants."""

    user: str
    has_row: bool
    budget_limit: int
    max_band: Band
    effective_budget_limit: int
    effective_max_band: Band
    spend: int
    # The band INTERACTIVE work of this user is scheduled in right now.
    effective_band: Band
    grants: list[UpliftGrant] = field(default_factory=list)
    # What ``spend`` is as of: the newest tick (its pk and start), or summed live (both None).
    spend_tick: int | None = None
    spend_at: datetime | None = None

    @property
    def over_budget(self) -> bool:
        return is_over_budget(self.spend, self.effective_budget_limit)

    @property
    def downgrade(self) -> Downgrade | None:
        """What the rule does to this user's INTERACTIVE work now (``core.budget``), or None."""
        return Downgrade.of(Band.INTERACTIVE, self.spend, self.effective_budget_limit)


def budget_views(users: list[str] | None = None, *, with_work: Iterable[str] = ()) -> list[BudgetView]:
    """Every user with a budget row, an open grant, spend or a name in ``with_work`` (or just
    ``users``), by name. Four queries."""
    at = timezone.now()
    defaults = budget_defaults()
    grants_qs = (
        UpliftGrant.objects.filter(state__in=OPEN_GRANT_STATES)
        .select_related("requested_by", "decided_by")
        .order_by("-created_at", "-pk")
    )
    if users is not None:
        grants_qs = grants_qs.filter(user_id__in=users)
    rows = budget_rows_of(users)
    open_grants: dict[str, list[UpliftGrant]] = {}
    for grant in grants_qs:
        if grant.state == UpliftGrant.State.APPROVED and grant.expires_at and grant.expires_at <= at:
            continue  # expired, not yet marked so by the beat task
        open_grants.setdefault(grant.user_id, []).append(grant)
    now = spend_now(users)
    spend = now.spend
    names = set(users) if users is not None else set(rows) | set(open_grants) | set(spend) | set(with_work)
    result = []
    for user in sorted(names):
        limit, band = rows.get(user, (defaults.budget_limit, int(defaults.max_band)))
        active = [
            (g.budget_limit, g.max_band)
            for g in open_grants.get(user, ())
            if g.state == UpliftGrant.State.APPROVED and g.starts_at and g.starts_at <= at
        ]
        spec = raised_by_grants(user, limit, band, active)
        result.append(
            BudgetView(
                user=user,
                has_row=user in rows,
                budget_limit=limit,
                max_band=Band(band),
                effective_budget_limit=spec.budget_limit,
                effective_max_band=spec.max_band,
                spend=spend.get(user, 0),
                effective_band=effective_band(Band.INTERACTIVE, user, spend, {user: spec}, defaults),
                grants=open_grants.get(user, []),
                spend_tick=now.tick,
                spend_at=now.at,
            )
        )
    return result


def budget_view(user: str) -> BudgetView:
    return budget_views([user])[0]


def user_is_known(user: str) -> bool:
    """A Django user, a budget row, a grant or a job carries this name."""
    return (
        get_user_model().objects.filter(username=user).exists()
        or UserBudget.objects.filter(user_id=user).exists()
        or UpliftGrant.objects.filter(user_id=user).exists()
        or Job.objects.filter(user=user).exists()
    )


def audit_entries() -> QuerySet[AuditEntry]:
    return AuditEntry.objects.select_related("actor").order_by("-created_at", "-pk")


def uplift_grants(*, user: str | None = None, state: str | None = None) -> QuerySet[UpliftGrant]:
    qs = UpliftGrant.objects.select_related("requested_by", "decided_by").order_by("-created_at", "-pk")
    if user:
        qs = qs.filter(user_id=user)
    if state:
        qs = qs.filter(state=state)
    return qs


@dataclass
class BudgetRow:
    """A budget as the console's table shows it: the API's facts plus task counts."""

    view: BudgetView
    running: int = 0
    pending: int = 0
    active_jobs: int = 0

    @property
    def percent(self) -> float | None:
        """Spend as a percentage of the effective limit; None when unlimited."""
        limit = self.view.effective_budget_limit
        return None if limit <= 0 else 100.0 * self.view.spend / limit


def budget_rows(counts: Mapping[str, UserCounts], users: list[str] | None = None) -> list[BudgetRow]:
    """``budget_views`` of every user with a budget row, an open grant, spend or unfinished work
    in ``counts``, with those counts. Four queries.

    The console passes the newest tick's counts (``board.queue.QueueIndex.by_user``, counted once
    per tick by ``board.counts.active_counts``), the same tick its scheduler page shows.
    Users known only by their unfinished work get the cluster defaults. Sorted as Iris's
    dashboard: most active jobs first, then most running tasks, then by name.
    """
    rows = []
    for view in budget_views(users, with_work=counts):
        mine = counts.get(view.user, NO_WORK)
        rows.append(BudgetRow(view, running=mine.active, pending=mine.pending, active_jobs=mine.jobs))
    rows.sort(key=lambda r: (-r.active_jobs, -r.running, r.view.user))
    return rows


@dataclass(frozen=True)
class SpendSample:
    at: datetime
    spend: dict[str, int]
    limits: dict[str, int]


def spend_samples(*, since: datetime, points: int = 240) -> list[SpendSample]:
    """Tick spend and limit samples since ``since``, oldest first, thinned to about ``points``
    (two queries, see :func:`scheduler.store.tick_samples.thinned_tick_rows`)."""
    rows = thinned_tick_rows(since, points, "started_at", "spend", "limits")
    return [SpendSample(at, dict(spend or {}), dict(limits or {})) for at, spend, limits in rows]
