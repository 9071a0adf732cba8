"""Unmet TPU demand and the provisioner's plan per scale group. Pure: no Django, no clock.

The provisioner (``scheduler.provisioning``) reads what waits and what exists, and this module
decides, per scale group, how many slices to create and which idle ones to let go:

- **Demand.** Pending TPU tasks of jobs our scheduler places go to the first scale group whose
  variant matches the job's (``auto`` matches any) and whose zone satisfies the job's hard
  ``zone`` constraint. A gang of *n* tasks needs ``ceil(n / hosts_per_slice)`` whole slices;
  solo tasks need hosts (``chips_per_host // chips`` tasks share one host).
- **Supply.** Slices still being created count as whole free slices; ready slices with no work
  are free whole slices; idle hosts of busy slices serve solo tasks. Tasks the current fleet can
  absorb (they only wait for the per-tick caps) therefore ask for nothing new.
- **Limits.** Never more than ``max_slices`` in the group (creating, ready, draining and
  deleting ones all count); at least ``min_slices``. After a failed creation the group waits
  ``backoff × 2^(failures - 1)`` (capped) before trying again.
- **Idle slices.** A ready slice with no work for ``idle_timeout`` is let go, oldest idle first,
  never below ``min_slices`` and never while the group has unmet demand; a slice already being
  drained is taken back (``reclaim``) before any new slice is created.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.core.types import ANY_VARIANT, GroupSpec

# Slice states that count towards a group's size.
LIVE_STATES = frozenset({"creating", "ready", "draining", "deleting"})


@dataclass(frozen=True, slots=True)
class PendingTpuJob:
    """A job our scheduler places with TPU tasks still pending (and not past their deadline)."""

    job: str
    variant: str | None
    chips: int
    pending: int
    gang: bool
    # Hard zone constraint values (empty: any zone).
    zones: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class SliceView:
    """One slice the provisioner knows. ``busy`` when any of its hosts holds work;
    ``free_hosts`` counts its hosts that joined as healthy workers and hold none."""

    name: str
    group: str
    state: str
    busy: bool = False
    free_hosts: int = 0
    idle_since_ms: int | None = None
    created_ms: int = 0


@dataclass(frozen=True, slots=True)
class GroupPlan:
    """What to do for one group this pass."""

    group: str
    demand_slices: int  # slices the waiting work needs beyond what exists
    create: int  # slices to request now
    release: tuple[str, ...] = ()  # idle slices to drain and delete
    reclaim: tuple[str, ...] = ()  # draining slices to bring back: the demand needs them
    backoff_until_ms: int | None = None  # when set, creation waits until then
    reason: str = ""


@dataclass(frozen=True, slots=True)
class FailureHistory:
    """Failed creations of a group since its last slice became ready."""

    failures: int = 0
    last_failure_ms: int | None = None


def group_for(job: PendingTpuJob, groups: Sequence[GroupSpec]) -> GroupSpec | None:
    """The first group (config order) whose variant and zone fit the job."""
    for group in groups:
        if job.variant not in (None, "", ANY_VARIANT) and job.variant != group.variant:
            continue
        if job.zones and group.zone not in job.zones:
            continue
        return group
    return None


def backoff_until(history: FailureHistory, base_seconds: int, max_seconds: int) -> int | None:
    """When a group with these failures may try again (epoch ms), or None when it may now."""
    if history.failures <= 0 or history.last_failure_ms is None:
        return None
    delay = min(base_seconds * 2 ** (history.failures - 1), max_seconds)
    return history.last_failure_ms + int(delay * 1000)


def slices_needed(group: GroupSpec, jobs: Sequence[PendingTpuJob], free_slices: int, free_hosts: int) -> int:
    """Slices the jobs need beyond ``free_slices`` whole free slices and ``free_hosts`` loose hosts."""
    hps = group.hosts_per_slice
    gang_slices = sum(math.ceil(j.pending / hps) for j in jobs if j.gang)
    solo_hosts = 0
    for job in jobs:
        if not job.gang:
            per_host = max(1, group.chips_per_host // max(1, job.chips))
            solo_hosts += math.ceil(job.pending / per_host)
    missing = max(0, gang_slices - free_slices)
    spare_slices = max(0, free_slices - gang_slices)
    missing_hosts = max(0, solo_hosts - spare_slices * hps - free_hosts)
    return missing + math.ceil(missing_hosts / hps)


def plan_group(
    group: GroupSpec,
    jobs: Sequence[PendingTpuJob],
    slices: Sequence[SliceView],
    history: FailureHistory,
    now_ms: int,
    *,
    idle_timeout_seconds: int,
    backoff_seconds: int,
    max_backoff_seconds: int,
) -> GroupPlan:
    """Create what the demand needs (within min/max and backoff); release what idled too long."""
    live = [s for s in slices if s.state in LIVE_STATES]
    creating = sum(1 for s in live if s.state == "creating")
    ready = [s for s in live if s.state == "ready"]
    free_slices = creating + sum(1 for s in ready if not s.busy)
    free_hosts = sum(s.free_hosts for s in ready if s.busy)
    # Slices being drained are taken back before anything new is created.
    draining = sorted(s.name for s in live if s.state == "draining" and not s.busy)
    need = slices_needed(group, jobs, free_slices, free_hosts)
    reclaim = tuple(draining[:need])
    demand = need - len(reclaim)
    wanted = max(demand, group.min_slices - len(live))
    room = max(0, group.max_slices - len(live))
    create = min(wanted, room)
    reason = ""
    if wanted > room:
        reason = f"at max_slices ({group.max_slices})"
    until = backoff_until(history, backoff_seconds, max_backoff_seconds)
    if create and until is not None and now_ms < until:
        reason = f"backing off after {history.failures} failed creation(s)"
        create = 0
    else:
        until = None

    release: list[str] = []
    if need == 0:
        keep = max(group.min_slices, 0)
        idle = sorted(
            (s for s in ready if not s.busy and s.idle_since_ms is not None),
            key=lambda s: (s.idle_since_ms, s.name),
        )
        removable = max(0, len(live) - keep)
        for s in idle:
            if len(release) >= removable:
                break
            if now_ms - s.idle_since_ms >= idle_timeout_seconds * 1000:
                release.append(s.name)
    return GroupPlan(group.name, demand, create, tuple(release), reclaim, until, reason)


@dataclass(frozen=True, slots=True)
class ProvisionPlan:
    groups: Mapping[str, GroupPlan] = field(default_factory=dict)
    # Jobs no group can serve (their variant or zone matches none).
    unserved: tuple[str, ...] = ()


def plan_provisioning(
    groups: Sequence[GroupSpec],
    jobs: Sequence[PendingTpuJob],
    slices: Sequence[SliceView],
    histories: Mapping[str, FailureHistory],
    now_ms: int,
    *,
    idle_timeout_seconds: int,
    backoff_seconds: int,
    max_backoff_seconds: int,
) -> ProvisionPlan:
    """One provisioning pass over every group."""
    by_group: dict[str, list[PendingTpuJob]] = {g.name: [] for g in groups}
    unserved = []
    for job in jobs:
        group = group_for(job, groups)
        if group is None:
            unserved.append(job.job)
        else:
            by_group[group.name].append(job)
    plans = {}
    for group in groups:
        plans[group.name] = plan_group(
            group,
            by_group[group.name],
            [s for s in slices if s.group == group.name],
            histories.get(group.name, FailureHistory()),
            now_ms,
            idle_timeout_seconds=idle_timeout_seconds,
            backoff_seconds=backoff_seconds,
            max_backoff_seconds=max_backoff_seconds,
        )
    return ProvisionPlan(plans, tuple(sorted(unserved)))
