"""Can this job ever run? The explain endpoint's and what-if's ``feasibility``: never (on the
cluster as it is), waiting for a TPU scale group to create a slice, or not now (matching
workers exist but are held, and by whom). The analysis is the core's
(``core.feasibility.analyse_job``, once per job shape); this module feeds it rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from scheduler.cluster_config import cluster_config
from scheduler.core.bands import Band
from scheduler.core.feasibility import ShapeAnalysis, analyse_job, holders
from scheduler.core.types import JobSpec, Resources, WorkerSpec
from scheduler.models import Job, Task, Worker
from scheduler.provisioning.tpu import group_specs
from scheduler.store.cluster_rows import constraints_from_json, device_from_columns
from scheduler.store.states import ACTIVE_VALUES


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
                     waiting: bool) -> dict:
    """The served form: ``verdict`` is ``never``, ``scale_group`` (a slice could be created),
    ``not_now`` (waiting: matching workers exist, ``held_by`` says who holds them) or ``fits``
    (nothing waits)."""
    if analysis.never:
        verdict = "never"
    elif analysis.scale_group is not None and not analysis.fits_when_idle:
        verdict = "scale_group"
    else:
        verdict = "not_now" if waiting else "fits"
    held = holders(analysis.matching_ids, active, band) if verdict == "not_now" else []
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
    """The feasibility of a job row, queued at ``band``. Two queries whatever the cluster size
    and the answer: the workers, and the active tasks on the workers it matches."""
    workers = worker_specs()
    analysis = analyse_job(job_spec(job), workers, group_specs(cluster_config()))
    # An empty list still runs the query (a name no worker has), so the count stays fixed.
    names = list(analysis.matching_ids) if waiting and analysis.matching_ids else [""]
    active: Sequence[tuple[str, str, Band]] = [
        (worker, user, Band(stamped))
        for worker, user, stamped in Task.objects.filter(
            state__in=ACTIVE_VALUES, worker__name__in=names, band__isnull=False
        ).values_list("worker__name", "job__user", "band")
    ]
    return feasibility_data(analysis, band, active, waiting)
