"""``decide``: one snapshot in, one decision out. The single entry point the shell calls.

The pipeline, each step a pass over plain data:

1. spend per user from the active tasks; effective band of every pending job;
2. gates (deadline expiry, per-job cap) and the scheduling order (band, then round robin);
3. placement, band by band (``placement``);
4. the preemption pass for work that did not fit (``preemption``);
5. outcomes: victims' new states, gang siblings, jobs that end; reasons for what still waits.

Nothing here reads the clock (``snapshot.now_ms`` is the time) or mutates the snapshot.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager
from itertools import chain
from operator import attrgetter

from scheduler.core.bands import Band
from scheduler.core.budget import budget_limit, effective_band, spend_from_counts
from scheduler.core.explain import (
    Downgrade,
    Explainer,
    HeldReasons,
    PendingReason,
    Preempted,
    Requeued,
    deadline_text,
    explain_pending,
)
from scheduler.core.ordering import JobQueue, gated_queue, scheduling_order, sort_jobs
from scheduler.core.placement import ShapeBook, place
from scheduler.core.pool import WorkerPool
from scheduler.core.preemption import PreemptionPass, PreemptionPlan
from scheduler.core.types import (
    ACTIVE_STATES,
    NON_TERMINAL_STATES,
    Assignment,
    AssignmentFiller,
    ClusterSnapshot,
    Decision,
    JobState,
    Preemption,
    TaskAfter,
    TaskSnapshot,
    TaskState,
    Unschedulable,
    preemption,
    task_after,
)

_by_index = attrgetter("index")


def decide(snapshot: ClusterSnapshot) -> Decision:
    """Decide one tick over ``snapshot``.

    The decision covers every task that was PENDING at tick start (an effective band each; then
    assigned, unschedulable or a pending reason) and every task whose state changes (``after``).
    Preconditions: every task's job is in ``snapshot.jobs``. Tasks listed with a terminal state
    are ignored except that an ``unfinished_attempt_worker`` still holds capacity.

    The cyclic garbage collector is paused while deciding: the decision builds about one
    container per pending task and no reference cycles, and collections triggered by those
    allocations would otherwise rescan the whole snapshot several times (a third of the time
    at 100k tasks). It is re-enabled on return if it was enabled. It is switched off before
    anything is allocated (not through :func:`collector_paused`, whose generator is an
    allocation): an allocation on the way in may start a collection of whatever the caller
    left young, such as the previous decision in a loop of decides, which is not this
    decision's work (40M instructions, 1.6% of a decide at 100k x 10k). The tick and
    ``simulate`` call ``decide`` with the collector already paused.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _decide(snapshot)
    finally:
        if was_enabled:
            gc.enable()


@contextmanager
def collector_paused():
    """Pause Python's cyclic garbage collector inside the block; re-enable it after if it was
    enabled. The decision uses it, and the tick around its load, decide and apply: both make
    hundreds of thousands of short-lived objects beside large live data and no reference
    cycles worth collecting on the way, so collections would only rescan what is live."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _decide(snapshot: ClusterSnapshot) -> Decision:
    jobs = snapshot.jobs
    config = snapshot.config
    pending_by_job, active_by_job, unfinished, out_of_order = _group_tasks(snapshot.tasks)
    spend = spend_from_counts(jobs, {job_id: len(tasks) for job_id, tasks in active_by_job.items()})
    pool = WorkerPool(snapshot, active_by_job, unfinished)
    book = ShapeBook(pool)
    by_job, expired, downgrades = _job_queues(snapshot, pending_by_job, out_of_order, spend, book)
    queues = list(by_job.values())
    # One pass over every pending task: its effective band.
    # (A comprehension: a third cheaper than the same inserts in a loop statement.)
    effective_bands: dict[str, Band] = {task.id: queue.band for queue in queues for task in queue.pending}
    # The reason of the tasks the per-job cap held back does not depend on placement; they are
    # put in the reasons map with the explanations, in one comprehension (see below).
    held = HeldReasons(config.max_tasks_per_job_per_cycle)
    # Most jobs run in the band they asked for: their reason is looked up once, not per job.
    not_downgraded = held.reason(None)
    held_back = [
        (queue.held, not_downgraded if (downgrade := downgrades.get(queue.spec.id)) is None else held.reason(downgrade))
        for queue in queues
        if queue.held
    ]

    unschedulable = []
    for queue in expired:
        reason = deadline_text(queue.spec.scheduling_deadline_ms, snapshot.now_ms)
        unschedulable.extend(Unschedulable(t.id, reason) for t in queue.pending)
    bands, gangs = scheduling_order(queues, spend)
    order = tuple([t.id for tasks in bands.values() for t in tasks])
    placed = place(bands, gangs, by_job, pool, book)

    # What placement left waiting in the bands that may preempt, in scheduling order.
    candidates = [t for band, tasks in placed.waiting.items() if band is not Band.BATCH for t in tasks]
    plan = PreemptionPass(pool, book, by_job, jobs, active_by_job, candidates).run() if candidates else PreemptionPlan()

    outcome = _Outcome(snapshot, by_job, pool.ids)
    outcome.assign(placed.tasks, placed.ends)
    outcome.assign(plan.placements)
    outcome.expire(expired)
    outcome.evict(plan)
    outcome.finish_jobs(pending_by_job, active_by_job)

    explainer = Explainer(pool, book, snapshot.workers, snapshot.scale_groups)
    explained = explain_pending(queues, placed, {t.id for t, _ in plan.placements}, explainer, downgrades)
    # Built once from (tasks, reason) pairs: merging one map of that size into another
    # inserts every entry a second time.
    reasons: dict[str, PendingReason] = {
        task.id: reason for tasks, reason in chain(held_back, explained) for task in tasks
    }
    reasons.update(outcome.requeued)
    # A task that ended in this decision (its gang failed for good, its job expired) is not
    # pending any more, whatever the placement pass said about it.
    for task_id in outcome.ended:
        reasons.pop(task_id, None)

    defaults = config.budget_defaults
    requeue_bands = {
        task_id: effective_band(jobs[job_id].band, jobs[job_id].user, spend, snapshot.budgets, defaults)
        for task_id in outcome.requeued
        if task_id in reasons
        for job_id in (task_id.rsplit("/", 1)[0],)
    }

    return Decision(
        spend=spend,
        effective_bands=effective_bands,
        order=order,
        assignments=tuple(
            [a for a in outcome.assignments if a.task not in outcome.withdrawn]
            if outcome.withdrawn
            else outcome.assignments
        ),
        preemptions=tuple(outcome.preemptions),
        unschedulable=tuple(unschedulable),
        pending_reasons=reasons,
        after=outcome.after,
        jobs_after=dict(sorted(outcome.jobs_after.items())),
        requeue_bands=requeue_bands,
        capacity_left=pool.capacity_left(),
    )


def placements(snapshot: ClusterSnapshot) -> list[tuple[str, str]]:
    """``decide``'s placement pass alone: (task id, worker id) of every task it places in free
    capacity, in placement order, without the preemption pass and without explanations (the
    uplift preview's trial: explaining what waits costs far more than placing, and it reads
    only where tasks land). The same steps as :func:`decide` up to ``place``, so on a snapshot
    where nothing is preempted these are exactly the decision's assignments
    (``tests/core/test_uplift_preview.py`` holds them equal)."""
    with collector_paused():
        pending_by_job, active_by_job, unfinished, out_of_order = _group_tasks(snapshot.tasks)
        counts = {job_id: len(tasks) for job_id, tasks in active_by_job.items()}
        spend = spend_from_counts(snapshot.jobs, counts)
        pool = WorkerPool(snapshot, active_by_job, unfinished)
        book = ShapeBook(pool)
        by_job, _, _ = _job_queues(snapshot, pending_by_job, out_of_order, spend, book)
        bands, gangs = scheduling_order(list(by_job.values()), spend)
        ids = pool.ids
        return [(task.id, ids[w]) for task, w in place(bands, gangs, by_job, pool, book).tasks]


def _group_tasks(
    tasks: Iterable[TaskSnapshot],
) -> tuple[dict[str, list[TaskSnapshot]], dict[str, list[TaskSnapshot]], list[TaskSnapshot], set[str]]:
    """PENDING tasks per job, ASSIGNED/BUILDING/RUNNING tasks per job, the tasks (any state)
    with an unfinished earlier attempt, and the jobs whose PENDING tasks came out of index
    order. One pass: this is the only loop over every task."""
    pending = TaskState.PENDING
    pending_by_job: dict[str, list[TaskSnapshot]] = {}
    active_by_job: dict[str, list[TaskSnapshot]] = {}
    unfinished: list[TaskSnapshot] = []
    out_of_order: set[str] = set()
    # Snapshots list a job's tasks together: the bucket and index of the last PENDING task
    # are kept, and a job's bucket is looked up only when the job changes (three in four
    # pending tasks follow one of their own job at 100k pending).
    job_id = None
    queued: list[TaskSnapshot] = []
    last_index = 0
    # The same for the active tasks' bucket (13 tasks a job run on the squatters mix).
    active_job = None
    active: list[TaskSnapshot] = []
    for task in tasks:
        state = task.state
        if state is pending:
            index = task.index
            if task.job_id != job_id:
                job_id = task.job_id
                found = pending_by_job.get(job_id)
                if found is None:
                    queued = pending_by_job[job_id] = []
                    last_index = index
                else:
                    queued = found
                    last_index = queued[-1].index
            if index < last_index:
                out_of_order.add(job_id)
            last_index = index
            queued.append(task)
        elif state in ACTIVE_STATES:
            if task.job_id != active_job:
                active_job = task.job_id
                found = active_by_job.get(active_job)
                if found is None:
                    found = active_by_job[active_job] = []
                active = found
            active.append(task)
        if task.unfinished_attempt_worker is not None:
            unfinished.append(task)
    return pending_by_job, active_by_job, unfinished, out_of_order


def _job_queues(
    snapshot: ClusterSnapshot,
    pending_by_job: Mapping[str, list[TaskSnapshot]],
    out_of_order: set[str],
    spend: Mapping[str, int],
    book: ShapeBook,
) -> tuple[dict[str, JobQueue], list[JobQueue], dict[str, Downgrade]]:
    """One queue per job with pending work, by job id in job priority order, each with its
    effective band, through the gates (:func:`ordering.gated_queue`) and, unless it expired,
    with its shape; the expired queues; and job id -> why its pending work runs in a lower
    band than requested (one object per user and band), for the jobs that did not expire.

    One pass over the jobs. Only the jobs in ``out_of_order`` need their tasks sorted by index
    (snapshots list a job's tasks in index order, and sorting twelve thousand sorted lists
    cost a third of this); they are sorted (in place) before the pass, which then tests no
    job for it."""
    jobs = snapshot.jobs
    budgets, defaults = snapshot.budgets, snapshot.config.budget_defaults
    now_ms, max_tasks_per_job = snapshot.now_ms, snapshot.config.max_tasks_per_job_per_cycle
    # user -> requested band -> (effective band, its downgrade or None). (Keyed by user, then
    # band: a (user, band) tuple key cost a tuple, its hash and a compare per job.)
    band_of: dict[str, dict[Band, tuple[Band, Downgrade | None]]] = {}
    by_job: dict[str, JobQueue] = {}
    expired: list[JobQueue] = []
    downgrades: dict[str, Downgrade] = {}
    for job_id in out_of_order:
        pending_by_job[job_id].sort(key=_by_index)
    ordered = [jobs[job_id] for job_id in pending_by_job]
    sort_jobs(ordered)
    shapes = book.shapes_by_identity
    for job in ordered:
        tasks = pending_by_job[job.id]
        user_bands = band_of.get(job.user)
        if user_bands is None:
            user_bands = band_of[job.user] = {}
        found = user_bands.get(job.band)
        if found is None:
            band = effective_band(job.band, job.user, spend, budgets, defaults)
            downgrade = None
            if band is not job.band:
                downgrade = Downgrade(job.band, band, spend.get(job.user, 0), budget_limit(job.user, budgets, defaults))
            found = user_bands[job.band] = (band, downgrade)
        band, downgrade = found
        queue = by_job[job.id] = gated_queue(job, band, tasks, now_ms, max_tasks_per_job)
        if queue.expired:
            expired.append(queue)
            continue
        # The book's own first key, looked up here: a call per job cost more than the look-up.
        shape = shapes.get((id(job.resources), id(job.constraints)))
        queue.shape = book.shape_of(job) if shape is None else shape
        if downgrade is not None:
            downgrades[job.id] = downgrade
    return by_job, expired, downgrades


class _Outcome:
    """Accumulates the state changes of one decision."""

    def __init__(self, snapshot: ClusterSnapshot, queues: Mapping[str, JobQueue], worker_ids: list[str]) -> None:
        self.jobs = snapshot.jobs
        self.queues = queues
        self.worker_ids = worker_ids
        self.after: dict[str, TaskAfter] = {}
        self.assignments: list[Assignment] = []
        self.preemptions: list[Preemption] = []
        self.jobs_after: dict[str, JobState] = {}
        self.requeued: dict[str, PendingReason] = {}
        self.withdrawn: set[str] = set()
        # The tasks whose state after this decision is not PENDING and not ASSIGNED (expired,
        # ended by preemption, killed, their gang failed): none of them is left waiting.
        self.ended: set[str] = set()
        # Jobs touched by preemption: job id -> ids of its evicted tasks, and whether one ended.
        self.victims_by_job: dict[str, list[str]] = {}
        self.ended_by_preemption: set[str] = set()

    def assign(self, placements: Sequence[tuple[TaskSnapshot, int]], ends: Mapping[Band, int] | None = None) -> None:
        """Assign each (task, worker index) of ``placements``. ``ends``: per band, in order, where
        its placements end (the placement pass's, band after band), so each one's band is known
        without looking up its job's queue; without it, the queue's band."""
        ids = self.worker_ids
        queues = self.queues
        after = self.after
        append = self.assignments.append
        # TaskAfter is immutable, so tasks landing on the same worker in the same band with the
        # same count share one (there are tens of thousands of assignments in a large tick).
        # The key packs (count, worker, band rank) into one int: cheaper than a tuple.
        shared: dict[int, TaskAfter] = {}
        assigned = TaskState.ASSIGNED  # enum attribute lookups are slow; keep them out of loops
        stride = 4 * len(ids)
        # Assignment is a frozen slots dataclass: its __init__ goes through object.__setattr__
        # per field. Filling the slots of a plain class of the same layout and re-classing it
        # (``types.AssignmentFiller``) builds an equal object at a third of that cost, and for
        # a fifth fewer instructions than calling each slot descriptor's ``__set__``. The filler
        # instance comes from calling the class (``types._filler``: cheaper than
        # ``object.__new__(filler)``, the generic ``__new__`` wrapper).
        filler = AssignmentFiller
        parts: list[tuple[Band | None, Sequence[tuple[TaskSnapshot, int]]]] = [(None, placements)]
        if ends is not None:
            starts = [0, *ends.values()]
            parts = [(band, placements[start:end]) for (band, end), start in zip(ends.items(), starts)]
        for fixed, part in parts:
            for task, w in part:
                band = queues[task.job_id].band if fixed is None else fixed
                worker = ids[w]
                a = filler()
                a.task = task.id
                a.worker = worker
                a.band = band
                a.__class__ = Assignment
                append(a)
                key = task.preemption_count * stride + 4 * w + band
                state = shared.get(key)
                if state is None:
                    state = shared[key] = task_after(assigned, worker, band, task.preemption_count)
                after[task.id] = state

    def expire(self, expired: Iterable[JobQueue]) -> None:
        """Every pending task of an expired job becomes UNSCHEDULABLE, and so does the job."""
        unschedulable = TaskState.UNSCHEDULABLE
        for queue in expired:
            for task in queue.pending:
                self.after[task.id] = TaskAfter(unschedulable, None, None, task.preemption_count)
                self.ended.add(task.id)
            self.jobs_after[queue.spec.id] = JobState.UNSCHEDULABLE

    def evict(self, plan: PreemptionPlan) -> None:
        """Victim outcomes: an ASSIGNED victim goes back free; a BUILDING/RUNNING one is charged
        and retries while its count before the charge is below ``max_retries_preemption``, else
        ends PREEMPTED."""
        pending, preempted, assigned = TaskState.PENDING, TaskState.PREEMPTED, TaskState.ASSIGNED
        # Both immutable, so shared (thousands of evictions in a large tick): the reason by
        # the victims of one preemptor, the state by the victims with the same outcome.
        reason_of: dict[str, PendingReason] = {}
        after_of: dict[tuple[TaskState, int], TaskAfter] = {}
        for eviction in plan.evictions:
            victim = eviction.victim
            preemptor = eviction.preemptor
            job = self.jobs[victim.job_id]
            self.preemptions.append(
                preemption(
                    victim.id,
                    preemptor.id,
                    self.worker_ids[eviction.worker],
                    eviction.victim_band,
                    self.queues[preemptor.job_id].band,
                )
            )
            count = victim.preemption_count
            if victim.state is assigned:
                state = pending
            elif count < job.max_retries_preemption:
                state, count = pending, count + 1
            else:
                state, count = preempted, count + 1
                self.ended_by_preemption.add(job.id)
                self.ended.add(victim.id)
            after = after_of.get((state, count))
            if after is None:
                after = after_of[(state, count)] = TaskAfter(state, None, None, count)
            self.after[victim.id] = after
            if state is pending:
                reason = reason_of.get(preemptor.id)
                if reason is None:
                    reason = reason_of[preemptor.id] = PendingReason(Preempted(preemptor.id))
                self.requeued[victim.id] = reason
            self.victims_by_job.setdefault(job.id, []).append(victim.id)

    def finish_jobs(
        self, pending_by_job: Mapping[str, list[TaskSnapshot]], active_by_job: Mapping[str, list[TaskSnapshot]]
    ) -> None:
        """Consequences for whole jobs.

        - A gang with an evicted member: its other active members go back to PENDING free of
          charge; if a member ended PREEMPTED, every unfinished task of the gang ends
          COSCHED_FAILED instead (assignments made to it this tick are withdrawn) and so does
          the job.
        - A solo job whose task ended PREEMPTED ends PREEMPTED once none of its tasks is left
          unfinished.
        - An expired (UNSCHEDULABLE) job's active tasks are KILLED.
        """
        expired = {job_id for job_id, state in self.jobs_after.items() if state is JobState.UNSCHEDULABLE}
        touched = expired | set(self.victims_by_job)
        if not touched:
            return
        after = self.after
        for job_id in sorted(touched):
            job = self.jobs[job_id]
            if job_id not in expired and job.group_by is None and job_id not in self.ended_by_preemption:
                # A solo job whose evicted tasks all go back to the queue: nothing else changes.
                continue
            job_tasks = sorted(pending_by_job.get(job_id, []) + active_by_job.get(job_id, []), key=_by_index)
            if job_id in expired:
                for task in job_tasks:
                    state = after[task.id].state if task.id in after else task.state
                    if state in ACTIVE_STATES or (task.id in after and state is TaskState.PENDING):
                        self._end(task, TaskState.KILLED)
                continue
            if job.group_by is not None:
                victims = set(self.victims_by_job[job_id])
                if job_id in self.ended_by_preemption:
                    for task in job_tasks:
                        state = after[task.id].state if task.id in after else task.state
                        if state in NON_TERMINAL_STATES:
                            self._end(task, TaskState.COSCHED_FAILED)
                    self.jobs_after[job_id] = JobState.COSCHED_FAILED
                else:
                    first_victim = self.victims_by_job[job_id][0]
                    for task in job_tasks:
                        if task.id not in victims and task.id not in after and task.state in ACTIVE_STATES:
                            after[task.id] = TaskAfter(TaskState.PENDING, None, None, task.preemption_count)
                            self.requeued[task.id] = PendingReason(Requeued(first_victim))
            elif job_id in self.ended_by_preemption:
                still_open = any(
                    (after[t.id].state if t.id in after else t.state) in NON_TERMINAL_STATES for t in job_tasks
                )
                if not still_open:
                    self.jobs_after[job_id] = JobState.PREEMPTED

    def _end(self, task: TaskSnapshot, state: TaskState) -> None:
        previous = self.after.get(task.id)
        count = previous.preemption_count if previous is not None else task.preemption_count
        if previous is not None and previous.state is TaskState.ASSIGNED:
            self.withdrawn.add(task.id)
        self.after[task.id] = TaskAfter(state, None, None, count)
        self.ended.add(task.id)
        self.requeued.pop(task.id, None)
