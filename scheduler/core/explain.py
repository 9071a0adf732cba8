"""Why a task is still pending, and why a task runs in a lower band, as data.

Every reason is a frozen dataclass with a stable ``code``, the numbers behind it, and a
``text()`` that renders it for people ("need 64 GiB, at most 12 GiB free"). Nothing is
formatted until ``text()`` is called, and the text is computed once per object.

Reasons are computed once per shape or job and shared by every task they apply to, so
explaining 100,000 pending tasks costs O(shapes × workers + jobs), not O(tasks × workers).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import ClassVar, Union

from scheduler.core.bands import Band
from scheduler.core.budget import GIB, MILLICORES_PER_CORE
from scheduler.core.ordering import JobQueue
from scheduler.core.placement import Shape, ShapeBook, WorkerPool
from scheduler.core.types import Constraint, ConstraintOp, TaskSnapshot

# Bytes per MiB: memory below 1 GiB is shown in MiB.
MIB = 1 << 20


def number(n: int) -> str:
    """``12400`` -> ``12,400``."""
    return f"{n:,}"


def _plural(n: int, one: str, many: str) -> str:
    return f"{number(n)} {one if n == 1 else many}"


def format_cores(millicores: int) -> str:
    """``8000`` -> ``8 cores``, ``500`` -> ``0.5 cores``; negative amounts show as 0."""
    millicores = max(millicores, 0)
    if millicores % MILLICORES_PER_CORE == 0:
        return _plural(millicores // MILLICORES_PER_CORE, "core", "cores")
    return f"{millicores / MILLICORES_PER_CORE:,.3g} cores"


def format_memory(n_bytes: int) -> str:
    """GiB with at most one decimal (MiB below 1 GiB); negative amounts show as 0."""
    n_bytes = max(n_bytes, 0)
    if n_bytes >= GIB:
        gib = n_bytes / GIB
        return f"{gib:,.0f} GiB" if n_bytes % GIB == 0 else f"{gib:,.1f} GiB"
    return f"{n_bytes / MIB:,.0f} MiB"


# Per resource: how it is named in reasons, and how an amount (millicores, bytes, devices) reads.
RESOURCE_FORMAT = {
    "cpu": ("CPU", format_cores),
    "memory": ("memory", format_memory),
    "gpu": ("GPUs", lambda n: _plural(max(n, 0), "GPU", "GPUs")),
    "tpu": ("TPU chips", lambda n: _plural(max(n, 0), "TPU chip", "TPU chips")),
}


def constraint_text(c: Constraint) -> str:
    if c.op is ConstraintOp.EQ:
        return f"{c.key}={c.value}"
    if c.op is ConstraintOp.NE:
        return f"{c.key}!={c.value}"
    if c.op is ConstraintOp.IN:
        return f"{c.key} in ({', '.join(c.value)})"
    return f"{c.key} exists"


def deadline_text(deadline_ms: int, now_ms: int) -> str:
    """The UNSCHEDULABLE reason of an expired task: names the deadline and how long ago it passed."""
    when = datetime.fromtimestamp(deadline_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    late_s = (now_ms - deadline_ms) // 1000
    minutes, seconds = divmod(late_s, 60)
    hours, minutes = divmod(minutes, 60)
    ago = f"{hours}h {minutes}m {seconds}s" if hours else f"{minutes}m {seconds}s" if minutes else f"{seconds}s"
    return f"Scheduling deadline exceeded: the deadline {when} (scheduling_deadline_ms={deadline_ms}) passed {ago} before this tick"


# -- causes -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NoHealthyWorkers:
    code: ClassVar[str] = "no_healthy_workers"

    def text(self) -> str:
        return "No healthy workers available"


@dataclass(frozen=True, slots=True)
class NoMatchingWorker:
    """No healthy worker satisfies the hard constraints (including the automatic device ones)."""

    constraints: tuple[str, ...]
    code: ClassVar[str] = "constraints_match_nothing"

    def text(self) -> str:
        return f"No healthy worker matches constraints [{', '.join(self.constraints)}]"


@dataclass(frozen=True, slots=True)
class InsufficientResource:
    """The most common blocker among matching workers is this resource.

    ``workers`` of the ``matching`` workers have a free slot but too little of it; ``need`` is
    the per-task request and ``best_free`` the most any of those ``workers`` has free (in
    millicores, bytes or devices).
    """

    resource: str
    need: int
    best_free: int
    workers: int
    matching: int

    @property
    def code(self) -> str:
        return f"insufficient_{self.resource}"

    def text(self) -> str:
        label, fmt = RESOURCE_FORMAT[self.resource]
        return (
            f"Insufficient {label}: need {fmt(self.need)}, at most {fmt(self.best_free)} free on "
            f"{number(self.workers)} of {_plural(self.matching, 'matching worker', 'matching workers')}"
        )


@dataclass(frozen=True, slots=True)
class BuildSlotsFull:
    """Matching workers already run ``limit`` ASSIGNED or BUILDING tasks."""

    workers: int
    matching: int
    limit: int
    code: ClassVar[str] = "build_slots"

    def text(self) -> str:
        return (
            f"Waiting for build slots: {number(self.workers)} of "
            f"{_plural(self.matching, 'matching worker', 'matching workers')} at the limit of "
            f"{number(self.limit)} concurrent builds"
        )


@dataclass(frozen=True, slots=True)
class AssignmentCapReached:
    """Matching workers already took ``limit`` new tasks this tick."""

    workers: int
    matching: int
    limit: int
    code: ClassVar[str] = "assignment_cap"

    def text(self) -> str:
        return (
            f"{number(self.workers)} of {_plural(self.matching, 'matching worker', 'matching workers')} "
            f"already took {number(self.limit)} new tasks this cycle"
        )


@dataclass(frozen=True, slots=True)
class GangGroupTooSmall:
    need: int
    group_by: str
    largest: int
    code: ClassVar[str] = "gang_group_too_small"

    def text(self) -> str:
        return (
            f"Coscheduling: need {number(self.need)} workers in same '{self.group_by}' group, "
            f"largest group has {number(self.largest)}"
        )


@dataclass(frozen=True, slots=True)
class GangNoRoom:
    """Groups are big enough, but no group has ``need`` hosts with room; the best has ``best``."""

    need: int
    group_by: str
    best: int
    code: ClassVar[str] = "gang_no_room"

    def text(self) -> str:
        return (
            f"Coscheduling: need {number(self.need)} workers with room in one '{self.group_by}' group, "
            f"best group has {number(self.best)}"
        )


@dataclass(frozen=True, slots=True)
class RoomFreedThisTick:
    """It would fit now: room was freed by preemption after it was considered."""

    # The wire code and the text predate the word "tick"; clients and the goldens match them.
    code: ClassVar[str] = "next_cycle"

    def text(self) -> str:
        return "Schedulable — waiting for next scheduling cycle"


@dataclass(frozen=True, slots=True)
class PerJobCap:
    limit: int
    code: ClassVar[str] = "per_job_cap"

    def text(self) -> str:
        return f"Held back by the per-job limit: at most {number(self.limit)} tasks of a job are scheduled per cycle"


@dataclass(frozen=True, slots=True)
class JobExhausted:
    """An earlier task of the same job did not fit (for ``cause``), so the rest of the job waits
    for the next tick without being tried."""

    cause: Cause
    code: ClassVar[str] = "job_exhausted"

    def text(self) -> str:
        return "Waiting: an earlier task of this job did not fit this cycle"


@dataclass(frozen=True, slots=True)
class WaitingBehind:
    """It would have fitted at tick start; ``ahead`` higher-priority tasks placed this tick took the room."""

    ahead: int
    cause: Cause
    code: ClassVar[str] = "waiting_behind"

    def text(self) -> str:
        return (
            f"Waiting behind {_plural(self.ahead, 'higher-priority task', 'higher-priority tasks')} "
            f"placed this cycle; now: {self.cause.text()}"
        )


@dataclass(frozen=True, slots=True)
class Preempted:
    """Evicted this tick by ``by``; back in the queue."""

    by: str
    code: ClassVar[str] = "preempted"

    def text(self) -> str:
        return f"Preempted by {self.by}; waiting to be rescheduled"


@dataclass(frozen=True, slots=True)
class Requeued:
    """A member of the same gang was preempted, so the whole gang goes back to the queue."""

    member: str
    code: ClassVar[str] = "gang_requeued"

    def text(self) -> str:
        return f"Requeued: gang member {self.member} was preempted"


Cause = Union[
    NoHealthyWorkers,
    NoMatchingWorker,
    InsufficientResource,
    BuildSlotsFull,
    AssignmentCapReached,
    GangGroupTooSmall,
    GangNoRoom,
    RoomFreedThisTick,
    PerJobCap,
    JobExhausted,
    WaitingBehind,
    Preempted,
    Requeued,
]


@dataclass(frozen=True, slots=True)
class Downgrade:
    """The user is over budget, so pending work requested in ``requested`` runs as ``effective``."""

    requested: Band
    effective: Band
    spend: int
    limit: int
    code: ClassVar[str] = "budget_downgrade"

    def text(self) -> str:
        return f"{self.requested.name} runs as {self.effective.name}: spend {number(self.spend)} > limit {number(self.limit)}"


@dataclass(frozen=True, slots=True)
class PendingReason:
    """Everything said about one pending task: the cause, its place in its band, any downgrade.

    ``position`` is 1-based within ``band`` among the ``band_size`` tasks that passed the gates
    in that band (None for tasks held back by the gates or put back in the queue this tick).
    """

    cause: Cause
    band: Band | None = None
    position: int | None = None
    band_size: int | None = None
    downgrade: Downgrade | None = None
    _text: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def code(self) -> str:
        return self.cause.code

    def text(self) -> str:
        if self._text is None:
            parts = [self.cause.text()]
            if self.position is not None and self.band is not None:
                parts.append(f"position {number(self.position)} of {number(self.band_size or 0)} in {self.band.name}")
            if self.downgrade is not None:
                parts.append(self.downgrade.text())
            object.__setattr__(self, "_text", "; ".join(parts))
        return self._text


# -- computing reasons --------------------------------------------------------------------------


class Explainer:
    """Causes per shape (solo) and per (shape, group_by, size) (gang), from the final capacity."""

    def __init__(self, pool: WorkerPool, book: ShapeBook) -> None:
        self.pool = pool
        self.book = book
        self._solo: dict[tuple, tuple[Cause, bool]] = {}
        self._by_shape: dict[int, tuple[Cause, bool]] = {}
        self._gang: dict[tuple, tuple[Cause, bool]] = {}

    def solo_cause(self, shape: Shape) -> tuple[Cause, bool]:
        """(why one more task of ``shape`` does not fit now, whether it would have at tick start)."""
        cached = self._by_shape.get(shape.id)
        if cached is None:
            # Soft constraints only reorder the candidates, so they do not change the cause.
            key = (shape.hard, shape.cpu, shape.mem, shape.gpu, shape.tpu)
            cached = self._solo.get(key)
            if cached is None:
                cached = self._solo[key] = self._compute_solo(shape)
            self._by_shape[shape.id] = cached
        return cached

    def _no_worker(self, shape: Shape) -> Cause | None:
        if not self.pool.by_id:
            return NoHealthyWorkers()
        if not shape.cands:
            return NoMatchingWorker(tuple(constraint_text(c) for c in shape.hard))
        return None

    def _compute_solo(self, shape: Shape) -> tuple[Cause, bool]:
        cause = self._no_worker(shape)
        if cause is not None:
            return cause, False
        pool = self.pool
        ma, mb = pool.max_assign, pool.max_building
        cpu, mem, gpu, tpu = pool.cpu, pool.mem, pool.gpu, pool.tpu
        c, m, g, u = shape.cpu, shape.mem, shape.gpu, shape.tpu
        # Per check, in check order (assignment cap, build slots, cpu, memory, gpu, tpu): how many
        # workers it is the first to fail, and the most free among those workers.
        blocked = [0] * 6
        best = [None] * 6
        fit_now = 0
        for w in shape.cands:
            if pool.assigned[w] >= ma:
                blocked[0] += 1
                continue
            if pool.building[w] >= mb:
                blocked[1] += 1
                continue
            for check, free, need in ((2, cpu, c), (3, mem, m), (4, gpu, g), (5, tpu, u)):
                if free[w] < need:
                    blocked[check] += 1
                    if best[check] is None or free[w] > best[check]:
                        best[check] = free[w]
                    break
            else:
                fit_now += 1
        fit_at_start = self._any_fits_at_start(shape.cands, shape)
        if fit_now:
            return RoomFreedThisTick(), fit_at_start
        worst = max(range(6), key=lambda i: (blocked[i], -i))
        matching = len(shape.cands)
        if worst == 0:
            return AssignmentCapReached(blocked[0], matching, ma), fit_at_start
        if worst == 1:
            return BuildSlotsFull(blocked[1], matching, mb), fit_at_start
        resource, need = (("cpu", c), ("memory", m), ("gpu", g), ("tpu", u))[worst - 2]
        return InsufficientResource(resource, need, best[worst], blocked[worst], matching), fit_at_start

    def _count_fit_at_start(self, workers: Sequence[int], shape: Shape) -> int:
        """How many of ``workers`` had a build slot and room for one task of ``shape`` at tick start."""
        pool = self.pool
        mb, building = pool.max_building, pool.start_building
        cpu, mem, gpu, tpu = pool.start_cpu, pool.start_mem, pool.start_gpu, pool.start_tpu
        c, m, g, u = shape.cpu, shape.mem, shape.gpu, shape.tpu
        return sum(
            1 for w in workers if building[w] < mb and cpu[w] >= c and mem[w] >= m and gpu[w] >= g and tpu[w] >= u
        )

    def _any_fits_at_start(self, workers: Sequence[int], shape: Shape) -> bool:
        pool = self.pool
        mb, building = pool.max_building, pool.start_building
        cpu, mem, gpu, tpu = pool.start_cpu, pool.start_mem, pool.start_gpu, pool.start_tpu
        c, m, g, u = shape.cpu, shape.mem, shape.gpu, shape.tpu
        return any(building[w] < mb and cpu[w] >= c and mem[w] >= m and gpu[w] >= g and tpu[w] >= u for w in workers)

    def gang_cause(self, shape: Shape, group_by: str, n: int) -> tuple[Cause, bool]:
        key = (shape.id, group_by, n)
        cached = self._gang.get(key)
        if cached is None:
            cached = self._gang[key] = self._compute_gang(shape, group_by, n)
        return cached

    def _compute_gang(self, shape: Shape, group_by: str, n: int) -> tuple[Cause, bool]:
        cause = self._no_worker(shape)
        if cause is not None:
            return cause, False
        groups = self.book.groups(shape, group_by)
        largest = max((len(g.members) for g in groups), default=0)
        if largest < n:
            return GangGroupTooSmall(n, group_by, largest), False
        fits = self.pool.fits
        big = [g for g in groups if len(g.members) >= n]
        best = max(sum(1 for w in g.members if fits(w, shape)) for g in big)
        fit_at_start = any(self._count_fit_at_start(g.members, shape) >= n for g in big)
        if best >= n:
            return RoomFreedThisTick(), fit_at_start
        return GangNoRoom(n, group_by, best), fit_at_start


class HeldReasons:
    """The reason of tasks held back by the per-job cap: one object per downgrade (or none)."""

    def __init__(self, max_tasks_per_job: int) -> None:
        self.cause = PerJobCap(max_tasks_per_job)
        self._by_downgrade: dict[int, PendingReason] = {}

    def reason(self, downgrade: Downgrade | None) -> PendingReason:
        reason = self._by_downgrade.get(id(downgrade))
        if reason is None:
            reason = self._by_downgrade[id(downgrade)] = PendingReason(self.cause, downgrade=downgrade)
        return reason


def explain_pending(
    queues: Sequence[JobQueue],
    bands: Mapping[Band, Sequence[TaskSnapshot]],
    assigned: set[str],
    explainer: Explainer,
    downgrades: Mapping[str, Downgrade],
) -> dict[str, PendingReason]:
    """A reason for every task that passed the gates and was not assigned (tasks held back by
    the per-job cap get theirs from :class:`HeldReasons`).

    ``queues`` are the jobs in priority order; ``downgrades`` maps a job id to its downgrade,
    if any. A job's first unplaced task gets a reason of its own (with its place in the band);
    the tasks after it (the job was exhausted) share one reason across jobs.
    """
    first_unplaced: dict[str, tuple[Band, int, int, int]] = {}
    ahead = 0
    for band, tasks in bands.items():
        size = len(tasks)
        for i, task in enumerate(tasks):
            if task.id in assigned:
                ahead += 1
            elif task.job_id not in first_unplaced:
                first_unplaced[task.job_id] = (band, i + 1, size, ahead)

    # (tasks, reason) pairs, turned into one dict at the end (far cheaper than per-job updates).
    shared: list[tuple[Sequence[TaskSnapshot], PendingReason]] = []
    exhausted_reasons: dict[tuple[int, int], PendingReason] = {}
    for queue in queues:
        job_id = queue.spec.id
        placed = first_unplaced.get(job_id)
        if placed is not None:
            downgrade = downgrades.get(job_id)
            band, position, size, before = placed
            passed = queue.passed
            unplaced = [t for t in passed if t.id not in assigned]
            if queue.gang:
                cause, fit_at_start = explainer.gang_cause(queue.shape, queue.spec.group_by, len(passed))
            else:
                cause, fit_at_start = explainer.solo_cause(queue.shape)
            base = cause
            if fit_at_start and before and not isinstance(cause, RoomFreedThisTick):
                cause = WaitingBehind(before, cause)
            head = PendingReason(cause, band, position, size, downgrade)
            if queue.gang or len(unplaced) == 1:
                shared.append((unplaced, head))
            else:
                shared.append((unplaced[:1], head))
                rest = exhausted_reasons.get((id(base), id(downgrade)))
                if rest is None:
                    rest = PendingReason(JobExhausted(base), downgrade=downgrade)
                    exhausted_reasons[(id(base), id(downgrade))] = rest
                shared.append((unplaced[1:], rest))
    return {task.id: reason for tasks, reason in shared for task in tasks}
