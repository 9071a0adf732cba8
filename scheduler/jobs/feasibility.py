"""Can this job ever run? The explain endpoint's and what-if's ``feasibility``: never (on the
cluster as it is), waiting for a TPU scale group to create a slice, or not now (matching
workers exist but are held, and by whom). The analysis is the core's
(``core.feasibility.analyse_job``, once per job shape); this module feeds it rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from django.db.models import Count

from scheduler.cluster_config import cluster_config
from scheduler.core.bands import Band
from scheduler.core.feasibility import ShapeAnalysis, analyse_job, holders, top_holders
from scheduler.core.types import JobSpec, Resources, WorkerSpec
from scheduler.models import Job, Task, Worker
from scheduler.provisioning.tpu import group_specs
from scheduler.store.cluster_rows import constraints_from_json, device_from_columns
from scheduler.store.states import ACTIVE_VALUES
from scheduler.tick.queries import whatif_basis


def job_spec(job: Job) -> JobSpec:
    """The core's view of a job row's shape (what the analysis reads)."""
    return JobSpec(
        id=job.name, user=job.user, band=Band(job.band), parent=None, submitted_at_ms=job.submitted_at_ms,
        root_submitted_at_ms=job.root_submitted_at_ms, replicas=job.replicas,
        resources=Resources(job.cpu_millicores, job.memory_bytes,
                            device_from_columns(job.device_type, job.device_variant, job.device_count)),
        group_by=job.group_by, constraints=constraints_from_json(job.constraints or []),
    )


def worker_specs() -> list[WorkerSpec]:
    """Every worker as the tick reads it (a draining worker counts as not healthy). One query."""
    return [
        WorkerSpec(name, cpu, mem, device_from_columns(dtype, variant, count),
                   {str(k): str(v) for k, v in (attributes or {}).items()}, bool(healthy) and not draining)
        for name, cpu, mem, dtype, variant, count, attributes, healthy, draining in Worker.objects.values_list(
            "name", "cpu_millicores", "memory_bytes", "device_type", "device_variant", "device_count",
            "attributes", "healthy", "draining",
        )
    ]


def feasibility_data(analysis: ShapeAnalysis, band: Band, active: Iterable[tuple[str, str, Band]],
                     waiting: bool, held_counts: Mapping[tuple[str, Band], int] | None = None) -> dict:
    """The served form: ``verdict`` is ``never``, ``scale_group`` (a slice could be created),
    ``not_now`` (waiting: matching workers exist, ``held_by`` says who holds them) or ``fits``
    (nothing waits). ``held_counts`` (active tasks per (user, stamped band) on the matching
    workers, already counted) stands in for ``active`` when given."""
    if analysis.never:
        verdict = "never"
    elif analysis.scale_group is not None and not analysis.fits_when_idle:
        verdict = "scale_group"
    else:
        verdict = "not_now" if waiting else "fits"
    if verdict != "not_now":
        held = []
    elif held_counts is not None:
        held = top_holders(held_counts, band)
    else:
        held = holders(analysis.matching_ids, active, band)
    largest = analysis.largest
    return {
        "verdict": verdict,
        "requirements": [
            {"kind": r.kind, "label": r.label, "need": r.need, "workers_alone": r.alone,
             "workers_with_previous": r.cumulative}
            for r in analysis.requirements
        ],
        "healthy_workers": analysis.healthy,
        "matching_workers": analysis.matching,
        "largest_worker": (
            {"cpu_millicores": largest[0], "memory_bytes": largest[1], "devices": largest[2]} if largest else None
        ),
        "scale_group": analysis.scale_group,
        "band": band.wire,
        "held_by": [{"user": h.user, "band": h.band.wire, "tasks": h.tasks, "preemptible": h.preemptible} for h in held],
    }


def job_feasibility(job: Job, band: Band, waiting: bool) -> dict:
    """The feasibility of a job row, queued at ``band``, over the workers as the newest tick
    read them (every worker's row before any tick). One or two queries for the workers (none
    once this process parsed the tick's basis), and, when it waits, one grouped query for who
    holds the workers it matches."""
    basis = whatif_basis()
    workers = basis.workers if basis is not None else worker_specs()
    analysis = analyse_job(job_spec(job), workers, group_specs(cluster_config()))
    return feasibility_data(analysis, band, (), waiting, held_counts(analysis, waiting))


def held_counts(analysis: ShapeAnalysis, waiting: bool = True) -> dict[tuple[str, Band], int]:
    """Active tasks per (user, stamped band) on the workers ``analysis`` matched. One grouped
    query (counted in SQL: tens of thousands of active tasks never reach Python). A job that
    does not wait needs none: the query still runs, on no worker, so the count stays fixed."""
    rows = Task.objects.filter(state__in=ACTIVE_VALUES, band__isnull=False)
    if not waiting:
        rows = rows.filter(worker__name__in=[""])
    elif len(analysis.matching_ids) < analysis.healthy:
        rows = rows.filter(worker__name__in=list(analysis.matching_ids) or [""])
    return {
        (user, Band(stamped)): n
        for user, stamped, n in rows.order_by().values_list("job__user", "band").annotate(n=Count("id"))
    }
