"""TPU slice provisioning (Celery beat, every ``IRIS_TPU_PROVISION_SECONDS``): tracks slices until
ready, plans per scale group from the unmet demand (:mod:`scheduler.core.demand`), creates and
deletes slices through the TPU API, and records failures (per slice, and as the group's
backoff) and the outcome.

Every API call is outside any transaction, and every database write is a compare-and-set or a
single row's update, so a failed or timed-out call leaves the state the next pass continues from.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Count, Max, Q
from django.utils import timezone

from scheduler.backends.tpu import SliceRequest, TpuApi, TpuApiError
from scheduler.foundation.cluster_config import ClusterConfig, cluster_config, group_specs
from scheduler.core.demand import FailureHistory, PendingTpuJob, SliceView, plan_provisioning
from scheduler.core.types import TaskState
from scheduler.execution.workers import declare_worker_lost
from scheduler.models import Attempt, Job, TpuSlice, Worker
from scheduler.provisioning.health import KUBERNETES, TPU, record_error, record_ok

log = logging.getLogger(__name__)

LIVE_SLICE_STATES = (TpuSlice.State.CREATING, TpuSlice.State.READY, TpuSlice.State.DRAINING, TpuSlice.State.DELETING)


def tpu_slices(*, include_finished: bool = False):
    """TPU slices, newest first; finished (deleted, failed) ones only when asked."""
    slices = TpuSlice.objects.order_by("-created_at", "-pk")
    if not include_finished:
        slices = slices.filter(state__in=LIVE_SLICE_STATES)
    return slices


_api_cache: dict[str, Any] = {}


def tpu_api(config: Any):
    """The TPU API client for this config (one per process and config)."""
    cached = _api_cache.get("api")
    if cached is None or cached.config != config:
        cached = _api_cache["api"] = TpuApi(config)
    return cached


@dataclass
class TpuPass:
    enabled: bool = True
    created: list[str] = field(default_factory=list)
    ready: list[str] = field(default_factory=list)
    draining: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    unserved: list[str] = field(default_factory=list)


def slice_name(group: str) -> str:
    """A fresh node id: ``iris-<group>-<6 hex>`` (lower-case, at most 63 characters)."""
    return f"iris-{group}"[:55].rstrip("-") + f"-{secrets.token_hex(3)}"


def epoch_ms(at: datetime | None) -> int | None:
    return None if at is None else int(at.timestamp() * 1000)


def provision_tpu(now: datetime | None = None) -> TpuPass:
    """One provisioning pass (see the module docstring). Never raises on API errors."""
    now = now or timezone.now()
    config = cluster_config()
    tpu = config.tpu
    if not tpu.enabled:
        record_ok(TPU, now, {"reason": "disabled in the cluster config"}, enabled=False)
        return TpuPass(enabled=False)
    api = tpu_api(tpu)
    result = TpuPass()
    track_slices(api, config, now, result)
    views = slice_views(now)
    plan = plan_provisioning(
        group_specs(config),
        pending_tpu_jobs(epoch_ms(now)),
        views,
        failure_histories(),
        epoch_ms(now),
        idle_timeout_seconds=tpu.idle_timeout_seconds,
        backoff_seconds=tpu.backoff_seconds,
        max_backoff_seconds=tpu.max_backoff_seconds,
    )
    result.unserved = list(plan.unserved)
    release_idle(api, plan, views, now, result)
    groups = {g.name: g for g in config.scale_groups}
    for name, group_plan in plan.groups.items():
        group = groups[name]
        for _ in range(group_plan.create):
            create_slice(api, tpu, group, now, result)
        result.groups[name] = {
            "demand_slices": group_plan.demand_slices,
            "created": group_plan.create,
            "reason": group_plan.reason,
            "backoff_until": (
                datetime.fromtimestamp(group_plan.backoff_until_ms / 1000, tz=now.tzinfo).isoformat()
                if group_plan.backoff_until_ms
                else None
            ),
        }
    sweep_orphans(api, config, result)
    counts = dict(TpuSlice.objects.order_by().values_list("state").annotate(n=Count("pk")))
    detail = {
        "project": tpu.project,
        "provisioning": tpu.provisioning,
        "slices": {state: counts.get(state, 0) for state in TpuSlice.State.values},
        "groups": result.groups,
        "unserved_jobs": result.unserved[:20],
    }
    if result.errors:
        record_error(TPU, now, "; ".join(result.errors)[:4000], detail)
    else:
        record_ok(TPU, now, detail)
    return result


def track_slices(api: Any, config: ClusterConfig, now: datetime, result: TpuPass) -> None:
    """Move creating slices to ready or failed, deleting ones to deleted, and notice ready
    slices that went away (preempted spot capacity)."""
    tpu = config.tpu
    for row in TpuSlice.objects.filter(state__in=LIVE_SLICE_STATES).order_by("pk"):
        try:
            status = api.status(row.name, row.zone, row.provisioning, row.operation)
        except TpuApiError as exc:
            result.errors.append(str(exc))
            TpuSlice.objects.filter(pk=row.pk).update(last_error=str(exc)[:2000])
            continue
        if row.state == TpuSlice.State.CREATING:
            if status.state == "ready":
                TpuSlice.objects.filter(pk=row.pk, state=row.state).update(
                    state=TpuSlice.State.READY, ready_at=now, idle_since=now, last_error=""
                )
                result.ready.append(row.name)
            elif status.state in ("failed", "gone"):
                fail_slice(api, row, status.error or "creation failed", now, result)
            elif (now - row.created_at).total_seconds() > tpu.ready_timeout_seconds:
                fail_slice(api, row, f"not ready after {tpu.ready_timeout_seconds}s", now, result, delete=True)
        elif row.state == TpuSlice.State.DELETING:
            if status.state in ("gone", "failed"):
                TpuSlice.objects.filter(pk=row.pk, state=row.state).update(
                    state=TpuSlice.State.DELETED, finished_at=now
                )
                result.deleted.append(row.name)
        elif status.state in ("gone", "failed"):
            # A ready slice vanished (spot preemption, maintenance): its hosts are lost.
            TpuSlice.objects.filter(pk=row.pk, state=row.state).update(
                state=TpuSlice.State.DELETED, finished_at=now, last_error=status.error
            )
            lose_slice_workers(row.name, f"TPU slice {row.name} is gone ({status.error or 'not found'})", now)
            result.deleted.append(row.name)


def fail_slice(api: Any, row: TpuSlice, error: str, now: datetime, result: TpuPass, *, delete: bool = False) -> None:
    TpuSlice.objects.filter(pk=row.pk, state=row.state).update(
        state=TpuSlice.State.FAILED, finished_at=now, last_error=error[:2000]
    )
    result.failed.append(row.name)
    result.errors.append(f"slice {row.name} ({row.scale_group}): {error}")
    if delete or row.provisioning == "queued_resources":
        try:
            api.delete(row.name, row.zone, row.provisioning)
        except TpuApiError as exc:
            result.errors.append(str(exc))  # the orphan sweep deletes it later


def slice_workers() -> dict[str, list[tuple[int, bool]]]:
    """``{tpu-name: [(worker pk, usable)]}`` for workers that joined from slices (one query)."""
    by_slice: dict[str, list[tuple[int, bool]]] = {}
    for pk, attributes, healthy, draining in Worker.objects.exclude(backend=KUBERNETES).values_list(
        "pk", "attributes", "healthy", "draining"
    ):
        name = (attributes or {}).get("tpu-name")
        if name:
            by_slice.setdefault(str(name), []).append((pk, healthy and not draining))
    return by_slice


def slice_views(now: datetime) -> list[SliceView]:
    """Every live slice with whether its hosts hold work; idle timers updated (three queries)."""
    workers = slice_workers()
    busy_workers = set(
        Attempt.objects.filter(finished_at__isnull=True, worker__isnull=False).values_list("worker_id", flat=True)
    )
    views = []
    became_busy, became_idle = [], []
    for row in TpuSlice.objects.filter(state__in=LIVE_SLICE_STATES).order_by("pk"):
        hosts = workers.get(row.name, [])
        busy = any(pk in busy_workers for pk, _ in hosts)
        free = sum(1 for pk, usable in hosts if usable and pk not in busy_workers)
        idle_since = row.idle_since
        if row.state in (TpuSlice.State.READY, TpuSlice.State.DRAINING):
            if busy and idle_since is not None:
                became_busy.append(row.pk)
                idle_since = None
            elif not busy and idle_since is None:
                became_idle.append(row.pk)
                idle_since = now
        views.append(
            SliceView(row.name, row.scale_group, row.state, busy, free, epoch_ms(idle_since), epoch_ms(row.created_at))
        )
    if became_busy:
        TpuSlice.objects.filter(pk__in=became_busy).update(idle_since=None)
    if became_idle:
        TpuSlice.objects.filter(pk__in=became_idle, idle_since__isnull=True).update(idle_since=now)
    return views


def pending_tpu_jobs(now_ms: int) -> list[PendingTpuJob]:
    """Jobs our scheduler places with TPU tasks pending and not expired (one grouped query)."""
    rows = (
        Job.objects.filter(device_type="tpu", tasks__state=TaskState.PENDING.value)
        .filter(finished_state__isnull=True)
        .exclude(route=KUBERNETES)
        .filter(Q(scheduling_deadline_ms__isnull=True) | Q(scheduling_deadline_ms__gt=now_ms))
        .values("name", "device_variant", "device_count", "group_by", "constraints")
        .annotate(pending=Count("tasks"))
        .order_by("pk")
    )
    jobs = []
    for row in rows:
        zones: set[str] = set()
        for c in row["constraints"] or []:
            if c.get("key") == "zone" and not c.get("soft"):
                value = c.get("value")
                if c.get("op") == "eq" and isinstance(value, str):
                    zones.add(value)
                elif c.get("op") == "in" and isinstance(value, list):
                    zones.update(str(v) for v in value)
        jobs.append(
            PendingTpuJob(
                job=row["name"],
                variant=row["device_variant"] or None,
                chips=row["device_count"],
                pending=row["pending"],
                gang=bool(row["group_by"]),
                zones=frozenset(zones),
            )
        )
    return jobs


def failure_histories() -> dict[str, FailureHistory]:
    """Per group: failed creations since its last slice became ready (two queries)."""
    last_ready = dict(
        TpuSlice.objects.filter(ready_at__isnull=False)
        .order_by()
        .values_list("scale_group")
        .annotate(at=Max("ready_at"))
    )
    histories: dict[str, FailureHistory] = {}
    for group, created_at, finished_at in TpuSlice.objects.filter(state=TpuSlice.State.FAILED).values_list(
        "scale_group", "created_at", "finished_at"
    ):
        if group in last_ready and created_at <= last_ready[group]:
            continue
        previous = histories.get(group, FailureHistory())
        at = epoch_ms(finished_at or created_at)
        histories[group] = FailureHistory(previous.failures + 1, max(previous.last_failure_ms or 0, at))
    return histories


def create_slice(api: Any, tpu: Any, group: Any, now: datetime, result: TpuPass) -> None:
    """Write the slice row first, then ask the API: a timeout still leaves the slice known."""
    name = slice_name(group.name)
    row = TpuSlice.objects.create(
        name=name,
        scale_group=group.name,
        zone=group.zone,
        accelerator_type=group.accelerator_type,
        provisioning=tpu.provisioning,
        state=TpuSlice.State.CREATING,
        created_at=now,
    )
    request = SliceRequest(
        name=name,
        zone=group.zone,
        accelerator_type=group.accelerator_type,
        runtime_version=group.runtime_version,
        spot=group.spot,
        scale_group=group.name,
        variant=group.device_variant,
        chips_per_host=group.chips_per_host,
    )
    try:
        operation = api.create(request, tpu.provisioning)
    except TpuApiError as exc:
        fail_slice(api, row, str(exc), now, result)
        return
    TpuSlice.objects.filter(pk=row.pk).update(operation=operation)
    result.created.append(name)
    log.info("TPU slice %s requested for scale group %s", name, group.name)


def release_idle(api: Any, plan: Any, views: list[SliceView], now: datetime, result: TpuPass) -> None:
    """Two steps, so the tick cannot place work on a slice being deleted: an idle slice past the
    timeout is first DRAINING (its workers take no new work); on the next pass, if still idle,
    it is deleted, else it is back to READY."""
    by_name = {v.name: v for v in views}
    workers = slice_workers()
    reclaimed = {name for group_plan in plan.groups.values() for name in group_plan.reclaim}
    for row in TpuSlice.objects.filter(state=TpuSlice.State.DRAINING).order_by("pk"):
        view = by_name.get(row.name)
        pks = [pk for pk, _ in workers.get(row.name, [])]
        if (view is not None and view.busy) or row.name in reclaimed:
            with transaction.atomic():
                TpuSlice.objects.filter(pk=row.pk, state=row.state).update(state=TpuSlice.State.READY)
                Worker.objects.filter(pk__in=pks).update(draining=False)
            continue
        try:
            api.delete(row.name, row.zone, row.provisioning)
        except TpuApiError as exc:
            result.errors.append(str(exc))
            TpuSlice.objects.filter(pk=row.pk).update(last_error=str(exc)[:2000])
            continue
        TpuSlice.objects.filter(pk=row.pk, state=row.state).update(state=TpuSlice.State.DELETING)
        lose_slice_workers(row.name, f"TPU slice {row.name} deleted after being idle", now)
        result.deleted.append(row.name)
    for group_plan in plan.groups.values():
        for name in group_plan.release:
            pks = [pk for pk, _ in workers.get(name, [])]
            with transaction.atomic():
                if TpuSlice.objects.filter(name=name, state=TpuSlice.State.READY).update(state=TpuSlice.State.DRAINING):
                    Worker.objects.filter(pk__in=pks).update(draining=True)
                    result.draining.append(name)


def lose_slice_workers(name: str, reason: str, now: datetime) -> None:
    """The slice's hosts are gone: their workers are lost (attempts end WORKER_FAILED, retried)."""
    for pk, _ in slice_workers().get(name, []):
        declare_worker_lost(pk, now, reason)


def sweep_orphans(api: Any, config: ClusterConfig, result: TpuPass) -> None:
    """Delete managed nodes that no live slice row claims (e.g. created by a request that timed
    out, then recorded as failed). One list per zone in use."""
    live = set(TpuSlice.objects.filter(state__in=LIVE_SLICE_STATES).values_list("name", flat=True))
    zones = sorted({g.zone for g in config.scale_groups})
    for zone in zones:
        try:
            names = api.managed(zone)
        except TpuApiError as exc:
            result.errors.append(str(exc))
            continue
        for name in names:
            if name in live:
                continue
            known = TpuSlice.objects.filter(name=name).values_list("provisioning", flat=True).first()
            try:
                api.delete(name, zone, known or "nodes")
            except TpuApiError as exc:
                result.errors.append(str(exc))
                continue
            log.warning("deleted orphan TPU node %s in %s", name, zone)
            result.deleted.append(name)
