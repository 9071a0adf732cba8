"""Gates and the scheduling order of pending work.

Pending tasks are grouped per job (:class:`JobQueue`) because every ordering key except the task
index is a property of the job: sorting jobs and then tasks by index is the global sort
``(requested band, -depth, root submitted, submitted, job id, task index)`` at a fraction of the
cost of sorting tasks. The gates (:func:`gated_queue`) then drop expired jobs and cap how many tasks of each non-gang
job go forward this tick; what passes is grouped by *effective* band and interleaved
round-robin across users, lower spend first.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from collections import deque
from dataclasses import dataclass
from itertools import chain
from typing import TypeVar

from scheduler.core.bands import BANDS_IN_ORDER, Band
from scheduler.core.types import JobSpec, TaskSnapshot

T = TypeVar("T")


@dataclass(slots=True, eq=False, init=False, repr=False)
class JobQueue:
    """One job's pending work during one tick (mutable scratch, never leaves the core).

    ``pending`` holds the job's tasks that were PENDING at tick start, by index. The gates split
    them into ``passed`` (go on to placement) and ``held`` (over the per-job cap); an expired
    job passes nothing. A job that passed gets its ``shape`` (``placement.ShapeBook``);
    placement sets ``failed_task`` when a task of the job does not fit (the rest of the job
    then waits for the next tick; for a gang, its first task). ``gang`` says whether the job
    is coscheduled (``spec.group_by`` is set).

    Built only by :func:`gated_queue`, which fills every slot: the class has no ``__init__``
    of its own, so ``JobQueue()`` is a bare instance (a decision builds tens of thousands; the
    dataclass ``__init__``, a Python call with nine defaulted parameters, cost more than the
    gates, and ``object.__new__(JobQueue)`` more than the bare call).
    """

    spec: JobSpec
    band: Band
    gang: bool
    pending: Sequence[TaskSnapshot] = ()
    passed: Sequence[TaskSnapshot] = ()
    held: Sequence[TaskSnapshot] = ()
    expired: bool = False
    shape: object | None = None
    failed_task: str | None = None


def job_sort_key(job: JobSpec) -> tuple[int, int, int, int, str]:
    """Priority of a job's tasks before budgets: requested band, deeper first, older tree, older job.

    Equal submission times tie-break by job id; tasks of one job then go by index.
    """
    return (int(job.band), -job.depth, job.root_submitted_at_ms, job.submitted_at_ms, job.id)


def sort_jobs(jobs: list[JobSpec]) -> None:
    """Sort ``jobs`` in place by :func:`job_sort_key`.

    One sort of (key..., job) tuples built by a comprehension: the comprehension reads the
    slots at the interpreter's specialised speed (``attrgetter`` goes through the generic
    attribute look-up, and ``depth`` is a Python property), and job ids are unique, so no two
    tuples tie before the job itself. At 23,000 jobs this executes a fifth fewer instructions
    than three stable passes by ``attrgetter`` keys. The band stays a ``Band`` here (``int()``
    per job would cost a call); it compares as its rank.
    """
    # ``-job.id.count("/")`` is ``-job.depth - 1`` (the property's expression, inline): the same
    # order; ``tests/core/test_ordering.py`` holds this sort equal to ``job_sort_key``'s.
    keyed = [(job.band, -job.id.count("/"), job.root_submitted_at_ms, job.submitted_at_ms, job.id, job) for job in jobs]
    keyed.sort()
    jobs[:] = [item[5] for item in keyed]


def is_expired(job: JobSpec, now_ms: int) -> bool:
    """A job with a scheduling deadline expires at the deadline itself (``now >= deadline``)."""
    return job.scheduling_deadline_ms is not None and now_ms >= job.scheduling_deadline_ms


def gated_queue(
    job: JobSpec, band: Band, tasks: Sequence[TaskSnapshot], now_ms: int, max_tasks_per_job: int
) -> JobQueue:
    """The queue of ``job``'s pending ``tasks`` (by index) in its effective ``band``, through
    the gates: split into passed and held, or expired.

    An expired job passes nothing (its pending tasks become UNSCHEDULABLE). A non-gang job
    passes at most ``max_tasks_per_job`` tasks, lowest index first; 0 means unlimited. Gangs
    are exempt because they place all-or-nothing. (One queue per job, its slots filled here
    directly: a decision builds tens of thousands of queues.)
    """
    gang = job.group_by is not None
    queue = JobQueue()
    queue.spec = job
    queue.band = band
    queue.gang = gang
    queue.pending = tasks
    queue.shape = None
    queue.failed_task = None
    if job.scheduling_deadline_ms is not None and is_expired(job, now_ms):
        queue.passed = queue.held = ()
        queue.expired = True
        return queue
    queue.expired = False
    if max_tasks_per_job and not gang and len(tasks) > max_tasks_per_job:
        queue.passed = tasks[:max_tasks_per_job]
        queue.held = tasks[max_tasks_per_job:]
    else:
        queue.passed = tasks
        queue.held = ()
    return queue


# Runs an iterator to its end, keeping nothing.
_consume = deque(maxlen=0).extend


def users_in_turn(buckets: Mapping[Hashable, Sequence[T]], spend: Mapping[str, int]) -> list[Hashable]:
    """The users of ``buckets`` in :func:`round_robin`'s turn order: ascending spend (missing =
    0), equal spend in the buckets' order."""
    return sorted(buckets, key=lambda user: spend.get(user, 0))


def round_robin(buckets: Mapping[Hashable, Sequence[T]], spend: Mapping[str, int]) -> list[T]:
    """Interleave per-user buckets: users by ascending spend (missing = 0), round k takes each
    user's k-th item. The sort is stable, so users with equal spend keep the buckets' order
    (first appearance)."""
    return interleave(buckets, users_in_turn(buckets, spend))


def interleave(buckets: Mapping[Hashable, Sequence[T]], users: Sequence[Hashable]) -> list[T]:
    """:func:`round_robin` with its users already in turn order (:func:`users_in_turn`)."""
    if len(users) == 1:
        return list(buckets[users[0]])
    # Round k is one list, filled a user at a time: ``map`` appends each of a user's items to
    # its round's list in C (a comprehension per round cost a Python step per item, twice).
    rounds: list[list[T]] = [[] for _ in range(max(map(len, buckets.values()), default=0))]
    for user in users:
        _consume(map(list.append, rounds, buckets[user]))
    return list(chain.from_iterable(rounds))


def interleave_by_user(items: Iterable[T], user_of: Callable[[T], str], spend: Mapping[str, int]) -> list[T]:
    """Round-robin ``items`` across users, lower spend first; each user's items keep their order."""
    buckets: dict[str, list[T]] = {}
    for item in items:
        buckets.setdefault(user_of(item), []).append(item)
    return round_robin(buckets, spend)


def scheduling_order(
    queues: Sequence[JobQueue], spend: Mapping[str, int]
) -> tuple[dict[Band, list[TaskSnapshot]], dict[Band, list[JobQueue]]]:
    """The passed tasks of ``queues`` (already in job priority order), per effective band; and
    per band, its gang queues in the order of their first task in that band's list.

    Bands never mix: each band's list is interleaved across users on its own. Returns the
    non-empty bands in rank order. A task ``i`` places into its user's bucket comes in round
    ``i`` of :func:`round_robin`, after the tasks of the users before its own in turn order:
    a gang's first task comes before another's when its offset is lower, or equal with its
    user earlier in turn. (Placement takes a band's gangs in this order; finding it by walking
    the band's whole list cost a pass over every task.)
    """
    per_band: dict[Band, dict[str, list[TaskSnapshot]]] = {}
    # Per band: (the offset of a gang's first task in its user's bucket, the user, its queue).
    gang_firsts: dict[Band, list[tuple[int, str, JobQueue]]] = {}
    for queue in queues:
        if queue.passed:
            users = per_band.get(queue.band)
            if users is None:
                users = per_band[queue.band] = {}
            user = queue.spec.user
            bucket = users.get(user)
            if bucket is None:
                users[user] = list(queue.passed)
                if queue.gang:
                    gang_firsts.setdefault(queue.band, []).append((0, user, queue))
            else:
                if queue.gang:
                    gang_firsts.setdefault(queue.band, []).append((len(bucket), user, queue))
                bucket.extend(queue.passed)
    bands: dict[Band, list[TaskSnapshot]] = {}
    gangs: dict[Band, list[JobQueue]] = {}
    for band in BANDS_IN_ORDER:
        if band not in per_band:
            continue
        in_turn = users_in_turn(per_band[band], spend)
        bands[band] = interleave(per_band[band], in_turn)
        firsts = gang_firsts.get(band)
        if not firsts:
            continue
        turn = {user: i for i, user in enumerate(in_turn)}
        # (offset, turn) as one int, unique (one user's gangs start at different offsets):
        # sorting small ints is far cheaper than sorting tuples built by a key function.
        n = len(in_turn)
        keys = [offset * n + turn[user] for offset, user, _ in firsts]
        gangs[band] = [firsts[i][2] for i in sorted(range(len(firsts)), key=keys.__getitem__)]
    return bands, gangs
