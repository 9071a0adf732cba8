"""Why a task is still pending, and why a task runs in a lower band, as data.

Every reason is a frozen dataclass with a stable ``code``, the numbers behind it, and a
``text()`` that renders it for people ("need 64 GiB, at most 12 GiB free"). Nothing is
formatted until ``text()`` is called, and the text is computed once per object.

Reasons are computed once per shape or job and shared by every task they apply to, so
explaining 100,000 pending tasks costs O(shapes × workers + jobs), not O(tasks × workers).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from typing import ClassVar, Union

from scheduler.core.bands import Band
from scheduler.core.feasibility import ShapeAnalysis, analyse_job, any_fits_when_idle, constraint_text, slice_group
from scheduler.core.kueue import KUEUE_TEXT
from scheduler.core.ordering import JobQueue
from scheduler.core.placement import Shape, ShapeBook, WorkerPool
from scheduler.core import units
from scheduler.core.types import Decision, GroupSpec, JobSpec, TaskSnapshot, WorkerSpec

# Bytes per MiB: memory below 1 GiB is shown in MiB.
MIB = 1 << 20


def number(n: int) -> str:
    """``12400`` -> ``12,400``."""
    return f"{n:,}"


def _plural(n: int, one: str, many: str) -> str:
    return f"{number(n)} {one if n == 1 else many}"


def format_cores(millicores: int) -> str:
    """``8000`` -> ``8 cores``: :func:`scheduler.core.units.format_cores`."""
    return units.format_cores(millicores)


def format_memory(n_bytes: int) -> str:
    """Bytes for people, in the unit they were likely asked in (``8 GB``, ``16 GiB``):
    :func:`scheduler.core.units.format_memory`."""
    return units.format_memory(n_bytes)


# Per resource: how it is named in reasons, and how an amount (millicores, bytes, devices) reads.
RESOURCE_FORMAT = {
    "cpu": ("CPU", format_cores),
    "memory": ("memory", format_memory),
    "gpu": ("GPUs", lambda n: _plural(max(n, 0), "GPU", "GPUs")),
    "tpu": ("TPU chips", lambda n: _plural(max(n, 0), "TPU chip", "TPU chips")),
}


def iso_time(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC to the second: ``2026-12-02T05:10:03Z``."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_duration(ms: int) -> str:
    """A span for people, to its two largest units: ``3d 4h``, ``2h 5m``, ``12m 3s``, ``45s``."""
    seconds = max(ms, 0) // 1000
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {seconds}s"
    return f"{seconds}s"


def ordinal(n: int) -> str:
    """``1`` -> ``1st``, ``2`` -> ``2nd``, ``11`` -> ``11th``, ``23`` -> ``23rd``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{number(n)}{suffix}"


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
            f"already took {number(self.limit)} new tasks this tick"
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

    # The wire code predates the word "tick"; API clients match on it, so it stays.
    code: ClassVar[str] = "next_cycle"

    def text(self) -> str:
        return "Schedulable — waiting for the next tick"


@dataclass(frozen=True, slots=True)
class PerJobCap:
    limit: int
    code: ClassVar[str] = "per_job_cap"

    def text(self) -> str:
        return f"Held back by the per-job limit: at most {number(self.limit)} tasks of a job are scheduled per tick"


@dataclass(frozen=True, slots=True)
class JobExhausted:
    """An earlier task of the same job did not fit (for ``cause``), so the rest of the job waits
    for the next tick without being tried."""

    cause: Cause
    code: ClassVar[str] = "job_exhausted"

    def text(self) -> str:
        return "Waiting: an earlier task of this job did not fit this tick"


@dataclass(frozen=True, slots=True)
class WaitingBehind:
    """It would have fitted at tick start; ``ahead`` higher-priority tasks placed this tick took the room."""

    ahead: int
    cause: Cause
    code: ClassVar[str] = "waiting_behind"

    def text(self) -> str:
        return (
            f"Waiting behind {_plural(self.ahead, 'higher-priority task', 'higher-priority tasks')} "
            f"placed this tick; now: {self.cause.text()}"
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


@dataclass(frozen=True, slots=True)
class NeverFits:
    """No healthy worker meets every requirement of the job, even idle: waiting will not help.

    ``requirements`` are ``[kind, label, need, alone, cumulative]`` in the order of
    :func:`scheduler.core.feasibility.analyse_job`; ``largest`` is (millicores, bytes, devices) of
    the biggest worker meeting the constraints, or None.
    """

    requirements: tuple
    largest: tuple | None
    code: ClassVar[str] = "never_fits"

    def text(self) -> str:
        reqs = [tuple(r) for r in self.requirements]
        blocking = next((r for r in reqs if r[4] == 0 or (r[0] == "group" and r[4] < (r[2] or 0))), None)
        parts = ["Never fits on the cluster as it is"]
        if blocking is not None:
            kind, label, need, alone, cumulative = blocking
            what = {"cpu": lambda: f"{format_cores(need)} per task", "memory": lambda: f"{format_memory(need)} per task"}
            name = what[kind]() if kind in what else label
            if kind == "group":
                parts.append(f"need {name}, the largest group of matching workers has {number(cumulative)}")
            else:
                parts.append(
                    f"{name}: {_plural(alone, 'healthy worker has', 'healthy workers have')} it, "
                    f"{number(cumulative)} with every requirement before it"
                )
        if self.largest is not None:
            c, m, d = self.largest
            parts.append(f"largest matching worker: {format_cores(c)}, {format_memory(m)}"
                         + (f", {_plural(d, 'device', 'devices')}" if d else ""))
        return "; ".join(parts)


@dataclass(frozen=True, slots=True)
class WaitingForSlice:
    """No healthy worker can hold the job as the cluster is, but the TPU scale group ``group``
    could create a slice that does: it waits for the provisioner, not forever."""

    group: str
    code: ClassVar[str] = "scale_group"

    def text(self) -> str:
        return f"Waiting for a TPU slice: no worker can hold it yet, scale group '{self.group}' can create one"


def never_fits(analysis: ShapeAnalysis) -> NeverFits:
    return NeverFits(
        tuple((r.kind, r.label, r.need, r.alone, r.cumulative) for r in analysis.requirements), analysis.largest
    )


Cause = Union[
    NeverFits,
    WaitingForSlice,
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
    """Everything said about why one pending task waits: the cause and any downgrade.

    A reason says nothing about the task's place in the queue: one reason is shared by many
    tasks, and the place is each task's own (:func:`pending_queue` is its one definition;
    :func:`pending_text` puts the two together for people).
    """

    cause: Cause
    downgrade: Downgrade | None = None
    _text: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def code(self) -> str:
        return self.cause.code

    def text(self) -> str:
        if self._text is None:
            parts = [self.cause.text()]
            if self.downgrade is not None:
                parts.append(self.downgrade.text())
            object.__setattr__(self, "_text", "; ".join(parts))
        return self._text


# -- reasons as stored data -----------------------------------------------------------------------
#
# A record is the JSON form of a reason: ``{"code": ..., <the cause's numbers>, "downgrade":
# {...}}`` (``downgrade`` only when there is one). It is what the tick stores and the API serves;
# the text is always rendered from it (``record_text``), never parsed back. docs/api.md lists
# every code with its parameters.

# Codes of causes whose parameters are exactly their dataclass fields.
_CAUSE_TYPES: dict[str, type] = {
    cls.code: cls
    for cls in (
        NoHealthyWorkers, NoMatchingWorker, BuildSlotsFull, AssignmentCapReached, GangGroupTooSmall,
        GangNoRoom, RoomFreedThisTick, PerJobCap, JobExhausted, WaitingBehind, Preempted, Requeued, NeverFits,
        WaitingForSlice,
    )
}
# ``insufficient_<resource>``: one dataclass, the resource is a parameter.
_INSUFFICIENT = {f"insufficient_{r}" for r in RESOURCE_FORMAT}

# Reasons the shell gives for tasks the core did not explain (no tick has seen them yet, or a
# stored record it cannot read): code -> text.
SHELL_TEXT = {
    "not_yet_ticked": "Waiting for the next scheduling tick",
    "unknown": "No reason recorded",
}


def cause_record(cause: object) -> dict:
    """The JSON form of a cause: its code and its fields (a nested cause as its own record)."""
    record = getattr(cause, "record", None)
    if callable(record):  # causes defined outside this module (Kubernetes waits)
        return record()
    out: dict = {"code": cause.code}
    for f in fields(cause):
        name = f.name
        if name.startswith("_"):
            continue
        value = getattr(cause, name)
        if name == "cause":
            value = cause_record(value)
        elif isinstance(value, tuple):
            value = [list(v) if isinstance(v, tuple) else v for v in value]
        out[name] = value
    return out


def reason_record(reason: object) -> dict:
    """The JSON form of a pending reason (a :class:`PendingReason`, or a bare cause)."""
    if isinstance(reason, PendingReason):
        out = cause_record(reason.cause)
        if reason.downgrade is not None:
            d = reason.downgrade
            out["downgrade"] = {"requested": d.requested.wire, "effective": d.effective.wire,
                                "spend": d.spend, "limit": d.limit}
        return out
    return cause_record(reason)


def _cause_from_record(record: Mapping) -> object | None:
    code = record.get("code")
    cls = InsufficientResource if code in _INSUFFICIENT else _CAUSE_TYPES.get(code)
    if cls is None:
        return None
    # Only the cause's own numbers: a served reason also carries its text, band and place.
    names = {f.name for f in fields(cls)}
    params = {k: v for k, v in record.items() if k in names}
    if "cause" in params:
        params["cause"] = _cause_from_record(params["cause"])
    if "constraints" in params:
        params["constraints"] = tuple(params["constraints"])
    if cls is NeverFits:
        params["requirements"] = tuple(tuple(r) for r in params.get("requirements", ()))
        params["largest"] = tuple(params["largest"]) if params.get("largest") else None
    try:
        return cls(**params)
    except TypeError:
        return None


def _downgrade_from_record(record: Mapping | None) -> Downgrade | None:
    if not record:
        return None
    return Downgrade(Band.parse(record["requested"]), Band.parse(record["effective"]), record["spend"], record["limit"])


def cause_text(record: Mapping) -> str:
    """The cause of a stored reason, for people (without the downgrade or the place)."""
    cause = _cause_from_record(record)
    if cause is not None:
        return cause.text()
    code = record.get("code", "unknown")
    if code in SHELL_TEXT:
        return SHELL_TEXT[code]
    if code in KUEUE_TEXT:
        return KUEUE_TEXT[code].format(detail=record.get("detail", ""))
    return record.get("text") or SHELL_TEXT["unknown"]


def downgrade_of(record: Mapping) -> Downgrade | None:
    """The downgrade of a stored reason, typed, or None."""
    return _downgrade_from_record(record.get("downgrade"))


def downgrade_text(record: Mapping) -> str | None:
    """The downgrade of a stored reason, for people, or None."""
    downgrade = downgrade_of(record)
    return downgrade.text() if downgrade is not None else None


def place_text(band: Band, position: int, band_count: int, tick: int | None) -> str:
    """``position 3 of 17 in BATCH as of tick 812``: the one wording of a task's place."""
    text = f"position {number(position)} of {number(band_count)} in {band.name}"
    return f"{text} as of tick {tick}" if tick is not None else text


def pending_text(
    record: Mapping, band: Band | None = None, position: int | None = None, band_count: int | None = None,
    tick: int | None = None,
) -> str:
    """THE text of a pending task: cause; place (if queued); downgrade. Every page, the API's
    ``pending_reason.text`` and so the CLI render through here."""
    parts = [cause_text(record)]
    if band is not None and position is not None and band_count is not None:
        parts.append(place_text(band, position, band_count, tick))
    downgrade = downgrade_text(record)
    if downgrade:
        parts.append(downgrade)
    return "; ".join(parts)


# -- computing reasons --------------------------------------------------------------------------


class Explainer:
    """Causes per shape (solo) and per (shape, group_by, size) (gang), from the final capacity."""

    def __init__(self, pool: WorkerPool, book: ShapeBook, workers: Sequence[WorkerSpec] = (),
                 scale_groups: Sequence[GroupSpec] = ()) -> None:
        self.pool = pool
        self.book = book
        # The snapshot's workers (total capacity, for "never"); empty: the check is skipped.
        self.workers = workers
        # TPU scale groups: a job one of them could create a slice for is not "never".
        self.scale_groups = scale_groups
        self._never: dict[tuple[int, bool], NeverFits | WaitingForSlice | None] = {}
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
        capped = full = 0
        # The free amount of each worker first short of cpu, memory, gpu, tpu (appended, not
        # counted through a helper: a call per worker cost a third of the explanations).
        short: tuple[list[int], ...] = ([], [], [], [])
        short_cpu, short_mem, short_gpu, short_tpu = (free.append for free in short)
        assigned, building = pool.assigned, pool.building
        for w in shape.cands:
            if assigned[w] >= ma:
                capped += 1
            elif building[w] >= mb:
                full += 1
            # The four resource checks, unrolled (a tuple of checks per worker cost half the
            # explanation's time): the first one short counts.
            elif (free := cpu[w]) < c:
                short_cpu(free)
            elif (free := mem[w]) < m:
                short_mem(free)
            elif (free := gpu[w]) < g:
                short_gpu(free)
            elif (free := tpu[w]) < u:
                short_tpu(free)
            else:
                # One worker with room decides the cause: the counts are not needed.
                return RoomFreedThisTick(), self._any_fits_at_start(shape.cands, shape)
        blocked = [capped, full, *(len(free) for free in short)]
        best = [None, None, *(max(free, default=None) for free in short)]
        fit_at_start = self._any_fits_at_start(shape.cands, shape)
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
        # A loop rather than any() over a generator: this scans whole candidate lists.
        for w in workers:
            if building[w] < mb and cpu[w] >= c and mem[w] >= m and gpu[w] >= g and tpu[w] >= u:
                return True
        return False

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


    def never(self, shape: Shape, spec: JobSpec, impossible: bool = False) -> NeverFits | WaitingForSlice | None:
        """For a shape that did not fit even at tick start: :class:`WaitingForSlice` if no
        worker could hold it idle but a TPU scale group could create a slice that does; else
        :class:`NeverFits` if no worker could hold it idle; else None (it waits for room).

        ``impossible``: the cause already says the cluster as it is cannot hold it (no healthy
        or matching worker, no group big enough), so only the scale groups are asked. Once per
        shape: a cheap pass over its candidates' totals, and the full requirement analysis only
        for shapes that fail it (rare)."""
        key = (shape.id, impossible)
        if key in self._never:
            return self._never[key]
        result: NeverFits | WaitingForSlice | None = None
        if impossible:
            group = slice_group(spec, self.scale_groups)
            result = WaitingForSlice(group) if group is not None else None
        elif self.workers and shape.cands and not any_fits_when_idle(
            self.workers, shape.cands, (shape.cpu, shape.mem, shape.gpu, shape.tpu)
        ):
            group = slice_group(spec, self.scale_groups)
            result = WaitingForSlice(group) if group is not None else never_fits(analyse_job(spec, self.workers))
        self._never[key] = result
        return result


# Causes that already say no worker or group of the cluster as it is could hold the job.
IMPOSSIBLE_AS_IS = (NoHealthyWorkers, NoMatchingWorker, GangGroupTooSmall)


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
    if any. A job's first unplaced task gets a reason of its own; the tasks after it (the job
    was exhausted) share one reason across jobs.
    """
    # job id -> how many tasks were placed ahead of the job's first unplaced task.
    first_unplaced: dict[str, int] = {}
    ahead = 0
    for tasks in bands.values():
        for task in tasks:
            if task.id in assigned:
                ahead += 1
            elif task.job_id not in first_unplaced:
                first_unplaced[task.job_id] = ahead

    # (tasks, reason) pairs, turned into one dict at the end (far cheaper than per-job updates).
    shared: list[tuple[Sequence[TaskSnapshot], PendingReason]] = []
    exhausted_reasons: dict[tuple[int, int], PendingReason] = {}
    for queue in queues:
        job_id = queue.spec.id
        before = first_unplaced.get(job_id)
        if before is not None:
            downgrade = downgrades.get(job_id)
            passed = queue.passed
            unplaced = [t for t in passed if t.id not in assigned]
            if queue.gang:
                cause, fit_at_start = explainer.gang_cause(queue.shape, queue.spec.group_by, len(passed))
            else:
                cause, fit_at_start = explainer.solo_cause(queue.shape)
            if not fit_at_start and not isinstance(cause, RoomFreedThisTick):
                never = explainer.never(queue.shape, queue.spec, isinstance(cause, IMPOSSIBLE_AS_IS))
                if never is not None:
                    cause = never
            base = cause
            if fit_at_start and before and not isinstance(cause, RoomFreedThisTick):
                cause = WaitingBehind(before, cause)
            head = PendingReason(cause, downgrade)
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


def pending_queue(decision: Decision) -> dict[Band, list[str]]:
    """THE queue a tick leaves: per effective band, the ids of the tasks still pending, in the
    tick's order. A task's position is its 1-based index here and its band count the list's
    length; every page, the API and the CLI show these numbers.

    The tick's order is the scheduling order of the tasks that passed the gates, then the
    tasks the per-job cap held back (in job order), then the tasks put back in the queue this
    tick (preemption victims and their gang siblings, in their next tick's band).
    """
    assigned = {a.task for a in decision.assignments}
    reasons = decision.pending_reasons
    bands = decision.effective_bands
    requeued = decision.requeue_bands
    queue: dict[Band, list[str]] = {}
    seen = set(decision.order)
    ordered = [t for t in decision.order if t in reasons and t not in assigned]
    ordered.extend(t for t in reasons if t not in seen and t not in assigned)
    for task_id in ordered:
        band = bands.get(task_id)
        if band is None:
            band = requeued[task_id]
        tasks = queue.get(band)
        if tasks is None:
            tasks = queue[band] = []
        tasks.append(task_id)
    return dict(sorted(queue.items()))
