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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from scheduler.core.bands import Band
from scheduler.core.budget import effective_band
from scheduler.core.decision import decide
from scheduler.core.feasibility import HeldWork
from scheduler.core.ordering import job_sort_key
from scheduler.core.preemption import may_evict
from scheduler.core.types import (
    BudgetSpec,
    ClusterSnapshot,
    DeviceType,
    JobSpec,
    Resources,
    SchedulerConfig,
    TaskSnapshot,
    TaskState,
    WorkerSpec,
)

# The job the build-slot stand-ins belong to (never a real job id: real ids start with "/").
_SLOT_JOB = "uplift-preview:slots"


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
    ``building`` the ASSIGNED/BUILDING tasks on each (by worker id, zeros left out): the
    build-slot cap counts them. ``lines`` is each band's :class:`BandLine` without the user.
    ``holders`` the running tasks per held work on the workers the moved jobs may use."""

    now_ms: int
    config: SchedulerConfig
    spend: Mapping[str, int]
    free: tuple[WorkerSpec, ...]
    building: Mapping[str, int]
    lines: Mapping[Band, BandLine]
    holders: Mapping[HeldWork, int] = field(default_factory=dict)
    at_rest: bool = True


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
    for k, q in enumerate(passed):
        worker = placed.get(q.task)
        if worker is not None:
            placed_so_far += 1
            moves[q.task] = _move(q, jobs, target, None, count_after, worker)
            continue
        index = sum(min(n, k + 1) for _, n in before_me) + sum(min(n, k) for _, n in after_me) + k
        moves[q.task] = _move(q, jobs, target, index - placed_so_far + 1, count_after)
    for j, q in enumerate(held):
        key = job_sort_key(moved_jobs[q.job])
        ahead = sum(n for other_key, n in line.held if other_key < key)
        moves[q.task] = _move(q, jobs, target, passed_after + ahead + j + 1, count_after)
    preemptible = _preemptible(basis.holders, moved_jobs.values(), target)
    return replace(
        base,
        tasks=tuple(moves[q.task] for q in moved),
        preemptible=preemptible,
        unchanged=len(queued) - len(moved),
    )


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
    """``decide`` on the free capacity with the moved jobs alone: {task id: worker}.

    Each worker's ASSIGNED/BUILDING tasks are stood in for by resource-free ASSIGNED tasks of
    a job no user owns, so the build-slot cap counts them as the tick would; they hold nothing
    and cost no spend. Tasks the cap held back are not tried (they do not pass the gates: the
    trial's own gates hold the same ones, the jobs' pending tasks being the same)."""
    jobs: dict[str, JobSpec] = dict(moved_jobs)
    tasks: list[TaskSnapshot] = []
    for q in moved:
        _, _, index = q.task.rpartition("/")
        tasks.append(TaskSnapshot(id=q.task, job_id=q.job, index=int(index)))
    if basis.building:
        jobs[_SLOT_JOB] = JobSpec(
            id=_SLOT_JOB, user="", band=Band.BATCH, parent=None, submitted_at_ms=0, root_submitted_at_ms=0
        )
        slot = 0
        for worker, n in basis.building.items():
            for _ in range(n):
                tasks.append(
                    TaskSnapshot(
                        id=f"{_SLOT_JOB}/{slot}",
                        job_id=_SLOT_JOB,
                        index=slot,
                        state=TaskState.ASSIGNED,
                        worker=worker,
                        band=Band.BATCH,
                    )
                )
                slot += 1
    # No budgets and no spend of the user's in the trial: the jobs run at their requested band,
    # the one they move to. A solo job can only land on a worker with room for one of its
    # tasks, so only those are offered (first-fit keeps their order); gangs see every worker.
    workers = basis.free
    if not any(job.group_by is not None for job in moved_jobs.values()):
        workers = tuple(w for w in workers if any(_has_room(w, job.resources) for job in moved_jobs.values()))
    trial = decide(ClusterSnapshot(basis.now_ms, basis.config, {}, workers, jobs, tuple(tasks)))
    ours = {q.task for q in moved}
    return {a.task: a.worker for a in trial.assignments if a.task in ours}


def _preemptible(holders: Mapping[HeldWork, int], jobs, band: Band) -> dict[Band, int]:
    """Running tasks (by stamped band) that some moved job may evict at ``band`` and may not at
    BATCH (the preemption pass's rule, ``may_evict``: BATCH work never preempts)."""
    out: dict[Band, int] = {}
    specs = [(job.resources.device, job.group_by is not None) for job in jobs]
    for held, n in holders.items():
        now = any(
            may_evict(Band.BATCH, device, gang, held.band, held.device, held.gang, held.worker_variant)
            for device, gang in specs
        )
        then = any(
            may_evict(band, device, gang, held.band, held.device, held.gang, held.worker_variant)
            for device, gang in specs
        )
        if then and not now:
            out[held.band] = out.get(held.band, 0) + n
    return dict(sorted(out.items()))


def _has_room(worker: WorkerSpec, need: Resources) -> bool:
    """Whether the free capacity ``worker`` could hold one task asking ``need`` (the device's
    type and variant are the core's placement's to check)."""
    chips = need.device.count if need.device.type is not DeviceType.CPU else 0
    return (
        worker.healthy
        and worker.cpu_millicores >= need.cpu_millicores
        and worker.memory_bytes >= need.memory_bytes
        and worker.device.count >= chips
    )
