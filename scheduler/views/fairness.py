"""The fairness page: per band, as of the newest tick, each user's share against the equal
share, and the smallest job left waiting; the last 24 hours' work lost to preemption and the
starving tasks; each band's share by user over time. The numbers are the tick's own sample
(``tick.fairness``). The page refreshes itself at each new tick."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.utils import timezone

from scheduler.tick.fairness import fairness_report, newest_fairness_tick
from scheduler.views.common import POLL_SECONDS, no_change, page_or_fragment, unchanged
from scheduler.views.charts import share_chart

# Users listed per band unless the band is opened whole (``?band=<band>``): past this, the rows
# are the users furthest below an equal share while they wait, then the largest shares.
BAND_ROWS = 25


def shown_rows(band: dict, whole: bool) -> tuple[list[dict], int]:
    """The band's rows the page lists, and how many it leaves out."""
    rows = band["users"]
    if whole or len(rows) <= BAND_ROWS:
        return rows, 0
    ranked = sorted(
        rows,
        key=lambda r: (
            not (r["pending"] and r["share"] < r["equal_share"]),
            r["share"] - r["equal_share"] if r["pending"] else -r["share"],
            r["user"],
        ),
    )
    return ranked[:BAND_ROWS], len(rows) - BAND_ROWS


@login_required
def fairness(request):
    """The page, refreshing like the queue: it polls every few seconds with ``since=<tick>``,
    answered 204 (one indexed query, nothing computed) until a newer tick, then re-rendered."""
    if unchanged(request, newest_fairness_tick()):
        return no_change()
    report = fairness_report(timezone.now())
    opened = request.GET.get("band", "")
    for band in report.bands:
        band["shown"], band["left_out"] = shown_rows(band, band["band"].wire == opened)
    charts = [(band, share_chart(series)) for band, series in report.shares.items()]
    return page_or_fragment(
        request, "scheduler/fairness.html", "report", {"report": report, "charts": charts, "poll": POLL_SECONDS}
    )
