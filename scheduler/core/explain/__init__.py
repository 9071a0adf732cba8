"""Why a task is still pending, and why a task runs in a lower band, as data.

Every reason is a frozen dataclass with a stable ``code``, the numbers behind it, and a
``text()`` that renders it for people ("need 64 GiB, at most 12 GiB free"). Nothing is
formatted until ``text()`` is called, and the text is computed once per object.

Reasons are computed once per shape or job and shared by every task they apply to, so
explaining 100,000 pending tasks costs O(shapes × workers + jobs), not O(tasks × workers).
"""

from scheduler.core.explain.text import (
    MIB,
    RESOURCE_FORMAT,
    deadline_text,
    format_cores,
    format_duration,
    format_memory,
    iso_time,
    number,
    ordinal,
)
from scheduler.core.explain.reasons import (
    AssignmentCapReached,
    BuildSlotsFull,
    Cause,
    Downgrade,
    GangGroupTooSmall,
    GangNoRoom,
    InsufficientResource,
    JobExhausted,
    NeverFits,
    NoHealthyWorkers,
    NoMatchingWorker,
    PendingReason,
    PerJobCap,
    Preempted,
    Requeued,
    RoomFreedThisTick,
    WaitingBehind,
    WaitingForSlice,
    downgrade_rule_text,
    never_fits,
    stamp_text,
)
from scheduler.core.explain.records import (
    SHELL_TEXT,
    cause_record,
    cause_text,
    downgrade_of,
    downgrade_text,
    pending_text,
    place_text,
    reason_record,
)
from scheduler.core.explain.explainer import (
    Explainer,
    HeldReasons,
    IMPOSSIBLE_AS_IS,
    explain_pending,
    pending_queue,
    queued_jobs,
)

__all__ = [
    "AssignmentCapReached",
    "BuildSlotsFull",
    "Cause",
    "Downgrade",
    "Explainer",
    "GangGroupTooSmall",
    "GangNoRoom",
    "HeldReasons",
    "IMPOSSIBLE_AS_IS",
    "InsufficientResource",
    "JobExhausted",
    "MIB",
    "NeverFits",
    "NoHealthyWorkers",
    "NoMatchingWorker",
    "PendingReason",
    "PerJobCap",
    "Preempted",
    "RESOURCE_FORMAT",
    "Requeued",
    "RoomFreedThisTick",
    "SHELL_TEXT",
    "WaitingBehind",
    "WaitingForSlice",
    "cause_record",
    "cause_text",
    "deadline_text",
    "downgrade_of",
    "downgrade_rule_text",
    "downgrade_text",
    "explain_pending",
    "format_cores",
    "format_duration",
    "format_memory",
    "iso_time",
    "never_fits",
    "number",
    "ordinal",
    "pending_queue",
    "queued_jobs",
    "pending_text",
    "place_text",
    "reason_record",
    "stamp_text",
]
