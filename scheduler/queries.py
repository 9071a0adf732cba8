"""Read-side queries for the console and the API. Each function runs a fixed number of queries."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db.models import Count, Prefetch, Q, QuerySet
from django.utils import timezone

from scheduler import budgets as budget_rules
from scheduler.core.bands import Band
from scheduler.core.budget import effective_band, resource_value
from scheduler.core.explain import Downgrade
from scheduler.core.types import (
    ACTIVE_STATES,
    TERMINAL_JOB_STATES,
    BudgetDefaults,
    BudgetSpec,
    Device,
    DeviceType,
    Resources,
    TaskState,
)
from scheduler.models import (
    Attempt,
    AuditEntry,
    Job,
    PreemptionEvent,
    Task,
    TickRecord,
    UpliftGrant,
    UserBudget,
    Worker,
)


def recent_ticks(limit: int = 20) -> list[TickRecord]:
    return list(TickRecord.objects.defer("explanation", "spend", "limits").order_by("-started_at")[:limit])


def task_counts_by_state() -> dict[str, int]:
    return dict(Task.objects.values_list("state").annotate(n=Count("id")).values_list("state", "n"))


# --- API read side (budgets, jobs, queue, preemptions) ---------------------------------------------
# Appended for the REST API; each function runs a fixed number of queries whatever the number of
# tasks. Budgets are "live": spend is computed now from active tasks, not read from the last tick.

API_ACTIVE_VALUES = sorted(s.value for s in ACTIVE_STATES)
API_TERMINAL_JOB_VALUES = sorted(s.value for s in TERMINAL_JOB_STATES)
OPEN_GRANT_STATES = (UpliftGrant.State.REQUESTED, UpliftGrant.State.APPROVED)


def budget_defaults() -> BudgetDefaults:
    return budget_rules.budget_defaults()


def live_spend(users: list[str] | None = None) -> dict[str, int]:
    """Spend per user right now, in ONE aggregate query.

    Active tasks (ASSIGNED/BUILDING/RUNNING) of jobs requested above BATCH are counted per user
    and resource shape in SQL; the core's ``resource_value`` prices each shape. The Python loop
    runs over (user, shape) groups, never over tasks. Users with zero spend are left out.
    """
    rows = Task.objects.filter(state__in=API_ACTIVE_VALUES, job__band__lt=int(Band.BATCH))
    if users is not None:
        rows = rows.filter(job__user__in=users)
    groups = (
        rows.order_by()
        .values_list(
            "job__user", "job__cpu_millicores", "job__memory_bytes", "job__device_type", "job__device_variant",
            "job__device_count",
        )
        .annotate(n=Count("id"))
    )
    spend: dict[str, int] = {}
    for user, cpu, memory, device_type, variant, count, n in groups:
        device = Device() if device_type == DeviceType.CPU.value else Device(DeviceType(device_type), variant, count)
        value = resource_value(Resources(cpu, memory, device)) * n
        if value:
            spend[user] = spend.get(user, 0) + value
    return dict(sorted(spend.items()))


def effective_budget_for(user: str, at_ms: int | None = None) -> BudgetSpec:
    """One user's effective budget: row (or defaults) raised by active grants. Two queries."""
    # Not truncated to milliseconds: a grant approved a moment ago must already count.
    at = timezone.now() if at_ms is None else datetime.fromtimestamp(at_ms / 1000, tz=UTC)
    defaults = budget_defaults()
    row = UserBudget.objects.filter(user_id=user).values_list("budget_limit", "max_band").first()
    limit, band = row if row else (defaults.budget_limit, int(defaults.max_band))
    for grant_limit, grant_band in UpliftGrant.objects.filter(
        user_id=user, state=UpliftGrant.State.APPROVED, starts_at__lte=at, expires_at__gt=at
    ).values_list("budget_limit", "max_band"):
        if grant_limit is not None:
            limit = budget_rules.better_limit(limit, grant_limit)
        if grant_band is not None:
            band = min(band, grant_band)
    return BudgetSpec(user=user, budget_limit=limit, max_band=Band(band))


@dataclass
class BudgetView:
    """A user's budget as people read it: configured, effective now, spend, and open grants."""

    user: str
    has_row: bool
    budget_limit: int
    max_band: Band
    effective_budget_limit: int
    effective_max_band: Band
    spend: int
    # The band INTERACTIVE work of this user is scheduled in right now.
    effective_band: Band
    grants: list[UpliftGrant] = field(default_factory=list)

    @property
    def over_budget(self) -> bool:
        return self.effective_budget_limit > 0 and self.spend > self.effective_budget_limit


def budget_views(users: list[str] | None = None) -> list[BudgetView]:
    """Every user with a budget row, an open grant or spend (or just ``users``). Four queries."""
    at = timezone.now()
    defaults = budget_defaults()
    rows_qs = UserBudget.objects.all()
    grants_qs = (
        UpliftGrant.objects.filter(state__in=OPEN_GRANT_STATES)
        .select_related("requested_by", "decided_by")
        .order_by("-created_at", "-pk")
    )
    if users is not None:
        rows_qs = rows_qs.filter(user_id__in=users)
        grants_qs = grants_qs.filter(user_id__in=users)
    rows = {u: (limit, band) for u, limit, band in rows_qs.values_list("user_id", "budget_limit", "max_band")}
    open_grants: dict[str, list[UpliftGrant]] = {}
    for grant in grants_qs:
        if grant.state == UpliftGrant.State.APPROVED and grant.expires_at and grant.expires_at <= at:
            continue  # expired, not yet marked so by the beat task
        open_grants.setdefault(grant.user_id, []).append(grant)
    spend = live_spend(users)
    names = set(users) if users is not None else set(rows) | set(open_grants) | set(spend)
    effective = _effective_from(rows, open_grants, defaults, at)
    result = []
    for user in sorted(names):
        limit, band = rows.get(user, (defaults.budget_limit, int(defaults.max_band)))
        spec = effective.get(user) or BudgetSpec(user, limit, Band(band))
        result.append(
            BudgetView(
                user=user,
                has_row=user in rows,
                budget_limit=limit,
                max_band=Band(band),
                effective_budget_limit=spec.budget_limit,
                effective_max_band=spec.max_band,
                spend=spend.get(user, 0),
                effective_band=effective_band(Band.INTERACTIVE, user, spend, {user: spec}, defaults),
                grants=open_grants.get(user, []),
            )
        )
    return result


def _effective_from(
    rows: dict[str, tuple[int, int]], open_grants: dict[str, list[UpliftGrant]], defaults: BudgetDefaults,
    at: datetime,
) -> dict[str, BudgetSpec]:
    """Effective budgets from rows and grants already read (same rule as ``scheduler.budgets``)."""
    result = {}
    for user, grants in open_grants.items():
        limit, band = rows.get(user, (defaults.budget_limit, int(defaults.max_band)))
        for grant in grants:
            if grant.state != UpliftGrant.State.APPROVED or not grant.starts_at or grant.starts_at > at:
                continue
            if grant.budget_limit is not None:
                limit = budget_rules.better_limit(limit, grant.budget_limit)
            if grant.max_band is not None:
                band = min(band, grant.max_band)
        result[user] = BudgetSpec(user, limit, Band(band))
    return result


def budget_view(user: str) -> BudgetView:
    return budget_views([user])[0]


def user_is_known(user: str) -> bool:
    """A Django user, a budget row, a grant or a job carries this name."""
    from django.contrib.auth import get_user_model

    return (
        get_user_model().objects.filter(username=user).exists()
        or UserBudget.objects.filter(user_id=user).exists()
        or UpliftGrant.objects.filter(user_id=user).exists()
        or Job.objects.filter(user=user).exists()
    )


# --- jobs -----------------------------------------------------------------------------------------


def jobs(*, user: str | None = None, band: Band | None = None, state: str | None = None) -> QuerySet[Job]:
    """Jobs newest first, filtered. Pair with ``task_counts`` for the page shown."""
    qs = Job.objects.select_related("parent").order_by("-submitted_at_ms", "-pk")
    if user:
        qs = qs.filter(user=user)
    if band is not None:
        qs = qs.filter(band=int(band))
    if state:
        qs = qs.filter(state=state)
    return qs


def task_counts(job_pks: list[int]) -> dict[int, dict[str, int]]:
    """``{job pk: {state: n}}`` for the given jobs, one grouped query."""
    counts: dict[int, dict[str, int]] = {pk: {} for pk in job_pks}
    for job_pk, state, n in (
        Task.objects.filter(job_id__in=job_pks).order_by().values_list("job_id", "state").annotate(n=Count("id"))
    ):
        counts[job_pk][state] = n
    return counts


def job_detail(name: str) -> Job | None:
    """A job with its tasks (by index), their workers and attempts: four queries."""
    attempts = Attempt.objects.select_related("worker").order_by("number")
    tasks = Task.objects.select_related("worker").order_by("index").prefetch_related(Prefetch("attempts", attempts))
    return (
        Job.objects.select_related("parent")
        .prefetch_related(Prefetch("tasks", tasks), Prefetch("children", Job.objects.order_by("name").only("name", "parent")))
        .filter(name=name)
        .first()
    )


# --- the queue, from the newest tick's explanation --------------------------------------------------


@dataclass(frozen=True)
class QueueEntry:
    task: str
    job: str
    index: int
    user: str
    band: Band
    position: int
    reason: str


def latest_explanation() -> tuple[TickRecord | None, dict]:
    """The newest tick that kept its queue explanation, and the explanation (empty if none)."""
    tick = TickRecord.objects.filter(explanation__isnull=False).order_by("-pk").first()
    if tick is None:
        return None, {"tasks": {}, "reasons": [], "band_counts": {}}
    return tick, tick.explanation or {"tasks": {}, "reasons": [], "band_counts": {}}


def split_task_id(task_id: str) -> tuple[str, int]:
    job, _, index = task_id.rpartition("/")
    return job, int(index)


def queue_entries(
    explanation: dict, *, band: Band | None = None, user: str | None = None, job: str | None = None
) -> list[QueueEntry]:
    """Pending tasks of the explanation in scheduling order: by effective band, then position."""
    reasons = explanation.get("reasons", [])
    entries = []
    for task_id, (rank, position, reason_index) in explanation.get("tasks", {}).items():
        if band is not None and rank != int(band):
            continue
        job_id, index = split_task_id(task_id)
        owner = job_id.split("/", 2)[1]
        if user and owner != user:
            continue
        if job and job_id != job:
            continue
        reason = reasons[reason_index] if 0 <= reason_index < len(reasons) else ""
        entries.append(QueueEntry(task_id, job_id, index, owner, Band(rank), position, reason))
    entries.sort(key=lambda e: (e.band, e.position))
    return entries


def queue_task_rows(entries: list[QueueEntry]) -> dict[str, Task]:
    """The current rows of a page of queue entries, in one query."""
    if not entries:
        return {}
    by_job: dict[str, list[int]] = {}
    for entry in entries:
        by_job.setdefault(entry.job, []).append(entry.index)
    match = Q()
    for job_id, indices in by_job.items():
        match |= Q(job__name=job_id, index__in=indices)
    return {
        f"{t.job.name}/{t.index}": t
        for t in Task.objects.filter(match).select_related("job").only(
            "index", "state", "job__name", "job__user", "job__band", "job__cpu_millicores", "job__memory_bytes",
            "job__device_type", "job__device_variant", "job__device_count",
        )
    }


# --- preemptions, audit, grants, workers ---------------------------------------------------------


def preemptions(
    *, user: str | None = None, band: Band | None = None, since: datetime | None = None, job: str | None = None
) -> QuerySet[PreemptionEvent]:
    """Preemption events newest first; filters apply to the victim (its user, stamped band, job)."""
    qs = PreemptionEvent.objects.select_related("victim__job", "preemptor__job", "worker").order_by(
        "-created_at", "-pk"
    )
    if user:
        qs = qs.filter(victim__job__user=user)
    if band is not None:
        qs = qs.filter(victim_band=int(band))
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if job:
        qs = qs.filter(victim__job__name=job)
    return qs


def audit_entries() -> QuerySet[AuditEntry]:
    return AuditEntry.objects.select_related("actor").order_by("-created_at", "-pk")


def uplift_grants(*, user: str | None = None, state: str | None = None) -> QuerySet[UpliftGrant]:
    qs = UpliftGrant.objects.select_related("requested_by", "decided_by").order_by("-created_at", "-pk")
    if user:
        qs = qs.filter(user_id=user)
    if state:
        qs = qs.filter(state=state)
    return qs


def workers_with_load() -> QuerySet[Worker]:
    """Workers by name, with how many tasks are active on each (one query)."""
    return Worker.objects.annotate(
        active_tasks=Count("tasks", filter=Q(tasks__state__in=API_ACTIVE_VALUES))
    ).order_by("name")


# --- explain a job --------------------------------------------------------------------------------


def downgrade_text(requested: Band, spend: int, limit: int) -> str:
    """The core's wording, e.g. "INTERACTIVE runs as BATCH: spend 12,400 > limit 10,000"."""
    return Downgrade(requested, Band.BATCH, spend, limit).text()


def explain_job(job: Job) -> dict:
    """Why a job runs (or waits) where it does, with the numbers. A fixed number of queries."""
    requested = Band(job.band)
    spend_now = live_spend([job.user]).get(job.user, 0)
    budget = effective_budget_for(job.user)
    defaults = budget_defaults()
    effective = effective_band(requested, job.user, {job.user: spend_now}, {job.user: budget}, defaults)
    downgrade = None
    if effective != requested:
        downgrade = {"spend": spend_now, "limit": budget.budget_limit,
                     "text": downgrade_text(requested, spend_now, budget.budget_limit)}

    tick, explanation = latest_explanation()
    queued = explanation.get("tasks", {})
    reasons = explanation.get("reasons", [])
    band_counts = explanation.get("band_counts", {})
    task_rows = list(
        Task.objects.filter(job=job).order_by("index").values_list("index", "state", "band", "worker__name")
    )
    tasks = []
    best: tuple[int, int, str] | None = None  # (band rank, position, reason) of the job's first queued task
    for index, state, band, worker in task_rows:
        task_id = f"{job.name}/{index}"
        entry = queued.get(task_id) if state == TaskState.PENDING.value else None
        reason = None
        position = None
        task_band = Band(band).wire if band is not None and state != TaskState.PENDING.value else None
        if entry is not None:
            rank, position, reason_index = entry
            reason = reasons[reason_index] if 0 <= reason_index < len(reasons) else None
            task_band = Band(rank).wire
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
            band_counts.get(str(int(queue_band)), 0) if queue_band is not None and tick is not None else None
        ),
        "pending_reason": pending_reason,
        "tick": tick.pk if tick else None,
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
    if job.state in API_TERMINAL_JOB_VALUES:
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
