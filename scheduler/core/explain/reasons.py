"""The reasons, as data: one frozen dataclass per cause (a stable ``code``, the numbers behind
it, ``text()`` for people), the downgrade, and the pending reason that carries both."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Union

from scheduler.core.bands import Band
from scheduler.core.budget import DOWNGRADABLE_BANDS, DOWNGRADED_BAND, downgraded_band
from scheduler.core.feasibility import ShapeAnalysis
from scheduler.core.types import _filler
from scheduler.core.explain.text import RESOURCE_FORMAT, _plural, format_cores, format_memory, number


@dataclass(frozen=True, slots=True)
class NoHealthyWorkers:
    """The cluster has no healthy worker at all."""

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
        have = "has" if self.workers == 1 else "have"
        text = (
            f"Insufficient {label}: need {fmt(self.need)}, but {number(self.workers)} of "
            f"{_plural(self.matching, 'matching worker', 'matching workers')} {have} at most {fmt(self.best_free)} free"
        )
        others = self.matching - self.workers
        if others:
            text += f", the other {number(others)} {'is' if others == 1 else 'are'} short of something else"
        return text


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
    """No ``group_by`` group has ``need`` matching workers; the largest has ``largest``."""

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
    """The job already had ``limit`` tasks scheduled this tick (the per-job limit)."""

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
        return self.text_after(self.cause.text())

    def text_after(self, cause_text: str) -> str:
        """The text, given ``cause_text``, the text of ``cause`` (:class:`SharedTexts` renders
        a cause that many of these share once)."""
        return (
            f"Waiting behind {_plural(self.ahead, 'higher-priority task', 'higher-priority tasks')} "
            f"placed this tick; now: {cause_text}"
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
            what = {
                "cpu": lambda: f"{format_cores(need)} per task",
                "memory": lambda: f"{format_memory(need)} per task",
            }
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
            parts.append(
                f"largest matching worker: {format_cores(c)}, {format_memory(m)}"
                + (f", {_plural(d, 'device', 'devices')}" if d else "")
            )
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

    @classmethod
    def of(cls, requested: Band, spend: int, limit: int) -> Downgrade | None:
        """The downgrade the rule (``core.budget``) gives work requested in ``requested`` of a
        user with this spend and effective limit, or None when it runs as requested."""
        effective = downgraded_band(requested, spend, limit)
        return cls(requested, effective, spend, limit) if effective is not requested else None

    @property
    def over(self) -> int:
        """Points over the limit."""
        return self.spend - self.limit

    def text(self) -> str:
        """e.g. "INTERACTIVE runs as BATCH: spend 12,400 > limit 10,000"."""
        return f"{self.requested.name} runs as {self.effective.name}: spend {number(self.spend)} > limit {number(self.limit)}"

    def cause(self) -> str:
        """Why, in a clause: "over budget, spend 48 > limit 30" (the band summaries)."""
        return f"over budget, spend {number(self.spend)} > limit {number(self.limit)}"

    def badge(self) -> str:
        """The short form a badge shows: "downgraded: 2,400 pts over (12,400 > 10,000)"."""
        return f"downgraded: {number(self.over)} pts over ({number(self.spend)} > {number(self.limit)})"

    def advice(self, who: str, whose: str) -> str:
        """The sentence for a person: ``who`` "You are" / "alice is", ``whose`` "your" / "alice's"."""
        return (
            f"{who} {number(self.over)} points over {whose} limit (spend {number(self.spend)} > "
            f"limit {number(self.limit)}); {whose} {self.requested.name} work runs as {self.effective.name} until "
            f"{whose} running work drops to {number(self.limit)} points or less, or an uplift is granted."
        )

    def remedy(self, user: str) -> str:
        """What would change it, for ``user``'s job page and ``what_would_change``."""
        return (
            f"{user}'s spend ({number(self.spend)}) is over the limit ({number(self.limit)}), so pending tasks queue as "
            f"{self.effective.name} behind all {self.requested.name} work. They queue as {self.requested.name} again "
            f"once spend is back to {number(self.limit)} or less (other work of {user} finishing or being cancelled), "
            f"or when an admin approves a higher budget_limit (iris uplift request)."
        )


def stamp_text(user: str, requested: Band, stamped: Band) -> str:
    """Why a task ran (and was preempted) in the band it was stamped with at assignment: as
    requested, or downgraded because ``user`` was over budget then."""
    if stamped == requested:
        return f"stamped {stamped.name} at assignment: the band it was requested at"
    return f"stamped {stamped.name} at assignment: {user} was over budget then (requested {requested.name})"


def downgrade_rule_text() -> str:
    """The rule in one sentence, from its definition (``core.budget``): what the spend-rule
    panel and the jobs table's badge title say."""
    downgradable = " and ".join(b.name for b in sorted(DOWNGRADABLE_BANDS))
    never = " and ".join(b.name for b in sorted(frozenset(Band) - DOWNGRADABLE_BANDS - {DOWNGRADED_BAND}))
    return (
        f"While spend is over the limit, pending {downgradable} work runs as {DOWNGRADED_BAND.name}; "
        f"{never} work is never downgraded"
    )


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
            downgrade = self.downgrade
            object.__setattr__(
                self, "_text", _pending_text(self.cause.text(), None if downgrade is None else downgrade.text())
            )
        return self._text


def _pending_text(cause_text: str, downgrade_text: str | None) -> str:
    """A pending reason's text from its parts' texts: the cause, then any downgrade."""
    return cause_text if downgrade_text is None else f"{cause_text}; {downgrade_text}"


class SharedTexts:
    """``text(reason)`` renders many reasons as ``reason.text()`` does (``str(reason)`` for a
    reason without one), each distinct object among them and their parts once: a decision
    shares one cause between many waiting-behind causes, and one downgrade between many
    reasons (on the independent mix, 5,251 reasons hold 187 distinct inner causes and 272
    downgrades).

    Parts are told apart by identity and kept here while it lives, so an id stays its
    object's. ``tests/core/test_explain.py`` holds the texts to the plain ``text()``."""

    def __init__(self) -> None:
        self._texts: dict[int, str] = {}
        self._parts: list[Any] = []

    def _part(self, part: Any) -> str:
        text = self._texts.get(id(part))
        if text is None:
            text = part.text_after(self._part(part.cause)) if type(part) is WaitingBehind else part.text()
            self._texts[id(part)] = text
            self._parts.append(part)
        return text

    def text(self, reason: Any) -> str:
        """The text of ``reason``, cheap again for the same object: a pending reason keeps its
        text, a bare cause is remembered here."""
        if type(reason) is not PendingReason:
            return self._part(reason) if hasattr(reason, "text") else str(reason)
        text = reason._text
        if text is None:
            downgrade = reason.downgrade
            text = _pending_text(self._part(reason.cause), None if downgrade is None else self._part(downgrade))
            object.__setattr__(reason, "_text", text)
        return text


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
        NoHealthyWorkers,
        NoMatchingWorker,
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
        NeverFits,
        WaitingForSlice,
    )
}


_WaitingBehindFiller: Any = _filler(WaitingBehind)
_PendingReasonFiller: Any = _filler(PendingReason)


def waiting_behind(ahead: int, cause: Cause) -> WaitingBehind:
    """``WaitingBehind(ahead, cause)`` by the filler (``types._filler``): a decision builds one
    per job left waiting behind placed work (thousands in a large tick), and the frozen
    dataclass's ``__init__`` cost three times this. ``tests/core/test_explain.py`` holds it
    to the constructor."""
    reason = _WaitingBehindFiller()
    reason.ahead = ahead
    reason.cause = cause
    reason.__class__ = WaitingBehind
    return reason


def pending_reason(cause: Cause, downgrade: Downgrade | None) -> PendingReason:
    """``PendingReason(cause, downgrade)`` by the filler, as :func:`waiting_behind`."""
    reason = _PendingReasonFiller()
    reason.cause = cause
    reason.downgrade = downgrade
    reason._text = None
    reason.__class__ = PendingReason
    return reason
