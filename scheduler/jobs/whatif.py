""" "What if I submitted this?": the submission rules (live), then the core's decision for the
planned job alone, on the cluster as the newest tick left it. Writes nothing.

The newest tick records a what-if basis (``board.formats.whatif_basis_to_json``): every
worker's free capacity after its decision, who holds each worker (active tasks per user and
stamped band), and each band's users with their pending counts. A web process reads it once
per tick (a few MB for 10,000 workers, no tasks), places only the new job on it with
``core.decision.decide``, and counts its place in the band's round robin
(``core.whatif.queue_place``). The job shape's feasibility analysis and the workers its trial
is offered are kept per shape with the parsed basis; the holders of its matching workers are
summed from the basis (no grouped count of the task table). When nothing fits in the free capacity, the workers where
lower-band work holds enough are read (a bounded number, with those tasks) and the core's
preemption decides on them. Before the first tick there is no basis: the answer then comes
from a decision over the whole live snapshot, as it always did.

Every answer says what it stands on (``basis``): the tick, or the live snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Sum

from scheduler.foundation import roles
from scheduler.foundation.access import require_authenticated
from scheduler.budgets.rules import budget_defaults, effective_budget_for, spend_now
from scheduler.foundation.cluster_config import cluster_config, group_specs
from scheduler.core.bands import Band
from scheduler.core.budget import effective_band
from scheduler.core.decision import decide
from scheduler.core.explain import Downgrade, pending_queue, pending_text, reason_record
from scheduler.core.feasibility import HeldWork, ShapeAnalysis, analyse_job, holders, rank_holders
from scheduler.core.types import (
    ACTIVE_STATES,
    ClusterSnapshot,
    Decision,
    DeviceType,
    JobSpec,
    TaskSnapshot,
    TaskState,
    WorkerSpec,
)
from scheduler.core.whatif import queue_place
from scheduler.foundation.errors import InvalidArgument, NotFound, PermissionDenied, ServiceError
from scheduler.foundation.inputs import parse_user_id
from scheduler.jobs.feasibility import feasibility_data, shape_key
from scheduler.board.read import queue_index
from scheduler.jobs.request import parse_job_request
from scheduler.jobs.submit import SubmissionPlan, plan_submission
from scheduler.jobs.submit import _job_fields as submitted_job_fields  # the one plan -> row mapping
from scheduler.models import Task
from scheduler.store import clock
from scheduler.store.job_rows import ResourceCache, job_spec_fields, job_spec_from_fields, job_spec_from_row
from scheduler.store.states import ACTIVE_VALUES
from scheduler.tick.load import load_snapshot, scheduler_config
from scheduler.board.estimates import estimate_behind
from scheduler.board.read import whatif_basis
from scheduler.board.whatif import WhatIfBasis

# At most this many workers are read, with their lower-band tasks, to try a preemption: the
# first by name where the free capacity plus what lower bands hold there covers one task. The
# core then chooses victims among them as a tick would. (A tick searches every worker; a gang
# needing more hosts than this is answered as waiting.)
PREEMPTION_WORKERS = 16
# A solo job is tried on at most this many of the workers with room for it (the first by id,
# which first-fit would take first anyway): trying it on 10,000 costs more than the answer.
FIRST_FIT_WORKERS = 64


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
    # ``{code, text, ...parameters, band, position, band_pending, tick}``: the tick the place is
    # counted in (None before any tick).
    pending_reason: dict | None = None
    # Can it ever run? (``jobs.feasibility``), on the workers of the basis.
    feasibility: dict | None = None
    # What the answer stands on: ``{"source": "tick", "tick": N, "tick_at": datetime}`` (the
    # newest tick's basis; spend and budget are live), or ``{"source": "live", ...}`` before any tick.
    basis: dict | None = None
    # When it would probably start (``tick.estimates.estimate_behind``) and the sentence.
    estimated_start: dict | None = None
    estimated_start_text: str = ""

    @property
    def downgrade(self) -> Downgrade | None:
        """The downgrade the decision queued it under (its sentences are ``Downgrade``'s), or None."""
        if self.effective_band is None or self.requested_band is None or self.effective_band == self.requested_band:
            return None
        return Downgrade(self.requested_band, self.effective_band, self.spend or 0, self.limit or 0)

    @property
    def never(self) -> bool:
        """Accepted, but it can never run on the cluster as it is (the feasibility verdict)."""
        return self.feasibility is not None and self.feasibility["verdict"] == "never"


def what_if(actor, data: Any) -> WhatIf:
    """Answer "what if I submitted this?" on the newest tick's basis. Writes nothing.

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
            accepted=False,
            error={"code": exc.code, "message": exc.message},
            requested_band=requested,
            effective_band=None,
            spend=None,
            limit=None,
            position=None,
            would_place=False,
            worker=None,
            would_preempt=[],
        )
    return simulate_plan(plan)


def planned_job(plan: SubmissionPlan, now_ms: int) -> tuple[JobSpec, tuple[TaskSnapshot, ...]]:
    """The planned job and its pending tasks as the core sees them: the row submission would
    write (``jobs.submit``), read back by the one mapper (``store.job_rows``)."""
    req = plan.request
    job = job_spec_from_fields(submitted_job_fields(None, plan, now_ms), plan.parent.name if plan.parent else None)
    tasks = tuple(TaskSnapshot(id=f"{plan.job_id}/{i}", job_id=plan.job_id, index=i) for i in range(req.replicas))
    return job, tasks


def simulate_plan(plan: SubmissionPlan) -> WhatIf:
    """The core's decision for the planned job: on the newest tick's basis, or on the whole live
    snapshot before the first tick."""
    basis = whatif_basis()
    if basis is None:
        return simulate_on_live_snapshot(plan)
    now_ms = clock.now_ms()
    job, tasks = planned_job(plan, now_ms)
    defaults = budget_defaults()
    budget = effective_budget_for(plan.user)
    spend = spend_now([plan.user]).spend.get(plan.user, 0)
    band = effective_band(plan.band, plan.user, {plan.user: spend}, {plan.user: budget}, defaults)
    analysis, offered = shape_on_basis(job, basis)
    config = scheduler_config()
    # The job alone, at the band it would be scheduled in (so the trial does not re-price it),
    # on the capacity the tick left free; a job that never fits is tried on the totals, so
    # its reason names what no worker has at all.
    alone = replace(job, band=band)
    trial = decide(ClusterSnapshot(now_ms, config, {}, offered, {job.id: alone}, tasks))
    ours = {t.id for t in tasks}
    assignments = [a for a in trial.assignments if a.task in ours]
    victims: list[str] = []
    if not assignments and not analysis.never and band is not Band.BATCH:
        preempting = preemption_trial(alone, tasks, analysis, basis, band, now_ms, config)
        if preempting is not None:
            assignments = [a for a in preempting.assignments if a.task in ours]
            victims = sorted(p.victim for p in preempting.preemptions if p.preemptor in ours)
    waiting = not assignments
    place = queue_place(basis.queue.get(int(band), []), basis.spend, plan.user, len(tasks)) if waiting else None
    return answer(
        plan,
        band=band,
        spend=spend,
        limit=budget.budget_limit,
        place=place,
        reason=trial.pending_reasons.get(tasks[0].id) if waiting else None,
        worker=assignments[0].worker if assignments else None,
        victims=victims,
        feasibility=feasibility_data(
            analysis,
            band,
            lambda: rank_holders(basis.holder_counts(analysis.matching_ids), job, band),
            waiting,
            basis.tick,
        ),
        basis={"source": "tick", "tick": basis.tick, "tick_at": basis.tick_at},
        ahead=task_ahead_in_tick_queue(band, place[0]) if place is not None else None,
        now_ms=now_ms,
    )


def shape_on_basis(job: JobSpec, basis: WhatIfBasis) -> tuple[ShapeAnalysis, tuple[WorkerSpec, ...]]:
    """The job's feasibility analysis over the basis's workers and the workers its trial is
    offered (:func:`trial_workers`): both depend only on the job's shape (``jobs.feasibility.
    shape_key``) and the basis, so they are computed once per shape per tick in this process
    (analysing 10,000 workers cost more than the rest of a warm what-if)."""
    groups = group_specs(cluster_config())
    key = ("shape", shape_key(job), groups)
    found = basis.memo.get(key)
    if found is None:
        analysis = analyse_job(job, basis.workers, groups, basis.attributes)
        found = basis.memo[key] = (analysis, trial_workers(job, analysis, basis))
    return found


def task_ahead_in_tick_queue(band: Band, position: int) -> str | None:
    """The task the newest tick queued just ahead of ``position`` in ``band`` (None: first)."""
    ids = queue_index().ids.get(int(band), [])
    return ids[position - 2] if 1 < position <= len(ids) + 1 else None


def trial_workers(job: JobSpec, analysis: ShapeAnalysis, basis: WhatIfBasis) -> tuple[WorkerSpec, ...]:
    """The workers the job alone is tried on, as free as the tick left them.

    Placement is first-fit over the healthy workers matching the hard constraints, in id order
    (soft constraints first): so a solo job without soft constraints is placed as on the whole
    cluster when tried on the first ``FIRST_FIT_WORKERS`` matching workers with room, by id.
    When none has room, every worker is offered, so the reason it waits counts the cluster;
    a job that never fits is offered the totals, so its reason names what no worker has.
    """
    if analysis.never:
        return basis.workers
    need = job.resources
    chips = need.device.count if need.device.type is not DeviceType.CPU else 0
    matching = set(analysis.matching_ids)
    room = [
        w
        for w in basis.free
        if w.id in matching
        and w.cpu_millicores >= need.cpu_millicores
        and w.memory_bytes >= need.memory_bytes
        and w.device.count >= chips
    ]
    if not room:
        return basis.free
    if job.group_by is not None or any(c.soft for c in job.constraints):
        return tuple(room)
    return tuple(sorted(room, key=lambda w: w.id)[:FIRST_FIT_WORKERS])


def answer(
    plan: SubmissionPlan,
    *,
    band: Band,
    spend: int,
    limit: int,
    place: tuple[int, int] | None,
    reason: object | None,
    worker: str | None,
    victims: list[str],
    feasibility: dict,
    basis: dict,
    ahead: str | None,
    now_ms: int,
) -> WhatIf:
    """THE what-if answer for an accepted plan, whatever it was computed on (one place to extend).

    ``place`` is (position, band count) when the job would wait, ``reason`` the core's pending
    reason of its first task then, ``ahead`` the task queued just ahead of it (its stored
    estimate bounds ours).
    """
    estimated_start, estimated_text = estimate_behind(ahead, worker is not None, now_ms)
    pending_reason = None
    if place is not None and reason is not None:
        position, count = place
        record = reason_record(reason)
        tick = basis.get("tick")
        pending_reason = {
            **record,
            "text": pending_text(record, band, position, count, tick),
            "band": band.wire,
            "position": position,
            "band_pending": count,
            "tick": tick,
        }
    return WhatIf(
        accepted=True,
        error=None,
        requested_band=plan.band,
        effective_band=band,
        spend=int(spend),
        limit=limit,
        position=place[0] if place is not None else None,
        would_place=worker is not None,
        worker=worker,
        would_preempt=victims,
        job=plan.job_id,
        pending_reason=pending_reason,
        feasibility=feasibility,
        basis=basis,
        estimated_start=estimated_start,
        estimated_start_text=estimated_text,
    )


def preemption_trial(
    job: JobSpec,
    tasks: tuple[TaskSnapshot, ...],
    analysis: ShapeAnalysis,
    basis: WhatIfBasis,
    band: Band,
    now_ms: int,
    config,
) -> Decision | None:
    """The core's decision for ``job`` on the few workers where lower-band work could make room.

    Two queries: what lower bands hold per worker, then the tasks on the chosen workers. Each
    chosen worker is offered as its free capacity plus what those tasks hold, with only those
    tasks on it, so the core's preemption picks the victims. None when no worker could do.
    """
    matching = set(analysis.matching_ids)
    held = {
        name: (cpu or 0, mem or 0, chips or 0)
        for name, cpu, mem, chips in Task.objects.filter(state__in=ACTIVE_VALUES, band__gt=int(band))
        .order_by()
        .values_list("worker__name")
        .annotate(cpu=Sum("job__cpu_millicores"), mem=Sum("job__memory_bytes"), chips=Sum("job__device_count"))
    }
    need_cpu, need_mem = job.resources.cpu_millicores, job.resources.memory_bytes
    need_chips = job.resources.device.count if job.resources.device.type is not DeviceType.CPU else 0
    free = basis.free_by_name
    chosen = []
    for name in sorted(matching & set(held)):
        f = free[name]
        cpu, mem, chips = held[name]
        if (
            f.cpu_millicores + cpu >= need_cpu
            and f.memory_bytes + mem >= need_mem
            and f.device.count + chips >= need_chips
        ):
            chosen.append(name)
            if len(chosen) == PREEMPTION_WORKERS:
                break
    if not chosen:
        return None
    rows = Task.objects.filter(state__in=ACTIVE_VALUES, band__gt=int(band), worker__name__in=chosen).values_list(
        "index", "state", "band", "preemption_count", "worker__name", *job_spec_fields("job__")
    )
    jobs: dict[str, JobSpec] = {job.id: job}
    running: list[TaskSnapshot] = []
    shapes = ResourceCache()
    for row in rows:
        index, state, stamped, preemptions, worker = row[:5]
        job_id = row[5]
        if job_id not in jobs:
            jobs[job_id] = job_spec_from_row(row[5:], shapes)
        running.append(
            TaskSnapshot(
                id=f"{job_id}/{index}",
                job_id=job_id,
                index=index,
                state=TaskState(state),
                worker=worker,
                band=Band(stamped),
                preemption_count=preemptions,
            )
        )
    workers = []
    for name in chosen:
        f = free[name]
        cpu, mem, chips = held[name]
        device = f.device if f.device.type is DeviceType.CPU else replace(f.device, count=f.device.count + chips)
        workers.append(WorkerSpec(name, f.cpu_millicores + cpu, f.memory_bytes + mem, device, f.attributes, f.healthy))
    return decide(ClusterSnapshot(now_ms, config, {}, tuple(workers), jobs, (*running, *tasks)))


def simulate_on_live_snapshot(plan: SubmissionPlan) -> WhatIf:
    """Before the first tick: the planned job added to the whole live snapshot, one full decision."""
    now_ms = clock.now_ms()
    snapshot = load_snapshot(now_ms).snapshot
    job, tasks = planned_job(plan, now_ms)
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
        if first in task_ids:
            position = task_ids.index(first) + 1
            place = (band, position, len(task_ids))
            ahead = task_ids[position - 2] if position > 1 else None
            break
    band = place[0] if place is not None else Band(decision.effective_bands.get(first, plan.band))
    budgets_now = hypothetical.budgets
    limit = (
        budgets_now[plan.user].budget_limit
        if plan.user in budgets_now
        else hypothetical.config.budget_defaults.budget_limit
    )
    jobs_now = hypothetical.jobs
    variant_of = {w.id: w.device.variant for w in snapshot.workers}
    active = [
        (
            t.worker,
            HeldWork(
                jobs_now[t.job_id].user,
                t.band if t.band is not None else jobs_now[t.job_id].band,
                jobs_now[t.job_id].resources.device,
                jobs_now[t.job_id].group_by is not None,
                variant_of.get(t.worker),
            ),
        )
        for t in snapshot.tasks
        if t.state in ACTIVE_STATES and t.worker is not None and t.job_id in jobs_now
    ]
    analysis = analyse_job(job, snapshot.workers, snapshot.scale_groups)
    return answer(
        plan,
        band=band,
        spend=decision.spend.get(plan.user, 0),
        limit=limit,
        place=place[1:] if place is not None else None,
        reason=decision.pending_reasons.get(first) if place is not None else None,
        worker=assignments[0].worker if assignments else None,
        victims=victims,
        feasibility=feasibility_data(
            analysis, band, lambda: holders(analysis.matching_ids, active, job, band), waiting=place is not None
        ),
        basis={"source": "live", "tick": None, "tick_at": None},
        ahead=ahead,
        now_ms=now_ms,
    )
