"""What a user can be notified of (a *topic*), and which events are which topic.

Researchers (and operators) choose among the topics of their own jobs; admins also among uplift
requests (anyone's: approving them is their job). A topic is a reading of one event kind:
``finished`` and ``failed`` are both the ``finished`` event, told apart by its outcome. Other
kinds (submitted, queued, running, requeued, task ends, cancels by the owner) tell nobody
anything they did not do themselves or could not wait for with ``iris job wait``.
"""

from __future__ import annotations

from scheduler.events import kinds

STARTED = "started"  # a task of the job was given a worker (one per task and attempt)
FINISHED = "finished"  # the job ended and succeeded
FAILED = "failed"  # the job ended otherwise: failed, killed, lost, preempted for good, unschedulable
PREEMPTED = "preempted"  # a running task was stopped for higher-band work (it is requeued)
DOWNGRADED = "downgraded"  # the job's pending tasks now queue as BATCH (its user over the limit)
UPLIFT_REQUESTED = "uplift_requested"  # someone asked for an uplift (admins only)

JOB_TOPICS = (STARTED, FINISHED, FAILED, PREEMPTED, DOWNGRADED)
ADMIN_TOPICS = (UPLIFT_REQUESTED,)
ALL_TOPICS = JOB_TOPICS + ADMIN_TOPICS

# The event kinds the fan-out reads (every topic is one of these kinds).
NOTIFIED_KINDS = (kinds.STARTED, kinds.FINISHED, kinds.PREEMPTED, kinds.DOWNGRADED, kinds.UPLIFT_REQUESTED)

EMAIL = "email"
WEBHOOK = "webhook"
CHANNELS = (EMAIL, WEBHOOK)

# A user with no settings row: admins hear of uplift requests by email (the issue: "admins are
# notified of uplift requests"), everyone else of nothing until they choose.
ADMIN_DEFAULT_EMAIL_TOPICS = (UPLIFT_REQUESTED,)


def topic_of(kind: str, data: dict) -> str | None:
    """The topic an event of ``kind`` with ``data`` is, or ``None`` if it is no topic."""
    if kind == kinds.FINISHED:
        return FINISHED if data.get("outcome") == "succeeded" else FAILED
    if kind in (kinds.STARTED, kinds.PREEMPTED, kinds.DOWNGRADED, kinds.UPLIFT_REQUESTED):
        return kind
    return None


def topics_for(is_admin: bool) -> tuple[str, ...]:
    """The topics a user of that role may choose."""
    return ALL_TOPICS if is_admin else JOB_TOPICS
