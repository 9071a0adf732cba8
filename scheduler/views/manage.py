"""The admin console: budgets (edit with validation), the cluster tiers as loaded, uplift
requests to approve or deny with an expiry, and the audit log. Admins only.

Every write goes through ``scheduler.budgets.writes`` (which audits it); a refused write shows the
service's message on the field it names.
"""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect

from scheduler.budgets.preview import preview_grant
from scheduler.budgets.queries import audit_entries, budget_rows, budget_view, budget_views, uplift_grants
from scheduler.budgets.rules import budget_defaults, budget_rows_of
from scheduler.budgets.writes import approve_uplift, deny_uplift, set_budget
from scheduler.foundation.cluster_config import cluster_config
from scheduler.core.bands import Band
from scheduler.foundation.errors import ServiceError
from scheduler.board.read import queue_index
from scheduler.models import UpliftGrant
from scheduler.views.common import (
    PAGE_SIZE,
    admin_required,
    apply_service_error,
    page_or_fragment,
    window,
    require_POST,
)
from scheduler.views.forms import BudgetForm, UpliftDecisionForm

# Decided grants listed under the open requests.
RECENT_DECISIONS = 25


@admin_required("The admin console")
def budgets(request):
    if request.method == "POST":
        form = BudgetForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            try:
                row = set_budget(
                    request.user,
                    data["user"],
                    budget_limit=data.get("budget_limit"),
                    max_band=data.get("max_band") or None,
                    reason=data["reason"],
                    create_user_budget=bool(data.get("new_user")),
                )
            except ServiceError as exc:
                apply_service_error(form, exc)
            else:
                messages.success(
                    request,
                    f"Budget of {row.user_id} set: limit {row.budget_limit:,} "
                    f"({'unlimited' if row.budget_limit == 0 else 'points'}), max band {Band(row.max_band).name}.",
                )
                return redirect("console:manage-budgets")
        status = 400
    else:
        initial = {}
        user = request.GET.get("user", "").strip()
        if user:
            view = budget_view(user)
            initial = {"user": user, "budget_limit": view.budget_limit, "max_band": view.max_band.wire}
        form = BudgetForm(initial=initial)
        status = 200
    every = budget_rows(queue_index().by_user)  # users with work come in, most active first
    win = window(request, len(every), PAGE_SIZE)
    context = {
        "form": form,
        "rows": every[win.offset : win.offset + win.size],
        "window": win,
        "defaults": budget_defaults(),
        "tab": "budgets",
    }
    return page_or_fragment(request, "scheduler/manage_budgets.html", "table", context, status=status)


@admin_required("The admin console")
def tiers(request):
    config = cluster_config()
    users = sorted({u for tier in config.user_budgets for u in tier.user_ids})
    rows = budget_rows_of(users)
    # Later tiers win, as reconciliation applies them.
    final: dict[str, int] = {}
    for i, tier in enumerate(config.user_budgets):
        for user in tier.user_ids:
            final[user] = i
    tiers = []
    for i, tier in enumerate(config.user_budgets):
        members = []
        for user in tier.user_ids:
            row = rows.get(user)
            members.append(
                {
                    "user": user,
                    "overridden": final[user] != i,
                    "row": row,
                    "differs": final[user] == i
                    and row is not None
                    and (row[0], row[1]) != (tier.budget_limit, int(tier.max_band)),
                    "missing": final[user] == i and row is None,
                }
            )
        tiers.append({"number": i + 1, "tier": tier, "members": members})
    context = {"config": config, "tiers": tiers, "tab": "tiers"}
    return page_or_fragment(request, "scheduler/manage_tiers.html", "tiers", context)


def uplift_context(forms: dict[int, UpliftDecisionForm] | None = None) -> dict:
    requested = list(uplift_grants(state=UpliftGrant.State.REQUESTED).order_by("created_at", "pk")[:100])
    forms = forms or {}
    budgets = {v.user: v for v in budget_views(sorted({g.user_id for g in requested}))} if requested else {}
    for grant in requested:
        hours = grant.duration_seconds / 3600
        grant.form = forms.get(grant.pk) or UpliftDecisionForm(
            initial={"duration_hours": int(hours) if hours.is_integer() else round(hours, 2)}, prefix=f"g{grant.pk}"
        )
        grant.budget = budgets.get(grant.user_id)
    decided = list(uplift_grants().exclude(state=UpliftGrant.State.REQUESTED)[:RECENT_DECISIONS])
    return {"requested": requested, "decided": decided, "tab": "uplifts", "previews_on_load": PREVIEWS_ON_LOAD}


@admin_required("The admin console")
def uplifts(request):
    return page_or_fragment(request, "scheduler/manage_uplifts.html", "uplifts", uplift_context())


# The first requests on the page load their preview at once; the rest when asked (each one is a
# decision on the tick's basis, tens of milliseconds at 100,000 pending tasks).
PREVIEWS_ON_LOAD = 10


@admin_required("Previewing uplift requests")
def preview_uplift(request, pk: str):
    """What approving request ``pk`` would do at the next tick (``budgets.preview``): the
    fragment for the request's card, or a page of its own. Writes nothing."""
    try:
        context = {"preview": preview_grant(request.user, pk), "error": None, "pk": int(pk)}
    except ServiceError as exc:
        context = {"preview": None, "error": exc.message, "pk": int(pk)}
    return page_or_fragment(request, "scheduler/manage_uplift_preview.html", "preview", context)


@admin_required("Deciding uplift requests")
@require_POST
def decide_uplift(request, pk: str, verb: str):
    pk = int(pk)
    form = UpliftDecisionForm(request.POST, prefix=f"g{pk}")
    if form.is_valid():
        try:
            if verb == "approve":
                grant = approve_uplift(
                    request.user, pk, duration_seconds=form.duration_seconds(), note=form.cleaned_data.get("note")
                )
            else:
                grant = deny_uplift(request.user, pk, note=form.cleaned_data.get("note"))
        except ServiceError as exc:
            if exc.field in ("duration_seconds",):
                apply_service_error(form, exc, {"duration_seconds": "duration_hours"})
            else:
                messages.error(request, exc.message)
                return redirect("console:manage-uplifts")
        else:
            if grant.state == UpliftGrant.State.APPROVED:
                messages.success(
                    request,
                    f"Approved uplift {grant.pk} for {grant.user_id}; it expires "
                    f"{grant.expires_at:%Y-%m-%d %H:%M} UTC.",
                )
            else:
                messages.success(request, f"Denied uplift {grant.pk} for {grant.user_id}.")
            return redirect("console:manage-uplifts")
    return page_or_fragment(request, "scheduler/manage_uplifts.html", "uplifts", uplift_context({pk: form}), status=400)


@admin_required("The audit log")
def audit(request):
    qs = audit_entries()
    win = window(request, qs.count(), PAGE_SIZE)
    context = {"entries": list(qs[win.offset : win.offset + win.size]), "window": win, "tab": "audit"}
    return page_or_fragment(request, "scheduler/manage_audit.html", "audit", context)
