"""Task and job states as the database stores them (their ``.value``), computed once.

Sorted tuples, so they serve ``state__in=`` filters, membership tests and SQL text alike.
"""

from __future__ import annotations

from scheduler.core.types import (
    ACTIVE_STATES,
    NON_TERMINAL_STATES,
    TERMINAL_JOB_STATES,
    TERMINAL_STATES,
    JobState,
    TaskState,
)

# Tasks and attempts that hold resources on a worker (assigned, building, running).
ACTIVE_VALUES = tuple(sorted(s.value for s in ACTIVE_STATES))
# Tasks that are not finished: pending or active.
NON_TERMINAL_VALUES = tuple(sorted(s.value for s in NON_TERMINAL_STATES))
# Jobs that are finished (succeeded, failed, killed, ...).
TERMINAL_JOB_VALUES = tuple(sorted(s.value for s in TERMINAL_JOB_STATES))
# The complements the cluster rows read: tasks and jobs the tick still decides over.
LIVE_TASK_VALUES = tuple(sorted(s.value for s in TaskState if s not in TERMINAL_STATES))
LIVE_JOB_VALUES = tuple(sorted(s.value for s in JobState if s not in TERMINAL_JOB_STATES))
