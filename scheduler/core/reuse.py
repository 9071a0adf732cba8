"""When an earlier decision is still the decision: deciding again only if something it depends on
changed.

``decide`` is a pure function of its snapshot, and the only part of the snapshot that moves on
its own is ``now_ms``. The clock enters the decision in one place: a job whose scheduling
deadline has come (``now_ms >= deadline``) expires, and its reason says by how much. So the
decision made over snapshot A is the decision over snapshot B when

- every field of B but ``now_ms`` equals A's, in the same order (workers, jobs, tasks, budgets,
  config, scale groups; a changed row anywhere means deciding again), and
- no job of A has a deadline at or before either A's or B's ``now_ms`` (while none has come,
  the clock changes nothing; once one has, the decision differs with the clock).

Equality is checked by value, with the identity shortcut of Python's container comparisons:
the tick's cached rows hand back the same objects for rows that did not change, so comparing a
cluster of 100,000 tasks costs milliseconds. ``tests/core/test_reuse.py`` checks over random
snapshots and clocks that a reused decision always equals a fresh one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.core.types import ClusterSnapshot, Decision


@dataclass(frozen=True, slots=True)
class DecidedSnapshot:
    """A snapshot with its decision. ``first_deadline_ms`` is the earliest scheduling deadline
    of any of its jobs (None: no job has one): from then on the clock changes the decision."""

    snapshot: ClusterSnapshot
    decision: Decision
    first_deadline_ms: int | None


def remember(snapshot: ClusterSnapshot, decision: Decision) -> DecidedSnapshot:
    """``decision`` (which must be ``decide(snapshot)``) kept with what :func:`still_decided` needs."""
    deadlines = [job.scheduling_deadline_ms for job in snapshot.jobs.values() if job.scheduling_deadline_ms is not None]
    return DecidedSnapshot(snapshot, decision, min(deadlines) if deadlines else None)


def still_decided(previous: DecidedSnapshot | None, snapshot: ClusterSnapshot) -> bool:
    """Whether ``decide(snapshot)`` is ``previous.decision`` (see the module docstring)."""
    if previous is None:
        return False
    old = previous.snapshot
    deadline = previous.first_deadline_ms
    if deadline is not None and (old.now_ms >= deadline or snapshot.now_ms >= deadline):
        return False
    return (
        old.config == snapshot.config
        and old.scale_groups == snapshot.scale_groups
        and old.workers == snapshot.workers
        and old.tasks == snapshot.tasks
        and _same_in_order(old.jobs, snapshot.jobs)
        and _same_in_order(old.budgets, snapshot.budgets)
    )


def _same_in_order(a: Mapping, b: Mapping) -> bool:
    """Equal mappings whose keys also come in the same order (the decision may follow it)."""
    return a is b or (len(a) == len(b) and a == b and list(a) == list(b))
