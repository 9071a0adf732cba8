"""The queue: pending tasks per effective band, in scheduling order, as of the newest tick.

The order, positions and reasons come from the newest tick's explanation (the same source the
API's queue reads), indexed once per tick by ``queries.queue_index``; a page shows a window of
it and reads only that window's rows. A poll that finds no newer tick answers 204.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required

from scheduler.foundation import roles
from scheduler.core.bands import BANDS_IN_ORDER, Band
from scheduler.core.explain import downgrade_of
from scheduler.board.estimates import ShownEstimate
from scheduler.board.queue import QueueEntry, QueueIndex, queue_estimates, queue_rows, queue_window
from scheduler.board.read import queue_index
from scheduler.jobs.feasibility import never_runs
from scheduler.store import clock
from scheduler.views.common import PAGE_SIZE, Window, no_change, page_number, page_or_fragment, unchanged
from scheduler.views.forms import QueueFilterForm

# Rows of each band shown on the all-bands view; "show all" opens the band's own pages.
PER_BAND_PREVIEW = 10


def queue_row(
    entry: QueueEntry,
    task,
    index: QueueIndex,
    estimate: ShownEstimate,
    now_ms: int,
    never: frozenset[str] | set[str] = frozenset(),
) -> dict:
    """One table row: the explanation's facts (band, place, reason as of the tick, with the
    downgrade the tick decided with), the task's current row (to mark a task that moved), and
    whether its job can never run (``never``: the names of such jobs, ``jobs.feasibility.never_runs``)."""
    requested = entry.requested or (Band(task.job.band) if task else None)
    why = downgrade_of(entry.reason)
    downgrade = {"text": why.text(), "badge": why.badge()} if why is not None else None
    return {
        "entry": entry,
        "task": task,
        "requested": requested,
        "downgrade": downgrade,
        "changed": task is not None and task.state != "pending",
        "estimate": estimate,
        "estimate_span": estimate.span(now_ms),
        "estimate_text": estimate.text(now_ms),
        "never": entry.job in never,
    }


def number_no_estimate_reasons(rows: list[dict]) -> list[str]:
    """The distinct reasons the rows without an estimate have none, in order of first use, and
    each such row's ``note``: its reason's number. The table says each reason once, under it,
    rather than the same sentence in every row."""
    notes: list[str] = []
    for row in rows:
        if row["estimate_span"] is None:
            if row["estimate_text"] not in notes:
                notes.append(row["estimate_text"])
            row["note"] = notes.index(row["estimate_text"]) + 1
    return notes


@login_required
def queue(request):
    form = QueueFilterForm(request.GET or None)
    filters = form.cleaned_data if form.is_valid() else {}
    user = (filters.get("user") or "").strip()
    job = (filters.get("job") or "").strip()
    band = Band.parse(filters["band"]) if filters.get("band") else None

    index = queue_index()
    if unchanged(request, index.tick_pk):
        return no_change()

    sections = []
    if band is not None:
        number = page_number(request)
        entries, total = queue_window(
            index, int(band), user=user or None, job=job or None, offset=(number - 1) * PAGE_SIZE, limit=PAGE_SIZE
        )
        win = Window(number, PAGE_SIZE, total)
        sections.append({"band": band, "entries": entries, "total": total, "window": win})
    else:
        for b in BANDS_IN_ORDER:
            entries, total = queue_window(index, int(b), user=user or None, job=job or None, limit=PER_BAND_PREVIEW)
            sections.append({"band": b, "entries": entries, "total": total, "window": None})
    shown = [e for s in sections for e in s["entries"]]
    rows = queue_rows(shown)
    now = clock.now_ms()
    estimates = queue_estimates(shown, now)
    tick_key = (index.tick_pk, index.tick_now_ms) if index.tick_pk is not None else None
    never = never_runs({t.job.name: t.job for t in rows.values()}.values(), tick_key)
    for section in sections:
        section["rows"] = [
            queue_row(e, rows.get(e.task), index, estimates[e.task], now, never) for e in section["entries"]
        ]
        section["no_estimate_notes"] = number_no_estimate_reasons(section["rows"])

    context = {
        "form": form,
        "index": index,
        "sections": sections,
        "band": band,
        "filtered": bool(user or job),
        "band_counts": [(b, index.count(int(b))) for b in BANDS_IN_ORDER],
        "preview": PER_BAND_PREVIEW,
        "any_match": any(section["total"] for section in sections),
        "operator": roles.is_operator(request.user),
    }
    return page_or_fragment(request, "scheduler/queue.html", "queue", context)
