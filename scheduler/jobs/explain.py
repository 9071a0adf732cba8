"""Why a job is where it is: one job's explanation from the queue index and its rows.
"""

from __future__ import annotations

from scheduler.budgets.rules import budget_defaults, effective_budget_for, live_spend
from scheduler.core.bands import Band
from scheduler.core.budget import effective_band
from scheduler.core.explain import Downgrade
from scheduler.core.types import BudgetSpec, TaskState
from scheduler.jobs.queue import QueueIndex, queue_index
from scheduler.models import Job, PreemptionEvent, Task
from scheduler.store.states import TERMINAL_JOB_VALUES


def downgrade_text(requested: Band, spend: int, limit: int) -> str:
    """The core's wording, e.g. "INTERACTIVE runs as BATCH: spend 12,400 > limit 10,000"."""
    return Downgrade(requested, Band.BATCH, spend, limit).text()


def explain_job(job: Job, index: QueueIndex | None = None) -> dict:
    """Why a job runs (or waits) where it does, with the numbers. A fixed number of queries.

    Queue facts come from ``index`` (default: ``queue_index()``, which parses the newest tick's
    explanation only once per tick per process).
    """
    requested = Band(job.band)
    spend_now = live_spend([job.user]).get(job.user, 0)
    budget = effective_budget_for(job.user)
    defaults = budget_defaults()
    effective = effective_band(requested, job.user, {job.user: spend_now}, {job.user: budget}, defaults)
    downgrade = None
    if effective != requested:
        downgrade = {"spend": spend_now, "limit": budget.budget_limit,
                     "text": downgrade_text(requested, spend_now, budget.budget_limit)}

    if index is None:
        index = queue_index()
    task_rows = list(
        Task.objects.filter(job=job).order_by("index").values_list("index", "state", "band", "worker__name")
    )
    tasks = []
    best: tuple[int, int, str] | None = None  # (band rank, position, reason) of the job's first queued task
    for task_index, state, band, worker in task_rows:
        task_id = f"{job.name}/{task_index}"
        entry = index.locate(task_id) if state == TaskState.PENDING.value else None
        reason = None
        position = None
        task_band = Band(band).wire if band is not None and state != TaskState.PENDING.value else None
        if entry is not None:
            rank, position = int(entry.band), entry.position
            reason = entry.reason or None
            task_band = entry.band.wire
            if best is None or (rank, position) < best[:2]:
                best = (rank, position, reason or "")
        elif state == TaskState.PENDING.value:
            reason = "Waiting for the next scheduling tick"
            task_band = effective.wire
        tasks.append({"task": task_id, "state": state, "band": task_band, "worker": worker,
                      "position": position, "pending_reason": reason})

    events = list(
        PreemptionEvent.objects.filter(victim__job=job)
        .select_related("victim__job", "preemptor__job", "worker")
        .order_by("-created_at", "-pk")
    )
    preempted = [
        {
            "victim": f"{e.victim.job.name}/{e.victim.index}",
            "preemptor": f"{e.preemptor.job.name}/{e.preemptor.index}",
            "preemptor_band": Band(e.preemptor_band).wire,
            "worker": e.worker.name if e.worker else None,
            "at": e.created_at,
            "reason": e.reason,
        }
        for e in events
    ]
    pending = [t for t in tasks if t["state"] == TaskState.PENDING.value]
    pending_reason = best[2] if best else (pending[0]["pending_reason"] if pending else None)
    position = best[1] if best else None
    queue_band = Band(best[0]) if best else (effective if pending else None)
    return {
        "job": job.name,
        "user": job.user,
        "state": job.state,
        "requested_band": requested.wire,
        "effective_band": effective.wire,
        "downgrade": downgrade,
        "spend": spend_now,
        "limit": budget.budget_limit,
        "position": position,
        "band_queue_length": (
            index.count(int(queue_band)) if queue_band is not None and index.tick_pk is not None else None
        ),
        "pending_reason": pending_reason,
        "tick": index.tick_pk,
        "tasks": tasks,
        "preemptions": preempted,
        "what_would_change": what_would_change(job, requested, effective, spend_now, budget, pending, position,
                                               pending_reason),
    }


def what_would_change(
    job: Job, requested: Band, effective: Band, spend: int, budget: BudgetSpec, pending: list[dict],
    position: int | None, pending_reason: str | None,
) -> str:
    """One paragraph a researcher can act on."""
    if job.state in TERMINAL_JOB_VALUES:
        return f"Nothing: the job has finished ({job.state})."
    if not pending:
        return "Nothing is waiting: every unfinished task of this job is placed."
    parts = []
    if effective != requested:
        parts.append(
            f"{job.user}'s spend ({spend:,}) is over the limit ({budget.budget_limit:,}), so pending tasks queue as "
            f"BATCH behind all INTERACTIVE work. They queue as {requested.name} again once spend is back to "
            f"{budget.budget_limit:,} or less (other work of {job.user} finishing or being cancelled), or when an "
            f"admin approves a higher budget_limit (iris uplift request)."
        )
    if position is not None and position > 1:
        parts.append(f"{position - 1:,} task(s) are ahead of it in the {effective.name} queue.")
    if pending_reason:
        parts.append(f"Scheduler: {pending_reason}.")
    if effective == requested and requested is Band.BATCH:
        parts.append("BATCH work runs when no higher band needs the capacity.")
    return " ".join(parts) or "It should be placed at the next tick."
