"""An uplift's effect before approval, on the newest tick's basis (``POST uplifts/<id>:preview``,
the approval page, ``iris admin uplift preview``). Writes nothing.

Reads the board (``board.read``: the queue and the what-if basis, parsed once per tick per
process), the grant, the user's effective budget and the specs of the user's queued jobs, and
hands them to the pure ``core.uplift_preview.preview_uplift``, which answers what ``decide``
would do with the user's tasks under the raised limit (its docstring says why that is exact on
a cluster at rest and what it leaves out). What depends on the tick only (the target band's
queue without the user, the job specs it names, each job shape's matching workers) is kept
with the parsed basis (``WhatIfBasis.memo``), so a second preview at the same tick costs a
few queries and a pass over the user's own tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from scheduler.board.queue import QueueIndex
from scheduler.board.read import queue_index, whatif_basis
from scheduler.board.whatif import WhatIfBasis
from scheduler.budgets.rules import effective_budget_for, raised_by_grants
from scheduler.core.bands import Band
from scheduler.core.feasibility import analyse_job
from scheduler.core.types import JobSpec
from scheduler.core.uplift_preview import (
    HELD_CODE,
    BandLine,
    PreviewBasis,
    QueuedTask,
    UpliftPreview,
    band_line,
    build_slot_stand_ins,
    preview_uplift,
)
from scheduler.foundation.access import require_admin
from scheduler.foundation.cluster_config import cluster_config, group_specs, scheduler_config
from scheduler.foundation.errors import FailedPrecondition, NotFound
from scheduler.foundation.inputs import MAX_INT64, parse_int
from scheduler.models import Job, TickRecord, UpliftGrant
from scheduler.store import clock
from scheduler.store.job_rows import JOB_SPEC_FIELDS, ResourceCache, job_spec_from_row


@dataclass(frozen=True)
class GrantPreview:
    """A requested grant's preview and what it stands on (the tick, its time)."""

    grant: UpliftGrant
    preview: UpliftPreview
    tick: int
    tick_at: datetime


def preview_grant(actor, grant_id) -> GrantPreview:
    """What approving uplift ``grant_id`` would do at the next tick. Admins only, as the
    approval; a grant already decided is FAILED_PRECONDITION (its effect is the
    queue itself)."""
    require_admin(actor, "preview uplifts")
    pk = parse_int(grant_id, "id", minimum=1, maximum=MAX_INT64)
    grant = UpliftGrant.objects.filter(pk=pk).first()
    if grant is None:
        raise NotFound(f"uplift {pk} does not exist", field="id")
    if grant.state != UpliftGrant.State.REQUESTED:
        raise FailedPrecondition(f"uplift {pk} was already decided ({grant.state})", field="id")
    basis = whatif_basis()
    queue = queue_index()
    if basis is None or queue.tick_pk is None:
        raise FailedPrecondition("no tick has published the queue yet: preview after the first tick", field="id")
    user = grant.user_id
    before = effective_budget_for(user)
    after = raised_by_grants(user, before.budget_limit, int(before.max_band), [(grant.budget_limit, grant.max_band)])
    queued = user_queue(queue, user)
    jobs = job_specs(list(dict.fromkeys(q.job for q in queued)))
    queued = [q for q in queued if q.job in jobs]  # a job deleted since the tick
    moved_shapes = [jobs[j] for j in dict.fromkeys(q.job for q in queued) if jobs[j].band is Band.INTERACTIVE]
    config = scheduler_config()
    preview_basis = PreviewBasis(
        now_ms=clock.now_ms(),
        config=config,
        spend=basis.spend,
        free=basis.free,
        stand_ins=stand_ins(basis),
        attributes=basis.attributes,
        memo=basis.memo.setdefault("uplift-preview", {}),
        lines={Band.INTERACTIVE: interactive_line(basis, queue, user)},
        holders=holders_for(basis, moved_shapes),
        at_rest=tick_at_rest(basis.tick),
    )
    preview = preview_uplift(preview_basis, user, jobs, queued, before, after)
    return GrantPreview(grant, preview, basis.tick, basis.tick_at)


def user_queue(queue: QueueIndex, user: str) -> list[QueuedTask]:
    """``user``'s queued tasks as the tick left them, band by band in position order."""
    out: list[QueuedTask] = []
    reasons = queue.reasons
    for rank in sorted(queue.owner):
        owners = queue.owner[rank]
        if user not in queue.users.get(rank, ()):
            continue
        ids, reason_of, count = queue.ids[rank], queue.reason_of[rank], len(owners)
        band = Band(rank)
        for i, owner in enumerate(owners):
            if owner == user:
                task = ids[i]
                code = reasons[reason_of[i]].get("code") if 0 <= reason_of[i] < len(reasons) else None
                out.append(QueuedTask(task, task[: task.rfind("/")], band, i + 1, code == HELD_CODE, count))
    return out


def interactive_line(basis: WhatIfBasis, queue: QueueIndex, user: str) -> BandLine:
    """The INTERACTIVE band of the tick's queue without ``user``, kept per tick when the user
    has no task in it (always so when the grant moves any: a user's INTERACTIVE jobs share one
    effective band)."""
    rank = int(Band.INTERACTIVE)
    ids = queue.ids.get(rank, [])
    present = user in queue.users.get(rank, ())
    key = ("uplift-line", rank, queue.tick_pk)
    if not present:
        line = basis.memo.get(key)
        if line is not None:
            return line
    reasons = queue.reasons
    codes = [reasons[i].get("code", "") if 0 <= i < len(reasons) else "" for i in queue.reason_of.get(rank, [])]
    # The jobs the line compares by job order: each user's first job in the band, and the held ones.
    wanted: dict[str, None] = {}
    seen_users: set[str] = set()
    for task, code in zip(ids, codes, strict=True):
        job_id = task[: task.rfind("/")]
        if code == HELD_CODE:
            wanted[job_id] = None
        else:
            owner = job_id.split("/", 2)[1]
            if owner not in seen_users:
                seen_users.add(owner)
                wanted[job_id] = None
    line = band_line(ids, codes, job_specs(list(wanted)), without=user if present else None)
    if not present:
        basis.memo[key] = line
    return line


def stand_ins(basis: WhatIfBasis):
    """The tick's ASSIGNED/BUILDING tasks as the preview's build-slot stand-ins, kept per tick."""
    found = basis.memo.get("uplift-stand-ins")
    if found is None:
        found = basis.memo["uplift-stand-ins"] = build_slot_stand_ins(basis.building)
    return found


def holders_for(basis: WhatIfBasis, jobs: list[JobSpec]):
    """The running tasks by held work on the workers any of ``jobs`` may use (their hard
    constraints and device, ``core.feasibility.analyse_job``), summed from the basis. The
    matching workers are kept per job shape with the basis."""
    if not jobs:
        return {}
    groups = group_specs(cluster_config())
    names: set[str] = set()
    for job in jobs:
        shape = ("uplift-match", job.resources, job.constraints, job.group_by)
        matching = basis.memo.get(shape)
        if matching is None:
            matching = basis.memo[shape] = analyse_job(job, basis.workers, groups, basis.attributes).matching_ids
        names.update(matching)
    ordered = tuple(w.id for w in basis.workers if w.id in names)
    return basis.holder_counts(ordered)


def tick_at_rest(tick: int) -> bool:
    """Whether the basis's tick placed and evicted nothing (the preview is then the next
    tick's, absent other changes). One query."""
    row = TickRecord.objects.filter(pk=tick).values_list("assigned", "preempted").first()
    return row is not None and not row[0] and not row[1]


def job_specs(names: list[str]) -> dict[str, JobSpec]:
    """``{job id: JobSpec}`` of the jobs ``names`` (those still in the database), through the one
    job-row mapper (``store.job_rows``), as the tick reads them. One query."""
    if not names:
        return {}
    resources = ResourceCache()
    rows = Job.objects.filter(name__in=names).values_list(*JOB_SPEC_FIELDS)
    return {row[0]: job_spec_from_row(row, resources) for row in rows}
