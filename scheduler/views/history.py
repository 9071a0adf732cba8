"""Preemption history: who lost a slot to whom, where and when, with repeat victims flagged."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.utils import timezone

from scheduler.core.bands import Band
from scheduler.tick import queries as tick_queries
from scheduler.tick.queries import COUNTED_EVENTS, REPEATED_PREEMPTIONS, newest_preemption, preemption_counts
from scheduler.views.common import PAGE_SIZE, POLL_SECONDS, no_change, page_or_fragment, unchanged, window
from scheduler.views.forms import SINCE_SECONDS, PreemptionFilterForm


@login_required
def preemptions(request):
    form = PreemptionFilterForm(request.GET or None)
    filters = form.cleaned_data if form.is_valid() else {}
    newest = newest_preemption()
    if unchanged(request, newest):
        return no_change()
    since = None
    if filters.get("since"):
        since = timezone.now() - timedelta(seconds=SINCE_SECONDS[filters["since"]])
    job = (filters.get("job") or "").strip()
    events = tick_queries.preemptions(
        user=(filters.get("user") or "").strip() or None,
        band=Band.parse(filters["band"]) if filters.get("band") else None,
        since=since,
        job="/" + job.strip("/") if job else None,
    )
    total = events.count()
    win = window(request, total, PAGE_SIZE)
    page = list(events[win.offset : win.offset + win.size])
    counts = preemption_counts(events)
    repeated = {c["job"] for c in counts if c["repeated"]}
    context = {
        "form": form,
        "events": page,
        "window": win,
        "counts": counts,
        # Counted among the newest COUNTED_EVENTS of the view only (said so when there are more).
        "counted_among": COUNTED_EVENTS if total > COUNTED_EVENTS else None,
        "repeated": repeated,
        "threshold": REPEATED_PREEMPTIONS,
        "newest": newest,
        "poll": POLL_SECONDS * 2,
        "filtered": any(filters.values()) if filters else False,
    }
    return page_or_fragment(request, "scheduler/preemptions.html", "history", context)
