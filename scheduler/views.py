"""Console views: thin; they read through ``queries`` and render templates."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils import timezone

from scheduler import queries


@login_required
def scheduler_state(request):
    ticks = queries.recent_ticks()
    context = {
        "ticks": ticks,
        "lag_seconds": (timezone.now() - ticks[0].started_at).total_seconds() if ticks else None,
        "task_counts": sorted(queries.task_counts_by_state().items()),
    }
    template = "scheduler/scheduler_state.html#state" if request.htmx else "scheduler/scheduler_state.html"
    return render(request, template, context)
