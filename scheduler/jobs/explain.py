"""Why a job is where it is: one job's explanation from the queue index and its rows."""

from __future__ import annotations

from django.db.models import OuterRef, Subquery

from scheduler.budgets.rules import budget_defaults, effective_budget_for, spend_now
from scheduler.core.bands import Band
from scheduler.core.budget import effective_band
from scheduler.core.explain import (
    Downgrade,
    NeverFits,
    never_fits,
    downgrade_of,
    format_duration,
    iso_time,
    number,
    ordinal,
    pending_text,
    place_text,
    stamp_text,
)
from scheduler.core.explain import downgrade_text as downgrade_text_of_record
from scheduler.core.types import BudgetSpec, TaskState
from scheduler.jobs.feasibility import job_feasibility, shape_analysis
from scheduler.board.queue import QueueEntry, QueueIndex, round_robin_place
from scheduler.board.read import queue_index
from scheduler.jobs.queries import shown_placement
from scheduler.models import Attempt, Job, PreemptionEvent, Task
from scheduler.store.job_rows import job_shape_of
from scheduler.store.states import TERMINAL_JOB_VALUES
from scheduler.store import clock
from scheduler.board.estimates import shown_estimates_of_job


# A pending task no tick has explained yet (submitted, or put back, since the newest tick).
NOT_YET_TICKED = {"code": "not_yet_ticked"}


def not_yet_ticked_data() -> dict:
    return {
        "code": "not_yet_ticked",
        "text": pending_text(NOT_YET_TICKED),
        "band": None,
        "position": None,
        "band_pending": None,
        "tick": None,
    }


# Task states counted as "running" in a job's band summary (placed, stamped with a band).
PLACED_STATES = (TaskState.ASSIGNED.value, TaskState.BUILDING.value, TaskState.RUNNING.value)
# The order of a band summary's kinds: placed work, then waiting work, then finished work.
SUMMARY_KINDS = ("running", "pending", "ran")


def band_summary(tasks: list[dict], downgrade_at_tick: Downgrade | None) -> list[dict]:
    """How many of a job's tasks run in each stamped band, wait in each queued band, and ran
    (finished) in each band of their last attempt, e.g. ``[{"kind": "running", "band":
    Band.INTERACTIVE, "count": 4, "why": None}, {"kind": "pending", "band": Band.BATCH, "count":
    2, "why": Downgrade(...)}]``: bands are :class:`Band`, ``why`` is the downgrade the tick
    queued BATCH work under (a record, rendered where shown)."""
    counts: dict[tuple[str, Band], int] = {}
    for t in tasks:
        if t["state"] in PLACED_STATES and t["stamped_band"] is not None:
            key = ("running", t["stamped_band"])
        elif t["state"] == TaskState.PENDING.value and t["band"] is not None:
            key = ("pending", t["band"])
        elif t["state"] not in PLACED_STATES and t["state"] != TaskState.PENDING.value and t["band"] is not None:
            key = ("ran", t["band"])
        else:
            continue
        counts[key] = counts.get(key, 0) + 1
    out = []
    for (kind, band), n in sorted(counts.items(), key=lambda kv: (SUMMARY_KINDS.index(kv[0][0]), int(kv[0][1]))):
        why = downgrade_at_tick if kind == "pending" and band is Band.BATCH else None
        out.append({"kind": kind, "band": band, "count": n, "why": why})
    return out


def band_summary_text(summary: list[dict]) -> str:
    """``4 running as INTERACTIVE · 2 pending as BATCH: over budget, spend 48 > limit 30``."""
    parts = []
    for item in summary:
        text = f"{item['count']:,} {item['kind']} as {item['band'].name}"
        why = item["why"]
        if why is not None:
            text += f": {why.cause()}"
        parts.append(text)
    return " · ".join(parts)


def ran_as(tasks: list[dict]) -> Band | None:
    """The band a finished job ran as: the band most of its finished tasks' last attempts were
    stamped with (ties: the higher band); None if none of them ever ran."""
    counts: dict[Band, int] = {}
    for t in tasks:
        if t["state"] not in PLACED_STATES and t["state"] != TaskState.PENDING.value and t["band"] is not None:
            counts[t["band"]] = counts.get(t["band"], 0) + 1
    if not counts:
        return None
    return min(counts, key=lambda b: (-counts[b], int(b)))


def submitted_text(at_ms: int, tick_ms: int | None, tick: int | None) -> str:
    """``2026-12-02T05:10:03Z, 12m 3s before tick 812``: when, and how long before the tick that
    ordered it (the age the order used, the same on every page whenever it is read)."""
    text = iso_time(at_ms)
    if tick_ms is not None and tick is not None:
        text += f", {format_duration(tick_ms - at_ms)} before tick {tick}"
    return text


def priority_factors(job: Job, index: QueueIndex, first: QueueEntry | None) -> dict | None:
    """Like Slurm's ``sprio``: every factor of the job's first waiting task's place, in the
    order the scheduler applies them (``core.ordering.scheduling_order``): the effective band;
    the user's round-robin turn in that band (users by ascending spend at the tick); then,
    within the user's own work, requested band, depth (deeper first), root job age, submission
    time and task index. None when no tick has queued it.

    Each factor has its machine ``value`` (band names, counts, epoch ms), a ``label`` and a
    ``text`` for people (names, ordinals, ISO times with their age at the tick) and a
    ``detail``: the console, the API and the CLI all show ``label``, ``text`` and ``detail``."""
    if first is None:
        return None
    place = round_robin_place(index, int(first.band), first.position)
    requested = Band(job.band)
    downgrade = downgrade_text_of_record(first.reason)
    users = place.users if place else []
    turn = place.turn if place else None
    tick = index.tick_pk
    tick_ms = index.tick_now_ms
    spends = ", ".join(f"{u} {number(s)}" for u, s in users)
    factors = [
        (
            "effective_band",
            "Effective band",
            first.band.wire,
            first.band.name,
            f"requested {requested.name}; {downgrade}"
            if downgrade
            else f"requested {requested.name}, queued as requested",
        ),
        (
            "round_robin_turn",
            "Round-robin turn",
            turn,
            f"{ordinal(turn)} of {len(users)} users" if place and turn else None,
            f"{job.user} goes {ordinal(turn)} in {first.band.name}: users take turns, lower spend first "
            f"(spend at tick {tick}: {spends})"
            if place
            else None,
        ),
        (
            "own_tasks_ahead",
            "Own tasks ahead",
            place.ahead_own if place else None,
            number(place.ahead_own) if place else None,
            f"{job.user}'s own tasks ahead of it in {first.band.name}, ordered by the factors below",
        ),
        ("requested_band", "Requested band", requested.wire, requested.name, "higher requested bands first"),
        (
            "depth",
            "Depth",
            job.depth,
            f"{job.depth} ({'root job' if job.depth <= 1 else 'child job'})",
            "deeper jobs (children) first",
        ),
        (
            "root_submitted_at_ms",
            "Job tree submitted",
            job.root_submitted_at_ms,
            submitted_text(job.root_submitted_at_ms, tick_ms, tick),
            "older job trees first",
        ),
        (
            "submitted_at_ms",
            "Job submitted",
            job.submitted_at_ms,
            submitted_text(job.submitted_at_ms, tick_ms, tick),
            "older jobs first, then job id",
        ),
        ("task_index", "Task index", first.index, number(first.index), "lower indices first"),
    ]
    out = []
    for factor, label, value, text, detail in factors:
        item = {
            "factor": factor,
            "label": label,
            "value": value,
            "text": text if text is not None else "—",
            "detail": detail,
        }
        if factor == "round_robin_turn":
            item["users"] = [{"user": u, "spend": s} for u, s in users]
        out.append(item)
    return {
        "tick": tick,
        "task": first.task,
        "factors": out,
        "position": first.position,
        "band_pending": first.band_count,
        "text": place_text(first.band, first.position, first.band_count, tick),
    }


def explain_job(job: Job, index: QueueIndex | None = None) -> dict:
    """Why a job runs (or waits) where it does, with the numbers. A fixed number of queries.

    Queue facts (positions, band counts, reasons, spend at the tick) come from ``index``
    (default: ``queue_index()``, the newest tick's explanation, parsed once per tick per
    process) and are labelled with its tick; ``spend`` is as the newest tick committed it
    (``budgets.rules.spend_now``) and ``limit`` is live. A task the tick
    queued whose state has changed since keeps its place as of that tick and is marked
    ``changed_since_tick``.
    """
    requested = Band(job.band)
    finished = job.state in TERMINAL_JOB_VALUES
    user_spend = spend_now([job.user]).spend.get(job.user, 0)
    budget = effective_budget_for(job.user)
    defaults = budget_defaults()
    effective = effective_band(requested, job.user, {job.user: user_spend}, {job.user: budget}, defaults)

    if index is None:
        index = queue_index()
    last = Attempt.objects.filter(task=OuterRef("pk")).order_by("-number")
    task_rows = list(
        Task.objects.filter(job=job)
        .order_by("index")
        .annotate(last_band=Subquery(last.values("band")[:1]), last_worker=Subquery(last.values("worker__name")[:1]))
        .values_list("index", "state", "band", "worker__name", "last_band", "last_worker")
    )
    now = clock.now_ms()
    pending_names = [f"{job.name}/{i}" for i, state, *_ in task_rows if state == TaskState.PENDING.value]
    estimates = shown_estimates_of_job(job, pending_names, now)
    tasks = []
    first: QueueEntry | None = None  # the job's first task in the newest tick's queue
    for task_index, state, band, worker, last_band, last_worker in task_rows:
        task_id = f"{job.name}/{task_index}"
        entry = index.locate(task_id) if index.tick_pk is not None else None
        # Placed: the stamped band and worker; finished: its last attempt's; pending: none.
        shown_band, worker = shown_placement(state, band, worker, last_band, last_worker)
        stamped = shown_band if state in PLACED_STATES else None
        queued = None
        if entry is not None:
            queued = entry.as_data()
            if state == TaskState.PENDING.value and (
                first is None or (entry.band, entry.position) < (first.band, first.position)
            ):
                first = entry
        elif state == TaskState.PENDING.value:
            queued = not_yet_ticked_data()
        pending = state == TaskState.PENDING.value
        estimate = estimates[task_id] if pending else None
        tasks.append(
            {
                "task": task_id,
                "state": state,
                "band": (entry.band if entry is not None else effective) if pending else shown_band,
                "requested_band": requested,
                "stamped_band": stamped,
                "worker": worker,
                "position": entry.position if entry is not None else None,
                "band_pending": entry.band_count if entry is not None else None,
                "changed_since_tick": entry is not None and not pending,
                "pending_reason": queued,
                "estimated_start": estimate.data() if estimate else None,
                "estimated_start_reason": estimate.reason if estimate else "",
            }
        )

    # A finished job's band is what it ran as, whatever its user's spend is now: no downgrade.
    ran = ran_as(tasks) if finished else None
    if finished:
        effective = ran if ran is not None else requested
    downgrade = None
    current = Downgrade.of(requested, user_spend, budget.budget_limit) if not finished else None
    if current is not None:
        # "why": the typed record, for the console's sentences (core.explain.Downgrade renders them all).
        downgrade = {
            "spend": current.spend,
            "limit": current.limit,
            "text": current.text(),
            "badge": current.badge(),
            "why": current,
        }

    events = list(
        PreemptionEvent.objects.filter(victim__job=job)
        .select_related("victim__job", "preemptor__job", "worker")
        .order_by("-created_at", "-pk")
    )
    preempted = [
        {
            "victim": f"{e.victim.job.name}/{e.victim.index}",
            "victim_band": Band(e.victim_band),
            "victim_stamp": stamp_text(job.user, requested, Band(e.victim_band)),
            "preemptor": f"{e.preemptor.job.name}/{e.preemptor.index}",
            "preemptor_user": e.preemptor.job.user,
            "preemptor_band": Band(e.preemptor_band),
            "worker": e.worker.name if e.worker else None,
            "at": e.created_at,
            "reason": e.reason,
        }
        for e in events
    ]
    pending = [t for t in tasks if t["state"] == TaskState.PENDING.value]
    pending_reason = first.as_data() if first else (pending[0]["pending_reason"] if pending else None)
    # The job's estimate is its first queued task's (else its first pending task's).
    lead = next((t for t in pending if first is not None and t["task"] == first.task), pending[0] if pending else None)
    summary = band_summary(tasks, downgrade_of(first.reason) if first is not None else None)
    feasibility = None
    never = None  # the "never" verdict's record (core.explain.NeverFits), what the advice starts from
    if not finished:
        tick_key = (index.tick_pk, index.tick_now_ms) if index.tick_pk is not None else None
        feasibility = job_feasibility(job, first.band if first else effective, waiting=bool(pending), tick_key=tick_key)
        if feasibility["verdict"] == "never":
            never = never_fits(shape_analysis(job_shape_of(job), tick_key))  # the analysis just made, cached
    spend_at_tick = int(index.spend.get(job.user, 0)) if index.tick_pk is not None else None
    limit_at_tick = int(index.limits.get(job.user, budget.budget_limit)) if index.tick_pk is not None else None
    return {
        "job": job.name,
        "user": job.user,
        "state": job.state,
        "requested_band": requested,
        "effective_band": effective,
        "ran_as": ran,
        "downgrade": downgrade,
        "spend": user_spend,
        "limit": budget.budget_limit,
        "spend_at_tick": spend_at_tick,
        "limit_at_tick": limit_at_tick,
        "position": first.position if first else None,
        "queued_band": first.band if first else None,
        "band_pending": first.band_count if first else None,
        "band_queue_length": first.band_count if first else None,
        "pending_reason": pending_reason,
        "estimated_start": lead["estimated_start"] if lead else None,
        "estimated_start_reason": lead["estimated_start_reason"] if lead else "nothing is pending",
        "estimated_start_text": estimates[lead["task"]].text(now) if lead else "",
        "tick": index.tick_pk,
        "bands": summary,
        "bands_text": band_summary_text(summary),
        "feasibility": feasibility,
        "never": never,
        "priority": priority_factors(job, index, first),
        "tasks": tasks,
        "preemptions": preempted,
        "what_would_change": what_would_change(
            job,
            requested,
            effective,
            user_spend,
            budget,
            pending,
            first.position if first else None,
            first.cause if first else None,
            first.band if first else None,
            never,
        ),
    }


def what_would_change(
    job: Job,
    requested: Band,
    effective: Band,
    spend: int,
    budget: BudgetSpec,
    pending: list[dict],
    position: int | None,
    pending_reason: str | None,
    queued_band: Band | None = None,
    never: NeverFits | None = None,
) -> str:
    """One paragraph a researcher can act on; it starts from the verdict: a job that can never
    run is told what to change, not how many tasks are ahead of it."""
    if job.state in TERMINAL_JOB_VALUES:
        return f"Nothing: the job has finished ({job.state})."
    if not pending:
        return "Nothing is waiting: every unfinished task of this job is placed."
    parts = []
    if never is not None:
        parts.append(
            f"Only a change of the request or of the cluster: it can never run on the cluster as it is "
            f"({never.text()}). Ask for what a worker has (cancel it and submit again), or ask an operator "
            f"for a worker that meets every requirement; waiting and its place in the queue change nothing."
        )
    downgrade = Downgrade.of(requested, spend, budget.budget_limit)
    if downgrade is not None:
        parts.append(downgrade.remedy(job.user))
    if never is not None:
        return " ".join(parts)  # the queue's facts would contradict the verdict
    if position is not None and position > 1:
        parts.append(f"{position - 1:,} task(s) are ahead of it in the {(queued_band or effective).name} queue.")
    if pending_reason:
        parts.append(f"Scheduler: {pending_reason}.")
    if effective == requested and requested is Band.BATCH:
        parts.append("BATCH work runs when no higher band needs the capacity.")
    return " ".join(parts) or "It should be placed at the next tick."
