"""Fairness you can see: what the fairness page and ``GET fairness/`` read.

Per band, from the newest tick's own fairness sample (``TickRecord.fairness``, written by the
tick in its transaction: ``core.fairness.fairness_sample``): the users with demand and their
numbers, and the smallest job left waiting with why. Over the last 24 hours: the work each user
lost to preemption (resource value × how long the evicted attempt had run, in point-hours) and
the tasks preempted more than ``STARVATION_PREEMPTIONS`` times; and each band's share by
user over time, from the ticks' samples thinned as the spend charts are.

A fixed number of queries whatever the number of ticks, users, preemptions or tasks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Exists, OuterRef, Sum

from scheduler.core.bands import Band
from scheduler.core.explain import pending_text
from scheduler.core.fairness import FAIRNESS_VERSION, band_rows
from scheduler.models import PreemptionEvent, Task, TickRecord
from scheduler.store.tick_samples import thinned_ticks
from scheduler.tick.queries import REPEATED_PREEMPTIONS

# The window of the preemption figures and the share chart.
WINDOW = timedelta(hours=24)
# Points of the share chart: one every 12 minutes over 24 hours. Fewer than the spend chart's
# 240 because each point reads a whole fairness sample (about 30 bytes per band and user).
CHART_POINTS = 120
# A task preempted more than this many times is starving: the preemption history flags a job at
# three (``REPEATED_PREEMPTIONS``); a single task past it keeps losing its place.
STARVATION_PREEMPTIONS = REPEATED_PREEMPTIONS
# At most this many starving tasks are listed (most preempted first).
STARVING_LIMIT = 50
# Milliseconds per hour: lost work is in point-hours.
MS_PER_HOUR = 3_600_000


@dataclass
class FairnessReport:
    tick: int | None
    tick_at: datetime | None
    bands: list[dict] = field(default_factory=list)
    lost_work: list[dict] = field(default_factory=list)
    starving: list[dict] = field(default_factory=list)
    starvation_threshold: int = 0
    shares: dict[Band, list[tuple[datetime, SharePoint]]] = field(default_factory=dict)
    since: datetime | None = None


def band_view(band_wire: str, band: dict) -> dict:
    """One stored band for people: the :class:`Band` (the stored name parsed here, once), its
    users' rows and the smallest waiting job with its reason's text."""
    waiting = band.get("smallest_waiting")
    if waiting:
        waiting = {**waiting, "reason": {**waiting["reason"], "text": pending_text(waiting["reason"])}}
    return {
        "band": Band.parse(band_wire),
        "running_value": band.get("running_value", 0),
        "users": band_rows(band),
        "smallest_waiting": waiting,
    }


def lost_work(since: datetime) -> list[dict]:
    """Per user, the work lost to preemption since ``since``: for each eviction, the victim's
    resource value × how long its evicted attempt had run (started to evicted), which the tick
    wrote on the event (``lost_point_ms``). One grouped query over the events alone: joined to
    their tasks, jobs and attempts it took 137 ms on the server for a day's 19,000 events."""
    rows = (
        PreemptionEvent.objects.filter(created_at__gte=since)
        .order_by()
        .values_list("victim_user")
        .annotate(n=Count("*"), lost=Sum("lost_point_ms"))
    )
    out = [{"user": user, "preemptions": n, "point_hours": round(lost / MS_PER_HOUR, 3)} for user, n, lost in rows]
    return sorted(out, key=lambda e: (-e["point_hours"], -e["preemptions"], e["user"]))


def starving_tasks(since: datetime, threshold: int) -> list[dict]:
    """Unfinished tasks preempted more than ``threshold`` times, at least once since ``since``,
    most preempted first. One query: the few such tasks from their partial index
    (``task_starving``: at ``STARVATION_PREEMPTIONS``), each checked for an event since. Joined
    from the day's events instead, PostgreSQL walked every event kept by victim (152 ms beside
    the history benchmark's 359,000)."""
    recent = PreemptionEvent.objects.filter(victim=OuterRef("pk"), created_at__gte=since)
    rows = (
        Task.objects.filter(preemption_count__gt=threshold, job__finished_state__isnull=True)
        .filter(Exists(recent))
        .values_list("job__name", "index", "job__user", "band", "state", "preemption_count")
        .order_by("-preemption_count", "job__name", "index")[:STARVING_LIMIT]
    )
    return [
        {
            "task": f"{job}/{index}",
            "job": job,
            "user": user,
            "band": Band(band) if band is not None else None,
            "state": state,
            "preemptions": n,
            "history": f"/jobs{job}/",
        }
        for job, index, user, band, state, n in rows
    ]


# Users kept per band in each point of the share chart (the largest shares at that tick); the
# rest are summed into one figure. The chart draws the largest over the window (SHARE_LINES,
# fewer than this), so a drawn user is missing from a point only where 16 others outranked it.
SHARE_USERS_PER_POINT = 16


@dataclass(frozen=True)
class SharePoint:
    """One tick's shares of one band: the largest users' (fractions of 1) and the rest summed."""

    shares: dict[str, float]
    rest: float = 0.0


def sample_shares(sample: dict | None) -> dict[Band, SharePoint]:
    """A tick's fairness sample as share-chart points, one per band with running value."""
    if not sample or sample.get("version") != FAIRNESS_VERSION:
        return {}
    points: dict[Band, SharePoint] = {}
    for band_wire, band in sample.get("bands", {}).items():
        total = band.get("running_value", 0)
        values = {u: r[0] for u, r in band.get("users", {}).items()}
        top = sorted(values, key=lambda u: (-values[u], u))[:SHARE_USERS_PER_POINT]
        shares = {u: values[u] / total if total else 0.0 for u in top}
        rest = max(0.0, 1.0 - sum(shares.values())) if total and len(values) > len(top) else 0.0
        points[Band.parse(band_wire)] = SharePoint(shares, rest)
    return points


# {(tick pk, started at): its points}: a tick's sample never changes, and the chart's ticks are
# fixed slots (store.tick_samples.thinned_ticks), so a poll parses only the ticks new to this
# process (the newest, and a new slot every few minutes) instead of a day of samples, each
# tens of kilobytes per thousand users. Trimmed to the ticks of the newest read.
_share_points: dict[tuple[int, datetime], dict[Band, SharePoint]] = {}


def share_series(since: datetime) -> dict[Band, list[tuple[datetime, SharePoint]]]:
    """Per band, (tick time, its share point) over the window, oldest first, from the ticks'
    own samples. Two queries, and a third for the samples of ticks this process has not read."""
    ticks = list(thinned_ticks(since, CHART_POINTS).order_by("-pk").values_list("pk", "started_at")[: CHART_POINTS + 1])
    ticks.reverse()
    missing = [pk for pk, at in ticks if (pk, at) not in _share_points]
    if missing:
        for pk, at, sample in TickRecord.objects.filter(pk__in=missing).values_list("pk", "started_at", "fairness"):
            _share_points[(pk, at)] = sample_shares(sample)
    kept = set(ticks)
    for key in [key for key in _share_points if key not in kept]:
        del _share_points[key]
    series: dict[Band, list[tuple[datetime, SharePoint]]] = {}
    for key in ticks:
        for band, point in _share_points.get(key, {}).items():
            series.setdefault(band, []).append((key[1], point))
    return dict(sorted(series.items()))


def newest_fairness_tick() -> int | None:
    """The pk of the tick whose sample the fairness page shows (the newest tick). One indexed
    query: what a poll of the page asks before deciding to render anything."""
    return TickRecord.objects.order_by("-pk").values_list("pk", flat=True).first()


def fairness_report(now: datetime, *, shares: bool = True) -> FairnessReport:
    """Everything the fairness page shows, as of the newest tick and the 24 hours before ``now``;
    without ``shares`` (``GET fairness/``, which has no chart) the share series is not read:
    a day of the ticks' samples."""
    since = now - WINDOW
    threshold = STARVATION_PREEMPTIONS
    newest = TickRecord.objects.order_by("-pk").values_list("pk", "started_at", "fairness").first()
    report = FairnessReport(tick=None, tick_at=None, starvation_threshold=threshold, since=since)
    if newest is not None:
        report.tick, report.tick_at, sample = newest
        if sample and sample.get("version") == FAIRNESS_VERSION:
            report.bands = [band_view(b, data) for b, data in sample.get("bands", {}).items()]
    report.lost_work = lost_work(since)
    report.starving = starving_tasks(since, threshold)
    if shares:
        report.shares = share_series(since)
    return report
