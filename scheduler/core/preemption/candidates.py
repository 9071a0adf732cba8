"""Candidate generation for the preemption pass: which running tasks some candidate could
evict, indexed for the search (:mod:`scheduler.core.preemption.search`).

Solo victims are indexed per worker as *groups*: the tasks of one job with one stamped band on
one worker are interchangeable, so choosing victims on a worker costs O(groups) however many
tasks run there. Gang victims are *slices*: a gang job's running tasks, evicted together or not
at all. Variants decide who may evict whom: CPU work only CPU work; an accelerator job of a
fixed variant only that variant, ``auto`` any variant of its type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from operator import itemgetter
from typing import NamedTuple

from scheduler.core.bands import Band
from scheduler.core.budget import resource_value
from scheduler.core.ordering import JobQueue
from scheduler.core.pool import WorkerPool
from scheduler.core.constraints import request_tuple
from scheduler.core.preemption.ordering import group_order, task_index, worker_of, worker_then_index
from scheduler.core.types import ANY_VARIANT, Device, DeviceType, JobSpec, TaskSnapshot, TaskState

# (device type, variant) of a task for variant matching; None for CPU-only work.
VariantKey = tuple[str, str] | None


@dataclass(frozen=True, slots=True)
class Request:
    """One running task's request and value; shared by every job with the same resources."""

    cpu: int
    mem: int
    gpu: int
    tpu: int
    value: int


@dataclass(slots=True, eq=False, repr=False)
class VictimGroup:
    """The RUNNING tasks of one solo job with one stamped band on one worker, by index.

    They are interchangeable victims; the lowest indices are taken first.
    """

    neg_band: int
    value: int
    job_id: str
    info: Request
    variant: VariantKey
    worker: int
    members: list[TaskSnapshot]

    @property
    def band(self) -> int:
        return -self.neg_band


class SliceMember(NamedTuple):
    task: TaskSnapshot
    band: int
    # -1 when the task runs on an unknown or unhealthy worker (the slice cannot be evicted).
    worker: int


@dataclass(slots=True, eq=False, repr=False)
class Slice:
    """The RUNNING tasks of one gang job, evicted together or not at all."""

    job_id: str
    info: Request
    variant: VariantKey
    members: list[SliceMember] = field(default_factory=list)
    claimed: bool = False
    max_band: int = 0
    min_band: int = 0
    value: int = 0
    usable: bool = True

    def seal(self) -> None:
        """Compute the aggregates once all members are in."""
        bands = [m.band for m in self.members]
        self.max_band = max(bands)
        self.min_band = min(bands)
        self.value = self.info.value * len(self.members)
        self.usable = all(m.worker >= 0 for m in self.members)


def preemptor_variant(device: Device) -> VariantKey:
    """A candidate's variant; ``auto`` (or none given) stands for any variant of its type."""
    if device.type is DeviceType.CPU:
        return None
    return (device.type.value, device.variant or ANY_VARIANT)


def victim_variant(device: Device, worker_variant: str | None) -> VariantKey:
    """A running task's variant; one that asked for ``auto`` has the variant of its worker."""
    if device.type is DeviceType.CPU:
        return None
    if _takes_worker_variant(device):
        return (device.type.value, worker_variant or ANY_VARIANT)
    return (device.type.value, device.variant)


def _takes_worker_variant(device: Device) -> bool:
    """An accelerator job that asked for any variant runs as its worker's variant."""
    return device.type is not DeviceType.CPU and (not device.variant or device.variant == ANY_VARIANT)


def _could_match(preemptor: VariantKey, fixed: VariantKey, auto: bool) -> bool:
    """Whether a candidate of variant ``preemptor`` could evict a task whose variant is
    ``fixed``, or (``auto``) that of whichever worker of its type it runs on."""
    if auto:
        return preemptor is not None and preemptor[0] == fixed[0]
    return variant_matches(preemptor, fixed)


def variant_matches(preemptor: VariantKey, victim: VariantKey) -> bool:
    if preemptor is None or victim is None:
        return preemptor is victim
    return preemptor[0] == victim[0] and (preemptor[1] == ANY_VARIANT or preemptor[1] == victim[1])


def outranks(band: Band, victim_band: Band) -> bool:
    """The band rule: a pending task of ``band`` may evict work stamped ``victim_band`` only if
    that is strictly lower (never its own band), and BATCH preempts nothing."""
    return band is not Band.BATCH and int(victim_band) > int(band)


def may_evict(
    band: Band,
    device: Device,
    gang: bool,
    victim_band: Band,
    victim_device: Device,
    victim_gang: bool,
    worker_variant: str | None,
) -> bool:
    """Whether a pending task (of ``band``, requesting ``device``, a gang member or not) may ever
    evict a task stamped ``victim_band`` of ``victim_device`` (a gang member or not) running on
    a worker of variant ``worker_variant``: the pass's eligibility rules (the package's
    docstring), whatever the capacity. A solo candidate evicts only solo victims of its own
    variant (CPU work only CPU work); a gang evicts a whole slice of its variant, or solo
    squatters of any variant. Whether the eviction also frees enough room is the search's to
    find out."""
    if not outranks(band, victim_band):
        return False
    same_variant = variant_matches(preemptor_variant(device), victim_variant(victim_device, worker_variant))
    if gang:
        return same_variant or not victim_gang
    return same_variant and not victim_gang


@dataclass(slots=True, eq=False, repr=False)
class VictimIndex:
    """The running tasks some candidate could evict: per worker, its solo victim groups in
    eviction order (:func:`~scheduler.core.preemption.ordering.group_order`); gang jobs'
    slices; the jobs with victims; the workers with solo victims of each variant."""

    solo: dict[int, list[VictimGroup]] = field(default_factory=dict)
    slices: dict[str, Slice] = field(default_factory=dict)
    victim_jobs: set[str] = field(default_factory=set)
    workers_by_variant: dict[VariantKey, set[int]] = field(default_factory=dict)


def index_victims(
    pool: WorkerPool,
    queues: Mapping[str, JobQueue],
    jobs: Mapping[str, JobSpec],
    active_by_job: Mapping[str, Sequence[TaskSnapshot]],
    candidates: Sequence[TaskSnapshot],
) -> VictimIndex:
    """Index the RUNNING tasks that some of ``candidates`` (the pass's, in scheduling order)
    could evict: stamped below the best candidate's band and either of a variant some solo candidate has, on a host
    some gang candidate may use (squatters), or (gangs) of a variant some gang candidate
    has. Solo ones become groups per (worker, band), gangs slices. Leaving out the rest
    changes no decision; it only saves indexing work nobody would use."""
    victims = VictimIndex()
    if not candidates:
        return victims
    min_rank = int(queues[candidates[0].job_id].band)
    index = pool.index
    healthy = pool.healthy
    solo = victims.solo
    by_variant = victims.workers_by_variant
    running = TaskState.RUNNING
    solo_variants, gang_variants, squat_hosts = _wanted(queues, candidates)
    squat_ids = {pool.ids[w] for w in squat_hosts}
    # Per distinct Resources (by identity; the snapshot keeps them alive): the request,
    # whether the variant comes from the worker ("auto"), the variant otherwise, and
    # whether a solo / gang candidate could want such a victim.
    facts: dict[int, tuple[Request, bool, VariantKey, bool, bool]] = {}
    for job_id, active in active_by_job.items():
        resources = jobs[job_id].resources
        fact = facts.get(id(resources))
        if fact is None:
            device = resources.device
            info = Request(*request_tuple(resources), resource_value(resources))
            auto, fixed = _takes_worker_variant(device), victim_variant(device, None)
            fact = facts[id(resources)] = (
                info,
                auto,
                fixed,
                any(_could_match(v, fixed, auto) for v in solo_variants),
                any(_could_match(v, fixed, auto) for v in gang_variants),
            )
        info, auto, fixed, solo_wanted, gang_wanted = fact
        job = jobs[job_id]
        gang = job.group_by is not None
        if gang and not gang_wanted:
            continue
        # Solo work no candidate wants is skipped unless it squats: asked of all the job's
        # active tasks first, since that is cheaper than picking out the running ones.
        squat_only = not gang and not solo_wanted
        if squat_only and squat_ids.isdisjoint(map(worker_of, active)):
            continue
        tasks = [t for t in active if t.state is running and t.worker is not None]
        if not tasks:
            continue
        if squat_only and squat_ids.isdisjoint(map(worker_of, tasks)):
            continue
        requested_rank = int(job.band)
        ranks = {requested_rank if b is None else int(b) for b in {t.band for t in tasks}}
        if max(ranks) <= min_rank:
            continue
        victims.victim_jobs.add(job_id)
        if gang:
            victims.slices[job.id] = _slice(pool, job, info, tasks, requested_rank)
            continue
        for rank in ranks:
            if rank <= min_rank:
                continue
            same_band = (
                tasks
                if len(ranks) == 1
                else [t for t in tasks if (requested_rank if t.band is None else int(t.band)) == rank]
            )
            for worker, on_worker in tasks_by_worker(same_band):
                w = index.get(worker)
                if w is None or not healthy[w]:
                    continue
                variant = victim_variant(resources.device, pool.variant[w]) if auto else fixed
                group = VictimGroup(-rank, info.value, job_id, info, variant, w, on_worker)
                worker_groups = solo.get(w)
                if worker_groups is None:
                    solo[w] = [group]
                else:
                    worker_groups.append(group)
                workers = by_variant.get(variant)
                if workers is None:
                    by_variant[variant] = {w}
                else:
                    workers.add(w)
    for worker_groups in solo.values():
        if len(worker_groups) > 1:
            worker_groups.sort(key=group_order)
    return victims


def tasks_by_worker(tasks: Sequence[TaskSnapshot]) -> Sequence[tuple[str, list[TaskSnapshot]]]:
    """``tasks`` (of one job, each on a worker) grouped by worker: (worker, its tasks by index)
    per worker, each worker once, in no promised order of workers.

    A job's tasks usually come by index, in one run per worker (13 tasks a run on the
    squatters mix): then the runs are the groups, found in one pass without sorting;
    otherwise one sort on (worker, index)."""
    if len(tasks) == 1:
        return ((tasks[0].worker, list(tasks)),)
    worker = tasks[0].worker
    run: list[TaskSnapshot] = []
    runs = [(worker, run)]
    last = -1
    for task in tasks:
        if task.index < last:
            break
        last = task.index
        if task.worker != worker:
            worker = task.worker
            run = []
            runs.append((worker, run))
        run.append(task)
    else:
        if len(runs) == 1 or len(runs) == len(set(map(_first, runs))):
            return runs
    return [(worker, list(run)) for worker, run in groupby(sorted(tasks, key=worker_then_index), worker_of)]


_first = itemgetter(0)


def _wanted(
    queues: Mapping[str, JobQueue], candidates: Sequence[TaskSnapshot]
) -> tuple[set[VariantKey], set[VariantKey], set[int]]:
    """What the candidates could evict: solo candidates' variants, gang candidates'
    variants, and the hosts gang candidates may use (where squatters matter)."""
    solo_variants: set[VariantKey] = set()
    gang_variants: set[VariantKey] = set()
    squat_hosts: set[int] = set()
    gang_shapes: set[int] = set()
    for task in candidates:
        queue = queues[task.job_id]
        variant = preemptor_variant(queue.shape.resources.device)
        if queue.gang:
            gang_variants.add(variant)
            if queue.shape.id not in gang_shapes:
                gang_shapes.add(queue.shape.id)
                squat_hosts.update(queue.shape.cands)
        else:
            solo_variants.add(variant)
    return solo_variants, gang_variants, squat_hosts


def _slice(pool: WorkerPool, job: JobSpec, info: Request, tasks: Sequence[TaskSnapshot], requested_rank: int) -> Slice:
    """A gang job's running tasks as one slice (members in index order)."""
    index, healthy = pool.index, pool.healthy
    members = []
    for task in sorted(tasks, key=task_index):
        w = index.get(task.worker, -1)
        if w >= 0 and not healthy[w]:
            w = -1
        members.append(SliceMember(task, requested_rank if task.band is None else int(task.band), w))
    live = [m.worker for m in members if m.worker >= 0]
    piece = Slice(job.id, info, victim_variant(job.resources.device, pool.variant[live[0]] if live else None), members)
    piece.seal()
    return piece
