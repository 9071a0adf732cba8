"""Scheduler state, for operators: recent ticks, lag, pending and running by band and user,
each backend's health and the live TPU slices, dispatch intents stuck in the outbox, and
"run a tick now"."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.shortcuts import redirect
from django.utils import timezone

from scheduler.core.bands import BANDS_IN_ORDER
from scheduler.foundation.errors import ServiceError
from scheduler.execution.outbox import intent_counts, stuck_intents
from scheduler.board.read import queue_index
from scheduler.tick.queries import recent_ticks
from scheduler.tick.run import run_tick_now
from scheduler.observability.health import readiness
from scheduler.views.common import POLL_SECONDS, operator_required, page_or_fragment, require_POST
from scheduler.views.workers import backends_context

# Users shown in the band-by-user table (most pending and running first); the rest are summed.
USERS_SHOWN = 25
TICKS_SHOWN = 15
STUCK_SHOWN = 20
# The states of placed work, in the order the card splits its count: a tick's new assignments
# are ASSIGNED until their worker reports.
ACTIVE_BY_STATE = ("running", "building", "assigned")
# The lag is flagged once this many tick periods have passed without a tick (beat is down?).
LATE_TICKS = 3


def band_user_table(pending: dict[tuple[int, str], int], running: dict[tuple[int, str], int]) -> dict:
    """Rows per user with (pending, running) per band, busiest first, and per-band totals."""
    users: dict[str, dict[int, list[int]]] = {}
    for (rank, user), n in pending.items():
        users.setdefault(user, {}).setdefault(rank, [0, 0])[0] += n
    for (rank, user), n in running.items():
        users.setdefault(user, {}).setdefault(rank, [0, 0])[1] += n
    totals = {int(b): [0, 0] for b in BANDS_IN_ORDER}
    rows = []
    for user, cells in users.items():
        for rank, (p, r) in cells.items():
            totals.setdefault(rank, [0, 0])
            totals[rank][0] += p
            totals[rank][1] += r
        total = sum(p + r for p, r in cells.values())
        rows.append((total, user, [cells.get(int(b), [0, 0]) for b in BANDS_IN_ORDER]))
    rows.sort(key=lambda r: (-r[0], r[1]))
    shown_totals = [totals[int(b)] for b in BANDS_IN_ORDER]
    return {
        "rows": [{"user": u, "cells": c, "total": t} for t, u, c in rows[:USERS_SHOWN]],
        "hidden": max(0, len(rows) - USERS_SHOWN),
        "totals": shown_totals,
        "bands": BANDS_IN_ORDER,
        # The page's one count of placed work: the sum of the table's running column, shown on
        # the card too, so the two places cannot disagree.
        "active": sum(r for _, r in shown_totals),
    }


@operator_required("The scheduler state page")
def scheduler_state(request):
    index = queue_index()  # first: the ticks shown beside its figures go up to its tick
    ticks = recent_ticks(TICKS_SHOWN, up_to=index.tick_pk)
    now = timezone.now()
    intents = intent_counts(now)
    context = {
        "ticks": ticks,
        "lag_seconds": (now - ticks[0].started_at).total_seconds() if ticks else None,
        "late": bool(ticks) and (now - ticks[0].started_at).total_seconds() > LATE_TICKS * settings.TICK_SECONDS,
        # Both as of the newest tick, like the pending counts beside them (scheduler.board.counts):
        # the card's headline is the table's running total; these split it by state.
        "task_counts": [(state, index.active_by_state.get(state, 0)) for state in ACTIVE_BY_STATE],
        "table": band_user_table(index.pending_by_user(), index.running),
        "index": index,
        "stuck": list(stuck_intents(now)[:STUCK_SHOWN]),
        "intents": intents,
        **backends_context(),
        # The same checks as /readyz, from the same function.
        "readiness": readiness(stuck=intents["stuck"]),
        "poll": POLL_SECONDS,
    }
    return page_or_fragment(request, "scheduler/scheduler_state.html", "state", context)


@operator_required("Running a tick")
@require_POST
def run_tick(request):
    try:
        outcome = run_tick_now(request.user)
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request,
            f"Tick {outcome.tick_id} ran in {outcome.duration_ms:,.0f} ms: {outcome.assigned:,} assigned, "
            f"{outcome.preempted:,} preempted, {outcome.expired:,} expired.",
        )
    return redirect("console:scheduler-state")
