"""Prometheus metrics: events counted where they happen, state read from the database at scrape.

Two sources, one exposition (``/metrics``, served by ``scheduler.views.health``):

- **Events** (``scheduler.foundation.instruments``) (ticks and their phase durations, assignments, preemptions, budget downgrades,
  waits to first start, failed deliveries, submissions) are counters and histograms updated by
  the process where the event happens: a Celery worker for ticks and deliveries, a gunicorn
  worker for submissions. prometheus-client's multiprocess mode keeps each process's values in
  files under ``PROMETHEUS_MULTIPROC_DIR`` (``IRIS_DATA_DIR/metrics`` by default, set in
  settings) and the scrape sums them, so any web process answers for all processes on its host.
  Counters are incremented after the tick's transaction commits, so a rolled-back tick counts
  only as ``iris_ticks_total{outcome="failed"}``.
- **State** (pending and running tasks per band, downgraded tasks, the outbox, workers, spend and
  limits, recent preemptions per user, the newest tick's time) is computed at scrape time from
  the database by :class:`DatabaseCollector`: exact whichever process answers, and nothing to
  keep in step. Its queries are a fixed number (about ten) whatever the cluster's size.

Band labels are wire names (``system``, ``production``, ``interactive``, ``batch``). Per-user
series are bounded: the ``IRIS_METRICS_TOP_USERS`` biggest spenders (or most preempted users)
are named, the rest are summed into ``user="__other__"``.
"""

from __future__ import annotations

import logging
import os
from collections import Counter as Tally
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, F
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from scheduler.execution.outbox import stuck_intents
from scheduler.board.read import queue_index
from scheduler.core.bands import Band
from scheduler.core.types import ACTIVE_STATES
from scheduler.models import DispatchIntent, PreemptionEvent, Task, TickRecord, Worker
from scheduler.foundation.instruments import EVENTS, band_label

log = logging.getLogger(__name__)

ACTIVE_VALUES = sorted(s.value for s in ACTIVE_STATES)
OTHER_USERS = "__other__"
# --- state, read at scrape time -------------------------------------------------------------------


def top_users(values: dict[str, int | float], n: int) -> tuple[list[tuple[str, float]], float]:
    """The ``n`` largest ``(user, value)`` pairs (ties by name) and the sum of the rest."""
    ranked = sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))
    return ranked[:n], float(sum(v for _, v in ranked[n:]))


class DatabaseCollector:
    """Gauges computed from the database when /metrics is scraped (see the module docstring)."""

    def describe(self):
        return []  # not registered for its names: collected on each scrape only

    def collect(self):
        up = GaugeMetricFamily("iris_database_up", "1 when the metrics' database queries succeeded at this scrape.")
        try:
            families = list(self.families())
        except Exception:  # noqa: BLE001 -- a scrape must answer even when the database does not
            log.warning("metrics: database queries failed", exc_info=True)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def families(self):
        now = timezone.now()

        pending = GaugeMetricFamily(
            "iris_pending_tasks", "Pending tasks by effective band, as the newest tick queued them.", labels=["band"]
        )
        counts = queue_index().band_counts()
        for band in Band:
            pending.add_metric([band.wire], counts.get(int(band), 0))
        yield pending

        running = GaugeMetricFamily(
            "iris_running_tasks",
            "Tasks placed and not finished (assigned, building, running) by the band stamped at placement.",
            labels=["band"],
        )
        active = dict(
            Task.objects.filter(state__in=ACTIVE_VALUES).order_by().values_list("band").annotate(n=Count("id"))
        )
        for band in Band:
            running.add_metric([band.wire], active.get(int(band), 0))
        yield running

        downgraded = GaugeMetricFamily(
            "iris_downgraded_tasks",
            "Placed, unfinished tasks running in a lower band than their job requested (the budget rule).",
            labels=["requested_band", "band"],
        )
        rows = (
            Task.objects.filter(state__in=ACTIVE_VALUES, band__isnull=False)
            .exclude(band=F("job__band"))
            .order_by()
            .values_list("job__band", "band")
            .annotate(n=Count("id"))
        )
        for requested, band, n in rows:
            downgraded.add_metric([band_label(requested), band_label(band)], n)
        yield downgraded

        intents = GaugeMetricFamily(
            "iris_dispatch_intents",
            "Outbox intents not done, by state (pending, delivered, failed) and backend.",
            labels=["state", "backend"],
        )
        open_intents = DispatchIntent.objects.exclude(state=DispatchIntent.State.DONE).order_by()
        # By the worker's backend; only intents with no worker (work a backend such as Kueue
        # places itself) need the join to their job, which is costly over a full outbox.
        by_state: Tally = Tally()
        for state, backend, n in (
            open_intents.filter(worker__isnull=False).values_list("state", "worker__backend").annotate(n=Count("id"))
        ):
            by_state[(state, backend)] += n
        for state, backend, n in (
            open_intents.filter(worker__isnull=True).values_list("state", "task__job__route").annotate(n=Count("id"))
        ):
            by_state[(state, backend or "unknown")] += n
        for (state, backend), n in sorted(by_state.items()):
            intents.add_metric([state, backend], n)
        yield intents

        stuck = GaugeMetricFamily(
            "iris_dispatch_stuck_intents",
            "Intents an operator should look at: failed, retrying after an error, "
            "or not done IRIS_DISPATCH_STUCK_SECONDS after they were written.",
        )
        stuck.add_metric([], stuck_intents(now).count())
        yield stuck

        workers = GaugeMetricFamily(
            "iris_workers",
            "Registered workers by backend, device type and health (healthy, draining, unhealthy).",
            labels=["backend", "device", "health"],
        )
        by_health: Tally = Tally()
        for backend, device, healthy, draining, n in (
            Worker.objects.order_by()
            .values_list("backend", "device_type", "healthy", "draining")
            .annotate(n=Count("id"))
        ):
            by_health[(backend, device, "unhealthy" if not healthy else "draining" if draining else "healthy")] += n
        for (backend, device, health), n in sorted(by_health.items()):
            workers.add_metric([backend, device, health], n)
        yield workers

        newest = TickRecord.objects.order_by("-pk").values_list("started_at", "spend", "limits").first()
        last_tick = GaugeMetricFamily(
            "iris_last_tick_timestamp_seconds", "Unix time the newest recorded tick started (0: none yet)."
        )
        last_tick.add_metric([], newest[0].timestamp() if newest else 0)
        yield last_tick

        spend, limits = (dict(newest[1] or {}), dict(newest[2] or {})) if newest else ({}, {})
        shown, rest = top_users(spend, settings.METRICS_TOP_USERS)
        spend_family = GaugeMetricFamily(
            "iris_user_spend_points",
            "Spend (resource-value points) of the biggest spenders at the newest tick; "
            f'the rest summed as user="{OTHER_USERS}".',
            labels=["user"],
        )
        limit_family = GaugeMetricFamily(
            "iris_user_budget_limit_points",
            "Effective budget limit of the users named in iris_user_spend_points (0 = unlimited).",
            labels=["user"],
        )
        for user, value in shown:
            spend_family.add_metric([user], value)
            limit_family.add_metric([user], limits.get(user, 0))
        spend_family.add_metric([OTHER_USERS], rest)
        yield spend_family
        yield limit_family
        over = GaugeMetricFamily("iris_users_over_budget", "Users whose spend exceeds their limit at the newest tick.")
        over.add_metric([], sum(1 for u, s in spend.items() if limits.get(u, 0) and s > limits[u]))
        yield over

        window = settings.METRICS_PREEMPTION_WINDOW_SECONDS
        preempted = GaugeMetricFamily(
            "iris_user_preemptions",
            f"Preemptions suffered per user in the last IRIS_METRICS_PREEMPTION_WINDOW_SECONDS "
            f"({window} s), the most preempted users named, the rest summed.",
            labels=["user"],
        )
        per_user = dict(
            PreemptionEvent.objects.filter(created_at__gte=now - timedelta(seconds=window))
            .order_by()
            .values_list("victim_user")
            .annotate(n=Count("*"))
        )
        shown, rest = top_users(per_user, settings.METRICS_TOP_USERS)
        for user, n in shown:
            preempted.add_metric([user], n)
        preempted.add_metric([OTHER_USERS], rest)
        yield preempted


def exposition() -> bytes:
    """The /metrics body: every process's events on this host, plus the database's state."""
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)
    else:
        registry.register(_Events())
    registry.register(DatabaseCollector())
    return generate_latest(registry)


class _Events:
    """This process's event metrics (when multiprocess mode is off)."""

    def collect(self):
        return EVENTS.collect()
