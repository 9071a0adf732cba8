"""Routing jobs to a backend, and the Kubernetes promotion drain. Pure: no Django, no clock.

On Kubernetes our scheduler does not place tasks: Kueue admits pods. What the tick does for
tasks routed there is decide *which pending work becomes pods, in what order, how fast*:

1. Units. A solo task is one unit once its previous attempt has finished. A gang (coscheduled
   job) is one unit, promoted whole, and only once *all* its tasks are pending and none still
   has an unfinished attempt (Kueue's pod group needs every member at once).
2. Ranking. Each unit's band is its job's *effective* band this tick (requested band, or BATCH
   while the user is over budget), exactly as the core computes it for placement. Within a band
   units keep the core's order (deeper job, older tree, older submission, job id, task index),
   then round-robin across users, lower spend first; a gang takes one turn.
3. The rate cap, a token bucket (default 128 pods per minute, burst 128). Units are taken in
   rank order while they fit what is left. A gang larger than the whole cap goes alone: it is
   promoted only when the bucket is full and nothing else was promoted this tick, and while
   it waits nothing behind it is promoted (so the bucket fills and it goes next). A gang that
   fits the cap but not what is left this minute waits, and holds back every *lower* band
   until next time ("band barrier"); units of its own band may still use what is left.

Promoted tasks become ASSIGNED to the worker row that stands for the Kubernetes cluster, with
the effective band stamped; the shell writes their START intents in the same transaction.
A job past its scheduling deadline ends UNSCHEDULABLE (its active tasks KILLED), as in the core.

Routing (:func:`route_job`) is a job's one-time choice of backend, stamped at submission when
it does not depend on the cluster's workers (:func:`settled_route`), else by the first tick
that sees the job: an explicit hard ``backend`` constraint naming an admitting backend wins;
otherwise a job whose device a registered worker (local agent or TPU slice host) or a TPU scale
group serves goes to our own scheduler ("workers"); otherwise a job whose device type an
admitting backend accepts goes there; anything else stays with our scheduler (and waits,
explained, for a worker). Which backends admit, and what each accepts, is the shell's
(``scheduler.backends.admissions``): the core knows only our own route, ``ROUTE_WORKERS``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from scheduler.core.bands import BANDS_IN_ORDER, Band
from scheduler.core.budget import effective_band
from scheduler.core.ordering import is_expired, job_sort_key, round_robin
from scheduler.core.types import (
    ANY_VARIANT,
    Assignment,
    BudgetDefaults,
    BudgetSpec,
    ConstraintOp,
    Decision,
    DeviceType,
    JobSpec,
    JobState,
    TaskAfter,
    TaskSnapshot,
    TaskState,
    Unschedulable,
)

# The route of jobs our scheduler places (Job.route); every other route names an admitting backend.
ROUTE_WORKERS = "workers"
# The reserved constraint key that pins a job to a backend (an admitting backend's name, or "workers").
BACKEND_KEY = "backend"
# Pods promoted per minute by default: Iris's DISPATCH_PROMOTION_RATE, to protect the API server.
DEFAULT_PROMOTIONS_PER_MINUTE = 128
MS_PER_MINUTE = 60_000


# --- routing --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RoutingTable:
    """What each backend can run, for :func:`route_job`.

    ``worker_devices`` lists the ``(device type, variant)`` classes of registered workers of
    our own backends (whatever their health: a worker that is down now comes back) and of the
    TPU scale groups the provisioner can create. ``admitting`` lists the admitting backends as
    ``(route, device types it accepts)``, in the order they are preferred; a disabled one
    accepts nothing but can still be pinned to.
    """

    worker_devices: frozenset[tuple[DeviceType, str | None]] = frozenset()
    admitting: tuple[tuple[str, frozenset[DeviceType]], ...] = ()

    @property
    def admitting_routes(self) -> frozenset[str]:
        return frozenset(route for route, _ in self.admitting)


def _pin(value: str, admitting_routes: Iterable[str]) -> str:
    return value if value in admitting_routes else ROUTE_WORKERS


def pinned_backend(job: JobSpec, admitting_routes: Iterable[str]) -> str | None:
    """The backend a hard ``backend == X`` constraint pins the job to, if any: X when it names
    an admitting backend, else our own scheduler."""
    for constraint in job.constraints:
        if constraint.key == BACKEND_KEY and not constraint.soft and constraint.op is ConstraintOp.EQ:
            return _pin(str(constraint.value), admitting_routes)
    return None


def pinned_backend_in(raw_constraints: Iterable[Mapping] | None, admitting_routes: Iterable[str]) -> str | None:
    """:func:`pinned_backend` over constraints as stored on the job row (dicts), where the
    ``backend`` key lives (the core's copy of a job leaves it out)."""
    for c in raw_constraints or ():
        if c.get("key") == BACKEND_KEY and c.get("op") == "eq" and not c.get("soft"):
            return _pin(str(c.get("value")), admitting_routes)
    return None


def serves(devices: Iterable[tuple[DeviceType, str | None]], job: JobSpec) -> bool:
    """Whether any of these device classes can run the job (a CPU job runs on any host)."""
    device = job.resources.device
    wanted = device.variant
    for kind, variant in devices:
        if device.type is DeviceType.CPU:
            return True
        if kind is device.type and (wanted in (None, "", ANY_VARIANT) or variant == wanted):
            return True
    return False


def _admitting_route(device: DeviceType, admitting: Iterable[tuple[str, Iterable[DeviceType]]]) -> str | None:
    """The first admitting backend that accepts ``device``, if any."""
    for route, devices in admitting:
        if device in devices:
            return route
    return None


def settled_route(
    device: DeviceType, pinned: str | None, admitting: Iterable[tuple[str, Iterable[DeviceType]]]
) -> str | None:
    """The route :func:`route_job` gives whatever workers exist, or None when it depends on them.

    Only a job an admitting backend could take (its device type accepted there) and no hard
    ``backend`` constraint waits for the cluster's worker classes; every other job's route is
    known when it is submitted, so submission stamps it and the tick does not write the job
    again for it."""
    if pinned is not None:
        return pinned
    if _admitting_route(device, admitting) is None:
        return ROUTE_WORKERS
    return None


def route_job(job: JobSpec, table: RoutingTable) -> str:
    """Where a job runs: ``"workers"`` (our scheduler places it) or an admitting backend's name
    (``"kubernetes"``: Kueue does).

    1. a hard ``backend`` constraint (``eq``) decides;
    2. else a job some worker class or TPU scale group serves goes to ``"workers"``;
    3. else a job whose device type an admitting backend accepts goes to the first such;
    4. else ``"workers"``, where it waits with an explanation until a worker that fits joins.
    """
    device = job.resources.device.type
    settled = settled_route(device, pinned_backend(job, table.admitting_routes), table.admitting)
    if settled is not None:
        return settled
    if serves(table.worker_devices, job):
        return ROUTE_WORKERS
    return _admitting_route(device, table.admitting) or ROUTE_WORKERS


# --- the token bucket -----------------------------------------------------------------------------


def refill(tokens: float | None, tokens_at_ms: int | None, now_ms: int, per_minute: int) -> float:
    """Tokens available at ``now_ms``: a bucket of ``per_minute`` tokens that refills
    continuously at ``per_minute`` per minute. A bucket never counted before starts full."""
    if tokens is None or tokens_at_ms is None:
        return float(per_minute)
    elapsed = max(0, now_ms - tokens_at_ms)
    return min(float(per_minute), max(0.0, tokens) + per_minute * elapsed / MS_PER_MINUTE)


# --- reasons (data; rendered only when shown) -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KueueWait:
    """Why a pending Kubernetes task was not promoted this tick."""

    code: str
    detail: str = ""

    def text(self) -> str:
        return KUEUE_TEXT[self.code].format(detail=self.detail)


KUEUE_TEXT = {
    "not_ready": "Kubernetes backend not ready: {detail}",
    "rate_cap": "Kubernetes promotion rate cap: {detail}",
    "band_barrier": "Held behind a {detail} gang waiting for promotion tokens",
    "oversized_gang": "Gang of {detail} is larger than the promotion cap; it goes alone when the bucket is full",
    "waiting_behind_oversized": "Waiting behind a gang larger than the promotion cap ({detail})",
    "gang_incomplete": "Gang waits until all its tasks are pending ({detail})",
    "attempt_unfinished": "Previous attempt's pod has not finished yet",
}


# --- the drain ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KueueInput:
    """The Kubernetes side of one tick's snapshot.

    ``pending`` are the PENDING tasks of jobs routed to Kubernetes; ``unfinished`` names those
    whose previous attempt has not finished (its pod may still exist). ``active_counts`` counts
    each job's ASSIGNED/BUILDING/RUNNING tasks and ``active`` lists them (for deadline expiry).
    ``worker`` is the name of the worker row standing for the cluster; ``blocked`` says why
    nothing can be promoted (backend disabled, unhealthy, not set up), empty when it can.
    ``route`` the admitting backend's name.
    """

    jobs: Mapping[str, JobSpec] = field(default_factory=dict)
    pending: tuple[TaskSnapshot, ...] = ()
    unfinished: frozenset[str] = frozenset()
    active: tuple[TaskSnapshot, ...] = ()
    worker: str | None = None
    blocked: str = ""
    per_minute: int = DEFAULT_PROMOTIONS_PER_MINUTE
    tokens: float | None = None
    tokens_at_ms: int | None = None
    route: str = ""  # the admitting backend's name (its BackendState row keeps the bucket)


@dataclass(frozen=True, slots=True)
class Unit:
    """What is promoted at once: one solo task, or every task of a gang."""

    job: JobSpec
    tasks: tuple[TaskSnapshot, ...]
    band: Band

    @property
    def size(self) -> int:
        return len(self.tasks)

    @property
    def gang(self) -> bool:
        return self.job.group_by is not None


@dataclass(frozen=True, slots=True)
class KueuePlan:
    """What the drain decided; :func:`merge_into` folds it into the core's decision."""

    promotions: tuple[Assignment, ...] = ()
    expired: tuple[Unschedulable, ...] = ()
    effective_bands: Mapping[str, Band] = field(default_factory=dict)
    order: tuple[str, ...] = ()
    pending_reasons: Mapping[str, KueueWait] = field(default_factory=dict)
    after: Mapping[str, TaskAfter] = field(default_factory=dict)
    jobs_after: Mapping[str, JobState] = field(default_factory=dict)
    # The bucket after this tick's promotions, to store for the next tick.
    tokens: float = 0.0
    tokens_at_ms: int = 0


def rank_units(units: Sequence[Unit], spend: Mapping[str, int]) -> dict[Band, list[Unit]]:
    """Units per effective band (bands in rank order), each band round-robin across users.

    ``units`` must already be in the core's order (job priority, then task index).
    """
    per_band: dict[Band, dict[str, list[Unit]]] = {}
    for unit in units:
        per_band.setdefault(unit.band, {}).setdefault(unit.job.user, []).append(unit)
    return {band: round_robin(per_band[band], spend) for band in BANDS_IN_ORDER if band in per_band}


@dataclass(slots=True)
class Promotion:
    """The outcome of :func:`take_within_cap`."""

    promoted: list[Unit]
    held: dict[int, KueueWait]  # id(unit) -> why it waits
    tokens_left: float


def take_within_cap(ranked: Mapping[Band, Sequence[Unit]], tokens: float, cap: int) -> Promotion:
    """Promote units in rank order within ``tokens`` (see the module docstring for the rules)."""
    promoted: list[Unit] = []
    held: dict[int, KueueWait] = {}
    left = math.floor(tokens)
    full = tokens >= cap
    barrier: Band | None = None
    blocker: Unit | None = None  # an oversized gang that waits: nothing behind it goes
    for band, units in ranked.items():
        for unit in units:
            if blocker is not None:
                held[id(unit)] = KueueWait("waiting_behind_oversized", blocker.job.id)
            elif barrier is not None and band > barrier:
                held[id(unit)] = KueueWait("band_barrier", barrier.name)
            elif unit.size > cap:
                if full and not promoted:
                    promoted.append(unit)
                    left = 0
                    tokens = 0.0
                    blocker = unit
                else:
                    held[id(unit)] = KueueWait("oversized_gang", f"{unit.size} > {cap} per minute")
                    blocker = unit
            elif unit.size <= left:
                promoted.append(unit)
                left -= unit.size
                tokens -= unit.size
            else:
                held[id(unit)] = KueueWait("rate_cap", f"{left} of {cap} pods left this minute")
                if unit.gang and barrier is None:
                    barrier = band
    return Promotion(promoted, held, max(0.0, tokens))


def plan_promotions(
    data: KueueInput,
    spend: Mapping[str, int],
    budgets: Mapping[str, BudgetSpec],
    defaults: BudgetDefaults,
    now_ms: int,
) -> KueuePlan:
    """Decide this tick's Kubernetes promotions and expirations (see the module docstring).

    ``spend`` is the tick's spend per user, the same the core used (not updated by promotions).
    """
    tokens = refill(data.tokens, data.tokens_at_ms, now_ms, data.per_minute)
    pending_by_job: dict[str, list[TaskSnapshot]] = {}
    for task in data.pending:
        pending_by_job.setdefault(task.job_id, []).append(task)
    active_by_job: dict[str, list[TaskSnapshot]] = {}
    for task in data.active:
        active_by_job.setdefault(task.job_id, []).append(task)

    effective: dict[str, Band] = {}
    band_of: dict[tuple[str, Band], Band] = {}
    after: dict[str, TaskAfter] = {}
    jobs_after: dict[str, JobState] = {}
    expired: list[Unschedulable] = []
    reasons: dict[str, KueueWait] = {}
    units: list[Unit] = []
    for job_id in sorted(pending_by_job, key=lambda j: job_sort_key(data.jobs[j])):
        job = data.jobs[job_id]
        tasks = sorted(pending_by_job[job_id], key=lambda t: t.index)
        key = (job.user, job.band)
        band = band_of.get(key)
        if band is None:
            band = band_of[key] = effective_band(job.band, job.user, spend, budgets, defaults)
        for task in tasks:
            effective[task.id] = band
        if is_expired(job, now_ms):
            reason = f"Scheduling deadline passed ({job.scheduling_deadline_ms} <= {now_ms})"
            for task in tasks:
                expired.append(Unschedulable(task.id, reason))
                after[task.id] = TaskAfter(TaskState.UNSCHEDULABLE, None, None, task.preemption_count)
            for task in active_by_job.get(job_id, ()):
                after[task.id] = TaskAfter(TaskState.KILLED, None, None, task.preemption_count)
            jobs_after[job_id] = JobState.UNSCHEDULABLE
            continue
        if job.group_by is not None:
            waiting = [t for t in tasks if t.id in data.unfinished]
            if len(tasks) < job.replicas or waiting:
                detail = f"{len(tasks) - len(waiting)} of {job.replicas} ready"
                for task in tasks:
                    reasons[task.id] = KueueWait("gang_incomplete", detail)
                continue
            units.append(Unit(job, tuple(tasks), band))
            continue
        for task in tasks:
            if task.id in data.unfinished:
                reasons[task.id] = KueueWait("attempt_unfinished")
            else:
                units.append(Unit(job, (task,), band))

    ranked = rank_units(units, spend)
    order = tuple(t.id for band_units in ranked.values() for u in band_units for t in u.tasks)
    promotions: list[Assignment] = []
    if data.blocked or data.worker is None:
        why = KueueWait("not_ready", data.blocked or "no Kubernetes worker row")
        for band_units in ranked.values():
            for unit in band_units:
                for task in unit.tasks:
                    reasons[task.id] = why
        tokens_left = tokens
    else:
        outcome = take_within_cap(ranked, tokens, data.per_minute)
        for unit in outcome.promoted:
            for task in unit.tasks:
                promotions.append(Assignment(task.id, data.worker, unit.band))
                after[task.id] = TaskAfter(TaskState.ASSIGNED, data.worker, unit.band, task.preemption_count)
        for band_units in ranked.values():
            for unit in band_units:
                wait = outcome.held.get(id(unit))
                if wait is not None:
                    for task in unit.tasks:
                        reasons[task.id] = wait
        tokens_left = outcome.tokens_left
    return KueuePlan(
        promotions=tuple(promotions),
        expired=tuple(expired),
        effective_bands=effective,
        order=order,
        pending_reasons=reasons,
        after=after,
        jobs_after=jobs_after,
        tokens=tokens_left,
        tokens_at_ms=now_ms,
    )


def merge_into(decision: Decision, plan: KueuePlan) -> Decision:
    """The core's decision with the Kubernetes plan added (the two touch disjoint tasks)."""
    if not (plan.promotions or plan.expired or plan.effective_bands or plan.after):
        return decision
    return Decision(
        spend=decision.spend,
        effective_bands={**decision.effective_bands, **plan.effective_bands},
        order=tuple(decision.order) + plan.order,
        assignments=tuple(decision.assignments) + plan.promotions,
        preemptions=decision.preemptions,
        unschedulable=tuple(decision.unschedulable) + plan.expired,
        pending_reasons={**decision.pending_reasons, **plan.pending_reasons},
        after={**decision.after, **plan.after},
        jobs_after=dict(sorted({**decision.jobs_after, **plan.jobs_after}.items())),
        requeue_bands=decision.requeue_bands,
        capacity_left=decision.capacity_left,
    )
