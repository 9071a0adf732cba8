"""The fairness page: per band, as of the newest tick, each user's share against the equal
share, and the smallest job left waiting; the last 24 hours' work lost to preemption and the
starving tasks; each band's share by user over time. The numbers are the tick's own sample
(``tick.fairness``)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils import timezone

from scheduler.tick.fairness import fairness_report
from scheduler.views.charts import share_chart


@login_required
def fairness(request):
    report = fairness_report(timezone.now())
    charts = [(band, share_chart(series)) for band, series in report.shares.items()]
    return render(request, "scheduler/fairness.html", {"report": report, "charts": charts})
