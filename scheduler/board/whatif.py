"""The what-if basis as readers hold it: every worker as the newest tick left it (totals and
what its decision left free), who holds each worker, and each band's users in round-robin order
(written by :func:`scheduler.board.formats.whatif_basis_to_json`, read through
:func:`scheduler.board.read.whatif_basis`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings

from scheduler.core.bands import Band
from scheduler.core.feasibility import HeldWork
from scheduler.core.constraints import worker_attributes
from scheduler.core.types import Device, DeviceType, WorkerSpec
from scheduler.store.job_rows import device_from_columns


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
    # band rank, kind index, active tasks) after one another, users interned in ``users``, the
    # kinds of work (device with its variant resolved, gang) in ``kinds``; and the same summed
    # over the healthy workers, ``{(user index, band rank, kind index): tasks}``. Summed per
    # matching set by :meth:`holder_counts`.
    holders: tuple[int, ...] = ()
    users: tuple[str, ...] = ()
    kinds: tuple[tuple[Device, bool], ...] = ()
    holders_healthy: dict[tuple[int, int, int], int] = field(default_factory=dict, compare=False, repr=False)
    # ASSIGNED/BUILDING tasks per worker after the tick (the build-slot cap counts them), zeros
    # left out: the uplift preview places on ``free`` with them (``budgets.preview``).
    building: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    # Per-tick memos of the web side (this object is replaced with the tick): the holder counts
    # per matching set, and whatever ``jobs.whatif`` keeps per job shape.
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    def holder_counts(self, matching_ids: tuple[str, ...]) -> dict[HeldWork, int]:
        """``{held work (user, stamped band, kind): active tasks}`` on the workers
        ``matching_ids``, as the tick left them (``core.feasibility.rank_holders`` ranks them
        for one job); counted once per matching set (a shape matching every healthy worker, a
        plain CPU job on most clusters, reads the tick's sum over them)."""
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
                for i, u, band, k, n in zip(rows, rows, rows, rows, rows, strict=True):
                    if wanted[i]:
                        grouped[(u, band, k)] = grouped.get((u, band, k), 0) + n
            users, kinds = self.users, self.kinds
            counts = self.memo[key] = {
                HeldWork(users[u], Band(band), kinds[k][0], kinds[k][1], None): n for (u, band, k), n in grouped.items()
            }
        return counts


def parse_basis(tick: int, started_at: datetime, spend: dict | None, data: dict) -> WhatIfBasis:
    """The stored basis (``board.formats.whatif_basis_to_json``) as a :class:`WhatIfBasis`."""
    attributes = [{str(k): str(v) for k, v in a.items()} for a in data["attributes"]]
    workers, free, constraint_view = [], [], []
    cpu_type = DeviceType.CPU
    # A worker with every build slot taken has no room for a new task, whatever it has free.
    max_building = settings.MAX_BUILDING_TASKS
    # Devices and constraint views interned: 10,000 hosts share a handful of shapes, and building
    # one costs more than the rest of a row.
    devices: dict[tuple, Device] = {}
    views: dict[tuple, dict[str, str]] = {}
    building_of: dict[str, int] = {}
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
        if building:
            building_of[name] = building
        if max_building and building >= max_building:
            free_cpu = free_mem = free_chips = 0
        if device.type is cpu_type:
            left = device
        else:
            chips = free_chips if free_chips > 0 else 0
            left = devices.get((dtype, variant, -1 - chips))
            if left is None:
                left = devices[(dtype, variant, -1 - chips)] = Device(device.type, device.variant, chips)
        free.append(
            WorkerSpec(name, free_cpu if free_cpu > 0 else 0, free_mem if free_mem > 0 else 0, left, attrs, healthy)
        )
    return WhatIfBasis(
        tick=tick,
        tick_at=started_at,
        spend={str(u): int(v) for u, v in (spend or {}).items()},
        queue={int(rank): users for rank, users in data["queue"].items()},
        workers=tuple(workers),
        free=tuple(free),
        attributes=tuple(constraint_view),
        free_by_name={w.id: w for w in free},
        holders=tuple(data["holders"]),
        users=tuple(data["users"]),
        kinds=tuple(
            (device_from_columns(dtype, variant, 0 if dtype == DeviceType.CPU.value else 1), bool(gang))
            for dtype, variant, gang in data["kinds"]
        ),
        holders_healthy={(u, band, k): n for u, band, k, n in data["holders_healthy"]},
        building=building_of,
    )
