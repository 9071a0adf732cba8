"""The event kinds, in one place: what each says and which fields its ``data`` carries.

docs/api.md's "Events" table lists the same kinds and fields (``tests/events`` ties them).
"""

from __future__ import annotations

# Job events (``job`` set; task events also ``task_index`` and, where one exists, ``attempt``).
SUBMITTED = "submitted"  # band, replicas, parent
QUEUED = "queued"  # band, position, of, position_class: the job's first pending task in its band
DOWNGRADED = "downgraded"  # from_band, to_band: the job's pending tasks now queue in a lower band
REPROMOTED = "repromoted"  # from_band, to_band: back to a higher band
STARTED = "started"  # task: worker, attempt, band (the tick gave the task a worker)
RUNNING = "running"  # task: worker, attempt (the worker reports its process running)
PREEMPTED = "preempted"  # task: worker, attempt, band, by (task id), by_user, by_band
REQUEUED = "requeued"  # task: attempt, reason (back in the queue after its attempt ended)
TASK_FINISHED = "task_finished"  # task: attempt, outcome, exit_code, reason
FINISHED = "finished"  # job: outcome (succeeded, failed, lost, killed, preempted, unschedulable, cosched_failed)
CANCELLED = "cancelled"  # job: by, root (the job whose cancel killed this one)

# Budget events (``job`` empty, ``user`` the budget's user).
UPLIFT_REQUESTED = "uplift_requested"  # uplift, max_band, budget_limit, requested_by, duration_seconds
UPLIFT_APPROVED = "uplift_approved"  # uplift, by, expires_at
UPLIFT_DENIED = "uplift_denied"  # uplift, by, note
UPLIFT_EXPIRED = "uplift_expired"  # uplift
LIMIT_CROSSED = "limit_crossed"  # over (true: spend went above the limit; false: back within), spend, limit

JOB_KINDS = (
    SUBMITTED,
    QUEUED,
    DOWNGRADED,
    REPROMOTED,
    STARTED,
    RUNNING,
    PREEMPTED,
    REQUEUED,
    TASK_FINISHED,
    FINISHED,
    CANCELLED,
)
BUDGET_KINDS = (UPLIFT_REQUESTED, UPLIFT_APPROVED, UPLIFT_DENIED, UPLIFT_EXPIRED, LIMIT_CROSSED)
ALL_KINDS = JOB_KINDS + BUDGET_KINDS

# A job's last event: after one of these nothing more is recorded for it.
END_KINDS = (FINISHED, CANCELLED)

# Job outcomes of FINISHED (and CANCELLED's implied "cancelled"), for `iris job wait`.
OUTCOME_LOST = "lost"  # failed because its worker was lost, not by its own exit
OUTCOME_KILLED = "killed"  # failed because a signal ended its process (or the scheduler killed it)


def position_class(position: int) -> int:
    """Which class a queue position is in: 0 for the head, then 1 for 2-10, 2 for 11-100, 3 for
    101-1,000 and so on. A job's ``queued`` event is recorded again only when its class (or band)
    changes, so a 100,000-task queue does not write 100,000 events every tick as it moves up by
    one; a waiter still hears each order-of-magnitude step, and the head."""
    return 0 if position <= 1 else len(str(position - 1))


def last_position_of_class(cls: int) -> int:
    """The last queue position in class ``cls`` (:func:`position_class`): 1, 10, 100, ..."""
    return 10**cls if cls else 1
