"""Read side of ticks: recent tick records, task counts, preemption history. What the newest
tick published for readers (the queue, counts, the what-if basis) is the board's
(:mod:`scheduler.board`).
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count, Q, QuerySet

from scheduler.core.bands import Band
from scheduler.models import Job, PreemptionEvent, Task, TickRecord
from scheduler.store.states import ACTIVE_VALUES


def recent_ticks(limit: int = 20, *, up_to: int | None = None) -> list[TickRecord]:
    """The newest ``limit`` tick records, newest first; with ``up_to``, none after that tick (a
    page that shows the board's tick beside them: a tick committing between the two reads is
    not in one and missing from the other)."""
    ticks = TickRecord.objects.defer("explanation", "whatif_basis", "spend", "limits")
    if up_to is not None:
        ticks = ticks.filter(pk__lte=up_to)
    return list(ticks.order_by("-started_at")[:limit])


def task_counts_by_state() -> dict[str, int]:
    """``{state: tasks}`` over the task table, live. The scheduler page shows the tick's
    (``scheduler.board.counts``); tests compare the two right after a tick."""
    return dict(Task.objects.values_list("state").annotate(n=Count("id")).values_list("state", "n"))


def preemptions(
    *, user: str | None = None, band: Band | None = None, since: datetime | None = None, job: str | None = None
) -> QuerySet[PreemptionEvent]:
    """Preemption events newest first; filters apply to the victim (its user, stamped band, job)."""
    qs = PreemptionEvent.objects.select_related("victim__job", "preemptor__job", "worker").order_by(
        "-created_at", "-pk"
    )
    if user:
        qs = qs.filter(victim_user=user)
    if band is not None:
        qs = qs.filter(victim_band=int(band))
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if job:
        qs = qs.filter(victim_job__name=job)
    return qs


# Appended for the console (scheduler/views/). Each function runs the fixed number of queries its
# docstring names, whatever the number of tasks, jobs, users or workers.

# A job preempted at least this many times is flagged on the preemption history: once is the
# policy working; three times means the job keeps losing its place and its owner should know why.
REPEATED_PREEMPTIONS = 3


# The most preempted jobs are counted among the newest this many events of a view: 90 days of
# events (the default retention) were 344,000 in the history benchmark, and grouping them all by
# victim job took 7 s (docs/benchmarks.md, "A year of history").
COUNTED_EVENTS = 10_000


def preemption_counts(events: QuerySet[PreemptionEvent], limit: int = 20, among: int | None = None) -> list[dict]:
    """Victim jobs of ``events`` with the most preemptions first (ties: the older job first),
    counted among the newest ``among`` events (``COUNTED_EVENTS`` unless given). Three queries:
    the oldest of those, one grouped query over the events alone (each carries its victim's
    job), then the names of the ``limit`` jobs it kept.

    ``repeated`` flags jobs preempted at least ``REPEATED_PREEMPTIONS`` times.
    """
    among = COUNTED_EVENTS if among is None else among
    # The newest ``among`` as a range from the oldest of them (one index read), not as
    # ``pk IN (newest)``: PostgreSQL answered that by hashing every event kept (359,000 in the
    # history benchmark, 0.2-0.3 s) before joining the 10,000 to their tasks and jobs.
    edge = next(iter(events.order_by("-created_at", "-pk").values_list("created_at", "pk")[among - 1 : among]), None)
    if edge is not None:
        # (created_at, id) >= edge, with the time's bound on its own so that it is the index's range.
        events = events.filter(Q(created_at__gte=edge[0]), Q(created_at__gt=edge[0]) | Q(pk__gte=edge[1]))
    # Grouped by the event's own victim_job (an index-only scan of the window on PostgreSQL),
    # not by the victim task's job: that looked up each of the 10,000 events' tasks (40 ms).
    rows = list(
        events.order_by()
        .values("victim_job")
        .annotate(n=Count("id"), tasks=Count("victim", distinct=True))
        .order_by("-n", "victim_job")[:limit]
    )
    jobs = {
        pk: (name, user)
        for pk, name, user in Job.objects.filter(pk__in=[r["victim_job"] for r in rows]).values_list(
            "pk", "name", "user"
        )
    }
    return [
        {
            "job": jobs[r["victim_job"]][0],
            "user": jobs[r["victim_job"]][1],
            "count": r["n"],
            "tasks": r["tasks"],
            "repeated": r["n"] >= REPEATED_PREEMPTIONS,
        }
        for r in rows
        if r["victim_job"] in jobs  # a job deleted since the grouped read (its events went with it)
    ]


def running_by_band_user() -> dict[tuple[int, str], int]:
    """``{(stamped band rank, user): active tasks}``, live. One grouped query. The scheduler page
    shows the tick's count of the same (``scheduler.board.counts``); tests compare them."""
    return {
        (band, user): n
        for band, user, n in Task.objects.filter(state__in=ACTIVE_VALUES)
        .order_by()
        .values_list("band", "job__user")
        .annotate(n=Count("id"))
        if band is not None
    }


def newest_preemption() -> int | None:
    """The pk of the newest preemption event (pollers compare it). One query."""
    return PreemptionEvent.objects.order_by("-pk").values_list("pk", flat=True).first()
