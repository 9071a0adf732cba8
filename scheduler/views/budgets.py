"""Budgets: spend versus limit per user, charts of spend over time, and uplift requests.

The numbers are the API's (``queries.budget_views``: spend as the newest tick left it, effective limit and band with
grants); each user's jobs and running and pending tasks are the newest tick's counts (the same
tick the scheduler page shows); the charts come from the spend and limit each tick sampled.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect
from django.utils import timezone

from scheduler.foundation import roles
from scheduler.budgets import writes as budgets_writes
from scheduler.budgets.queries import BudgetRow, budget_rows, spend_samples, uplift_grants, user_is_known
from scheduler.budgets.rules import budget_defaults
from scheduler.core.budget import ACCELERATOR_POINTS, CORE_POINTS, GIB_POINTS
from scheduler.foundation.errors import ServiceError
from scheduler.board.read import queue_index
from scheduler.views.charts import spend_chart
from scheduler.views.common import PAGE_SIZE, POLL_SECONDS, apply_service_error, page_or_fragment, require_POST, window
from scheduler.views.forms import UpliftRequestForm

# Bars turn amber from this share of the limit (as Iris's dashboard) and red above the limit.
AMBER_PERCENT = 75
# A sparkline covers the last hour in at most this many points.
SPARK_SECONDS = 3600
SPARK_POINTS = 60
CHART_POINTS = 240
CHART_WINDOWS = {"1h": 3600, "6h": 6 * 3600, "24h": 86400, "7d": 7 * 86400}

SPEND_RULE = {"chip": ACCELERATOR_POINTS, "gib": GIB_POINTS, "core": CORE_POINTS}


def samples_for(seconds: int, points: int):
    """Tick samples over the last ``seconds``, thinned to about ``points`` (two queries)."""
    return spend_samples(since=timezone.now() - timedelta(seconds=seconds), points=points)


def bar(row: BudgetRow) -> dict:
    """The spend bar: width and colour from the share of the limit used."""
    percent = row.percent
    if percent is None:
        return {"width": 0, "level": "unlimited", "percent": None}
    level = "red" if percent > 100 else "amber" if percent >= AMBER_PERCENT else "green"
    return {"width": min(100.0, round(percent, 1)), "level": level, "percent": percent}


@login_required
def budgets(request):
    index = queue_index()
    every = budget_rows(index.by_user)  # sorted over every user (most active first), then one page is drawn
    win = window(request, len(every), PAGE_SIZE)
    rows = every[win.offset : win.offset + win.size]
    defaults = budget_defaults()
    samples = samples_for(SPARK_SECONDS, SPARK_POINTS)
    for row in rows:
        row.bar = bar(row)
        row.spark = spend_chart(samples, row.view.user, defaults.budget_limit, width=140, height=30, axes=False)
    context = {
        "rows": rows,
        "window": win,
        "defaults": defaults,
        "rule": SPEND_RULE,
        "amber": AMBER_PERCENT,
        "poll": POLL_SECONDS * 2,
        "me": request.user.username,
        "counts_tick": index.tick_pk,
    }
    return page_or_fragment(request, "scheduler/budgets.html", "table", context)


def may_see_requests(viewer, user: str) -> bool:
    """Researchers see their own uplift requests; operators and admins see everyone's (as the API)."""
    return viewer.username == user or roles.is_operator(viewer)


@login_required
def budget_detail(request, user: str, form: UpliftRequestForm | None = None, status: int = 200):
    index = queue_index()
    row = budget_rows(index.by_user, [user])[0]
    view = row.view
    unheard_of = not (view.has_row or view.grants or view.spend or row.pending or row.running or row.active_jobs)
    if unheard_of and user != request.user.username and not user_is_known(user):
        raise Http404(f"No user, budget, grant or job is named {user!r}.")
    window = request.GET.get("window") if request.GET.get("window") in CHART_WINDOWS else "1h"
    defaults = budget_defaults()
    chart = spend_chart(samples_for(CHART_WINDOWS[window], CHART_POINTS), user, defaults.budget_limit)
    own = request.user.username == user
    can_request = own or roles.is_admin(request.user)
    context = {
        "row": row,
        "view": view,
        "counts_tick": index.tick_pk,
        "bar": bar(row),
        "chart": chart,
        "window": window,
        "windows": list(CHART_WINDOWS),
        "defaults": defaults,
        "rule": SPEND_RULE,
        "own": own,
        "subject": "you" if own else user,
        "can_request": can_request,
        "form": form or UpliftRequestForm(),
        "requests": list(uplift_grants(user=user)[:20]) if may_see_requests(request.user, user) else None,
        "over_by": max(0, view.spend - view.effective_budget_limit) if view.effective_budget_limit else 0,
        "headroom": max(0, view.effective_budget_limit - view.spend),
        "chips": max(0, view.effective_budget_limit - view.spend) // ACCELERATOR_POINTS,
    }
    return page_or_fragment(request, "scheduler/budget_detail.html", "live", context, status=status)


@login_required
@require_POST
def request_uplift(request, user: str):
    form = UpliftRequestForm(request.POST)
    if form.is_valid():
        try:
            grant = budgets_writes.request_uplift(
                request.user,
                user=user,
                max_band=form.cleaned_data.get("max_band") or None,
                budget_limit=form.cleaned_data.get("budget_limit"),
                reason=form.cleaned_data["reason"],
                duration_seconds=form.duration_seconds(),
            )
        except ServiceError as exc:
            apply_service_error(form, exc, {"duration_seconds": "duration_hours", "user": None})
        else:
            messages.success(
                request, f"Uplift request {grant.pk} sent. An admin will approve or deny it; its state shows below."
            )
            return redirect("console:budget", user=user)
    return budget_detail(request, user, form=form, status=400)
