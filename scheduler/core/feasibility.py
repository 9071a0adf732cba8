"""Can this job ever run? The "never, on the cluster as it is" analysis of one job shape, like
HTCondor's ``-better-analyze``. Pure: no Django, no clock.

For one job (its shape: resources, hard constraints, gang size), over the healthy workers as
they are, each requirement in turn (every hard constraint, the automatic device ones included,
then device count, cores, memory, then the gang's group size) with how many healthy workers
satisfy it alone and how many satisfy it and every requirement before it. A job none of whose
requirements' running intersection is empty *could* run on an idle cluster; otherwise it never
will, and the largest matching worker says by how much. A TPU scale group that could create a
matching slice turns "never" into "not yet".

This module is called once per job shape (the tick's explainer caches by shape; the explain
endpoint and what-if analyse one job), never per task. It does not read placement state: it
works on total capacity, so it answers "never", not "not now" (``core.explain`` answers that).
Submission warnings may reuse :func:`analyse_job` as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.core.bands import Band
from scheduler.core.preemption import may_evict
from scheduler.core.constraints import constraint_matches, hard_constraints, request_tuple, worker_attributes
from scheduler.core.types import Constraint, ConstraintOp, Device, DeviceType, GroupSpec, JobSpec, WorkerSpec

# Worker attribute naming the zone (the same key the TPU demand matches scale groups on).
ZONE_KEY = "zone"


def constraint_text(c: Constraint) -> str:
    """``zone=us-east1``, ``pool!=spot``, ``gen in (a, b)``, ``gpu exists``."""
    if c.op is ConstraintOp.EQ:
        return f"{c.key}={c.value}"
    if c.op is ConstraintOp.NE:
        return f"{c.key}!={c.value}"
    if c.op is ConstraintOp.IN:
        return f"{c.key} in ({', '.join(c.value)})"
    return f"{c.key} exists"


def any_fits_when_idle(
    workers: Sequence[WorkerSpec], candidates: Sequence[int], request: tuple[int, int, int, int]
) -> bool:
    """Whether any of ``candidates`` (indices into ``workers``, already matching the hard
    constraints) could hold one task of ``request`` when idle. The tick's cheap pre-check."""
    c, m, g, u = request
    for i in candidates:
        w = workers[i]
        count = w.device.count
        if (
            w.cpu_millicores >= c
            and w.memory_bytes >= m
            and (not g or (w.device.type is DeviceType.GPU and count >= g))
            and (not u or (w.device.type is DeviceType.TPU and count >= u))
        ):
            return True
    return False


@dataclass(frozen=True, slots=True)
class Requirement:
    """One requirement: ``alone`` healthy workers satisfy it, ``cumulative`` satisfy it and every
    requirement listed before it. For the gang's group size, both are the largest group (of
    healthy workers, and of workers meeting every other requirement) and ``need`` the size."""

    kind: str  # "constraint", "devices", "cpu", "memory", "group"
    label: str
    need: int | None
    alone: int
    cumulative: int


@dataclass(frozen=True, slots=True)
class ShapeAnalysis:
    """``never``: no healthy worker (or group) meets every requirement even when idle.

    ``largest``: (cores in millicores, memory bytes, devices) of the biggest healthy worker that
    meets the constraints (None if none does). ``scale_group``: a TPU scale group that could
    create a matching slice (then the job is not "never": it waits for the slice).
    """

    requirements: tuple[Requirement, ...]
    healthy: int
    matching: int
    largest: tuple[int, int, int] | None
    scale_group: str | None = None
    # Ids of the healthy workers meeting every requirement (the gang's group size aside).
    matching_ids: tuple[str, ...] = ()

    @property
    def never(self) -> bool:
        return self.scale_group is None and not self.fits_when_idle

    @property
    def fits_when_idle(self) -> bool:
        if not self.requirements:
            return self.healthy > 0
        last = self.requirements[-1]
        if last.kind == "group":
            return last.cumulative >= (last.need or 0)
        return last.cumulative > 0


def analyse_job(
    job: JobSpec,
    workers: Sequence[WorkerSpec],
    groups: Sequence[GroupSpec] = (),
    attributes: Sequence[Mapping[str, str]] | None = None,
) -> ShapeAnalysis:
    """The requirement-by-requirement analysis of ``job`` over ``workers`` (and ``groups``).

    ``attributes``, when given, is each worker's ``placement.worker_attributes`` (in ``workers``'
    order), computed once by a caller that analyses many jobs over the same workers."""
    healthy = [w for w in workers if w.healthy]
    if attributes is None:
        attrs = [worker_attributes(w.attributes, w.device.type, w.device.variant) for w in healthy]
    else:
        attrs = [a for a, w in zip(attributes, workers, strict=True) if w.healthy]
    cpu, mem, gpu, tpu = request_tuple(job.resources)
    devices = gpu or tpu
    reqs: list[Requirement] = []
    alive = list(range(len(healthy)))

    def add(kind: str, label: str, need: int | None, test) -> None:
        nonlocal alive
        alone = sum(1 for i in range(len(healthy)) if test(i))
        alive = [i for i in alive if test(i)]
        reqs.append(Requirement(kind, label, need, alone, len(alive)))

    hard = hard_constraints(job)
    for c in hard:
        add("constraint", constraint_text(c), None, lambda i, c=c: constraint_matches(attrs[i], c))
    constrained = list(alive)
    if devices:
        kind = "GPU" if gpu else "TPU chip"
        dtype = job.resources.device.type
        add(
            "devices",
            f"{devices} {kind}{'s' if devices != 1 else ''}",
            devices,
            lambda i: healthy[i].device.type is dtype and healthy[i].device.count >= devices,
        )
    if cpu:
        add("cpu", "cpu", cpu, lambda i: healthy[i].cpu_millicores >= cpu)
    if mem:
        add("memory", "memory", mem, lambda i: healthy[i].memory_bytes >= mem)
    if job.group_by is not None:
        need = job.replicas

        def largest_group(members: Sequence[int]) -> int:
            sizes: dict[str, int] = {}
            for i in members:
                value = attrs[i].get(job.group_by)
                if value is not None:
                    sizes[value] = sizes.get(value, 0) + 1
            return max(sizes.values(), default=0)

        reqs.append(
            Requirement(
                "group",
                f"{need} workers in one '{job.group_by}' group",
                need,
                largest_group(range(len(healthy))),
                largest_group(alive),
            )
        )
    largest = None
    if constrained:
        best = max(
            constrained, key=lambda i: (healthy[i].device.count, healthy[i].cpu_millicores, healthy[i].memory_bytes)
        )
        w = healthy[best]
        largest = (w.cpu_millicores, w.memory_bytes, w.device.count)
    analysis = ShapeAnalysis(tuple(reqs), len(healthy), len(alive), largest, None, tuple(healthy[i].id for i in alive))
    if analysis.fits_when_idle:
        return analysis
    group = slice_group(job, groups)
    if group is None:
        return analysis
    return ShapeAnalysis(
        analysis.requirements, analysis.healthy, analysis.matching, analysis.largest, group, analysis.matching_ids
    )


def slice_group(job: JobSpec, groups: Sequence[GroupSpec]) -> str | None:
    """The name of the first TPU scale group that could create a slice for ``job`` (its variant,
    and a zone its hard ``zone`` constraint allows: the provisioner's own choice,
    :func:`scheduler.core.demand.group_for`), or None (not a TPU job, or no group fits)."""
    if job.resources.device.type is not DeviceType.TPU or not groups:
        return None
    zones: set[str] = set()
    for c in hard_constraints(job):
        if c.key == ZONE_KEY and c.op is ConstraintOp.EQ:
            zones.add(c.value)
        elif c.key == ZONE_KEY and c.op is ConstraintOp.IN:
            zones.update(c.value)
    # Imported here: only a TPU job that fits nowhere asks the provisioner's rule, and every
    # process that decides (``manage.py simulate`` among them) loads this module.
    from scheduler.core.demand import PendingTpuJob, group_for

    chips = request_tuple(job.resources)[3]
    group = group_for(
        PendingTpuJob(
            job.id, job.resources.device.variant, chips, job.replicas, job.group_by is not None, frozenset(zones)
        ),
        groups,
    )
    return group.name if group is not None else None


@dataclass(frozen=True, slots=True)
class Holder:
    """Active tasks of one (user, stamped band) on the workers a job could use, and whether the
    job may evict them (``preemptible``: the preemption pass's eligibility, not only the band)."""

    user: str
    band: Band
    tasks: int
    preemptible: bool


@dataclass(frozen=True, slots=True)
class HeldWork:
    """Active tasks of one user, stamped band and kind of work on the workers a job could use:
    the kind is what the preemption rules look at (the device asked for, gang or solo, and the
    variant of the worker it runs on, for work that asked for any variant)."""

    user: str
    band: Band
    device: Device
    gang: bool
    worker_variant: str | None


def holders(
    matching_ids: Sequence[str], active: Iterable[tuple[str, HeldWork]], job: JobSpec, band: Band, top: int = 5
) -> list[Holder]:
    """Who holds the workers ``matching_ids``: ``active`` is (worker id, held work) of every
    ASSIGNED/BUILDING/RUNNING task; ranked by :func:`rank_holders`."""
    wanted = set(matching_ids)
    counts: dict[HeldWork, int] = {}
    for worker, held in active:
        if worker in wanted:
            counts[held] = counts.get(held, 0) + 1
    return rank_holders(counts, job, band, top)


def rank_holders(counts: Mapping[HeldWork, int], job: JobSpec, band: Band, top: int = 5) -> list[Holder]:
    """``counts`` (active tasks on the workers ``job`` could use, by held work) summed per
    (user, stamped band, whether a task of ``job`` queued at ``band`` may evict them, by the
    preemption pass's own rule ``core.preemption.may_evict``); the ``top`` by task count, then
    band, then user."""
    device, gang = job.resources.device, job.group_by is not None
    summed: dict[tuple[str, Band, bool], int] = {}
    for held, n in counts.items():
        evictable = may_evict(band, device, gang, held.band, held.device, held.gang, held.worker_variant)
        key = (held.user, held.band, evictable)
        summed[key] = summed.get(key, 0) + n
    ranked = sorted(summed.items(), key=lambda kv: (-kv[1], int(kv[0][1]), kv[0][0], not kv[0][2]))[:top]
    return [Holder(user, stamped, n, evictable) for (user, stamped, evictable), n in ranked]
