"""Explaining a decision: every task it left pending gets its reason, computed once per shape or
job; and ``pending_queue``, the one definition of queue positions."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import accumulate, filterfalse, islice
from operator import itemgetter, methodcaller

from scheduler.core.bands import Band
from scheduler.core.feasibility import analyse_job, any_fits_when_idle, constraint_text, slice_group
from scheduler.core.ordering import JobQueue
from scheduler.core.placement import Placed, Shape, ShapeBook
from scheduler.core.pool import WorkerPool
from scheduler.core.types import Decision, GroupSpec, JobSpec, TaskSnapshot, WorkerSpec
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
    RoomFreedThisTick,
    WaitingForSlice,
    never_fits,
    pending_reason,
    waiting_behind,
)


class Explainer:
    """Causes per shape (solo) and per (shape, group_by, size) (gang), from the final capacity."""

    def __init__(
        self,
        pool: WorkerPool,
        book: ShapeBook,
        workers: Sequence[WorkerSpec] = (),
        scale_groups: Sequence[GroupSpec] = (),
    ) -> None:
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
        # id(candidate list) -> (how many are at the assignment cap, how many of the others
        # have no build slot, the rest by free CPU, their free CPU): the same for every shape
        # sharing the list.
        self._open: dict[int, tuple[int, int, list[int], list[int]]] = {}
        # id(candidate list) -> :meth:`_most_memory_from`'s suffix maxima (or None).
        self._most_memory: dict[int, list[int] | None] = {}
        # id(candidate list) -> how many of its open workers requests of no GPU or TPU walked.
        self._walked: dict[int, int] = {}

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
        mem, gpu, tpu = pool.mem, pool.gpu, pool.tpu
        c, m, g, u = shape.cpu, shape.mem, shape.gpu, shape.tpu
        # Per check, in check order (assignment cap, build slots, cpu, memory, gpu, tpu): how many
        # workers it is the first to fail, and the most free among those workers. The two caps
        # do not depend on the shape: they are counted once per candidate list (shapes with
        # the same constraints share it), and only the other workers are checked per shape.
        # Those are kept by free CPU, so the ones short of CPU are a prefix, counted by bisection.
        capped, full, open_workers, open_cpu = self._open_candidates(shape.cands)
        short_of_cpu = bisect_left(open_cpu, c)
        n = len(open_workers)
        cpu_only = not g and not u
        if cpu_only:
            most_memory = self._most_memory.get(id(shape.cands))
            if most_memory:
                # A request of no GPU and no TPU, and no open worker short of either: each worker
                # with enough CPU is short of memory, or has room. So there is room exactly
                # when the most free memory among them (a suffix maximum) is enough.
                if short_of_cpu < n and most_memory[short_of_cpu] >= m:
                    return RoomFreedThisTick(), self._any_fits_at_start(shape.cands, shape)
                blocked = [capped, full, short_of_cpu, n - short_of_cpu, 0, 0]
                best = [
                    None,
                    None,
                    open_cpu[short_of_cpu - 1] if short_of_cpu else None,
                    most_memory[short_of_cpu] if short_of_cpu < n else None,
                    None,
                    None,
                ]
                return self._solo_shortage(shape, blocked, best)
        # The free amount of each other worker first short of memory, gpu, tpu (appended, not
        # counted through a helper: a call per worker cost a third of the explanations).
        short: tuple[list[int], ...] = (open_cpu[:short_of_cpu], [], [], [])
        short_mem, short_gpu, short_tpu = (free.append for free in short[1:])
        room = False
        for w in islice(open_workers, short_of_cpu, None):
            # The remaining resource checks, unrolled (a tuple of checks per worker cost half
            # the explanation's time): the first one short counts.
            if (free := mem[w]) < m:
                short_mem(free)
            elif (free := gpu[w]) < g:
                short_gpu(free)
            elif (free := tpu[w]) < u:
                short_tpu(free)
            else:
                # One worker with room decides the cause: the counts are not needed.
                room = True
                break
        if cpu_only:
            walked = len(short[1]) + len(short[2]) + len(short[3]) + room
            self._note_walk(shape.cands, walked, n)
        if room:
            return RoomFreedThisTick(), self._any_fits_at_start(shape.cands, shape)
        blocked = [capped, full, *(len(free) for free in short)]
        best = [None, None, *(max(free, default=None) for free in short)]
        return self._solo_shortage(shape, blocked, best)

    def _note_walk(self, cands: list[int], walked: int, n: int) -> None:
        """Count the open workers of ``cands`` that requests of no GPU or TPU walked; once they
        add up to a quarter of the ``n`` open workers, the list's suffix maxima of free memory
        are built (:meth:`_most_memory_from`) and such requests read them instead of walking.
        (Built for every list up front, they cost more than they saved where lists have few
        shapes, or shapes find room early: the squatters mix. A quarter counted fewer
        instructions on the three benchmark mixes than a whole list or a sixteenth.)"""
        key = id(cands)
        if key in self._most_memory:
            return
        total = self._walked[key] = self._walked.get(key, 0) + walked
        if 4 * total >= n:
            self._most_memory_from(cands)

    def _solo_shortage(self, shape: Shape, blocked: list[int], best: list[int | None]) -> tuple[Cause, bool]:
        """The cause of a solo shape no candidate has room for, from how many candidates each
        check (assignment cap, build slots, cpu, memory, gpu, tpu) is the first to fail and
        the most free among those short of a resource: the largest count wins, the earlier
        check on a tie."""
        pool = self.pool
        ma, mb = pool.max_assign, pool.max_building
        c, m, g, u = shape.cpu, shape.mem, shape.gpu, shape.tpu
        fit_at_start = self._any_fits_at_start(shape.cands, shape)
        worst = max(range(6), key=lambda i: (blocked[i], -i))
        matching = len(shape.cands)
        if worst == 0:
            return AssignmentCapReached(blocked[0], matching, ma), fit_at_start
        if worst == 1:
            return BuildSlotsFull(blocked[1], matching, mb), fit_at_start
        resource, need = (("cpu", c), ("memory", m), ("gpu", g), ("tpu", u))[worst - 2]
        return InsufficientResource(resource, need, best[worst], blocked[worst], matching), fit_at_start

    def _open_candidates(self, cands: list[int]) -> tuple[int, int, list[int], list[int]]:
        """(how many of ``cands`` are at the assignment cap, how many others have no build slot,
        the rest by free CPU ascending, their free CPU), from the final counts; once per
        candidate list."""
        found = self._open.get(id(cands))
        if found is None:
            pool = self.pool
            ma, mb, assigned, building = pool.max_assign, pool.max_building, pool.assigned, pool.building
            uncapped = [w for w in cands if assigned[w] < ma]
            open_workers = [w for w in uncapped if building[w] < mb]
            open_workers.sort(key=pool.cpu.__getitem__)
            open_cpu = list(map(pool.cpu.__getitem__, open_workers))
            found = (len(cands) - len(uncapped), len(uncapped) - len(open_workers), open_workers, open_cpu)
            self._open[id(cands)] = found
        return found

    def _most_memory_from(self, cands: list[int]) -> list[int] | None:
        """For :meth:`_open_candidates`' open workers by free CPU, the most free memory of each
        one and those after it; None if one of them has less than no free GPU or TPU left (a
        request of none is then short of it there). Once per candidate list."""
        key = id(cands)
        if key in self._most_memory:
            return self._most_memory[key]
        _, _, open_workers, _ = self._open_candidates(cands)
        pool = self.pool
        found = None
        if not open_workers or (
            min(map(pool.gpu.__getitem__, open_workers)) >= 0 and min(map(pool.tpu.__getitem__, open_workers)) >= 0
        ):
            found = list(accumulate(reversed(list(map(pool.mem.__getitem__, open_workers))), max))
            found.reverse()
        self._most_memory[key] = found
        return found

    def _count_fit_at_start(self, workers: Sequence[int], shape: Shape) -> int:
        """How many of ``workers`` had a build slot and room for one task of ``shape`` at tick start."""
        pool = self.pool
        mb, building = pool.max_building, pool.start_building
        cpu, mem, gpu, tpu = pool.start_cpu, pool.start_mem, pool.start_gpu, pool.start_tpu
        c, m, g, u = shape.cpu, shape.mem, shape.gpu, shape.tpu
        # A list's length, not a sum over a generator (a generator resumes once per worker).
        return len(
            [w for w in workers if building[w] < mb and cpu[w] >= c and mem[w] >= m and gpu[w] >= g and tpu[w] >= u]
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
        big = [g for g in groups if len(g.members) >= n]
        # The most members of one group that one more task fits on now (``WorkerPool.fits``,
        # inline: a method call per member cost more than its tests; thousands of groups).
        pool = self.pool
        ma, mb, assigned, building = pool.max_assign, pool.max_building, pool.assigned, pool.building
        cpu, mem, gpu, tpu = pool.cpu, pool.mem, pool.gpu, pool.tpu
        c, m, g, u = shape.cpu, shape.mem, shape.gpu, shape.tpu
        best = 0
        for group in big:
            fitting = len(
                [
                    w
                    for w in group.members
                    if assigned[w] < ma
                    and building[w] < mb
                    and cpu[w] >= c
                    and mem[w] >= m
                    and gpu[w] >= g
                    and tpu[w] >= u
                ]
            )
            if fitting > best:
                best = fitting
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
        elif (
            self.workers
            and shape.cands
            and not any_fits_when_idle(self.workers, shape.cands, (shape.cpu, shape.mem, shape.gpu, shape.tpu))
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
    placed: Placed,
    placed_by_preemption: set[str],
    explainer: Explainer,
    downgrades: Mapping[str, Downgrade],
) -> list[tuple[Sequence[TaskSnapshot], PendingReason]]:
    """A reason for every task that passed the gates and was not assigned (tasks held back by
    the per-job cap get theirs from :class:`HeldReasons`), as (tasks, their reason) pairs in
    priority order: the caller builds one map from these and the held-back tasks' pairs.

    ``queues`` are the jobs in priority order; ``placed`` is the placement pass, whose waiting
    tasks are those not placed (``placed_by_preemption`` holds the ids of those the preemption
    pass placed); ``downgrades`` maps a job id to its downgrade, if any. A job's first
    unplaced task gets a reason of its own; the tasks after it (the job was exhausted) share
    one reason across jobs.
    """
    # job id -> (how many tasks were placed ahead of the job's first unplaced task, the job's
    # unplaced tasks). Only the waiting tasks are walked: a task at position p with k unplaced
    # tasks before it has p - k placed ones ahead.
    unplaced_of: dict[str, tuple[int, list[TaskSnapshot]]] = {}
    waited = 0
    for band, waiting in placed.waiting.items():
        for position, task in zip(placed.positions[band], waiting):
            if task.id in placed_by_preemption:
                continue
            found = unplaced_of.get(task.job_id)
            if found is None:
                unplaced_of[task.job_id] = (position - waited, [task])
            else:
                found[1].append(task)
            waited += 1

    # (tasks, reason) pairs (one map is built from them at the end, far cheaper than per-job updates).
    shared: list[tuple[Sequence[TaskSnapshot], PendingReason]] = []
    exhausted_reasons: dict[tuple[int, int], PendingReason] = {}
    # Reasons are immutable, so jobs with equal ones share one object: (tasks ahead or 0, the
    # cause's and the downgrade's identities) -> the reason of a job's first unplaced task.
    head_reasons: dict[tuple[int, int, int], PendingReason] = {}
    # A solo job's shape, or a gang's (shape, group_by, size) -> (its cause, whether its first
    # unplaced task waits behind the tasks placed ahead of it when any were): the same for
    # every job of the shape (the explainer and ``never`` memoise per shape too; this saves
    # their calls and the tests on the cause for each job).
    causes: dict[object, tuple[Cause, bool]] = {}
    for queue in queues:
        job_id = queue.spec.id
        found = unplaced_of.get(job_id)
        if found is not None:
            before, unplaced = found
            downgrade = downgrades.get(job_id)
            key = (queue.shape, queue.spec.group_by, len(queue.passed)) if queue.gang else queue.shape
            resolved = causes.get(key)
            if resolved is None:
                resolved = causes[key] = _job_cause(queue, explainer)
            base, waits_behind = resolved
            behind = before if waits_behind else 0
            head = head_reasons.get((behind, id(base), id(downgrade)))
            if head is None:
                head = pending_reason(waiting_behind(behind, base) if behind else base, downgrade)
                head_reasons[(behind, id(base), id(downgrade))] = head
            if queue.gang or len(unplaced) == 1:
                shared.append((unplaced, head))
            else:
                shared.append((unplaced[:1], head))
                rest = exhausted_reasons.get((id(base), id(downgrade)))
                if rest is None:
                    rest = PendingReason(JobExhausted(base), downgrade=downgrade)
                    exhausted_reasons[(id(base), id(downgrade))] = rest
                shared.append((unplaced[1:], rest))
    return shared


def _job_cause(queue: JobQueue, explainer: Explainer) -> tuple[Cause, bool]:
    """(why ``queue``'s first unplaced task waits, whether it waits behind the tasks placed
    ahead of it): it does when it would have fit at tick start and nothing was freed this tick."""
    if queue.gang:
        cause, fit_at_start = explainer.gang_cause(queue.shape, queue.spec.group_by, len(queue.passed))
    else:
        cause, fit_at_start = explainer.solo_cause(queue.shape)
    if isinstance(cause, RoomFreedThisTick):
        return cause, False
    if not fit_at_start:
        never = explainer.never(queue.shape, queue.spec, isinstance(cause, IMPOSSIBLE_AS_IS))
        if never is not None:
            cause = never
    return cause, fit_at_start


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
    # A task's band: its effective band at tick start, else (put back in the queue this tick)
    # the band it goes back in. (A copy of the 100,000-entry map is one block copy; merging
    # into a non-empty dict would insert its entries one by one.)
    band_of = dict(decision.effective_bands)
    for task, band in decision.requeue_bands.items():
        band_of.setdefault(task, band)
    # The filters run in C: this is once per pending task (100,000 in a large tick).
    ordered = list(filter(reasons.__contains__, decision.order))
    ordered.extend(filterfalse(set(decision.order).__contains__, reasons))
    if not assigned.isdisjoint(reasons):
        ordered = [t for t in ordered if t not in assigned]
    # Each band's tasks keep their order: a stable sort by band, then one list per band, cut
    # where a binary search finds the band's end (a few look-ups a band, not one a task).
    band_at = band_of.__getitem__
    ordered.sort(key=band_at)
    queue = {}
    start, count = 0, len(ordered)
    while start < count:
        band = band_at(ordered[start])
        end = bisect_right(ordered, band, start, count, key=band_at)
        queue[band] = ordered[start:end]
        start = end
    return queue


_split_job = methodcaller("rpartition", "/")
_job_part = itemgetter(0)


def queued_jobs(queue: Mapping[Band, Sequence[str]]) -> dict[Band, list[str]]:
    """Per band of ``pending_queue``'s queue, the job id of each queued task, in the same order
    (at C speed: no Python code runs per task, which matters at 100,000 pending tasks)."""
    return {band: list(map(_job_part, map(_split_job, task_ids))) for band, task_ids in queue.items()}


def queued_job_counts(jobs_in_queue: Mapping[Band, Sequence[str]]) -> dict[int, dict[str, int]]:
    """``{band rank: {job id: queued tasks}}`` of ``queued_jobs``'s columns, jobs in their order
    of first appearance: one count per queued task, shared by the fairness sample, the queue
    explanation and the what-if basis (each counted them itself before)."""
    return {int(band): Counter(job_ids) for band, job_ids in jobs_in_queue.items()}
