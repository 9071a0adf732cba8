"""Read side of ticks: recent tick records, the newest tick's what-if basis, task counts,
preemption history.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from django.conf import settings
from django.db.models import Count, Q, QuerySet

from scheduler.core.bands import Band
from scheduler.core.decision import collector_paused
from scheduler.core.placement import worker_attributes
from scheduler.core.types import Device, DeviceType, WorkerSpec
from scheduler.models import PreemptionEvent, Task, TickRecord
from scheduler.store.cluster_rows import device_from_columns
from scheduler.store.states import ACTIVE_VALUES
from scheduler.tick.explanation import WHATIF_BASIS_VERSION


@dataclass(frozen=True)
class WhatIfBasis:
    """The newest tick's what-if basis, parsed: every worker as the tick read it (``workers``,
    a draining worker counting as unhealthy) and as a new task finds it (``free``: capacity
    is what the decision left free, none where every build slot is taken), each band's ``[user, pending]`` in round-robin order
    (``queue``), and the spend the tick decided with."""

    tick: int
    tick_at: datetime
    spend: dict[str, int]
    queue: dict[int, list[list]]
    workers: tuple[WorkerSpec, ...]
    free: tuple[WorkerSpec, ...]
    # Each worker's attributes as constraints see them (``core.placement.worker_attributes``).
    attributes: tuple[dict[str, str], ...] = ()
    free_by_name: dict[str, WorkerSpec] = field(default_factory=dict, compare=False, repr=False)
    # Who holds each worker after the tick's writes, flat: (worker index, user index, stamped
    # band rank, active tasks) after one another, users interned in ``users``; and the same
    # summed over the healthy workers, ``{(user index, band rank): tasks}``. Summed per
    # matching set by :meth:`holder_counts`.
    holders: tuple[int, ...] = ()
    users: tuple[str, ...] = ()
    holders_healthy: dict[tuple[int, int], int] = field(default_factory=dict, compare=False, repr=False)
    # Per-tick memos of the web side (this object is replaced with the tick): the holder counts
    # per matching set, and whatever ``jobs.whatif`` keeps per job shape.
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    def holder_counts(self, matching_ids: tuple[str, ...]) -> dict[tuple[str, Band], int]:
        """``{(user, stamped band): active tasks}`` on the workers ``matching_ids``, as the tick
        left them; counted once per matching set (a shape matching every healthy worker, a plain
        CPU job on most clusters, reads the tick's sum over them)."""
        healthy = self.memo.get("healthy")
        if healthy is None:
            healthy = self.memo["healthy"] = sum(1 for w in self.workers if w.healthy)
        everyone = bool(matching_ids) and len(matching_ids) == healthy
        key = ("holders", "healthy" if everyone else matching_ids)
        counts = self.memo.get(key)
        if counts is None:
            if everyone:
                grouped = self.holders_healthy
            else:
                names = set(matching_ids)
                wanted = [w.id in names for w in self.workers]
                grouped = {}
                rows = iter(self.holders)
                for i, u, band, n in zip(rows, rows, rows, rows, strict=True):
                    if wanted[i]:
                        grouped[(u, band)] = grouped.get((u, band), 0) + n
            users = self.users
            counts = self.memo[key] = {(users[u], Band(band)): n for (u, band), n in grouped.items()}
        return counts


@dataclass(frozen=True, slots=True)
class QueueTick:
    """The newest tick with a stored queue: its (pk, now_ms) (``tick``), and the (pk, now_ms)
    of the record holding its explanation and what-if basis (``holder``): the tick itself, or
    the earlier one it names because it reused that tick's decision (``explanation_tick``).
    Both pairs are cache keys: a pk alone may come back in a test database."""

    tick: tuple[int, int]
    holder: tuple[int, int]


def newest_queue_tick() -> QueueTick | None:
    """The newest tick that stored a queue explanation or names the tick holding one. One query."""
    row = (
        TickRecord.objects.filter(Q(explanation__isnull=False) | Q(explanation_tick__isnull=False))
        .order_by("-pk")
        .values_list("pk", "now_ms", "explanation_tick", "explanation_tick__now_ms")
        .first()
    )
    if row is None:
        return None
    pk, now, holder, holder_now = row
    return QueueTick((pk, now), (holder, holder_now) if holder is not None else (pk, now))


# Only the newest basis is kept (with the holder's key it was parsed from): ticks replace it
# every few seconds; a tick that reused its decision shares the previous tick's parse.
_basis_cache: dict[tuple, WhatIfBasis] = {}


def whatif_basis() -> WhatIfBasis | None:
    """The newest tick's what-if basis, or None before any tick recorded one. One query, plus
    one (and a parse of a few milliseconds per thousand workers) the first time a process sees
    a tick (a tick reusing the parsed tick's decision costs the query, not the parse)."""
    # The newest tick that kept its explanation (as the queue reads): its basis or none, never
    # an older tick's (a tick written by an older release stores none and clears none).
    newest = newest_queue_tick()
    if newest is None:
        return None
    key = newest.tick
    cached = _basis_cache.get(key)
    if cached is not None:
        return cached
    parsed = _basis_cache.get(("holder", newest.holder))
    if parsed is not None:
        row = TickRecord.objects.filter(pk=key[0]).values_list("started_at", "spend").first()
        if row is None:
            return None
        basis = replace(parsed, tick=key[0], tick_at=row[0], spend={str(u): int(v) for u, v in (row[1] or {}).items()})
        _remember_basis(key, newest.holder, basis)
        return basis
    # The parsed JSON and some 20,000 objects built from it, beside the process's live data and
    # no cycles among them: as in the decision, collections on the way would only rescan what
    # is live.
    with collector_paused():
        row = TickRecord.objects.filter(pk=key[0]).values_list(
            "started_at", "spend", "whatif_basis", "explanation_tick__whatif_basis").first()
        if row is not None:
            row = (row[0], row[1], row[2] if row[2] is not None else row[3])
        if row is None or row[2] is None or row[2].get("version") != WHATIF_BASIS_VERSION:
            return None  # a newer tick cleared it between the two reads, or an older release stored it
        started_at, spend, data = row
        basis = parse_basis(key[0], started_at, spend, data)
    _remember_basis(key, newest.holder, basis)
    return basis


def _remember_basis(key: tuple[int, int], holder: tuple[int, int], basis: WhatIfBasis) -> None:
    _basis_cache.clear()
    _basis_cache[key] = basis
    _basis_cache[("holder", holder)] = basis


def parse_basis(tick: int, started_at: datetime, spend: dict | None, data: dict) -> WhatIfBasis:
    """The stored basis (``tick.explanation.whatif_basis_to_json``) as a :class:`WhatIfBasis`."""
    attributes = [{str(k): str(v) for k, v in a.items()} for a in data["attributes"]]
    workers, free, constraint_view = [], [], []
    cpu_type = DeviceType.CPU
    # A worker with every build slot taken has no room for a new task, whatever it has free.
    max_building = settings.MAX_BUILDING_TASKS
    # Devices and constraint views interned: 10,000 hosts share a handful of shapes, and building
    # one costs more than the rest of a row.
    devices: dict[tuple, Device] = {}
    views: dict[tuple, dict[str, str]] = {}
    for name, cpu, mem, dtype, variant, count, a, healthy, free_cpu, free_mem, free_chips, building in data["workers"]:
        device = devices.get((dtype, variant, count))
        if device is None:
            device = devices[(dtype, variant, count)] = device_from_columns(dtype, variant, count)
        attrs = attributes[a]
        workers.append(WorkerSpec(name, cpu, mem, device, attrs, healthy))
        view = views.get((a, dtype, variant))
        if view is None:
            view = views[(a, dtype, variant)] = worker_attributes(attrs, device.type, device.variant)
        constraint_view.append(view)
        if max_building and building >= max_building:
            free_cpu = free_mem = free_chips = 0
        if device.type is cpu_type:
            left = device
        else:
            chips = free_chips if free_chips > 0 else 0
            left = devices.get((dtype, variant, -1 - chips))
            if left is None:
                left = devices[(dtype, variant, -1 - chips)] = Device(device.type, device.variant, chips)
        free.append(WorkerSpec(name, free_cpu if free_cpu > 0 else 0, free_mem if free_mem > 0 else 0, left, attrs,
                               healthy))
    return WhatIfBasis(
        tick=tick, tick_at=started_at, spend={str(u): int(v) for u, v in (spend or {}).items()},
        queue={int(rank): users for rank, users in data["queue"].items()}, workers=tuple(workers), free=tuple(free),
        attributes=tuple(constraint_view), free_by_name={w.id: w for w in free},
        holders=tuple(data["holders"]), users=tuple(data["users"]),
        holders_healthy={(u, band): n for u, band, n in data["holders_healthy"]},
    )


def recent_ticks(limit: int = 20) -> list[TickRecord]:
    return list(TickRecord.objects.defer("explanation", "whatif_basis", "spend", "limits").order_by("-started_at")[:limit])


def task_counts_by_state() -> dict[str, int]:
    """``{state: tasks}`` over the task table, live. The scheduler page shows the tick's
    (``scheduler.tick.aggregates``); tests compare the two right after a tick."""
    return dict(Task.objects.values_list("state").annotate(n=Count("id")).values_list("state", "n"))


def preemptions(
    *, user: str | None = None, band: Band | None = None, since: datetime | None = None, job: str | None = None
) -> QuerySet[PreemptionEvent]:
    """Preemption events newest first; filters apply to the victim (its user, stamped band, job)."""
    qs = PreemptionEvent.objects.select_related("victim__job", "preemptor__job", "worker").order_by(
        "-created_at", "-pk"
    )
    if user:
        qs = qs.filter(victim__job__user=user)
    if band is not None:
        qs = qs.filter(victim_band=int(band))
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if job:
        qs = qs.filter(victim__job__name=job)
    return qs


# Appended for the console (scheduler/views/). Each function runs the fixed number of queries its
# docstring names, whatever the number of tasks, jobs, users or workers.

# A job preempted at least this many times is flagged on the preemption history: once is the
# policy working; three times means the job keeps losing its place and its owner should know why.
REPEATED_PREEMPTIONS = 3


def preemption_counts(events: QuerySet[PreemptionEvent], limit: int = 20) -> list[dict]:
    """Victim jobs of ``events`` with the most preemptions first. One grouped query.

    ``repeated`` flags jobs preempted at least ``REPEATED_PREEMPTIONS`` times.
    """
    rows = (
        events.order_by().values("victim__job__name", "victim__job__user")
        .annotate(n=Count("id"), tasks=Count("victim", distinct=True))
        .order_by("-n", "victim__job__name")[:limit]
    )
    return [
        {"job": r["victim__job__name"], "user": r["victim__job__user"], "count": r["n"], "tasks": r["tasks"],
         "repeated": r["n"] >= REPEATED_PREEMPTIONS}
        for r in rows
    ]


def running_by_band_user() -> dict[tuple[int, str], int]:
    """``{(stamped band rank, user): active tasks}``, live. One grouped query. The scheduler page
    shows the tick's count of the same (``scheduler.tick.aggregates``); tests compare them."""
    return {
        (band, user): n
        for band, user, n in Task.objects.filter(state__in=ACTIVE_VALUES)
        .order_by().values_list("band", "job__user").annotate(n=Count("id"))
        if band is not None
    }


def newest_preemption() -> int | None:
    """The pk of the newest preemption event (pollers compare it). One query."""
    return PreemptionEvent.objects.order_by("-pk").values_list("pk", flat=True).first()
