"""An uplift's effect before approval: what ``decide`` would do with one user's pending tasks
if their budget limit were raised, on the newest tick's basis. Pure: the shell
(``budgets.preview``) reads the basis, the queue and the user's jobs; ``now_ms`` is passed in.

What a grant changes in ``decide``: only the effective band (``core.budget.effective_band``).
A grant's ``max_band`` governs what may be *submitted*; the core never reads it. Spend is
counted from active tasks, so it does not move either. The user's pending tasks requested
INTERACTIVE that the old limit pushed to BATCH go back to INTERACTIVE when their spend is not
over the new limit; nothing else in the snapshot differs.

Why the answer is ``decide``'s, without a full decision (0.4 s at 100,000 pending tasks). Take
the newest tick's snapshot S and its decision D, and S' = S with the raised limit. When D
placed, evicted and ended nothing (the cluster is at rest: what is pending did not fit), then
in ``decide(S')``:

1. SYSTEM and PRODUCTION place nothing, as in D: the same tasks meet the same capacity.
2. In INTERACTIVE, every other user's task met that capacity in D and did not fit. Capacity
   only shrinks while a band is placed, and whether a task (or a gang) fits is monotone in
   capacity, so they still do not fit, whatever the user's tasks take between them. So the
   user's tasks are placed exactly as they would be alone on the capacity D left free
   (``Decision.capacity_left``, the basis's ``free``): we run ``decide`` on that, with the
   user's moved jobs only and each worker's build slots as the tick left them.
3. BATCH loses the user's moved tasks; the rest still do not fit (less capacity, same argument).
4. Positions are ``core.explain.pending_queue``'s: the band's tasks that passed the gates in
   round-robin order (``core.ordering.round_robin``: users by ascending spend, equal spend by
   first appearance in job order, round k takes each user's k-th task), less the tasks
   assigned; then the tasks the per-job cap held back, in job order (``job_sort_key``); then
   tasks requeued by a preemption. The gates split each job as before (they do not look at
   bands). Only the user's tasks are assigned, so a user's remaining task at round k is at its
   round-robin index less the user's tasks placed before it.

What the preview does not decide: a preemption. A moved task that does not fit free capacity
becomes a preemption candidate; ``preemptible`` counts the running tasks, by stamped band, on
the workers its job may use that the preemption pass's own rule (``core.preemption.may_evict``)
lets it evict at INTERACTIVE (at BATCH it may evict none). If the next tick does evict for it,
that task starts instead of waiting at the position shown. The preview also describes the
cluster as the newest tick left it: submissions, ends and workers changed since move the next
tick's numbers, and a tick that itself placed work is not at rest (the next tick counts that
work's spend and lets held tasks through); ``UpliftPreview.at_rest`` says which case applies.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from itertools import accumulate
from dataclasses import dataclass, field, replace

from scheduler.core.bands import Band
from scheduler.core.budget import effective_band
from scheduler.core.decision import placements
from scheduler.core.feasibility import HeldWork
from scheduler.core.ordering import job_sort_key
from scheduler.core.constraints import (
    constraint_matches,
    hard_constraints,
    request_tuple,
    soft_constraints,
    worker_attributes,
)
from scheduler.core.preemption import may_evict
from scheduler.core.types import (
    BudgetSpec,
    ClusterSnapshot,
    JobSpec,
    SchedulerConfig,
    TaskSnapshot,
    TaskState,
    WorkerSpec,
)

# A solo job is first tried on this many of the workers with room, by id (or twice the tasks
# tried, if more): first-fit takes the first ones anyway, and 10,000 workers cost more to set
# up than the trial. All of them are offered when a task found no place there.
FIRST_FIT_WORKERS = 64
FIRST_FIT_FACTOR = 2

# The job the build-slot stand-ins belong to (never a real job id: real ids start with "/").
SLOT_JOB = JobSpec(
    id="uplift-preview:slots", user="", band=Band.BATCH, parent=None, submitted_at_ms=0, root_submitted_at_ms=0
)


@dataclass(frozen=True, slots=True)
class QueuedTask:
    """One of the user's pending tasks as the newest tick queued it: effective band, 1-based
    position in it, and whether the per-job cap held it back this tick (``per_job_cap``)."""

    task: str
    job: str
    band: Band
    position: int
    held: bool
    band_count: int = 0


@dataclass(frozen=True, slots=True)
class BandLine:
    """A band of the newest tick's queue, reduced to what positions need, without the user.

    ``passed`` is each other user's count of tasks that passed the gates, in round-robin order
    (their first appearance); ``first_jobs`` the job of each one's first such task (compared
    with the user's when their spend is equal); ``held`` each other job's held-back tasks as
    (its ``job_sort_key``, count); ``tail`` the band's requeued tasks (last in the queue)."""

    passed: tuple[tuple[str, int], ...] = ()
    first_jobs: Mapping[str, JobSpec] = field(default_factory=dict)
    held: tuple[tuple[tuple, int], ...] = ()
    tail: int = 0

    @property
    def count(self) -> int:
        return sum(n for _, n in self.passed) + sum(n for _, n in self.held) + self.tail


@dataclass(frozen=True, slots=True)
class TaskMove:
    """One of the user's pending tasks before and with the grant.

    ``band_after``/``position_after``/``band_pending_after`` are the next tick's; a task that
    would be placed at once has ``starts_on`` (the worker) and no position."""

    task: str
    job: str
    requested: Band
    band_before: Band
    position_before: int
    band_pending_before: int
    band_after: Band
    position_after: int | None
    band_pending_after: int
    starts_on: str | None = None

    @property
    def changes_band(self) -> bool:
        return self.band_after is not self.band_before


@dataclass(frozen=True, slots=True)
class UpliftPreview:
    """What raising ``user``'s limit from ``limit_before`` to ``limit_after`` would do at the
    next tick (0 = unlimited). ``tasks`` lists the user's tasks that change band, in the order
    of the queue before; ``preemptible`` counts running tasks by stamped band that the moved
    tasks could evict and could not before; ``at_rest`` whether the newest tick placed and
    evicted nothing (the preview is then exactly the next tick's, absent other changes)."""

    user: str
    spend: int
    limit_before: int
    limit_after: int
    tasks: tuple[TaskMove, ...]
    preemptible: dict[Band, int]
    at_rest: bool
    unchanged: int = 0

    @property
    def starting(self) -> int:
        return sum(1 for t in self.tasks if t.starts_on is not None)


@dataclass(frozen=True, slots=True)
class PreviewBasis:
    """The newest tick's basis as the preview reads it.

    ``free`` is every worker as a new task finds it (what the decision left free) and
    ``stand_ins`` the tick's ASSIGNED/BUILDING tasks on them as :func:`build_slot_stand_ins`
    makes them: the build-slot cap counts them. ``lines`` is each band's :class:`BandLine` without the user.
    ``holders`` the running tasks per held work on the workers the moved jobs may use."""

    now_ms: int
    config: SchedulerConfig
    spend: Mapping[str, int]
    free: tuple[WorkerSpec, ...]
    stand_ins: Mapping[str, tuple[TaskSnapshot, ...]]
    lines: Mapping[Band, BandLine]
    holders: Mapping[HeldWork, int] = field(default_factory=dict)
    at_rest: bool = True
    # Each ``free`` worker's attributes as constraints see them (``placement.worker_attributes``),
    # in the same order; computed here when empty.
    attributes: tuple[Mapping[str, str], ...] = ()
    # The caller's cache for what depends on this basis alone (each shape's candidates); the
    # shell keeps one per tick. Reading it never changes an answer.
    memo: dict = field(default_factory=dict, compare=False, repr=False)


# The reason codes of tasks that did not pass the gates (held back by the per-job cap) and of
# tasks requeued by a preemption this tick (``core.explain.reasons``): the queue's later parts.
HELD_CODE = "per_job_cap"
REQUEUED_CODES = frozenset({"preempted", "gang_requeued"})


def band_line(
    ids: Sequence[str], codes: Sequence[str], jobs: Mapping[str, JobSpec], without: str | None = None
) -> BandLine:
    """One band of the tick's queue (``ids`` in position order, each task's reason code in
    ``codes``) as a :class:`BandLine`, leaving out the tasks of user ``without``. ``jobs`` must hold each user's first passed job and
    every held job (a job missing from it, ended since, counts with the lowest key: it stays
    ahead). One pass over the band; ``budgets.preview`` keeps it per tick."""
    passed: dict[str, int] = {}
    first_jobs: dict[str, JobSpec] = {}
    held: dict[str, int] = {}
    tail = 0
    for task_id, code in zip(ids, codes, strict=True):
        job_id = task_id[: task_id.rfind("/")]
        if without is not None and job_id.split("/", 2)[1] == without:
            continue
        if code == HELD_CODE:
            held[job_id] = held.get(job_id, 0) + 1
        elif code in REQUEUED_CODES:
            tail += 1
        else:
            user = job_id.split("/", 2)[1]
            n = passed.get(user)
            if n is None:
                passed[user] = 1
                if job_id in jobs:
                    first_jobs[user] = jobs[job_id]
            else:
                passed[user] = n + 1
    lowest = (-1, -(1 << 62), -(1 << 62), -(1 << 62), "")
    return BandLine(
        passed=tuple(passed.items()),
        first_jobs=first_jobs,
        held=tuple(sorted((job_sort_key(jobs[j]) if j in jobs else lowest, n) for j, n in held.items())),
        tail=tail,
    )


def preview_uplift(
    basis: PreviewBasis,
    user: str,
    jobs: Mapping[str, JobSpec],
    queued: Sequence[QueuedTask],
    budget_before: BudgetSpec,
    budget_after: BudgetSpec,
) -> UpliftPreview:
    """The next tick's bands and positions of ``user``'s queued tasks (``queued``, in the
    queue's order, every band) with ``budget_after`` instead of ``budget_before``.

    ``jobs`` holds the spec of every job in ``queued``. See the module docstring for why this
    is ``decide``'s answer on a cluster at rest.
    """
    defaults = basis.config.budget_defaults
    spend = basis.spend
    mine = spend.get(user, 0)
    band_before_of, band_after_of = {}, {}
    for job_id in dict.fromkeys(q.job for q in queued):
        job = jobs[job_id]
        band_before_of[job_id] = effective_band(job.band, user, spend, {user: budget_before}, defaults)
        band_after_of[job_id] = effective_band(job.band, user, spend, {user: budget_after}, defaults)
    moved = [q for q in queued if band_after_of[q.job] is not band_before_of[q.job]]
    base = UpliftPreview(
        user, mine, budget_before.budget_limit, budget_after.budget_limit, (), {}, basis.at_rest, len(queued)
    )
    if not moved:
        return base
    # A grant only raises the limit, so a move is always BATCH -> the requested band, and every
    # moved job goes to the same band (INTERACTIVE: SYSTEM and PRODUCTION never move).
    target = band_after_of[moved[0].job]
    line = basis.lines.get(target, BandLine())
    moved_jobs = {job_id: jobs[job_id] for job_id in dict.fromkeys(q.job for q in moved)}
    placed = _placements(basis, moved_jobs, moved)
    passed = [q for q in moved if not q.held]
    held = [q for q in moved if q.held]
    # Round robin of the passed tasks: the user's place among the band's users.
    order = list(line.passed)
    first = moved_jobs[passed[0].job] if passed else None
    at = len(order)
    for i, (other, _) in enumerate(order):
        theirs = spend.get(other, 0)
        if theirs > mine or (
            theirs == mine
            and first is not None
            and other in line.first_jobs
            and job_sort_key(first) < job_sort_key(line.first_jobs[other])
        ):
            at = i
            break
    before_me, after_me = order[:at], order[at:]
    passed_after = sum(n for _, n in order) + len(passed) - len(placed)
    held_after = sum(n for _, n in line.held) + len(held)
    count_after = passed_after + held_after + line.tail
    moves: dict[str, TaskMove] = {}
    placed_so_far = 0
    # Round k (0-based) of the round robin takes min(n, k + 1) tasks of each user ahead of ours
    # and min(n, k) of each after, before our k-th task.
    ahead_of_me, behind_me = _MinSums([n for _, n in before_me]), _MinSums([n for _, n in after_me])
    for k, q in enumerate(passed):
        worker = placed.get(q.task)
        if worker is not None:
            placed_so_far += 1
            moves[q.task] = _move(q, jobs, target, None, count_after, worker)
            continue
        index = ahead_of_me.total(k + 1) + behind_me.total(k) + k
        moves[q.task] = _move(q, jobs, target, index - placed_so_far + 1, count_after)
    # The held part is in job order: ours go after every other held job with a lower key.
    held_keys = [key for key, _ in line.held]
    held_before = list(accumulate((n for _, n in line.held), initial=0))
    for j, q in enumerate(held):
        ahead = held_before[bisect_left(held_keys, job_sort_key(moved_jobs[q.job]))]
        moves[q.task] = _move(q, jobs, target, passed_after + ahead + j + 1, count_after)
    preemptible = _preemptible(basis.holders, moved_jobs.values(), target)
    return replace(
        base,
        tasks=tuple(moves[q.task] for q in moved),
        preemptible=preemptible,
        unchanged=len(queued) - len(moved),
    )


class _MinSums:
    """``total(k)`` = the sum of ``min(n, k)`` over ``counts``, in O(log n) per ``k``."""

    def __init__(self, counts: Sequence[int]) -> None:
        self.sorted = sorted(counts)
        self.prefix = list(accumulate(self.sorted, initial=0))

    def total(self, k: int) -> int:
        below = bisect_left(self.sorted, k)  # counts under k count whole; the rest count k
        return self.prefix[below] + k * (len(self.sorted) - below)


def _move(
    q: QueuedTask, jobs: Mapping[str, JobSpec], band: Band, position: int | None, count: int, worker: str | None = None
) -> TaskMove:
    return TaskMove(
        task=q.task,
        job=q.job,
        requested=jobs[q.job].band,
        band_before=q.band,
        position_before=q.position,
        band_pending_before=q.band_count,
        band_after=band,
        position_after=position,
        band_pending_after=count,
        starts_on=worker,
    )


def _placements(basis: PreviewBasis, moved_jobs: Mapping[str, JobSpec], moved: Sequence[QueuedTask]) -> dict[str, str]:
    """The core's placement pass (``core.decision.placements``) on the free capacity with the
    moved jobs alone: {task id: worker}.

    A task can only land on a healthy worker with room for its request that satisfies its
    hard constraints (the automatic device ones included): its shape's *candidates*. When no
    moved job has any, nothing is placed and no trial is needed (always so on a cluster at
    rest: a moved task did not fit that capacity in BATCH either). A gang is offered the whole
    of each of its groups where it could fit (see below). Solo tasks go first-fit along their shape's candidates in the core's order (best
    soft score, then id), the shape's cursor never going back, so the first candidates of
    each shape are offered first (:data:`FIRST_FIT_WORKERS`, or twice the shape's tasks);
    that trial is the whole one when every placed task landed among its own shape's first
    candidates (no candidate before it was left out) and every shape with a task left
    unplaced had all its candidates offered. Otherwise every candidate is offered. The
    workers' ASSIGNED/BUILDING tasks are stood in for (:func:`build_slot_stand_ins`), so the
    build-slot cap counts them; tasks the per-job cap held back are held by the trial's own
    gates too (the jobs' pending tasks are the same)."""
    free = basis.free
    attributes = basis.attributes
    memo = basis.memo
    shape_of: dict[str, tuple] = {}
    candidates: dict[tuple, list[int]] = {}
    for job_id, job in moved_jobs.items():
        key = (request_tuple(job.resources), hard_constraints(job), soft_constraints(job))
        shape_of[job_id] = key
        if key not in candidates:
            found = memo.get(("candidates", key))
            if found is None:
                found = memo[("candidates", key)] = _candidates(free, attributes, *key)
            candidates[key] = found
    if not any(candidates.values()):
        return {}
    everyone = set().union(*candidates.values())
    # A gang goes to the first of its groups (its hard constraints' healthy workers with the
    # group attribute, ranked by the soft score of all their members, room or not) where enough
    # members fit, and gangs are placed before the band's solo tasks. A group with fewer members
    # with room than the gang has tasks can never be that one; the others are always offered
    # whole, so the gangs' placements are the whole trial's.
    gang_workers: set[int] = set()
    gang_ids = set()
    for job in moved_jobs.values():
        if job.group_by is not None:
            gang_ids.add(job.id)
            n = sum(1 for q in moved if q.job == job.id)  # a gang passes all its pending tasks
            key = ("gang-groups", shape_of[job.id], job.group_by, n)
            members = memo.get(key)
            if members is None:
                members = memo[key] = _viable_groups(free, attributes, job, n, set(candidates[shape_of[job.id]]))
            gang_workers.update(members)
    solo = [q for q in moved if q.job not in gang_ids and not q.held]
    tasks_of: dict[tuple, int] = {}
    for q in solo:
        tasks_of[shape_of[q.job]] = tasks_of.get(shape_of[q.job], 0) + 1
    firsts = {
        key: frozenset(candidates[key][: max(FIRST_FIT_WORKERS, FIRST_FIT_FACTOR * n)]) for key, n in tasks_of.items()
    }
    whole = everyone | gang_workers
    offered = set(gang_workers).union(*firsts.values())
    if len(offered) < len(whole):
        index = {w.id: i for i, w in enumerate(free)}
        placed = _trial(basis, moved_jobs, moved, tuple(free[i] for i in sorted(offered)))
        landed_first = all(index[placed[q.task]] in firsts[shape_of[q.job]] for q in solo if q.task in placed)
        short = {shape_of[q.job] for q in solo if q.task not in placed}
        if landed_first and all(offered.issuperset(candidates[key]) for key in short):
            return placed
    return _trial(basis, moved_jobs, moved, tuple(free[i] for i in sorted(whole)))


def _viable_groups(
    free: Sequence[WorkerSpec], attributes: Sequence[Mapping[str, str]], job: JobSpec, n: int, room: set[int]
) -> tuple[int, ...]:
    """Every member of the gang ``job``'s groups that have at least ``n`` (its pending tasks)
    members in ``room`` (its shape's candidates)."""
    hard = hard_constraints(job)
    by_value: dict[str, list[int]] = {}
    for i, w in enumerate(free):
        if not w.healthy:
            continue
        attrs = attributes[i] if attributes else worker_attributes(w.attributes, w.device.type, w.device.variant)
        value = attrs.get(job.group_by)
        if value is not None and all(constraint_matches(attrs, c) for c in hard):
            by_value.setdefault(value, []).append(i)
    return tuple(i for members in by_value.values() if sum(1 for i in members if i in room) >= n for i in members)


def _candidates(
    free: Sequence[WorkerSpec],
    attributes: Sequence[Mapping[str, str]],
    request: tuple[int, int, int, int],
    hard: tuple,
    soft: tuple,
) -> list[int]:
    """Indices of the healthy workers of ``free`` with room for ``request`` (chips counted on
    any accelerator: more, never fewer, than the pool's test) matching ``hard``, in the core's
    candidate order: more soft constraints met first, then by id
    (``placement.ShapeBook.candidates``)."""
    cpu, mem, gpus, tpus = request  # placement.request_tuple
    chips = gpus + tpus
    out = []
    for i, w in enumerate(free):
        if not (w.healthy and w.cpu_millicores >= cpu and w.memory_bytes >= mem and w.device.count >= chips):
            continue
        if hard:
            attrs = attributes[i] if attributes else worker_attributes(w.attributes, w.device.type, w.device.variant)
            if not all(constraint_matches(attrs, c) for c in hard):
                continue
        out.append(i)
    out.sort(key=lambda i: free[i].id)
    if soft:

        def score(i: int) -> int:
            attrs = (
                attributes[i]
                if attributes
                else worker_attributes(free[i].attributes, free[i].device.type, free[i].device.variant)
            )
            return sum(1 for c in soft if constraint_matches(attrs, c))

        out.sort(key=score, reverse=True)
    return out


def _trial(
    basis: PreviewBasis, moved_jobs: Mapping[str, JobSpec], moved: Sequence[QueuedTask], workers: tuple[WorkerSpec, ...]
) -> dict[str, str]:
    """``placements`` of the moved jobs alone on ``workers``: {task id: worker}."""
    jobs: dict[str, JobSpec] = dict(moved_jobs)
    tasks: list[TaskSnapshot] = []
    for q in moved:
        _, _, index = q.task.rpartition("/")
        tasks.append(TaskSnapshot(id=q.task, job_id=q.job, index=int(index)))
    stand_ins = basis.stand_ins
    if stand_ins:
        jobs[SLOT_JOB.id] = SLOT_JOB
        for w in workers:
            tasks.extend(stand_ins.get(w.id, ()))
    # No budgets and no spend of the user's in the trial: the jobs run at their requested band,
    # the one they move to. ``placements`` is decide's own placement pass without the
    # preemption pass (the preview counts preemptible work instead) and without explanations.
    trial = placements(ClusterSnapshot(basis.now_ms, basis.config, {}, workers, jobs, tuple(tasks)))
    ours = {q.task for q in moved}
    return {task: worker for task, worker in trial if task in ours}


def build_slot_stand_ins(building: Mapping[str, int]) -> dict[str, tuple[TaskSnapshot, ...]]:
    """Resource-free ASSIGNED tasks of :data:`SLOT_JOB`, ``building[w]`` on each worker ``w``:
    the build-slot cap counts them as the tick's ASSIGNED/BUILDING tasks, and they hold
    nothing and cost no spend (a BATCH job of no user). A function of the tick alone, so the
    shell builds them once per tick (``PreviewBasis.stand_ins``)."""
    out: dict[str, tuple[TaskSnapshot, ...]] = {}
    slot = 0
    for worker, n in building.items():
        mine = []
        for _ in range(n):
            mine.append(
                TaskSnapshot(
                    id=f"{SLOT_JOB.id}/{slot}",
                    job_id=SLOT_JOB.id,
                    index=slot,
                    state=TaskState.ASSIGNED,
                    worker=worker,
                    band=Band.BATCH,
                )
            )
            slot += 1
        out[worker] = tuple(mine)
    return out


def _preemptible(holders: Mapping[HeldWork, int], jobs, band: Band) -> dict[Band, int]:
    """Running tasks (by stamped band) that some moved job may evict at ``band`` and may not at
    BATCH (the preemption pass's rule, ``may_evict``: BATCH work never preempts). The rule
    does not look at the holder's user, so it is asked once per kind of held work."""
    kinds: dict[tuple, int] = {}
    for held, n in holders.items():
        key = (held.band, held.device, held.gang, held.worker_variant)
        kinds[key] = kinds.get(key, 0) + n
    specs = list(dict.fromkeys((job.resources.device, job.group_by is not None) for job in jobs))
    out: dict[Band, int] = {}
    for (held_band, held_device, held_gang, variant), n in kinds.items():
        then = any(may_evict(band, d, g, held_band, held_device, held_gang, variant) for d, g in specs)
        if then and not any(may_evict(Band.BATCH, d, g, held_band, held_device, held_gang, variant) for d, g in specs):
            out[held_band] = out.get(held_band, 0) + n
    return dict(sorted(out.items()))
