""""What if I submitted this?": the submission rules and the core's decision on the live snapshot
with the planned job added. Writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from django.contrib.auth import get_user_model

from scheduler import roles
from scheduler.access import require_authenticated
from scheduler.core.bands import Band
from scheduler.core.decision import decide
from scheduler.core.types import Device, DeviceType, JobSpec, Resources, TaskSnapshot
from scheduler.errors import InvalidArgument, NotFound, PermissionDenied, ServiceError
from scheduler.inputs import parse_user_id
from scheduler.jobs.request import parse_job_request
from scheduler.jobs.submit import SubmissionPlan, plan_submission
from scheduler.store import clock
from scheduler.store.cluster_rows import constraints_from_json
from scheduler.core.explain import pending_queue, pending_text, reason_record
from scheduler.core.feasibility import analyse_job, holders
from scheduler.core.types import ACTIVE_STATES
from scheduler.jobs.feasibility import feasibility_data
from scheduler.tick.estimates import estimate_behind
from scheduler.tick.load import load_snapshot


@dataclass(frozen=True)


class WhatIf:
    accepted: bool
    error: dict[str, str] | None
    requested_band: Band | None
    effective_band: Band | None
    spend: int | None
    limit: int | None
    position: int | None
    would_place: bool
    worker: str | None
    would_preempt: list[str]
    job: str | None = None
    # ``{code, text, ...parameters, band, position, band_pending, tick: None}`` (hypothetical:
    # the numbers are those of the simulated tick, not of a stored one).
    pending_reason: dict | None = None
    # Can it ever run? (``jobs.feasibility``), on the live cluster.
    feasibility: dict | None = None
    # When it would probably start (``tick.estimates.estimate_behind``) and the sentence.
    estimated_start: dict | None = None
    estimated_start_text: str = ""


def what_if(actor, data: Any) -> WhatIf:
    """Answer "what if I submitted this?" on the live snapshot. Writes nothing.

    ``data`` is a submission body plus an optional ``user``: admins and operators may ask on
    another user's behalf, and the rules are then those that user would meet.
    """
    require_authenticated(actor)
    if not isinstance(data, Mapping):
        raise InvalidArgument("expected a JSON object describing the job")
    subject = actor
    if data.get("user") not in (None, ""):
        username = parse_user_id(data.get("user"))
        if username != actor.username:
            if not roles.is_operator(actor):
                raise PermissionDenied("only admins and operators may ask what-if for another user", field="user")
            subject = get_user_model().objects.filter(username=username).first()
            if subject is None:
                raise NotFound(f"user {username} does not exist", field="user")
    request = parse_job_request(data, ignore=("user",), require_command=False)
    try:
        plan = plan_submission(subject, request)
    except ServiceError as exc:
        # A broken submission rule is an answer ("rejected, and why"), not an error of this call.
        # The requested band as far as it is known without the parent (a root defaults to INTERACTIVE).
        requested = request.priority or (None if request.parent or request.name.count("/") > 2 else Band.INTERACTIVE)
        return WhatIf(
            accepted=False, error={"code": exc.code, "message": exc.message}, requested_band=requested,
            effective_band=None, spend=None, limit=None, position=None, would_place=False, worker=None,
            would_preempt=[],
        )
    return simulate_plan(plan)


def simulate_plan(plan: SubmissionPlan) -> WhatIf:
    """Add the planned job to the live snapshot and run the core's decision on it."""
    now_ms = clock.now_ms()
    loaded = load_snapshot(now_ms)
    snapshot = loaded.snapshot
    req = plan.request
    device = Device() if req.device.type is DeviceType.CPU else Device(req.device.type, req.device.variant, req.device.count)
    job = JobSpec(
        id=plan.job_id,
        user=plan.user,
        band=plan.band,
        parent=plan.parent.name if plan.parent else None,
        submitted_at_ms=now_ms,
        root_submitted_at_ms=plan.parent.root_submitted_at_ms if plan.parent else now_ms,
        replicas=req.replicas,
        resources=Resources(req.cpu_millicores, req.memory_bytes, device),
        group_by=req.group_by,
        constraints=constraints_from_json(list(req.constraints)),
        scheduling_deadline_ms=(
            now_ms + round(req.scheduling_timeout_seconds * 1000) if req.scheduling_timeout_seconds else None
        ),
        max_retries_preemption=req.max_retries_preemption,
        max_retries_failure=req.max_retries_failure,
    )
    tasks = tuple(TaskSnapshot(id=f"{plan.job_id}/{i}", job_id=plan.job_id, index=i) for i in range(req.replicas))
    hypothetical = replace(snapshot, jobs={**snapshot.jobs, plan.job_id: job}, tasks=snapshot.tasks + tasks)
    decision = decide(hypothetical)
    ours = {t.id for t in tasks}
    first = tasks[0].id
    assignments = [a for a in decision.assignments if a.task in ours]
    victims = sorted(p.victim for p in decision.preemptions if p.preemptor in ours)
    # Our first queued task's place, by the one definition of positions.
    place = None
    ahead = None  # the task just ahead of ours in its band, if any
    for band, task_ids in pending_queue(decision).items():
        for position, task_id in enumerate(task_ids, start=1):
            if task_id in ours:
                place = (band, position, len(task_ids), task_id)
                ahead = task_ids[position - 2] if position > 1 else None
                break
        if place is not None:
            break
    effective = decision.effective_bands.get(first, plan.band)
    budgets_now = hypothetical.budgets
    limit = (
        budgets_now[plan.user].budget_limit if plan.user in budgets_now
        else hypothetical.config.budget_defaults.budget_limit
    )
    pending_reason = None
    if place is not None:
        band, position, count, task_id = place
        record = reason_record(decision.pending_reasons[task_id])
        pending_reason = {**record, "text": pending_text(record, band, position, count), "band": band.wire,
                          "position": position, "band_pending": count, "tick": None}
    jobs_now = hypothetical.jobs
    active = [
        (t.worker, jobs_now[t.job_id].user, t.band if t.band is not None else jobs_now[t.job_id].band)
        for t in snapshot.tasks
        if t.state in ACTIVE_STATES and t.worker is not None and t.job_id in jobs_now
    ]
    analysis = analyse_job(job, snapshot.workers, snapshot.scale_groups)
    queued_band = place[0] if place else Band(effective)
    feasibility = feasibility_data(analysis, queued_band, lambda: holders(analysis.matching_ids, active, queued_band),
                                   waiting=place is not None)
    estimated_start, estimated_text = estimate_behind(ahead, place is None and bool(assignments), now_ms)
    return WhatIf(
        accepted=True,
        error=None,
        requested_band=plan.band,
        effective_band=Band(effective),
        spend=int(decision.spend.get(plan.user, 0)),
        limit=limit,
        position=place[1] if place is not None else None,
        would_place=bool(assignments),
        worker=assignments[0].worker if assignments else None,
        would_preempt=victims,
        job=plan.job_id,
        pending_reason=pending_reason,
        feasibility=feasibility,
        estimated_start=estimated_start,
        estimated_start_text=estimated_text,
    )
