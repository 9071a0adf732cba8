"""Can this job ever run? The explain endpoint's and what-if's ``feasibility``: never (on the
cluster as it is), waiting for a TPU scale group to create a slice, or not now (matching
workers exist but are held, and by whom). The analysis is the core's
(``core.feasibility.analyse_job``, once per job shape); this module feeds it rows.

Bounded per request: the workers are read once per process per tick (the newest explained
tick's key, as the queue index is) and each job shape is analysed once per tick, so a job page
or an explain call that polls reads no worker rows and repeats no analysis until the next tick.
Who holds the matching workers is one aggregate query (rows per (user, band), not per task),
counted once per process per tick for each set of matching workers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.db.models import Count

from scheduler.foundation.cluster_config import cluster_config, group_specs
from scheduler.core.bands import Band
from scheduler.core.feasibility import HeldWork, Holder, ShapeAnalysis, analyse_job, rank_holders
from scheduler.core.types import Device, JobSpec, WorkerSpec
from scheduler.models import Job, Task, Worker
from scheduler.store.job_rows import device_from_columns, job_shape_of
from scheduler.store.states import ACTIVE_VALUES, TERMINAL_JOB_VALUES


def worker_specs() -> list[WorkerSpec]:
    """Every worker as the tick reads it (a draining worker counts as not healthy). One query.

    Devices are shared between workers of one shape: the list is kept for a tick, and 10,000
    devices of a handful of shapes are 10,000 objects every full collection would rescan."""
    devices: dict[tuple, Device] = {}
    workers = []
    for name, cpu, mem, dtype, variant, count, attributes, healthy, draining in Worker.objects.values_list(
        "name",
        "cpu_millicores",
        "memory_bytes",
        "device_type",
        "device_variant",
        "device_count",
        "attributes",
        "healthy",
        "draining",
    ):
        device = devices.get((dtype, variant, count))
        if device is None:
            device = devices[(dtype, variant, count)] = device_from_columns(dtype, variant, count)
        workers.append(
            WorkerSpec(
                name,
                cpu,
                mem,
                device,
                {str(k): str(v) for k, v in (attributes or {}).items()},
                bool(healthy) and not draining,
            )
        )
    return workers


def verdict(analysis: ShapeAnalysis, waiting: bool) -> str:
    """``never``, ``scale_group`` (a slice could be created), ``not_now`` (waiting: matching
    workers exist) or ``fits`` (nothing waits)."""
    if analysis.never:
        return "never"
    if analysis.scale_group is not None and not analysis.fits_when_idle:
        return "scale_group"
    return "not_now" if waiting else "fits"


def feasibility_data(
    analysis: ShapeAnalysis, band: Band, held: Callable[[], list[Holder]], waiting: bool, tick: int | None = None
) -> dict:
    """The served form; ``held`` gives the holders (asked every time, so a page's query count
    does not depend on the verdict; served only for ``not_now``); ``tick`` is the tick the
    workers were read at (None: read now)."""
    outcome = verdict(analysis, waiting)
    holders = held()
    if outcome != "not_now":
        holders = []
    # "Held by" names only the work this job may evict; the rest frees room only by finishing.
    others = [h for h in holders if not h.preemptible]
    largest = analysis.largest
    return {
        "verdict": outcome,
        "requirements": [
            {
                "kind": r.kind,
                "label": r.label,
                "need": r.need,
                "workers_alone": r.alone,
                "workers_with_previous": r.cumulative,
            }
            for r in analysis.requirements
        ],
        "healthy_workers": analysis.healthy,
        "matching_workers": analysis.matching,
        "largest_worker": (
            {"cpu_millicores": largest[0], "memory_bytes": largest[1], "devices": largest[2]} if largest else None
        ),
        "scale_group": analysis.scale_group,
        "band": band,
        "held_by": [
            {"user": h.user, "band": h.band, "tasks": h.tasks, "preemptible": h.preemptible}
            for h in holders
            if h.preemptible
        ],
        "held_by_others": {"tasks": sum(h.tasks for h in others), "users": sorted({h.user for h in others})}
        if others
        else None,
        "as_of_tick": tick,
    }


# The newest tick's workers and per-shape analyses: {"key": tick key, "workers": [...],
# "analyses": {shape key: ShapeAnalysis}}. One tick's worth is kept; a newer tick replaces it.
_per_tick: dict = {}
# Who holds the matching workers, per matching set, as counted after the newest tick:
# {"tick": tick pk, "counts": {matching key: {(user, band): tasks}}}. A newer tick replaces it.
_holder_counts: dict = {}


def shape_key(spec: JobSpec) -> tuple:
    """What the analysis depends on (not the job's id, user or times): equal keys, equal answers."""
    return (spec.resources, spec.constraints, spec.group_by, spec.replicas if spec.group_by is not None else 1)


def shape_analysis(spec: JobSpec, tick_key: tuple[int, int] | None) -> ShapeAnalysis:
    """``analyse_job`` of ``spec`` over the workers, cached per tick (``tick_key``: the newest
    explained tick's (pk, now_ms); None: no tick yet, so read and analyse now)."""
    groups = group_specs(cluster_config())
    if tick_key is None:
        return analyse_job(spec, worker_specs(), groups)
    if _per_tick.get("key") != (tick_key, groups):
        _per_tick.clear()
        _per_tick.update(key=(tick_key, groups), workers=worker_specs(), analyses={})
    analyses = _per_tick["analyses"]
    key = shape_key(spec)
    analysis = analyses.get(key)
    if analysis is None:
        analysis = analyses[key] = analyse_job(spec, _per_tick["workers"], groups)
    return analysis


def forget_feasibility_cache() -> None:
    _per_tick.clear()
    _holder_counts.clear()


def holders_of(analysis: ShapeAnalysis, job: JobSpec, band: Band, tick: int | None = None) -> list[Holder]:
    """The top holders of the workers ``analysis`` matched, and whether ``job`` queued at
    ``band`` may evict each (``core.feasibility.rank_holders``): one grouped query, one row per
    (user, stamped band, kind of work: device, gang or solo, worker variant), counted once per
    process per tick (``tick``: the pk of the tick the analysis is as of; None: counted now,
    not kept) and shared by every job whose shape matches the same workers. When every healthy
    worker matches (a plain CPU job on most clusters) the query filters on health instead of
    naming thousands of workers (a 10,000-name list cost more to send and plan than the count
    itself), and every such shape shares one count. With no match the query still runs, on a
    name no worker has, so the number of queries stays fixed."""
    everyone = bool(analysis.matching_ids) and len(analysis.matching_ids) == analysis.healthy
    key = "healthy" if everyone else analysis.matching_ids
    if tick is not None and _holder_counts.get("tick") != tick:
        _holder_counts.clear()
        _holder_counts.update(tick=tick, counts={})
    counts = _holder_counts["counts"].get(key) if tick is not None else None
    if counts is None:
        rows = Task.objects.filter(state__in=ACTIVE_VALUES, band__isnull=False)
        if everyone:
            rows = rows.filter(worker__healthy=True, worker__draining=False)
        else:
            rows = rows.filter(worker__name__in=analysis.matching_ids or ("",))
        counts = {}
        for user, stamped, dtype, variant, count, group_by, worker_variant, n in (
            rows.values_list(
                "job__user",
                "band",
                "job__device_type",
                "job__device_variant",
                "job__device_count",
                "job__group_by",
                "worker__device_variant",
            )
            .annotate(n=Count("pk"))
            .order_by()
        ):
            held = HeldWork(
                user,
                Band(stamped),
                device_from_columns(dtype, variant, count),
                group_by is not None,
                worker_variant or None,
            )
            counts[held] = counts.get(held, 0) + n
        if tick is not None:
            _holder_counts["counts"][key] = counts
    return rank_holders(counts, job, band)


def job_feasibility(job: Job, band: Band, waiting: bool, tick_key: tuple[int, int] | None = None) -> dict:
    """The feasibility of a job row, queued at ``band``: the shape's analysis as of the tick
    ``tick_key`` (see :func:`shape_analysis`) and, when it waits for room, who holds the
    matching workers now. At most two queries; none for the workers once this process has
    read them for the tick."""
    spec = job_shape_of(job)
    analysis = shape_analysis(spec, tick_key)
    tick = tick_key[0] if tick_key else None
    return feasibility_data(analysis, band, lambda: holders_of(analysis, spec, band, tick), waiting, tick)


def never_runs(jobs: Iterable[Job], tick_key: tuple[int, int] | None) -> set[str]:
    """The names of ``jobs`` that can never run on the cluster as it is (the verdict
    :func:`verdict` calls ``never``: the queue's and the jobs table's NEVER marker, the same
    analysis the job page shows). Each shape is analysed once per tick (:func:`shape_analysis`),
    so a page of rows costs at most the one read of the workers per tick per process; finished
    jobs are never asked about. ``tick_key``: the newest board tick's (pk, now_ms)."""
    never = set()
    # Before the first tick there is no tick to cache by: the workers are read once for the call.
    untimed: dict[tuple, bool] = {}
    workers: list[WorkerSpec] | None = None
    for job in jobs:
        if job.state in TERMINAL_JOB_VALUES:
            continue
        spec = job_shape_of(job)
        if tick_key is not None:
            is_never = shape_analysis(spec, tick_key).never
        else:
            key = shape_key(spec)
            if key not in untimed:
                if workers is None:
                    workers = worker_specs()
                untimed[key] = analyse_job(spec, workers, group_specs(cluster_config())).never
            is_never = untimed[key]
        if is_never:
            never.add(job.name)
    return never
